#include "base/rng.h"

#include <algorithm>

#include "base/vector_clones.h"

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

namespace {

// Counter: position (64 bits), purpose, index. Key: seed mixed with the sequence id.
std::array<uint32_t, 4> CounterOf(const RngKey& key, uint32_t index) {
  return {static_cast<uint32_t>(key.position), static_cast<uint32_t>(key.position >> 32),
          static_cast<uint32_t>(key.purpose), index};
}

std::array<uint32_t, 2> KeyOf(const RngKey& key) {
  const uint64_t mixed = key.seed ^ (key.sequence * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  return {static_cast<uint32_t>(mixed) ^ static_cast<uint32_t>(key.sequence >> 32),
          static_cast<uint32_t>(mixed >> 32) ^ static_cast<uint32_t>(key.sequence)};
}

// Sixteen consecutive blocks from counter `ctr` (its last word the first index): the rounds of
// Philox4x32Block, lane by lane, in loops the compiler turns into vector multiplies.
SPECD_VECTOR_CLONES void SixteenBlocks(const std::array<uint32_t, 4>& ctr,
                                       std::array<uint32_t, 2> key, uint32_t* words) {
  constexpr int kLanes = 16;
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    c0[j] = ctr[0];
    c1[j] = ctr[1];
    c2[j] = ctr[2];
    c3[j] = ctr[3] + static_cast<uint32_t>(j);
  }
  for (int round = 0; round < 10; ++round) {
    for (int j = 0; j < kLanes; ++j) {
      const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0[j];
      const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2[j];
      const uint32_t next0 = static_cast<uint32_t>(p1 >> 32) ^ c1[j] ^ key[0];
      const uint32_t next2 = static_cast<uint32_t>(p0 >> 32) ^ c3[j] ^ key[1];
      c1[j] = static_cast<uint32_t>(p1);
      c3[j] = static_cast<uint32_t>(p0);
      c0[j] = next0;
      c2[j] = next2;
    }
    key[0] += kPhiloxW0;
    key[1] += kPhiloxW1;
  }
  for (int j = 0; j < kLanes; ++j) {
    words[4 * j] = c0[j];
    words[4 * j + 1] = c1[j];
    words[4 * j + 2] = c2[j];
    words[4 * j + 3] = c3[j];
  }
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(const RngKey& key, uint32_t index) {
  return Philox4x32Block(CounterOf(key, index), KeyOf(key));
}

void Philox4x32Blocks(const RngKey& key, uint32_t first, int64_t n_blocks, uint32_t* words) {
  const std::array<uint32_t, 2> k = KeyOf(key);
  int64_t b = 0;
  for (; b + 16 <= n_blocks; b += 16) {
    SixteenBlocks(CounterOf(key, first + static_cast<uint32_t>(b)), k, words + 4 * b);
  }
  for (; b < n_blocks; ++b) {
    const auto block = Philox4x32Block(CounterOf(key, first + static_cast<uint32_t>(b)), k);
    std::copy(block.begin(), block.end(), words + 4 * b);
  }
}

double UniformDouble(const RngKey& key, uint32_t index) {
  const auto words = Philox4x32(key, index);
  const uint64_t bits = (static_cast<uint64_t>(words[0]) << 21) ^ (words[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace specd
