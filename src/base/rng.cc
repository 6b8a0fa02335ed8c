#include "base/rng.h"

namespace specd {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

}  // namespace

std::array<uint32_t, 4> Philox4x32Block(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kPhiloxM0, ctr[0], &hi0, &lo0);
    MulHiLo(kPhiloxM1, ctr[2], &hi1, &lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kPhiloxW0;
    key[1] += kPhiloxW1;
  }
  return ctr;
}

std::array<uint32_t, 4> Philox4x32(const RngKey& key, uint32_t index) {
  // Counter: position (64 bits), purpose, index. Key: seed mixed with the sequence id.
  const std::array<uint32_t, 4> ctr = {static_cast<uint32_t>(key.position),
                                       static_cast<uint32_t>(key.position >> 32),
                                       static_cast<uint32_t>(key.purpose), index};
  const uint64_t mixed = key.seed ^ (key.sequence * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  return Philox4x32Block(
      ctr, {static_cast<uint32_t>(mixed) ^ static_cast<uint32_t>(key.sequence >> 32),
            static_cast<uint32_t>(mixed >> 32) ^ static_cast<uint32_t>(key.sequence)});
}

double UniformDouble(const RngKey& key, uint32_t index) {
  const auto words = Philox4x32(key, index);
  const uint64_t bits = (static_cast<uint64_t>(words[0]) << 21) ^ (words[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace specd
