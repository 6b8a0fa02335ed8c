// Per-sequence key/value cache. Every sequence owns a slot of n_ctx positions in one slab per layer
// and tensor ([n_slots, n_ctx, kv_dim] of f32 or f16), so PAD attention can read any sequence up to
// the longest length of a batch without copying, and rollback after a rejected draft is just a
// shorter length. The slab is reserved (not touched) up front: memory is bounded by
// n_slots * n_ctx and pages are committed only as positions are written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace specd {

struct KvCacheConfig {
  int n_slots = 1;   // sequences that can be live at once
  int n_ctx = 2048;  // positions per sequence
  // f32, or f16 (half the memory and the bytes attention reads; llama.cpp's default).
  DType type = DType::kF32;
};

class KvCache {
 public:
  KvCache(const KvCacheConfig& config, int n_layers, int kv_dim);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int n_slots() const { return config_.n_slots; }
  int n_ctx() const { return config_.n_ctx; }
  int kv_dim() const { return kv_dim_; }
  DType type() const { return config_.type; }
  // Bytes reserved for K and V of all layers and slots.
  size_t BytesReserved() const { return bytes_; }

  // Takes a free sequence slot (length 0); throws if all are in use.
  int Acquire();
  // Returns a slot to the free list; its contents are forgotten.
  void Release(int seq);
  bool InUse(int seq) const;

  int Length(int seq) const;
  // Rolls a sequence back to `length` positions (<= its current length).
  void Truncate(int seq, int length);
  // After a token tree: moves the entries at indices `path` (increasing, each >= base + its
  // place) to base, base + 1, ... and truncates the sequence to base + path.size().
  void KeepPath(int seq, int base, const std::vector<int>& path);
  // Moves the K and V entries of positions [from, from + n) to [to, to + n), to <= from, in every
  // layer (the entries left between are overwritten or beyond what the caller keeps); the
  // length is unchanged. Keys keep their rotary positions: see ShiftKeyPositions.
  void MoveRows(int seq, int from, int to, int n);
  // Makes `dst` hold the first `length` positions of `src` (a shared prompt encoded once).
  void Fork(int src, int dst, int length);
  // Marks `n` more positions as written (called by the forward pass after it stores them).
  void Advance(int seq, int n);

  // [n_ctx, kv_dim] storage of a sequence for a layer, elements of type().
  void* K(int layer, int seq) { return Slot(layer, 0, seq); }
  void* V(int layer, int seq) { return Slot(layer, 1, seq); }

 private:
  uint8_t* Slot(int layer, int which, int seq);
  size_t ElementBytes() const { return config_.type == DType::kF16 ? 2 : 4; }
  void CheckSeq(int seq) const;

  KvCacheConfig config_;
  int n_layers_;
  int kv_dim_;
  size_t bytes_ = 0;
  uint8_t* slab_ = nullptr;
  std::vector<int> length_;
  std::vector<bool> in_use_;
};

}  // namespace specd
