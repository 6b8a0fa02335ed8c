#include "model/lora.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "base/error.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

constexpr const char kSuffixA[] = ".lora_a";
constexpr const char kSuffixB[] = ".lora_b";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A 2-D tensor as f32, row-major [shape[1], shape[0]].
std::vector<float> ReadMatrix(const GgufFile& f, const GgufTensorInfo& t) {
  SPECD_CHECK(t.shape.size() == 2, f.path(), ": LoRA tensor '", t.name, "' is not 2-D");
  const int64_t cols = t.shape[0], rows = t.shape[1];
  SPECD_CHECK(cols % BlockElements(t.type) == 0, f.path(), ": LoRA tensor '", t.name,
              "' has rows that are not whole ", DTypeName(t.type), " blocks");
  std::vector<float> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t.type, t.data + r * RowBytes(t.type, cols), out.data() + r * cols, cols);
  }
  return out;
}

LoraUpdate MakeUpdate(const GgufFile& f, const std::string& target, const GgufTensorInfo& a,
                      const GgufTensorInfo& b, float alpha, float scale) {
  LoraUpdate u;
  u.target = target;
  std::vector<float> a_values = ReadMatrix(f, a), b_values = ReadMatrix(f, b);
  if (target == "token_embd.weight") {
    // a [rank, n_vocab] (ggml order): row t of a holds token t's coefficients; b [rank, n_embd].
    SPECD_CHECK(a.shape[0] == b.shape[0], f.path(), ": token_embd LoRA ranks differ (", a.shape[0],
                " vs ", b.shape[0], ")");
    u.rank = a.shape[0];
    u.rows = a.shape[1];
    u.cols = b.shape[1];
    u.left = std::move(a_values);  // [n_vocab, rank]
    u.right.resize(u.rank * u.cols);
    for (int64_t e = 0; e < u.cols; ++e) {
      for (int64_t k = 0; k < u.rank; ++k) u.right[k * u.cols + e] = b_values[e * u.rank + k];
    }
  } else {
    // a [in, rank], b [rank, out] (ggml order): row-major A [rank, in], B [out, rank].
    SPECD_CHECK(a.shape[1] == b.shape[0], f.path(), ": '", target,
                "': lora_a and lora_b ranks differ (", a.shape[1], " vs ", b.shape[0],
                "; lora_a must be [in, rank] and lora_b [rank, out])");
    u.rank = a.shape[1];
    u.rows = b.shape[1];
    u.cols = a.shape[0];
    u.left = std::move(b_values);
    u.right = std::move(a_values);
  }
  SPECD_CHECK(u.rank >= 1, f.path(), ": '", target, "' has a LoRA of rank 0");
  u.stored_f16 = a.type == DType::kF16 && b.type == DType::kF16;
  u.s = alpha != 0.0f ? scale * alpha / static_cast<float>(u.rank) : scale;
  return u;
}

}  // namespace

void LoraUpdate::DeltaRow(int64_t r, float* out) const {
  std::fill_n(out, cols, 0.0f);
  for (int64_t k = 0; k < rank; ++k) {
    const float c = s * left[r * rank + k];
    if (c == 0.0f) continue;
    const float* row = right.data() + k * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] += c * row[j];
  }
}

bool LoraUpdate::TouchesRow(int64_t r) const {
  const float* coefficients = left.data() + r * rank;
  return s != 0.0f &&
         std::any_of(coefficients, coefficients + rank, [](float c) { return c != 0.0f; });
}

int64_t LoraUpdate::CountTouchedRows() const {
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) n += TouchesRow(r) ? 1 : 0;
  return n;
}

