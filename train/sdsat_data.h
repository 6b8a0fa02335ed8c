// Training rows for SDSAT (Semantic Adaptive Tokens): plain rows, and mixed rows in which windows
// of adaptive tokens follow randomly chosen positions. No LibTorch here: rows are plain vectors.
//
// A window of w adaptive tokens after real token r[p] sits at positions p + 1 .. p + w, and its
// j-th token (1-based) learns to predict r[p + 1 + j] -- exactly what generation asks of the k
// adaptive tokens appended after the last real token. The window sees r[0..p] and its own earlier
// tokens only; real tokens never see any adaptive token. So every window is trained in the
// context it meets at inference, and the real tokens of a mixed row compute exactly what they
// compute in a plain row (the paper isolates standard tokens by keeping their loss out of mixed
// rows; the mask makes the isolation exact).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specd::train {

struct SdsatLayout {
  int32_t adaptive_token = 0;
  int max_window = 5;          // L: window sizes are uniform in 1..L
  double window_share = 0.10;  // of real positions followed by a window
};

// One training row of `length` slots.
struct SdsatRow {
  std::vector<int32_t> tokens;     // [length]
  std::vector<int64_t> positions;  // [length] RoPE positions
  std::vector<int32_t> labels;     // [length] next-token targets, -1 where no loss is taken
  std::vector<uint8_t> visible;    // [length, length] row-major: slot i may attend to slot j
  std::vector<int8_t> offsets;     // [length] j for the j-th token of a window, 0 for real ones
  int n_adaptive = 0;              // adaptive slots (all of them labelled)

  int64_t length() const { return static_cast<int64_t>(tokens.size()); }
};

// real[0..length) with labels real[1..length]: needs length + 1 tokens.
SdsatRow PlainRow(std::span<const int32_t> real, int64_t length);

// Real tokens interleaved with windows, cut at `length` slots; labels on adaptive slots only.
// Needs length + max_window + 1 real tokens. `seed` decides where windows go and how long.
SdsatRow MixedRow(std::span<const int32_t> real, int64_t length, const SdsatLayout& layout,
                  uint64_t seed);

struct FimTokens {
  int32_t prefix = -1, middle = -1, suffix = -1;
  bool ok() const { return prefix >= 0 && middle >= 0 && suffix >= 0; }
};

enum class FimMode { kNone, kPsm, kSpm };

// Fill-in-the-middle reordering of a span of tokens cut at [0, cut_a) [cut_a, cut_b) [cut_b, n):
// PSM: <pre> prefix <suf> suffix <mid> middle; SPM (CodeLlama's): <pre> <suf> suffix <mid> prefix
// middle. Three tokens longer than `tokens` (unchanged for kNone).
std::vector<int32_t> FimReorder(std::span<const int32_t> tokens, FimMode mode, const FimTokens& fim,
                                int64_t cut_a, int64_t cut_b);

// The mode for a row: PSM and SPM a quarter of the time each, none otherwise (always none
// without FIM tokens); cuts uniform over the span.
struct FimChoice {
  FimMode mode = FimMode::kNone;
  int64_t cut_a = 0, cut_b = 0;
};
FimChoice ChooseFim(int64_t n_tokens, const FimTokens& fim, uint64_t seed);

}  // namespace specd::train
