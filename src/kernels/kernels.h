// The compute kernels of a forward pass. Each has a plain scalar version in reference/ (the test
// oracle) and a fast version here, chosen at run time from the CPU's features.
//
// Matmul is written for batch invariance: a row's result does not depend on how many other rows
// share the call or how the work is split over threads, so one token decoded alone and the same
// token verified inside a chunk of draft tokens get bit-identical logits. That is what lets greedy
// speculative decoding reproduce plain greedy decoding token for token.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/cpu_features.h"
#include "kernels/packed_kernel_choice.h"
#include "tensor/dtype.h"
#include "threading/thread_pool.h"

namespace specd {

// Quantized weights re-laid for the AVX-512 VNNI kernel: rows in groups of 16, and within a
// group and a 32-block the 16 rows' 4-byte groups interleaved, so one 64-byte load feeds one
// vpdpbusd for 16 output rows and no horizontal sums are needed. Every quantized type is held as
// exact unsigned levels u with per-row float scales (and mins), w = scale * (u - offset) + min,
// per 32 values or, for the 16-value sub-blocks of q2_K / q3_K / q6_K, per 16:
//   per (row group, block): header, then values.
//   header: scales [sub_blocks][16] then, with mins, mins [sub_blocks][16]; f16, or f32 for
//           q2_K / q3_K, whose scales are products d * sc (exact in f32, not in f16), or signed
//           bytes sc with d in a trailer (k_scales below: q4_K, q5_K, q6_K, iq4_xs).
//   values: bytes u, 8 x 64 (lanes g = elements 4g..4g+3), or nibbles, 4 x 64 (low nibbles
//           elements 0..15, high 16..31, as in q4_0), followed for 5- and 6-bit levels by
//           their high_planes bits above the nibble in one of two forms (HighBits).
// Built once at model load; the size of the source for q4_0, q4_1, the 5- and 6-bit types and
// the IQ4 types, a little more for q2_K / q3_K (their scales as f32); q8_0 is kept as bytes.
struct OneDnnInt8Weights;  // kernels/onednn_int8.h

// How packed weights hold the bits above the nibbles of 5- and 6-bit levels (k = high_planes
// bits per level), 64 * k bytes per block in either form.
enum class HighBits {
  // k bit planes of 8 x 64 bits (plane p, lane g: bit j*4+t is bit 4+p of element 4g+t of row
  // j): AVX-512 adds a plane to a lane's 64 bytes under a mask register, and AMX unpacks them.
  kPlanes,
  // Fields: per half h of 8 rows, k vectors of 32 bytes; byte i = 4 * (j - 8h) + t of vector
  // (l * k) / 8 holds lane l's k bits of element 4l+t of row j at bit (l * k) % 8. Without
  // masked adds (AVX2), one shift and one and place a lane's bits for all 32 of its bytes,
  // where planes took a broadcast, a shuffle and a compare per plane.
  kFields,
};
// The form the packed kernels on `cpu` read: planes with AVX-512, fields with AVX2 alone.
HighBits HighBitsFor(const CpuFeatures& cpu);

struct PackedInt8Weights {
  DType source_type = DType::kQ8_0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_groups = 0;   // ceil(rows / 16)
  bool nibbles = false;     // values as 4-bit pairs
  int high_planes = 0;      // bits above the nibbles (5-bit: 1, 6-bit: 2)
  int sub_blocks = 1;       // scales per 32 values: 1, or 2 (one per 16)
  bool has_mins = false;    // an additive min per sub-block
  bool f32_scales = false;  // header floats as f32 (else f16)
  // q4_K / q5_K / q6_K / iq4_xs: the header holds the rows' sub-block scales [sub_blocks][16]
  // (and for q4_K / q5_K their mins [16]) as signed bytes, and each row group ends with a trailer
  // of the rows' f16 super-block d (and dmin) per 256 values; the kernel forms d * sc (and
  // dmin * m) in f32, which is exact (f16 times an 8-bit integer).
  bool k_scales = false;
  // The form of the bits above the nibbles (with high_planes > 0).
  HighBits high_bits = HighBits::kPlanes;
  // iq4_nl / iq4_xs: a nibble is an index into the non-linear grid (kIq4Levels); the kernels
  // look the byte level + 128 up in registers (vpshufb), so the weights stream as 4 bits each.
  bool level_lut = false;
  // i8 (BASS's INT8): bytes q + 128, no block headers; each row group ends with a trailer of
  // its 16 rows' f32 scales, applied once to the whole row's exact integer sum.
  bool row_scales = false;
  int32_t offset = 128;  // the level is u - offset
  AlignedBuffer<uint8_t> data;
  // The same weights laid out for oneDNN's s8 matmul (i8 only, when that path is enabled).
  std::shared_ptr<OneDnnInt8Weights> onednn;

