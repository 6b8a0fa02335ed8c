// `specd quantize IN OUT --type T`: llama-quantize's job. Matrices (2-D tensors) are converted to
// T; vectors (norms, biases) stay f32. A K-quant needs rows of 256 values: rows that are not get
// llama-quantize's fallback type (q4_K -> q5_0, q6_K -> q8_0), and 32-value types fall back to
// f16 for rows not a multiple of 32. Metadata is copied, with general.file_type set for T.
// `--restrict-input-embedding` keeps a draft's token_embd rows for the tokens it predicts and the
// control tokens only (the rest share one row), with T or `copy` (the tensors as they are).
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "engine/model_options.h"
#include "flags/common_flags.h"
#include "gguf/gguf.h"
#include "tensor/quantize.h"
#include "threading/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {
namespace {

// The type a matrix with rows of `cols` values gets when T is asked for.
DType TypeForRow(DType want, int64_t cols) {
  if (cols % BlockElements(want) == 0) return want;
  if (want == DType::kQ4_K) return cols % kQuantBlock == 0 ? DType::kQ5_0 : DType::kF16;
  if (want == DType::kQ6_K) return cols % kQuantBlock == 0 ? DType::kQ8_0 : DType::kF16;
  if (want == DType::kIQ4_XS) return cols % kQuantBlock == 0 ? DType::kIQ4_NL : DType::kF16;
  return DType::kF16;
}

// Row r of a tensor as f32 (an i8 tensor scaled by its row scales).
void ReadRow(const GgufFile& f, const GgufTensorInfo& t, int64_t r, float* out) {
  const int64_t cols = t.shape[0];
  DequantizeRow(t.type, t.data + r * RowBytes(t.type, cols), out, cols);
  if (t.type != DType::kI8) return;
  const std::string scale_name = I8ScaleTensorName(t.name);
  const GgufTensorInfo* scale = f.FindTensor(scale_name);
  SPECD_CHECK(scale != nullptr && scale->type == DType::kF32 &&
                  scale->NumElements() == t.NumElements() / cols,
              f.path(), ": i8 tensor '", t.name, "' has no f32 row scales ('", scale_name, "')");
  const float s = reinterpret_cast<const float*>(scale->data)[r];
  for (int64_t i = 0; i < cols; ++i) out[i] *= s;
  // SmoothQuant: the stored weights are w * s per column, the multipliers 1 / s.
  if (const GgufTensorInfo* smooth = f.FindTensor(I8SmoothTensorName(t.name))) {
    SPECD_CHECK(smooth->type == DType::kF32 && smooth->NumElements() == cols, f.path(), ": '",
                smooth->name, "' must be f32 of ", cols, " values");
    const auto* m = reinterpret_cast<const float*>(smooth->data);
    for (int64_t i = 0; i < cols; ++i) out[i] *= m[i];
  }
}

// Whether t is the row scales or SmoothQuant multipliers of an i8 matrix of f.
bool IsI8Companion(const GgufFile& f, const GgufTensorInfo& t) {
  if (t.shape.size() != 1) return false;
  for (const char* suffix : {".scale", ".smooth"}) {
    const std::string_view name = t.name;
    const size_t n = std::string_view(suffix).size();
    if (name.size() <= n || name.substr(name.size() - n) != suffix) continue;
    const GgufTensorInfo* w =
        f.FindTensor(std::string(name.substr(0, name.size() - n)) + ".weight");
    if (w != nullptr && w->type == DType::kI8) return true;
  }
  return false;
}

std::vector<uint8_t> FloatBytes(const float* v, int64_t n) {
  std::vector<uint8_t> bytes(n * sizeof(float));
  std::memcpy(bytes.data(), v, bytes.size());
  return bytes;
}

// The i8 matrices of the model at `path`, converted as `--weights i8` converts them at load
// (SmoothQuant calibrated on the flags' text); the model holds the views' memory.
std::unique_ptr<Model> LoadI8(const QuantizeOptions& o, ThreadPool* pool,
                              std::map<std::string, WeightView>* matrices) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  const KernelContext ctx{pool, cpu, Int8Backend::kSpecd};
  WeightOptions flags;
  flags.int8 = true;
  flags.smooth_alpha = o.smooth_alpha;
  flags.calibration_file = o.calibration_file;
  auto model = Model::Load(o.input, &ctx, LoadOptionsForModel(flags, o.input));
  model->ForEachI8Matrix(
      [&](const std::string& name, const WeightView& w) { (*matrices)[name] = w; });
  return model;
}

