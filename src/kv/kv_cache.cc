#include "kv/kv_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/error.h"

namespace specd {

KvCache::KvCache(const KvCacheConfig& config, int n_layers, int kv_dim)
    : config_(config), n_layers_(n_layers), kv_dim_(kv_dim) {
  SPECD_CHECK(config.n_slots >= 1 && config.n_slots <= 4096, "KV cache: sequence slots must be in",
              " 1..4096, got ", config.n_slots);
  SPECD_CHECK(config.n_ctx >= 1 && config.n_ctx <= (1 << 20), "KV cache: context must be in ",
              "1..1048576, got ", config.n_ctx);
  SPECD_CHECK(config.type == DType::kF32 || config.type == DType::kF16,
              "KV cache: type must be f32 or f16, got ", DTypeName(config.type));
  bytes_ = ElementBytes() * 2ull * n_layers * config.n_slots * static_cast<size_t>(config.n_ctx) *
           kv_dim;
  // Pages are committed only as positions are written, but a cache that could not be filled
  // without running the machine out of memory is refused up front, with the size it needs.
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_bytes = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_bytes > 0) {
    const double machine_gib = double(pages) * page_bytes / (1 << 30);
    SPECD_CHECK(double(bytes_) / (1 << 30) <= machine_gib, "a KV cache of ", config.n_slots,
                " sequences x ", config.n_ctx, " positions needs ", double(bytes_) / (1 << 30),
                " GiB, more than this machine's ", machine_gib,
                " GiB of memory: lower {n_sequences} or {n_ctx}");
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  SPECD_CHECK(p != MAP_FAILED, "KV cache: cannot reserve ", bytes_ >> 20, " MiB (", config.n_slots,
              " sequences x ", config.n_ctx, " positions); lower {n_ctx} or {n_sequences}");
  slab_ = static_cast<uint8_t*>(p);
  length_.assign(config.n_slots, 0);
  in_use_.assign(config.n_slots, false);
}

KvCache::~KvCache() {
  if (slab_ != nullptr) ::munmap(slab_, bytes_);
}

uint8_t* KvCache::Slot(int layer, int which, int seq) {
  const size_t per_slot = ElementBytes() * config_.n_ctx * kv_dim_;
  return slab_ + ((static_cast<size_t>(layer) * 2 + which) * config_.n_slots + seq) * per_slot;
}

void KvCache::CheckSeq(int seq) const {
  SPECD_CHECK(seq >= 0 && seq < config_.n_slots, "KV cache: sequence ", seq, " is out of range (",
              config_.n_slots, " slots)");
  SPECD_CHECK(in_use_[seq], "KV cache: sequence ", seq, " is not in use");
}

int KvCache::Acquire() {
  for (int s = 0; s < config_.n_slots; ++s) {
    if (!in_use_[s]) {
      in_use_[s] = true;
      length_[s] = 0;
      return s;
    }
  }
  Fail("KV cache: all ", config_.n_slots, " sequence slots are in use");
}

void KvCache::Release(int seq) {
  CheckSeq(seq);
  in_use_[seq] = false;
  length_[seq] = 0;
}

bool KvCache::InUse(int seq) const { return seq >= 0 && seq < config_.n_slots && in_use_[seq]; }

int KvCache::Length(int seq) const {
  CheckSeq(seq);
  return length_[seq];
}

void KvCache::Truncate(int seq, int length) {
  CheckSeq(seq);
  SPECD_CHECK(length >= 0 && length <= length_[seq], "KV cache: cannot truncate sequence ", seq,
              " of length ", length_[seq], " to ", length);
  length_[seq] = length;
}

void KvCache::Fork(int src, int dst, int length) {
  CheckSeq(src);
  CheckSeq(dst);
  SPECD_CHECK(src != dst, "KV cache: cannot fork a sequence onto itself");
  SPECD_CHECK(length >= 0 && length <= length_[src], "KV cache: cannot fork ", length,
              " positions of sequence ", src, " which has ", length_[src]);
  const size_t bytes = ElementBytes() * length * kv_dim_;
  for (int layer = 0; layer < n_layers_; ++layer) {
    std::memcpy(K(layer, dst), K(layer, src), bytes);
    std::memcpy(V(layer, dst), V(layer, src), bytes);
  }
  length_[dst] = length;
}

void KvCache::KeepPath(int seq, int base, const std::vector<int>& path) {
  CheckSeq(seq);
  const size_t row = ElementBytes() * kv_dim_;
  for (size_t j = 0; j < path.size(); ++j) {
    const int from = path[j];
    SPECD_CHECK(
        from >= base + static_cast<int>(j) && from < length_[seq] && (j == 0 || from > path[j - 1]),
        "KV cache: tree path entries must increase and lie in [base, length)");
    if (from == base + static_cast<int>(j)) continue;
    const size_t at = static_cast<size_t>(base + j) * row, src = static_cast<size_t>(from) * row;
    for (int layer = 0; layer < n_layers_; ++layer) {
      std::memmove(static_cast<uint8_t*>(K(layer, seq)) + at,
                   static_cast<uint8_t*>(K(layer, seq)) + src, row);
      std::memmove(static_cast<uint8_t*>(V(layer, seq)) + at,
                   static_cast<uint8_t*>(V(layer, seq)) + src, row);
    }
  }
  length_[seq] = base + static_cast<int>(path.size());
}

void KvCache::MoveRows(int seq, int from, int to, int n) {
  CheckSeq(seq);
  SPECD_CHECK(n >= 0 && to >= 0 && to <= from && from + n <= length_[seq], "KV cache: cannot move ",
              n, " positions from ", from, " to ", to, " in a sequence of length ", length_[seq]);
  if (n == 0 || to == from) return;
  const size_t row = ElementBytes() * kv_dim_;
  for (int layer = 0; layer < n_layers_; ++layer) {
    for (void* base : {K(layer, seq), V(layer, seq)}) {
      auto* bytes = static_cast<uint8_t*>(base);
      std::memmove(bytes + static_cast<size_t>(to) * row, bytes + static_cast<size_t>(from) * row,
                   static_cast<size_t>(n) * row);
    }
  }
}

void KvCache::Advance(int seq, int n) {
  CheckSeq(seq);
  SPECD_CHECK(n >= 0 && length_[seq] + n <= config_.n_ctx, "KV cache: sequence ", seq,
              " would exceed the context of ", config_.n_ctx, " positions");
  length_[seq] += n;
}

}  // namespace specd