  int64_t HeaderBytes() const {
    if (row_scales) return 0;
    if (k_scales) return 16 * (sub_blocks + (has_mins ? 1 : 0));
    return 16 * sub_blocks * (has_mins ? 2 : 1) * (f32_scales ? 4 : 2);
  }
  int64_t BlockBytes() const { return HeaderBytes() + (nibbles ? 256 + 64 * high_planes : 512); }
  int64_t GroupBytes() const {
    return cols / 32 * BlockBytes() + (k_scales ? cols / 256 * TrailerBytesPerSuper() : 0) +
           (row_scales ? 64 : 0);
  }
  // k_scales: the trailer's bytes per 256 values (16 rows' f16 d, and dmin with mins).
  int64_t TrailerBytesPerSuper() const { return has_mins ? 64 : 32; }
  // Bytes after the last group: the AMX kernel reads i8 weights in tiles of 64 values, so with
  // cols % 64 == 32 its last tile reaches 448 bytes past the end (multiplied by zeros).
  int64_t SlackBytes() const { return row_scales ? 512 : 0; }
  // The trailer of super-block scales (k_scales) or row scales (row_scales) of a row group.
  int64_t TrailerOffset() const { return cols / 32 * BlockBytes(); }
};

// The IQ4 grid's levels + 128: the unsigned byte the packed kernels multiply for each index.
inline constexpr std::array<uint8_t, 16> kIq4LevelBytes = [] {
  std::array<uint8_t, 16> bytes{};
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<uint8_t>(kIq4Levels[i] + 128);
  return bytes;
}();

// Whether PackInt8 takes weights of this type (every quantized type; not f32 / f16 / bf16).
bool IsPackable(DType t);

// The layouts of packed weights the int8 kernels (AVX-512 and AVX2) have code for, named by
// the types that pack into them. kBlock: one f16 scale per 32, no mins (bytes: q8_0; nibbles:
// q4_0; nibbles + 1 plane: q5_0); the rest take the general tile (mins, f32 or K-quant scales,
// 16-value sub-blocks); i8 (row scales) has its own tile and is not listed.
enum class PackedLayout {
  kBlockBytes,
  kBlockNibbles,
  kBlockNibbles5,
  kIq4NL,  // kBlockNibbles with the grid lookup
  kIq4XS,  // kQ4_K's byte scales, no mins, with the grid lookup
  kQ4_1,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ3_K,
  kQ2_K
};
// The layout of w (not i8); an Error for a combination no kernel has.
PackedLayout LayoutOf(const PackedInt8Weights& w);
// How many values of an activation row share one int8 scale in the packed kernels for weights of
// a packable type: 256 for q4_K, q5_K, q6_K and iq4_xs (k_scales), else 32.
int64_t Int8ActivationSpan(DType type);

// A weight matrix [rows, cols] in storage type `type`, rows contiguous: y = x W^T.
struct WeightView {
  DType type = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;                           // output features (N)
  int64_t cols = 0;                           // input features (K)
  const PackedInt8Weights* packed = nullptr;  // optional fast layout of the same weights
  const float* row_scales = nullptr;          // [rows] i8 only: w[n, k] = row_scales[n] * q[n, k]
  // [cols] i8 only, optional: SmoothQuant's migration. The activations are multiplied by these
  // (x[m, k] * col_scales[k], in f32) before their per-row quantization, the weights having been
  // multiplied by the inverses, which flattens activation outliers into the weights.
  const float* col_scales = nullptr;
  const uint8_t* Row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + r * RowBytes(type, cols);
  }
};