// A tensor's values converted to `type`, row by row, on the pool; for i8 also the row scales.
std::vector<uint8_t> Convert(const GgufFile& f, const GgufTensorInfo& t, DType type,
                             ThreadPool* pool, std::vector<float>* row_scales) {
  const int64_t cols = t.shape[0];
  const int64_t rows = t.NumElements() / cols;
  const int64_t out_bytes = RowBytes(type, cols);
  std::vector<uint8_t> out(rows * out_bytes);
  if (type == DType::kI8) row_scales->assign(rows, 0.0f);
  pool->ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(cols);
    for (int64_t r = r0; r < r1; ++r) {
      ReadRow(f, t, r, row.data());
      if (type == DType::kI8) {
        (*row_scales)[r] =
            QuantizeRowI8(row.data(), reinterpret_cast<int8_t*>(out.data() + r * out_bytes), cols);
      } else {
        QuantizeRow(type, row.data(), out.data() + r * out_bytes, cols);
      }
    }
  });
  return out;
}

// The type tensor t gets when T is asked for. i8 (specd's own format): every matrix but the
// token embeddings, which stay q8_0 (a lookup table gains nothing from i8; tied embeddings get
// an i8 output.weight of their own).
DType TypeFor(const GgufTensorInfo& t, DType want) {
  if (t.shape.size() < 2) return DType::kF32;
  if (want == DType::kI8)
    return t.name == "token_embd.weight" ? TypeForRow(DType::kQ8_0, t.shape[0]) : DType::kI8;
  return TypeForRow(want, t.shape[0]);
}

// The tokens that keep their own input-embedding row in a restricted embedding, ascending: the
// FR-Spec head's (the tokens the draft was trained to predict, its most frequent) and the
// vocabulary's control and user-defined tokens (chat and FIM markers, rare in text but in
// every prompt).
std::vector<int32_t> InputTokensToKeep(const GgufFile& f, int64_t n_vocab) {
  const GgufValue* head = f.Find("specd.head_tokens");
  SPECD_CHECK(head != nullptr, f.path(),
              ": --restrict-input-embedding keeps the rows of the FR-Spec head's tokens, and this "
              "file has no specd.head_tokens");
  SPECD_CHECK(f.Find("specd.input_tokens") == nullptr, f.path(),
              ": the input embedding is already restricted");
  std::vector<char> keep(n_vocab, 0);
  for (const GgufValue& v : head->AsArray("specd.head_tokens").items) {
    const int64_t id = v.AsInt("specd.head_tokens");
    SPECD_CHECK(id >= 0 && id < n_vocab, f.path(), ": specd.head_tokens has token ", id,
                " outside the vocabulary");
    keep[id] = 1;
  }
  if (const GgufValue* types = f.Find("tokenizer.ggml.token_type")) {
    const auto& items = types->AsArray("tokenizer.ggml.token_type").items;
    for (size_t id = 0; id < items.size() && static_cast<int64_t>(id) < n_vocab; ++id) {
      const auto type = static_cast<TokenType>(items[id].AsInt("tokenizer.ggml.token_type"));
      if (type == TokenType::kControl || type == TokenType::kUserDefined) keep[id] = 1;
    }
  }
  std::vector<int32_t> kept;
  for (int64_t id = 0; id < n_vocab; ++id) {
    if (keep[id]) kept.push_back(static_cast<int32_t>(id));
  }
  return kept;
}

