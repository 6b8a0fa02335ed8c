#include "policy/completion_lengths.h"

#include <algorithm>
#include <cmath>

namespace specd {

void CompletionLengths::Finished(int n_generated) { lengths_[count_++ % kKept] = n_generated; }

int CompletionLengths::ExpectedRemaining(int n_generated, int n_max) const {
  const int left = std::max(0, n_max - n_generated);
  double weighted_remainder = 0.0, weights = 0.0;
  int longer = 0;
  for (int i = 0; i < std::min(count_, kKept); ++i) {
    const int length = lengths_[i];
    if (length <= n_generated) continue;
    weighted_remainder += static_cast<double>(length - n_generated) / length;
    weights += 1.0 / length;
    ++longer;
  }
  if (longer < kMinLonger) return left;
  return std::min(left, static_cast<int>(std::ceil(weighted_remainder / weights - 1e-9)));
}

}  // namespace specd