// Which matmul runs i8 weights. Every choice gives the same bits (exact integer sums, one fixed
// order of the float steps after them), so this is a choice of speed only.
enum class Int8Backend {
  kAuto,   // specd's AMX kernel from amx_min_rows rows on a CPU with AMX, its VNNI kernel otherwise
  kSpecd,  // specd's AVX-512 VNNI kernel
  kAmx,    // specd's AMX tile kernel (CPUs with AMX-INT8)
  kOneDnn,  // oneDNN's s8 x s8 -> s32 matmul (AMX or VNNI, its choice; ONEDNN_VERBOSE shows it)
};

// Which i8 kernel a context runs, for benchmark tables: "specd VNNI", "oneDNN (AMX from 8 rows,
// specd VNNI below)" and so on.
struct KernelContext;
std::string Int8KernelName(const KernelContext& ctx);
// Whether an m-row matmul of packed i8 weights runs on specd's AMX kernel under ctx.
bool RunsOnAmx(const KernelContext& ctx, int64_t m);
// Whether an m-row matmul of packed GGUF-type weights (q8_0, q4_K, ...) runs on the AMX kernel:
// on a CPU with AMX-INT8, from amx_packed_min_rows rows under kAuto (where the context's
// packed_chooser, if any, then picks AMX or VNNI by measured speed), always under kAmx, never
// under kSpecd or kOneDnn (oneDNN has no GGUF types).
bool PackedRunsOnAmx(const KernelContext& ctx, int64_t m);

// Explicit context for every kernel call: threads and the ISA to use.
struct KernelContext {
  ThreadPool* pool = nullptr;
  CpuFeatures cpu;
  Int8Backend int8_backend = Int8Backend::kAuto;
  // kAuto: rows from which the AMX kernel runs i8 matmuls. Below, the VNNI kernel is as fast on
  // SmolLM2's forward (whose weights stream from DRAM) and 10-15% faster on the 16.5M target's
  // (whose weights come from L3). At 8 rows AMX is 10% faster on SmolLM2 and 7% slower on the
  // 16.5M target; at 16 rows 25% faster on both. Measured 2026-11-25, Xeon, 2 threads.
  int amx_min_rows = 8;
  // kAuto: rows from which packed GGUF-type weights may run on the AMX kernel. Below 16 rows (one
  // A tile) its tiles run part empty: q4_K at 1 / 4 / 8 rows took 2.5x / 1.6x / 1.5x the VNNI
  // kernel's time (Xeon, 2026-12-06, `bench matmul --int8-kernels specd,amx`, paired calls).
  int amx_packed_min_rows = 16;
  // kAuto, from amx_packed_min_rows rows: measures which of the AMX and VNNI kernels is faster
  // per weight shape and row count on this machine, and runs that one (null: AMX). Shared by
  // the copies of a context (a run's models and engine).
  std::shared_ptr<PackedKernelChooser> packed_chooser;
};

// A kernel splits its work over threads only while each thread gets at least this many
// multiply-accumulates (~0.15 us on one core here): below that, handing a share to the other
// core costs more than it saves (a 1.7M-parameter draft decodes ~4% faster with this cut-off).
inline constexpr int64_t kMinMacsPerThread = int64_t{1} << 14;

// The ParallelFor min_items_per_thread for items of `macs_per_item` multiply-accumulates each.
inline int64_t MinItemsPerThread(int64_t macs_per_item) {
  return macs_per_item <= 0 ? 1 : (kMinMacsPerThread + macs_per_item - 1) / macs_per_item;
}

// Scratch space reused across calls (activations converted for the weight type).
struct MatmulScratch {
  AlignedBuffer<uint8_t> bytes;
  AlignedBuffer<float> smoothed;      // [m, cols] i8 activations after the SmoothQuant scales
  AlignedBuffer<uint8_t> tile_pairs;  // the AMX kernel's pair-major activations (K-quants)
};