// token_embd.weight restricted to `kept`'s rows (in that order, converted to `type`, or their
// bytes when `type` is the input's) and one more row, the mean of all the other tokens' rows.
std::vector<uint8_t> RestrictedEmbedding(const GgufTensorInfo& t, const std::vector<int32_t>& kept,
                                         DType type) {
  SPECD_CHECK(t.type != DType::kI8, "--restrict-input-embedding: an i8 embedding is not supported");
  const int64_t cols = t.shape[0], n_vocab = t.shape[1];
  const int64_t in_bytes = RowBytes(t.type, cols), out_bytes = RowBytes(type, cols);
  std::vector<uint8_t> out((kept.size() + 1) * out_bytes);
  std::vector<float> row(cols);
  std::vector<double> sum(cols, 0.0);
  std::vector<char> is_kept(n_vocab, 0);
  for (int32_t id : kept) is_kept[id] = 1;
  for (int64_t id = 0; id < n_vocab; ++id) {
    if (is_kept[id]) continue;
    DequantizeRow(t.type, t.data + id * in_bytes, row.data(), cols);
    for (int64_t i = 0; i < cols; ++i) sum[i] += row[i];
  }
  for (size_t r = 0; r < kept.size(); ++r) {
    const uint8_t* src = t.data + kept[r] * in_bytes;
    if (type == t.type) {
      std::memcpy(out.data() + r * out_bytes, src, out_bytes);
      continue;
    }
    DequantizeRow(t.type, src, row.data(), cols);
    QuantizeRow(type, row.data(), out.data() + r * out_bytes, cols);
  }
  const int64_t n_shared = n_vocab - static_cast<int64_t>(kept.size());
  for (int64_t i = 0; i < cols; ++i) row[i] = static_cast<float>(sum[i] / n_shared);
  QuantizeRow(type, row.data(), out.data() + kept.size() * out_bytes, cols);
  return out;
}

// The input's metadata with the file type of `want` (none: kept as it is).
void CopyMetadata(const GgufFile& in, std::optional<DType> want, GgufWriter* out) {
  for (const auto& [key, value] : in.metadata()) {
    if (want.has_value() && (key == "general.file_type" || key == "general.quantization_version" ||
                             key == "specd.weights")) {
      continue;
    }
    out->Set(key, value);
  }
  if (!want.has_value()) return;
  if (*want == DType::kI8) {
    // No llama.cpp file type describes it; say what it is for readers that look.
    out->Set("specd.weights", GgufValue::Str("i8"));
  } else {
    out->Set("general.file_type", GgufValue::U32(LlamaFileType(*want)));
  }
  out->Set("general.quantization_version", GgufValue::U32(2));
}

// One conversion: the input, what it becomes, and the bytes in and out.
class Conversion {
 public:
  // `want`: the type asked for; none for --type copy.
  Conversion(const QuantizeOptions& o, std::optional<DType> want)
      : o_(o), want_(want), in_(GgufFile::Open(o.input)), pool_(o.threads) {
    CopyMetadata(*in_, want_, &out_);
    if (o.restrict_input_embedding) {
      kept_inputs_ = InputTokensToKeep(*in_, in_->GetTensor("token_embd.weight").shape.at(1));
      std::vector<GgufValue> ids;
      for (int32_t id : kept_inputs_) ids.push_back(GgufValue::I32(id));
      out_.Set("specd.input_tokens", GgufValue::Array(GgufType::kInt32, std::move(ids)));
    }
    if (want_ == DType::kI8) i8_model_ = LoadI8(o, &pool_, &i8_matrices_);
  }

