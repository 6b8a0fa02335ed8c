// LoRA adapters in llama.cpp's GGUF format (general.type = adapter, adapter.type = lora,
// adapter.lora.alpha; tensors "<base tensor>.lora_a" / ".lora_b"): W' = W + s B A with
// s = scale * alpha / rank (scale alone when alpha is 0). Applied at run time by default, as
// llama.cpp does (y = W x + s B (A x): the base keeps its own type, a 4-bit one included, and its
// speed), or merged into the weights at load (--lora-merge). token_embd.weight follows
// llama.cpp's flipped layout (lora_a [rank, n_vocab] rows looked up by token, lora_b
// [rank, n_embd]).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

namespace specd {

// --lora FILE (scale 1) or --lora-scaled FILE SCALE.
struct LoraSpec {
  std::string path;
  float scale = 1.0f;
};

// One low-rank update of a base tensor, as delta = s * left right in specd's orientation of the
// tensor (rows = output features, or tokens for token_embd; cols = input features).
struct LoraUpdate {
  std::string target;  // base tensor name, e.g. "blk.0.attn_q.weight"
  int64_t rows = 0, cols = 0, rank = 0;
  float s = 1.0f;            // scale * alpha / rank
  std::vector<float> left;   // [rows, rank]
  std::vector<float> right;  // [rank, cols]
  bool stored_f16 = false;   // both tensors were f16 in the file (so f16 holds them exactly)

  // delta row r: [cols] written to out (overwritten).
  void DeltaRow(int64_t r, float* out) const;
  // Whether row r changes at all (a token_embd update often touches a few tokens only).
  bool TouchesRow(int64_t r) const;
  int64_t CountTouchedRows() const;
};

// One low-rank term kept beside its matrix: y += s B (A x), A and B in the file's precision (f16
// when it was f16, else f32). A x runs through Matmul and B t through AddLowRankProduct, both
// batch invariant (a row's result does not depend on the batch: greedy speculation needs it).
struct LowRankTerm {
  DType type = DType::kF32;  // of both factors: f32 or f16
  int64_t rank = 0, rows = 0, cols = 0;
  float s = 1.0f;
  std::vector<uint8_t> a_bytes;   // A [rank, cols]
  std::vector<uint8_t> bt_bytes;  // B transposed in blocks (see AddLowRankProduct)

  WeightView A() const { return WeightView{type, a_bytes.data(), rank, cols}; }
  int64_t Bytes() const { return static_cast<int64_t>(a_bytes.size() + bt_bytes.size()); }
};
LowRankTerm MakeLowRankTerm(const LoraUpdate& update);

// Buffers of AddLowRank, reused across calls: one set per thread of the pool.
struct LowRankScratch {
  struct PerThread {
    std::unique_ptr<ThreadPool> solo;  // a one-thread pool: kernels called inside RunOnAll
    AlignedBuffer<float> t;            // [m, rank]
    MatmulScratch matmul;
  };
  std::vector<PerThread> threads;
};

// The run-time terms of one matrix and where its output goes: y's rows are y_stride floats apart
// (a slice of a stacked output).
struct LowRankJob {
  const std::vector<LowRankTerm>* terms;
  float* y;
  int64_t y_stride;
};

// y[i, 0..rows) += sum over each job's terms of s B (A x[i]) for the m rows of x ([m, cols]),
// for matrices that read the same input (q / k / v, gate / up): one parallel region, each thread
// computing every A x and its share of the outputs of B t.
void AddLowRank(const KernelContext& ctx, std::initializer_list<LowRankJob> jobs, const float* x,
                int64_t m, LowRankScratch* scratch);

// A token_embd update that touches few rows, kept as those rows' deltas [n, n_embd]: added to
// the looked-up row and, for tied embeddings, to the head's logits (x . delta), which is what
// merging it would give without converting the whole embedding.
struct EmbeddingDelta {
  std::vector<int32_t> tokens;  // ascending
  std::vector<float> rows;      // [tokens.size(), n_embd]
  int64_t n_embd = 0;
  // The delta of `token`'s row, or nullptr when the update leaves it alone.
  const float* Find(int32_t token) const;
  // Adds `update`'s touched rows (summing with rows already held).
  void Add(const LoraUpdate& update);
};

struct LoraAdapter {
  std::unique_ptr<GgufFile> file;  // its metadata stays readable (e.g. specd.sdsat.*)
  std::vector<LoraUpdate> updates;
};

// Reads and checks an adapter for a model of architecture `arch`; every problem is an Error that
// names the file.
LoraAdapter ReadLoraAdapter(const LoraSpec& spec, const std::string& arch);

// token_embd updates touching at most this many rows are applied at run time; denser ones are
// merged (their delta rows would take more memory than the matrix).
inline constexpr int64_t kMaxRuntimeEmbeddingRows = 1024;

// The type a matrix of `type` is merged into: its own for f32, f16, bf16 and q8_0; q8_0 for the
// coarser ones, whose grid would round a small low-rank update away.
DType LoraMergedType(DType type);

// W + delta of one matrix stored as `type` ([rows] rows of `cols`), in LoraMergedType(type);
// rows the update does not touch are copied unchanged when the type stays.
std::vector<uint8_t> MergeLoraUpdate(DType type, const uint8_t* base, const LoraUpdate& update);

}  // namespace specd