// Builds the packed layout of quantized weights (cols a multiple of 32), 5- and 6-bit levels'
// high bits in the given form (HighBitsFor the CPU that runs them).
PackedInt8Weights PackInt8(const WeightView& w, ThreadPool* pool, HighBits high_bits);

// Stacks matrices of one type and width into one packed matrix (rows of parts[0], then
// parts[1], ...), so that projections of the same input (Q/K/V, gate/up) run as one matmul:
// one activation quantization and one parallel region instead of several. Every part but the
// last must have a multiple of 16 rows; returns false (and leaves *out alone) otherwise.
bool StackPackedInt8(const std::vector<const WeightView*>& parts, ThreadPool* pool,
                     HighBits high_bits, PackedInt8Weights* out);

// y[m, n] = sum_k x[m, k] * W[n, k].  x: [m, cols] f32, y: [m, rows] f32.
void Matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightView& w, float* y,
            MatmulScratch* scratch);

// y[i, o] += sum_k t[i, k] B[o, k] for i < m, o < n: a LoRA's second product. B is stored
// transposed in blocks of kLowRankBlock outputs, so that a block's rank rows are contiguous:
// b[(o / kLowRankBlock) * rank * kLowRankBlock + k * kLowRankBlock + o % kLowRankBlock], the last
// block padded with zeros; f32 or f16. Each element adds its k terms in order, so a row's result
// does not depend on m. y's rows are y_stride floats apart (a slice of a stacked output).
inline constexpr int64_t kLowRankBlock = 256;
void AddLowRankProduct(const KernelContext& ctx, const float* t, int64_t m, int64_t rank,
                       DType b_type, const void* b, int64_t n, float* y, int64_t y_stride);

// y = x / sqrt(mean(x^2) + eps) * weight, for each of n_rows rows of n values.
void RmsNorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps);

// Rotary position embedding of one row [n_heads, head_dim], in place.
struct RopeConfig {
  int head_dim = 0;
  int rotary_dim = 0;  // leading dims of each head that rotate (usually head_dim)
  float freq_base = 10000.0f;
  bool neox = false;  // pairs (i, i + d/2) instead of (2i, 2i+1)
  std::vector<float>
      freq_factors;          // Llama 3 / LongRoPE frequency divisors (rotary_dim / 2), or empty
  float attn_factor = 1.0f;  // scales cos and sin (LongRoPE's attention factor)
};
// cos/sin of the rotation angles for position pos: [rotary_dim / 2] each.
void RopeAngles(const RopeConfig& config, int64_t pos, float* cos_out, float* sin_out);
// Rotates one row [n_heads, head_dim] in place by precomputed angles.
void Rope(const RopeConfig& config, const float* cos, const float* sin, float* x, int n_heads);

// In-place softmax of n values.
void Softmax(float* x, int64_t n);

// y = silu(gate) * up, elementwise.
void SwiGlu(const KernelContext& ctx, const float* gate, const float* up, float* y, int64_t n);
// y = gelu(gate) * up with GELU's tanh form (Gemma's GeGLU), written as
// gelu(x) = x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))), which is the same function.
void GeGlu(const KernelContext& ctx, const float* gate, const float* up, float* y, int64_t n);

// Causal attention of query rows against per-sequence key/value caches.
struct AttentionRows {
  int64_t n_rows = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0.0f;
  const float* q = nullptr;            // [n_rows, n_head * head_dim]
  float* out = nullptr;                // [n_rows, n_head * head_dim]
  DType kv_type = DType::kF32;         // element type of k and v: f32 or f16
  std::vector<const void*> k;          // per row: its sequence's K [n_ctx, n_head_kv*head_dim]
  std::vector<const void*> v;          // per row: its sequence's V, same layout
  std::vector<int32_t> n_visible;      // per row: keys [first_visible, n_visible) are visible
  std::vector<int32_t> first_visible;  // per row (sliding-window layers), or empty: all from 0
  // Token trees: per row, key_mask[key_mask_offset[r] + t] != 0 iff key t (< n_visible) is visible
  // to the row (its sequence's committed keys and its ancestors in the tree); empty: all are.
  std::vector<uint8_t> key_mask;
  std::vector<int64_t> key_mask_offset;
  // Rows grouped by sequence for SPLIT: rows [seq_row_begin[i], seq_row_begin[i+1]).
  std::vector<int64_t> seq_row_begin;
};