namespace {

// A [rows, cols] matrix of floats as a WeightView over bytes it keeps in `bytes`: f16 when
// `type` (f16 only when the caller knows the values are halves, or f32).
std::vector<uint8_t> HoldValues(const std::vector<float>& values, DType type) {
  std::vector<uint8_t> bytes(values.size() * (type == DType::kF16 ? 2 : 4));
  if (type == DType::kF16) {
    auto* out = reinterpret_cast<uint16_t*>(bytes.data());
    for (size_t i = 0; i < values.size(); ++i) out[i] = Fp32ToFp16(values[i]);
  } else {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  }
  return bytes;
}

}  // namespace

LowRankTerm MakeLowRankTerm(const LoraUpdate& update) {
  LowRankTerm term;
  term.type = update.stored_f16 ? DType::kF16 : DType::kF32;
  term.rank = update.rank;
  term.rows = update.rows;
  term.cols = update.cols;
  term.s = update.s;
  term.a_bytes = HoldValues(update.right, term.type);
  // [blocks, rank, kLowRankBlock], zero-padded: AddLowRankProduct's layout of B.
  const int64_t blocks = (update.rows + kLowRankBlock - 1) / kLowRankBlock;
  std::vector<float> blocked(blocks * update.rank * kLowRankBlock, 0.0f);
  for (int64_t r = 0; r < update.rows; ++r) {
    for (int64_t k = 0; k < update.rank; ++k) {
      blocked[r / kLowRankBlock * update.rank * kLowRankBlock + k * kLowRankBlock +
              r % kLowRankBlock] = update.left[r * update.rank + k];
    }
  }
  term.bt_bytes = HoldValues(blocked, term.type);
  return term;
}

void AddLowRank(const KernelContext& ctx, std::initializer_list<LowRankJob> jobs, const float* x,
                int64_t m, LowRankScratch* scratch) {
  bool any = false;
  for (const LowRankJob& job : jobs) any = any || !job.terms->empty();
  if (!any || m <= 0) return;
  const int n_threads = ctx.pool->size();
  while (static_cast<int>(scratch->threads.size()) < n_threads) {
    scratch->threads.push_back({std::make_unique<ThreadPool>(1), {}, {}});
  }
  ctx.pool->RunOnAll([&](int thread) {
    LowRankScratch::PerThread& own = scratch->threads[thread];
    KernelContext solo = ctx;
    solo.pool = own.solo.get();
    for (const LowRankJob& job : jobs) {
      for (const LowRankTerm& term : *job.terms) {
        // Every thread forms A x (small), then adds B t to its share of the output blocks.
        own.t.Resize(m * term.rank);  // [m, rank]
        Matmul(solo, x, m, term.A(), own.t.data(), &own.matmul);
        for (int64_t i = 0; i < m * term.rank; ++i) own.t[i] *= term.s;
        const int64_t blocks = (term.rows + kLowRankBlock - 1) / kLowRankBlock;
        const int64_t b0 = blocks * thread / n_threads, b1 = blocks * (thread + 1) / n_threads;
        if (b0 == b1) continue;
        const int64_t o0 = b0 * kLowRankBlock;
        const int64_t n = std::min(term.rows, b1 * kLowRankBlock) - o0;
        const int64_t element_bytes = term.type == DType::kF16 ? 2 : 4;
        const uint8_t* bt = term.bt_bytes.data() + o0 * term.rank * element_bytes;
        AddLowRankProduct(solo, own.t.data(), m, term.rank, term.type, bt, n, job.y + o0,
                          job.y_stride);
      }
    }
  });
}

const float* EmbeddingDelta::Find(int32_t token) const {
  const auto it = std::lower_bound(tokens.begin(), tokens.end(), token);
  if (it == tokens.end() || *it != token) return nullptr;
  return rows.data() + (it - tokens.begin()) * n_embd;
}

