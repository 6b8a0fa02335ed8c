// Which of specd's two int8 kernels multiplies packed GGUF-type weights at a given row count on
// this machine: the AMX tile kernel or the VNNI one. Both give the same bits, so the choice moves
// speed only, and it is measured rather than fixed because it moves between machines of one CPU
// model: on the Xeon VM of 2026-12-03, q6_K at 32-64 rows ran 1.25-1.5x faster on the folded
// tile kernel than per block; on the one of 2026-12-06 (its tile peak a third of that day's), q6_K
// ran 1.13-1.59x slower on AMX than on VNNI at 16-32 rows while q4_K ran 3-15% faster
// (bench/results/amx-gguf/NOTES.md).
//
// Per weight type, shape and row-count bucket, the first calls alternate the two kernels. Calls
// of one key come from one forward's layers, a few ms apart, so each AMX call is paired with the
// VNNI call just before it and a slow spell of the shared machine falls on both; after
// kTrialPairs pairs (the first, cold, dropped) the kernel with the lower median of the paired
// time ratios runs every later call of that key.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace specd {

class PackedKernelChooser {
 public:
  static constexpr int kTrialPairs = 6;  // timed pairs per key, after the dropped first

  struct Key {
    int type = 0;  // the weights' DType
    int64_t rows = 0, cols = 0;
    int bucket = 0;  // RowBucket(m)
    auto operator<=>(const Key&) const = default;
  };

  // Row counts [16, 32), [32, 64), ..., [256, inf) as 0..4: a kernel's relative speed changes
  // with the rows slowly (the tile kernels fill 16-row tiles).
  static int RowBucket(int64_t m);

  // Whether the next call of `key` runs on the AMX kernel.
  bool UseAmx(const Key& key);
  // A call's time in ms, amx: the kernel UseAmx chose for it. Ignored once the key is decided.
  void Record(const Key& key, bool amx, double call_ms);
  // Decided keys: true where AMX won (for reports and tests).
  std::map<Key, bool> Decisions() const;

 private:
  struct Trials {
    std::vector<double> vnni_ms, amx_ms;  // call i of each kernel: pair i
    int decided = -1;                     // -1: still measuring; 0: VNNI; 1: AMX
  };

  mutable std::mutex mutex_;  // forwards of a draft and its target may run on separate threads
  std::map<Key, Trials> trials_;
};

}  // namespace specd