// All three give the same bits (masked keys add exactly 0 to every sum).
enum class AttentionMode {
  kPad,    // BASS-PAD: one computation over all sequences padded to the longest (max(n_visible)
           // keys for every row; keys a row cannot see get -inf before softmax)
  kSplit,  // BASS-SPLIT: one computation per sequence over exactly its own keys
  kRow,    // one computation per (row, head), each reading its keys on its own (specd's routine
           // before the BASS variants; kept for comparison)
};

void Attention(const KernelContext& ctx, const AttentionRows& rows, AttentionMode mode);

// Writes n floats into a KV cache row of `type` (f32: copied; f16: rounded to nearest even).
void StoreKvRow(const KernelContext& ctx, const float* x, int64_t n, DType type, void* dst);

// The keys t < n_visible with mask[t] != 0, in order: the list the SIMD attention rows walk.
// Grown in kernels.cc (baseline flags): vector growth in an AVX2 / AVX-512 source leaves a wide
// copy of it that the linker may give every caller (error.h).
std::vector<int32_t> VisibleKeys(const uint8_t* mask, int32_t n_visible);

// Scalar references (single-threaded, double accumulation where it matters): the test oracle.
namespace reference {
void Matmul(const float* x, int64_t m, const WeightView& w, float* y);
// The activations as the int8 kernels see them (every quantized weight type on AVX-512): per
// span of values (Int8ActivationSpan: 32, or 256 for the K-quants), d = amax / divisor (127),
// q = x * (1 / d) rounded half to even and saturated to int8; returns d * q exactly (in double).
// [m, k]
std::vector<double> Int8Activations(const float* x, int64_t m, int64_t k, float divisor = 127.0f,
                                    int64_t span = 32);
// Matmul on such activations, in double: the int8 kernels' result up to float rounding.
void Matmul(const double* x, int64_t m, const WeightView& w, float* y);
// Per-token (per-row) symmetric int8 activations, as every i8 matmul path quantizes them:
// d = amax / 127, q = x * (1 / d) rounded half to even and saturated. q: [m, k], d: [m].
void QuantizeActivationsPerRow(const float* x, int64_t m, int64_t k, int8_t* q, float* d);
// i8 weights (row_scales set): the exact integer sum s = sum_k q_w[n, k] * q_a[m, k] of the
// activations quantized per row (after x[m, k] * col_scales[k] when set), then
// y = (float(s) * row_scales[n]) * d[m] in float. Every i8 path gives these bits.
void MatmulI8(const float* x, int64_t m, const WeightView& w, float* y);
void AddLowRankProduct(const float* t, int64_t m, int64_t rank, DType b_type, const void* b,
                       int64_t n, float* y, int64_t y_stride);
void RmsNorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps);
void Rope(const RopeConfig& config, float* x, int n_heads, int64_t pos);
void Softmax(float* x, int64_t n);
void SwiGlu(const float* gate, const float* up, float* y, int64_t n);
void GeGlu(const float* gate, const float* up, float* y, int64_t n);
void Attention(const AttentionRows& rows);
void StoreKvRow(const float* x, int64_t n, DType type, void* dst);
}  // namespace reference

// AVX2 kernels (matmul_avx2.cc), for CPUs without AVX-512: the packed int8 matmul (the AVX-512
// kernels' results bit for bit; high bits as HighBits::kFields) and attention. Callers go
// through Matmul and Attention.
namespace avx2 {
void MatmulPacked(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w, float* y,
                  MatmulScratch* scratch);
// exp of n floats (vector_avx2.cc): relative error ~2e-7, exactly 0 below -104 and for -inf.
// It and the gated activations give avx512's bits.
void Exp(const float* x, float* y, int64_t n);
void SwiGlu(const float* gate, const float* up, float* y, int64_t n);
void GeGlu(const float* gate, const float* up, float* y, int64_t n);
// Attention of one query row and head (attention_avx2.cc), as avx512::AttendRow's contract says;
// head_dim a multiple of 8. Its structure in 8 lanes (f16 keys widened by F16C), so results
// differ from the AVX-512 kernel's in rounding, not in what they compute.
void AttendRow(const float* q, const float* k, const float* v, int64_t kv_stride, int head_dim,
               float scale, int32_t n_visible, int32_t n_compute, const uint8_t* mask,
               float* scores, float* out);
void AttendRow(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_stride,
               int head_dim, float scale, int32_t n_visible, int32_t n_compute, const uint8_t* mask,
               float* scores, float* out);
}  // namespace avx2