void EmbeddingDelta::Add(const LoraUpdate& update) {
  SPECD_CHECK(n_embd == 0 || n_embd == update.cols, "token_embd LoRAs of different widths");
  n_embd = update.cols;
  std::map<int32_t, std::vector<float>> merged;
  for (size_t i = 0; i < tokens.size(); ++i) {
    merged[tokens[i]].assign(rows.begin() + i * n_embd, rows.begin() + (i + 1) * n_embd);
  }
  std::vector<float> delta(n_embd);
  for (int64_t r = 0; r < update.rows; ++r) {
    if (!update.TouchesRow(r)) continue;
    update.DeltaRow(r, delta.data());
    std::vector<float>& row = merged[static_cast<int32_t>(r)];
    row.resize(n_embd, 0.0f);
    for (int64_t j = 0; j < n_embd; ++j) row[j] += delta[j];
  }
  tokens.clear();
  rows.clear();
  for (const auto& [token, row] : merged) {
    tokens.push_back(token);
    rows.insert(rows.end(), row.begin(), row.end());
  }
}

LoraAdapter ReadLoraAdapter(const LoraSpec& spec, const std::string& arch) {
  LoraAdapter adapter;
  adapter.file = GgufFile::Open(spec.path);
  const GgufFile& f = *adapter.file;
  auto string_key = [&](const char* key) -> std::string {
    const GgufValue* v = f.Find(key);
    return v != nullptr ? v->AsString(key) : "";
  };
  SPECD_CHECK(string_key("general.type") == "adapter" && string_key("adapter.type") == "lora",
              spec.path, " is not a LoRA adapter (general.type = adapter, adapter.type = lora)");
  const std::string adapter_arch = string_key("general.architecture");
  SPECD_CHECK(adapter_arch == arch, spec.path, " is an adapter for '", adapter_arch,
              "' models, not for this '", arch, "' model");
  const float alpha = static_cast<float>(f.GetFloat("adapter.lora.alpha", 0.0));
  std::map<std::string, std::pair<const GgufTensorInfo*, const GgufTensorInfo*>> pairs;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (EndsWith(t.name, kSuffixA)) {
      pairs[t.name.substr(0, t.name.size() - 7)].first = &t;
    } else if (EndsWith(t.name, kSuffixB)) {
      pairs[t.name.substr(0, t.name.size() - 7)].second = &t;
    } else {
      Fail(spec.path, ": tensor '", t.name, "' is neither a .lora_a nor a .lora_b");
    }
  }
  SPECD_CHECK(!pairs.empty(), spec.path, " holds no LoRA tensors");
  for (const auto& [target, ab] : pairs) {
    SPECD_CHECK(ab.first != nullptr && ab.second != nullptr, spec.path, ": '", target,
                "' has only one of lora_a and lora_b");
    adapter.updates.push_back(MakeUpdate(f, target, *ab.first, *ab.second, alpha, spec.scale));
  }
  return adapter;
}

DType LoraMergedType(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
      return type;
    default:
      return DType::kQ8_0;
  }
}

std::vector<uint8_t> MergeLoraUpdate(DType type, const uint8_t* base, const LoraUpdate& update) {
  const DType merged_type = LoraMergedType(type);
  const int64_t row_bytes = RowBytes(type, update.cols);
  const int64_t merged_row_bytes = RowBytes(merged_type, update.cols);
  std::vector<uint8_t> merged(merged_row_bytes * update.rows);
  std::vector<float> row(update.cols), delta(update.cols);
  for (int64_t r = 0; r < update.rows; ++r) {
    const uint8_t* src = base + r * row_bytes;
    uint8_t* dst = merged.data() + r * merged_row_bytes;
    const bool touched = update.TouchesRow(r);
    if (!touched && merged_type == type) {
      std::memcpy(dst, src, row_bytes);
      continue;
    }
    DequantizeRow(type, src, row.data(), update.cols);
    if (touched) {
      update.DeltaRow(r, delta.data());
      for (int64_t j = 0; j < update.cols; ++j) row[j] += delta[j];
    }
    QuantizeRow(merged_type, row.data(), dst, update.cols);
  }
  return merged;
}

}  // namespace specd