  void Run() {
    for (const GgufTensorInfo& t : in_->tensors()) {
      const int64_t t_bytes = RowBytes(t.type, t.shape[0]) * (t.NumElements() / t.shape[0]);
      bytes_in_ += t_bytes;
      if (o_.restrict_input_embedding && t.name == "token_embd.weight") {
        AddRestrictedEmbedding(t);
      } else if (!want_.has_value()) {
        bytes_out_ += t_bytes;
        out_.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t_bytes));
      } else if (!IsI8Companion(*in_, t)) {  // an i8 input's scales are read with their matrix
        const DType type = TypeFor(t, *want_);
        n_fallback_ += t.shape.size() >= 2 && type != *want_;
        Add(t, t.name, type);
      }
    }
    if (want_ == DType::kI8 && in_->FindTensor("output.weight") == nullptr) {
      Add(in_->GetTensor("token_embd.weight"), "output.weight", DType::kI8);  // tied: own head
    }
    out_.Write(o_.output);
    std::fprintf(stderr,
                 "wrote %s: %zu tensors as %s (%lld with a fallback type), %.1f MB -> %.1f MB\n",
                 o_.output.c_str(), in_->tensors().size(), o_.type.c_str(),
                 static_cast<long long>(n_fallback_), bytes_in_ / 1e6, bytes_out_ / 1e6);
    if (o_.restrict_input_embedding) {
      std::fprintf(stderr, "input embedding: %zu tokens keep their rows, the others share one\n",
                   kept_inputs_.size());
    }
  }

 private:
  void AddRestrictedEmbedding(const GgufTensorInfo& t) {
    const DType type = want_.has_value() ? TypeFor(t, *want_) : t.type;
    std::vector<uint8_t> data = RestrictedEmbedding(t, kept_inputs_, type);
    bytes_out_ += data.size();
    const int64_t n_rows = static_cast<int64_t>(kept_inputs_.size()) + 1;
    out_.AddTensor(t.name, type, {t.shape[0], n_rows}, std::move(data));
  }

  // The model's i8 conversion of a matrix, with its row scales and SmoothQuant multipliers.
  void AddI8(const std::string& name, const WeightView& w) {
    const auto* values = static_cast<const uint8_t*>(w.data);
    bytes_out_ += w.rows * w.cols + (w.rows + (w.col_scales ? w.cols : 0)) * 4;
    out_.AddTensor(name, DType::kI8, {w.cols, w.rows},
                   std::vector<uint8_t>(values, values + w.rows * w.cols));
    out_.AddTensor(I8ScaleTensorName(name), DType::kF32, {w.rows},
                   FloatBytes(w.row_scales, w.rows));
    if (w.col_scales != nullptr) {
      out_.AddTensor(I8SmoothTensorName(name), DType::kF32, {w.cols},
                     FloatBytes(w.col_scales, w.cols));
    }
  }

  void Add(const GgufTensorInfo& t, const std::string& name, DType type) {
    if (auto it = i8_matrices_.find(name); it != i8_matrices_.end()) return AddI8(name, it->second);
    std::vector<float> row_scales;
    std::vector<uint8_t> data = Convert(*in_, t, type, &pool_, &row_scales);
    bytes_out_ += data.size() + row_scales.size() * sizeof(float);
    out_.AddTensor(name, type, t.shape, std::move(data));
    if (type != DType::kI8) return;
    out_.AddTensor(I8ScaleTensorName(name), DType::kF32, {static_cast<int64_t>(row_scales.size())},
                   FloatBytes(row_scales.data(), static_cast<int64_t>(row_scales.size())));
  }

  const QuantizeOptions& o_;
  const std::optional<DType> want_;
  std::unique_ptr<GgufFile> in_;
  ThreadPool pool_;
  GgufWriter out_;
  std::vector<int32_t> kept_inputs_;  // --restrict-input-embedding: the tokens keeping rows
  std::map<std::string, WeightView> i8_matrices_;
  std::unique_ptr<Model> i8_model_;  // holds i8_matrices_' memory
  int64_t bytes_in_ = 0, bytes_out_ = 0, n_fallback_ = 0;
};

}  // namespace

