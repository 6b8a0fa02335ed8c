// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A draw is a pure function of
// (seed, sequence, position, purpose, index): no state to carry, so every sampling decision
// reproduces regardless of batch composition or the order in which sequences are processed, and
// the draft and verify steps use separate streams by giving them different purposes.
#pragma once

#include <array>
#include <cstdint>

namespace specd {

enum class RngPurpose : uint32_t {
  kSample = 1,       // plain sampling of the next token
  kDraft = 2,        // a draft model's proposal
  kAccept = 3,       // accept / reject a drafted token
  kResidual = 4,     // sampling the recovered token after a rejection
  kBonus = 5,        // the bonus token after full acceptance
  kSynthWeights = 6  // synthetic model weights
};

struct RngKey {
  uint64_t seed = 0;
  uint64_t sequence = 0;
  uint64_t position = 0;
  RngPurpose purpose = RngPurpose::kSample;
};

// The Philox4x32-10 block function itself (counter, key) -> four words, as Random123 defines it.
std::array<uint32_t, 4> Philox4x32Block(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

// Four 32-bit random words for `key` and draw `index`.
std::array<uint32_t, 4> Philox4x32(const RngKey& key, uint32_t index);

// The words of draws first .. first + n_blocks - 1 of `key`, four each, in order (what
// Philox4x32(key, first + b) gives, for every b): sixteen blocks at a time, vectorized.
void Philox4x32Blocks(const RngKey& key, uint32_t first, int64_t n_blocks, uint32_t* words);

// A uniform double in [0, 1) with 53 random bits.
double UniformDouble(const RngKey& key, uint32_t index = 0);

// A fast sequential generator for bulk data (synthetic weights); seeded by a counter draw.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform float in [-1, 1).
  float NextSymmetric() { return static_cast<float>((Next() >> 40) * (1.0 / 8388608.0) - 1.0); }

 private:
  uint64_t state_;
};

}  // namespace specd