// AMX-INT8 (matmul_amx.cc): the packed matmuls on tiles, the AVX-512 kernel's results bit for
// bit. Callers go through Matmul (where RunsOnAmx).
namespace amx {
// col_scales: SmoothQuant's [cols] multipliers of the activations, or null.
void MatmulPackedI8(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w,
                    const float* col_scales, float* y, MatmulScratch* scratch);
// The packed GGUF types (every PackedLayout; not i8), in their packed layout.
void MatmulPacked(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w, float* y,
                  MatmulScratch* scratch);
// The same kernel over a software model of the tile unit (amx_tiles.h): any AVX-512 CPU, for
// tests; the hardware's results bit for bit where the model is right.
void MatmulPackedEmulated(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w,
                          float* y, MatmulScratch* scratch);
}  // namespace amx

// Fast AVX-512 pieces (matmul_avx512.cc); callers go through the dispatchers above.
namespace avx512 {
void Matmul(ThreadPool* pool, const float* x, int64_t m, const WeightView& w, float* y,
            MatmulScratch* scratch);
void MatmulPacked(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w, float* y,
                  MatmulScratch* scratch);
// reference::QuantizeActivationsPerRow's bits, k a multiple of 16; sum: [m] each row's sum of q.
void QuantizeActivationsPerRow(const float* x, int64_t m, int64_t k, int8_t* q, float* d,
                               int32_t* sum);
void Exp(const float* x, float* y, int64_t n);
void SwiGlu(const float* gate, const float* up, float* y, int64_t n);
void GeGlu(const float* gate, const float* up, float* y, int64_t n);
// Attention of one query row and head over keys [0, n_compute), of which [0, n_visible) count
// and, with a mask, only those with mask[t] != 0: k / v point at the head's first key / value
// (f32, or f16 as uint16_t), consecutive keys kv_stride elements apart. scores: [n_compute]
// scratch; out: [head_dim]. head_dim must be a multiple of 16.
void AttendRow(const float* q, const float* k, const float* v, int64_t kv_stride, int head_dim,
               float scale, int32_t n_visible, int32_t n_compute, const uint8_t* mask,
               float* scores, float* out);
void AttendRow(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_stride,
               int head_dim, float scale, int32_t n_visible, int32_t n_compute, const uint8_t* mask,
               float* scores, float* out);
// Queries of one sequence and one KV head against its keys [0, n_compute) (BASS's batched
// attention): query i sees keys [0, n_visible[i]); every query's output equals AttendRow's for
// the same row, bit for bit. head_dim must be a multiple of 16.
struct AttentionBlock {
  int n_queries = 0;
  const float* const* q = nullptr;     // [n_queries] pointers to [head_dim]
  float* const* out = nullptr;         // [n_queries] pointers to [head_dim]
  const int32_t* n_visible = nullptr;  // [n_queries]
  int32_t n_compute = 0;
  int64_t kv_stride = 0;
  int head_dim = 0;
  float scale = 0.0f;
  float* scores = nullptr;  // [n_queries, n_compute] scratch
  // Skip each query's blocks of 16 keys wholly past its n_visible (a causal prompt chunk's early
  // rows): the same bits, as those keys weigh exactly 0. PAD scores them, as the paper's does.
  bool skip_masked = false;
};
void AttendBlock(const AttentionBlock& block, const float* k, const float* v);
void AttendBlock(const AttentionBlock& block, const uint16_t* k, const uint16_t* v);
void StoreF16(const float* x, int64_t n, uint16_t* dst);
}  // namespace avx512

}  // namespace specd
