// `specd quantize IN OUT --type T`: llama-quantize's job. Matrices (2-D tensors) are converted to
// T; vectors (norms, biases) stay f32. A K-quant needs rows of 256 values: rows that are not get
// llama-quantize's fallback type (q4_K -> q5_0, q6_K -> q8_0), and 32-value types fall back to
// f16 for rows not a multiple of 32. Metadata is copied, with general.file_type set for T.
#include <cstdio>

#include "base/error.h"
#include "cli/commands.h"
#include "gguf/gguf.h"
#include "tensor/quantize.h"
#include "threading/thread_pool.h"

namespace specd::cli {
namespace {

// The type a matrix with rows of `cols` values gets when T is asked for.
DType TypeForRow(DType want, int64_t cols) {
  if (cols % BlockElements(want) == 0) return want;
  if (want == DType::kQ4_K) return cols % kQuantBlock == 0 ? DType::kQ5_0 : DType::kF16;
  if (want == DType::kQ6_K) return cols % kQuantBlock == 0 ? DType::kQ8_0 : DType::kF16;
  return DType::kF16;
}

// A tensor's values converted to `type`, row by row, on the pool.
std::vector<uint8_t> Convert(const GgufTensorInfo& t, DType type, ThreadPool* pool) {
  const int64_t cols = t.shape[0];
  const int64_t rows = t.NumElements() / cols;
  const int64_t in_bytes = RowBytes(t.type, cols), out_bytes = RowBytes(type, cols);
  std::vector<uint8_t> out(rows * out_bytes);
  pool->ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(cols);
    for (int64_t r = r0; r < r1; ++r) {
      DequantizeRow(t.type, t.data + r * in_bytes, row.data(), cols);
      QuantizeRow(type, row.data(), out.data() + r * out_bytes, cols);
    }
  });
  return out;
}

}  // namespace

int RunQuantize(const QuantizeOptions& o) {
  const auto want = DTypeFromName(o.type);
  SPECD_CHECK(want.has_value(), "unknown type '", o.type, "'");
  SPECD_CHECK(o.input != o.output, "quantize: the output must be another file than the input");
  auto in = GgufFile::Open(o.input);
  ThreadPool pool(o.threads);
  GgufWriter out;
  for (const auto& [key, value] : in->metadata()) {
    if (key == "general.file_type" || key == "general.quantization_version") continue;
    out.Set(key, value);
  }
  out.Set("general.file_type", GgufValue::U32(LlamaFileType(*want)));
  out.Set("general.quantization_version", GgufValue::U32(2));
  int64_t bytes_in = 0, bytes_out = 0, n_fallback = 0;
  for (const GgufTensorInfo& t : in->tensors()) {
    const bool matrix = t.shape.size() >= 2;
    const DType type = matrix ? TypeForRow(*want, t.shape[0]) : DType::kF32;
    n_fallback += matrix && type != *want;
    std::vector<uint8_t> data = Convert(t, type, &pool);
    bytes_in += RowBytes(t.type, t.shape[0]) * (t.NumElements() / t.shape[0]);
    bytes_out += data.size();
    out.AddTensor(t.name, type, t.shape, std::move(data));
  }
  out.Write(o.output);
  std::fprintf(stderr,
               "wrote %s: %zu tensors as %s (%lld with a fallback type), %.1f MB -> %.1f MB\n",
               o.output.c_str(), in->tensors().size(), o.type.c_str(),
               static_cast<long long>(n_fallback), bytes_in / 1e6, bytes_out / 1e6);
  return 0;
}

}  // namespace specd::cli
