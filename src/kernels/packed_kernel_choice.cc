#include "kernels/packed_kernel_choice.h"

#include <algorithm>

namespace specd {

int PackedKernelChooser::RowBucket(int64_t m) {
  int bucket = 0;
  for (int64_t upper = 32; m >= upper && bucket < 4; upper *= 2) ++bucket;
  return bucket;
}

bool PackedKernelChooser::UseAmx(const Key& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Trials& t = trials_[key];
  if (t.decided >= 0) return t.decided == 1;
  return t.amx_ms.size() < t.vnni_ms.size();  // VNNI first, then AMX: a pair
}

void PackedKernelChooser::Record(const Key& key, bool amx, double call_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  Trials& t = trials_[key];
  if (t.decided >= 0) return;
  (amx ? t.amx_ms : t.vnni_ms).push_back(call_ms);
  const size_t pairs = std::min(t.amx_ms.size(), t.vnni_ms.size());
  if (pairs < kTrialPairs + 1) return;
  std::vector<double> ratios;  // AMX over VNNI, pair by pair, the cold first pair left out
  for (size_t i = 1; i < pairs; ++i) {
    ratios.push_back(t.amx_ms[i] / std::max(t.vnni_ms[i], 1e-9));
  }
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  t.decided = ratios[ratios.size() / 2] < 1.0 ? 1 : 0;
}

std::map<PackedKernelChooser::Key, bool> PackedKernelChooser::Decisions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<Key, bool> out;
  for (const auto& [key, t] : trials_) {
    if (t.decided >= 0) out[key] = t.decided == 1;
  }
  return out;
}

}  // namespace specd
