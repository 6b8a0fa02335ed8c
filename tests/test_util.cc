#include "tests/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/error.h"
#include "base/rng.h"
#include "gguf/gguf.h"
#include "tensor/quantize.h"
#include "threading/thread_pool.h"

namespace specd::testing {

ModelPair::ModelPair(DType type, uint64_t draft_seed, const std::string& draft_shape)
    : pool(2), ctx{&pool, CpuFeatures::Detect()} {
  target = Model::Load(TinyModel("tiny", type, 7), &ctx);
  draft = Model::Load(TinyModel(draft_shape, type, draft_seed), &ctx);
}

std::vector<float> RandomVector(int64_t n, uint64_t seed, float scale) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.NextSymmetric();
  return v;
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

GenerateRequest Greedy(const std::vector<int32_t>& prompt, int n) {
  GenerateRequest r;
  r.prompt = prompt;
  r.n_predict = n;
  r.sampling.temperature = 0.0f;
  r.stop_at_eos = false;
  return r;
}

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 53 + salt * 7 + 5) % 384);
  return p;
}

// Upper regularized incomplete gamma Q(a, x): the chi-square survival function is Q(df/2, x/2).
double GammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {  // series for P
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  // Continued fraction for Q (modified Lentz).
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::exp(log_prefix) * h;
}

// Chi-square goodness of fit; cells expected below 5 are pooled. Returns the p-value.
double ChiSquarePValue(const std::vector<double>& expected_probs,
                       const std::vector<int64_t>& counts, int64_t n) {
  double chi2 = 0, pooled_expected = 0, pooled_count = 0;
  int cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected_probs[i] * n;
    if (e < 5) {
      pooled_expected += e;
      pooled_count += counts[i];
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  if (pooled_expected > 0) {
    chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) /
            std::max(pooled_expected, 1e-9);
    ++cells;
  }
  return GammaQ((cells - 1) / 2.0, chi2 / 2.0);
}

std::string WithRestrictedHead(const std::string& path, const std::vector<int32_t>& head) {
  auto file = GgufFile::Open(path);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.Set(key, value);
  std::vector<GgufValue> ids;
  for (int32_t id : head) ids.push_back(GgufValue::I32(id));
  w.Set("specd.head_tokens", GgufValue::Array(GgufType::kInt32, std::move(ids)));
  for (const GgufTensorInfo& t : file->tensors()) {
    if (t.name == "output.weight") continue;
    w.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  // The head's rows of the output matrix (the embedding where the two are tied).
  const GgufTensorInfo& embd = file->FindTensor("output.weight") != nullptr
                                   ? file->GetTensor("output.weight")
                                   : file->GetTensor("token_embd.weight");
  const int64_t row_bytes = RowBytes(embd.type, embd.shape[0]);
  std::vector<uint8_t> rows;
  for (int32_t id : head) {
    rows.insert(rows.end(), embd.data + id * row_bytes, embd.data + (id + 1) * row_bytes);
  }
  w.AddTensor("output.weight", embd.type, {embd.shape[0], static_cast<int64_t>(head.size())},
              std::move(rows));
  const std::string out = path + ".head" + std::to_string(head.size()) + ".gguf";
  w.Write(out);
  return out;
}

std::string EagleHeadOf(const std::string& path, uint64_t seed) {
  auto file = GgufFile::Open(path);
  const std::string arch = file->Get("general.architecture").AsString("arch");
  const int64_t d = file->Get(arch + ".embedding_length").AsInt("d");
  const int64_t n_vocab = file->GetTensor("token_embd.weight").shape[1];
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.Set(key, value);
  w.Set(arch + ".block_count", GgufValue::U32(1));
  w.Set(arch + ".vocab_size", GgufValue::U32(static_cast<uint32_t>(n_vocab)));
  w.Set("specd.eagle", GgufValue::Bool(true));
  for (const GgufTensorInfo& t : file->tensors()) {
    const bool first_block = t.name.rfind("blk.0.", 0) == 0;
    if (t.name.rfind("blk.", 0) == 0 && !first_block) continue;
    // The output matrix is the embedding where the two are tied; the head keeps no embedding.
    const bool tied_output = t.name == "token_embd.weight" && !file->FindTensor("output.weight");
    if (t.name == "token_embd.weight" && !tied_output) continue;
    w.AddTensor(tied_output ? "output.weight" : t.name, t.type, t.shape,
                std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  const auto fc = RandomVector(d * 2 * d, seed, 1.7f / std::sqrt(2.0f * d));  // [d, 2d]
  std::vector<uint8_t> bytes(fc.size() * sizeof(float));
  std::memcpy(bytes.data(), fc.data(), bytes.size());
  w.AddTensor("eagle.fc.weight", DType::kF32, {2 * d, d}, std::move(bytes));
  const std::string out = path + ".eagle" + std::to_string(seed) + ".gguf";
  w.Write(out);
  return out;
}

CliRun RunSpecd(const std::string& args, const std::string& stdin_text, bool pretrained_default) {
  const std::string input = TempDir() + "/stdin-" + std::to_string(::getpid()) + ".txt";
  std::ofstream(input) << stdin_text;
  // Without -m the CLI picks SmolLM2 when it has been fetched; tests that rely on the default
  // mean the shipped pair unless they ask for the other.
  const std::string env = pretrained_default ? "" : "SPECD_PRETRAINED_DIR=/nonexistent ";
  const std::string cmd = env + std::string(SPECD_BINARY) + " " + args + " < " + input + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

nlohmann::json FirstJsonLine(const CliRun& run) {
  std::istringstream lines(run.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') return nlohmann::json::parse(line);
  }
  Fail("no JSON line in the output: ", run.out);
}

std::string TempDir() {
  static const std::string dir = [] {
    const auto path =
        std::filesystem::temp_directory_path() / ("specd-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path.string();
  }();
  return dir;
}

std::string TinyModel(const std::string& shape, DType type, uint64_t seed) {
  const std::string path = StrCat(TempDir(), "/", shape, "-", DTypeName(type), "-", seed, ".gguf");
  if (!std::filesystem::exists(path)) {
    ThreadPool pool(1);
    WriteSyntheticModel(ShapeByName(shape), type, seed, path, &pool);
  }
  return path;
}

void ModuloConstraint::Mask(std::span<float> logits) {
  for (size_t t = 0; t < logits.size(); ++t) {
    if (!Allowed(history_.back(), static_cast<int32_t>(t))) {
      logits[t] = -std::numeric_limits<float>::infinity();
    }
  }
}

bool ModuloConstraint::Advance(int32_t token) {
  if (!Allowed(history_.back(), token)) return false;
  history_.push_back(token);
  return true;
}

bool FollowsModuloRule(int32_t prompt_last, const std::vector<int32_t>& tokens) {
  int32_t previous = prompt_last;
  for (int32_t t : tokens) {
    if (!ModuloConstraint::Allowed(previous, t)) return false;
    previous = t;
  }
  return true;
}

}  // namespace specd::testing
