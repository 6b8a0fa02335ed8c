// Measuring a draft against its target: acceptance on held-out prompts, with intervals that
// account for the clustering of drafts within a sequence.
#include <ATen/autocast_mode.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/rng.h"
#include "base/timer.h"
#include "draft/eagle_proposer.h"
#include "engine/generate.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/prompt_file.h"
#include "tokenizer/tokenizer.h"
#include "train/corpus.h"
#include "train/teacher_targets.h"
#include "train/train_loop.h"
#include "train/trainer.h"

namespace specd::train {

std::pair<double, double> ClusteredAcceptance(const std::vector<int64_t>& drafted,
                                              const std::vector<int64_t>& accepted) {
  SPECD_CHECK(drafted.size() == accepted.size(), "acceptance: ", drafted.size(),
              " drafted counts but ", accepted.size(), " accepted counts");
  double sum_drafted = 0.0, sum_accepted = 0.0;
  for (size_t i = 0; i < drafted.size(); ++i) {
    sum_drafted += static_cast<double>(drafted[i]);
    sum_accepted += static_cast<double>(accepted[i]);
  }
  if (sum_drafted == 0.0) return {0.0, 0.0};
  const double rate = sum_accepted / sum_drafted;
  const size_t n = drafted.size();
  if (n < 2) return {rate, 0.0};
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double residual =
        static_cast<double>(accepted[i]) - rate * static_cast<double>(drafted[i]);
    sum_sq += residual * residual;
  }
  return {rate, std::sqrt(double(n) / double(n - 1) * sum_sq) / sum_drafted};
}

DraftReport MeasureDraft(const std::string& target_gguf, const std::string& draft_gguf,
                         const std::vector<std::string>& held_out_files, int threads,
                         int draft_length, int prompts_per_file) {
  SPECD_CHECK(prompts_per_file >= 1, "prompts per file must be at least 1, got ", prompts_per_file);
  constexpr int kPromptTokens = 64;
  auto gguf = GgufFile::Open(target_gguf);
  const auto tokenizer = Tokenizer::FromGguf(*gguf);
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& file : held_out_files) {
    const auto ids = tokenizer->Encode(ReadFileBytes(file), false, false);
    for (int p = 0; p < prompts_per_file; ++p) {
      const size_t start = ids.size() * (2 * p + 1) / (2 * prompts_per_file);
      if (start + kPromptTokens > ids.size()) continue;
      prompts.emplace_back(ids.begin() + start, ids.begin() + start + kPromptTokens);
    }
  }
  return MeasureDraftOnPrompts(target_gguf, draft_gguf, prompts, threads, draft_length);
}

DraftReport MeasureDraftOnPrompts(const std::string& target_gguf, const std::string& draft_gguf,
                                  const std::vector<std::vector<int32_t>>& prompts, int threads,
                                  int draft_length, int n_new) {
  SPECD_CHECK(!prompts.empty(), "no prompts to measure the draft on");
  ThreadPool pool(threads);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto target = Model::Load(target_gguf, &ctx);
  auto draft = Model::Load(draft_gguf, &ctx);
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int n_ctx = static_cast<int>(longest) + n_new + draft_length + 2;
  auto target_kv = target->NewKvCache({1, n_ctx});
  auto draft_kv = draft->NewKvCache({1, n_ctx});
  SpeculativeStats stats;
  std::vector<int64_t> drafted_per_prompt, accepted_per_prompt;
  for (const auto& prompt : prompts) {
    GenerateRequest request;
    request.sum_logprob = false;
    request.prompt = prompt;
    request.n_predict = n_new;
    request.sampling.temperature = 0.0f;
    request.stop_at_eos = false;
    SpeculativeStats prompt_stats;
    GenerateSpeculativeGreedy(*target, *draft, ctx, *target_kv, *draft_kv, request, draft_length,
                              &prompt_stats);
    drafted_per_prompt.push_back(prompt_stats.n_drafted);
    accepted_per_prompt.push_back(prompt_stats.n_accepted);
    stats.Add(prompt_stats);
  }
  DraftReport report;
  report.acceptance_rate = stats.acceptance_rate();
  report.acceptance_standard_error =
      ClusteredAcceptance(drafted_per_prompt, accepted_per_prompt).second;
  report.n_prompts = static_cast<int64_t>(drafted_per_prompt.size());
  report.n_drafted = stats.n_drafted;
  report.mean_accepted_length = stats.mean_accepted_length();
  for (size_t i = 0; i < stats.drafted_at_position.size(); ++i) {
    const int64_t drafted = stats.drafted_at_position[i];
    report.accepted_at_position.push_back(
        drafted > 0 ? double(stats.accepted_at_position[i]) / drafted : 0.0);
  }
  // Decode-step cost: 64 single-row forwards after a 64-token prompt, best of three. An EAGLE
  // head's step includes its input projection and the embedding lookup in the target.
  auto step_ms = [&](Model& model) {
    const std::vector<float> features(64 * model.config().n_embd, 0.5f);  // [rows, n_embd]
    std::vector<float> concat, input;
    MatmulScratch scratch;
    auto forward = [&](const Batch& batch, KvCache& kv, std::vector<float>* logits) {
      ForwardExtras extras;
      if (model.config().eagle) {
        EagleInputRows(ctx, *target, model, batch.tokens, features.data(), &concat, &input,
                       &scratch);
        extras.input_rows = input.data();
      }
      model.Forward(ctx, batch, kv, AttentionMode::kSplit, logits, extras);
    };
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto kv = model.NewKvCache({1, 256});
      const int seq = kv->Acquire();
      std::vector<float> logits;
      Batch batch;
      for (int i = 0; i < 64; ++i) batch.Add(5 + i, i, seq, i == 63);
      forward(batch, *kv, &logits);
      Timer t;
      for (int i = 0; i < 64; ++i) {
        batch.Clear();
        batch.Add(7 + i, 64 + i, seq, true);
        forward(batch, *kv, &logits);
      }
      best = std::min(best, t.ElapsedMs() / 64);
    }
    return best;
  };
  report.target_ms_per_token = step_ms(*target);
  report.draft_ms_per_token = step_ms(*draft);
  return report;
}

}  // namespace specd::train
