#include "policy/completion_lengths.h"

#include <algorithm>

namespace specd {

void CompletionLengths::Finished(int n_generated) { lengths_[count_++ % kKept] = n_generated; }

int CompletionLengths::ExpectedRemaining(int n_generated, int n_max) const {
  const int left = std::max(0, n_max - n_generated);
  long long sum = 0;
  int longer = 0;
  for (int i = 0; i < std::min(count_, kKept); ++i) {
    if (lengths_[i] <= n_generated) continue;
    sum += lengths_[i] - n_generated;
    ++longer;
  }
  if (longer < kMinLonger) return left;
  return static_cast<int>(std::min<long long>(left, (sum + longer - 1) / longer));
}

}  // namespace specd
