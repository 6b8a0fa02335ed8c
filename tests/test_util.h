#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/synth.h"
#include "sampling/token_constraint.h"
#include "tensor/dtype.h"

namespace specd::testing {

// A speculation config for the Generate* helpers: k drafts every step (0: the fixed default),
// sampled drafts verified by `mode` (rejection sampling unless told).
inline SpeculationConfig FixedDrafts(int k = 0, SpecSampling mode = SpecSampling::kRejection) {
  SpeculationConfig c;
  c.policy = DraftLengthPolicyKind::kFixed;
  c.draft_max = k;
  c.sampling = mode;
  return c;
}

// A fresh directory under the system temp dir, unique per process.
std::string TempDir();
// Path of a tiny synthetic model (written once per process and cached).
std::string TinyModel(const std::string& shape = "tiny", DType type = DType::kF32,
                      uint64_t seed = 7);

// A target and a draft of tiny synthetic shapes (the target seeded 7), with 2 threads.
struct ModelPair {
  explicit ModelPair(DType type, uint64_t draft_seed, const std::string& draft_shape = "tiny");
  ThreadPool pool;
  KernelContext ctx;
  std::unique_ptr<Model> target, draft;
};

// A copy of a model with an FR-Spec restricted head: output.weight holds the output matrix's
// (or tied embedding's) rows of `head` and specd.head_tokens lists them. Returns the copy's path.
std::string WithRestrictedHead(const std::string& path, const std::vector<int32_t>& head);

// An EAGLE head (specd.eagle) for targets shaped like the model at `path`: that model's first
// block, final norm and output matrix, no token embedding, and a seeded random eagle.fc.
// Returns the head's path.
std::string EagleHeadOf(const std::string& path, uint64_t seed);

// n values uniform in [-scale, scale), from a seeded SplitMix64.
std::vector<float> RandomVector(int64_t n, uint64_t seed, float scale = 1.0f);
// ||a - b|| / ||b||
double RelativeError(const std::vector<float>& a, const std::vector<float>& b);
// A greedy request for n new tokens that does not stop at EOS.
GenerateRequest Greedy(const std::vector<int32_t>& prompt, int n);

// A deterministic prompt of n tokens below 384 (the tiny vocabulary), varied by salt.
std::vector<int32_t> Prompt(int n, int salt);

// Chi-square goodness of fit of counts (n draws) against expected probabilities; cells expected
// below 5 are pooled. Returns the p-value.
double ChiSquarePValue(const std::vector<double>& expected_probs,
                       const std::vector<int64_t>& counts, int64_t n);

// The specd binary run with `args` (and `stdin_text` on its standard input): exit code and
// stdout + stderr together.
struct CliRun {
  int exit_code;
  std::string out;
};
// Runs the specd binary; without pretrained_default, SPECD_PRETRAINED_DIR points nowhere so
// that the default model is the shipped 16.5M pair.
CliRun RunSpecd(const std::string& args, const std::string& stdin_text = "",
                bool pretrained_default = false);
// The first line of a run's output that is a JSON object (a `generate --json` run's first
// sequence; notes on stderr come before it), parsed.
nlohmann::json FirstJsonLine(const CliRun& run);

// Kernel paths a test could not run on this CPU (an ISA it lacks), reported at the test's end as
// a skip naming them (SPECD_SKIP_IF_UNTESTED), so that a machine without AVX-512 shows a skipped
// test instead of a pass that tested less. Failures of the paths that ran still fail the test.
class UntestedPaths {
 public:
  // Records `path` as untested when `available` is false; returns `available`.
  bool Check(bool available, const std::string& path) {
    if (!available && reason_.find(path) == std::string::npos) {
      reason_ += (reason_.empty() ? "" : ", ") + path;
    }
    return available;
  }
  bool empty() const { return reason_.empty(); }
  std::string Reason() const { return "not tested on this CPU: " + reason_; }

 private:
  std::string reason_;
};
#define SPECD_SKIP_IF_UNTESTED(untested) \
  if (!(untested).empty()) GTEST_SKIP() << (untested).Reason()

// A grammar for the synthetic models, exact and cheap to reason about: after token t (the
// prompt's last token first) only tokens u with (t + u) % 3 != 0 may follow. Lets the lossless
// gates run under a constraint without a tokenizer.
class ModuloConstraint final : public TokenConstraint {
 public:
  explicit ModuloConstraint(int32_t last) : history_{last} {}
  static bool Allowed(int32_t previous, int32_t token) { return (previous + token) % 3 != 0; }
  void Mask(std::span<float> logits) override;
  bool Advance(int32_t token) override;
  void Rollback(int n) override { history_.resize(history_.size() - n); }
  bool terminated() const override { return false; }

 private:
  std::vector<int32_t> history_;
};

// Starts ModuloConstraints after the given prompt's last token.
class ModuloGrammar final : public TokenConstraintFactory {
 public:
  explicit ModuloGrammar(int32_t prompt_last) : prompt_last_(prompt_last) {}
  std::unique_ptr<TokenConstraint> Start() const override {
    return std::make_unique<ModuloConstraint>(prompt_last_);
  }

 private:
  int32_t prompt_last_;
};

// Whether tokens (following `prompt_last`) keep ModuloConstraint's rule.
bool FollowsModuloRule(int32_t prompt_last, const std::vector<int32_t>& tokens);

}  // namespace specd::testing