int RunQuantize(const QuantizeOptions& o) {
  // "copy" (llama-quantize's COPY): every tensor keeps its type and bytes.
  const bool copy = o.type == "copy";
  const auto want = copy ? std::nullopt : DTypeFromName(o.type);
  SPECD_CHECK(copy || want.has_value(), "unknown type '", o.type, "'");
  SPECD_CHECK(o.input != o.output, "quantize: the output must be another file than the input");
  SPECD_CHECK(!copy || o.restrict_input_embedding,
              "quantize --type copy changes nothing without --restrict-input-embedding");
  Conversion(o, want).Run();
  return 0;
}

namespace {

// llama-quantize's type names (Q8_0, Q4_K_M, ...) in specd's spelling. Its mixes (_M, _S) keep
// some matrices at a higher type; specd writes one type for every matrix, and says so.
std::string TypeFromLlamaQuantizeName(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* mix : {"q4_k_m", "q4_k_s"}) {
    if (lower == mix) {
      std::fprintf(stderr,
                   "note: %s is llama-quantize's mix; specd writes q4_K for every matrix "
                   "(embedding and output included)\n",
                   name.c_str());
      return "q4_K";
    }
  }
  if (lower == "q4_k") return "q4_K";
  if (lower == "q6_k") return "q6_K";
  return lower;
}

}  // namespace

Command AddQuantizeCommand(CLI::App& app) {
  auto options = std::make_shared<QuantizeOptions>();
  QuantizeOptions* o = options.get();
  CLI::App* q = app.add_subcommand(
      "quantize", "convert a model's matrices to another type (llama-quantize's IN OUT TYPE)");
  q->add_option("input", o->input, "input GGUF")->required();
  q->add_option("output", o->output, "output GGUF")->required();
  const auto* positional_type = q->add_option("type", o->type, "TYPE, as --type");
  q->add_option("nthreads", o->threads, "threads, as -t (llama-quantize's 4th argument)")
      ->check(CLI::Range(1, 256));
  auto* type_flag = q->add_option(
      "--type", o->type,
      "q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q6_K, iq4_nl, iq4_xs, f16, bf16, f32, i8 (specd "
      "only; iq4 with ggml's first-pass scales, not its search), or copy (every tensor as it "
      "is, with --restrict-input-embedding); llama-quantize's names (Q8_0, Q4_K_M) too");
  type_flag->excludes(positional_type->get_name());
  q->add_flag("--restrict-input-embedding", o->restrict_input_embedding,
              "a draft's input embedding kept for its FR-Spec head's tokens and the control tokens "
              "only; every other token shares one row, the mean of theirs (specd.input_tokens)");
  flags::AddThreadsFlag(q, &o->threads);
  q->add_option("--smooth-alpha", o->smooth_alpha,
                "i8: SmoothQuant migration strength (0 = none; default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  q->add_option("--calibration", o->calibration_file,
                "i8: calibration text (default: a built-in mix of prose, code and chat)")
      ->check(CLI::ExistingFile);
  return {q, [options] {
            SPECD_CHECK(!options->type.empty(),
                        "quantize needs a type: specd quantize IN.gguf OUT.gguf TYPE (q8_0, q4_0, "
                        "q4_1, q5_0, q5_1, q4_K, q6_K, iq4_nl, iq4_xs, f16, bf16, f32, i8, copy)");
            options->type = TypeFromLlamaQuantizeName(options->type);
            static const std::set<std::string> kTypes = {"q8_0", "q4_0", "q4_1",   "q4_K",   "q6_K",
                                                         "q5_0", "q5_1", "iq4_nl", "iq4_xs", "i8",
                                                         "f16",  "bf16", "f32",    "copy"};
            SPECD_CHECK(kTypes.count(options->type) > 0, "quantize: type '", options->type,
                        "' is not one specd writes (q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q6_K, "
                        "iq4_nl, iq4_xs, f16, bf16, f32, i8, copy)");
            return RunQuantize(*options);
          }};
}

}  // namespace specd::cli
