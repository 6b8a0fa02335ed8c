#include "train/teacher_targets.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/file_util.h"
#include "base/timer.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace specd::train {
namespace fs = std::filesystem;
namespace {

void AppendRecords(const std::string& bytes, int64_t n_sequences, int64_t positions, int k,
                   TeacherTopK* out) {
  const int64_t per = positions * k;
  for (int64_t s = 0; s < n_sequences; ++s) {
    const char* at = bytes.data() + s * TopKSequenceBytes(positions, k);
    const size_t ids_at = out->ids.size(), probs_at = out->probs.size();
    out->ids.resize(ids_at + per);
    out->probs.resize(probs_at + per);
    std::memcpy(out->ids.data() + ids_at, at, per * sizeof(int32_t));
    std::memcpy(out->probs.data() + probs_at, at + per * sizeof(int32_t), per * sizeof(float));
  }
}

}  // namespace

int64_t TopKSequenceBytes(int64_t positions, int k) {
  return positions * k * static_cast<int64_t>(sizeof(int32_t) + sizeof(float));
}

std::string TopKRecipe(int k, const std::vector<std::vector<int32_t>>& sequences, int64_t ctx,
                       const TeacherRun& run) {
  return StrCat(k, ".", sequences.size(), ".", ctx, ".", SequencesFingerprint(sequences),
                run.int8_weights ? ".i8" : "", "\n");
}

void TeacherTopKOfTokens(Model& teacher, const KernelContext& kernels, KvCache& kv,
                         std::span<const int32_t> tokens, int k, int32_t* ids, float* probs) {
  if (tokens.empty()) return;
  const int64_t n_vocab = teacher.config().n_vocab;
  const int slot = kv.Acquire();
  Batch batch;
  for (size_t t = 0; t < tokens.size(); ++t)
    batch.Add(tokens[t], static_cast<int32_t>(t), slot, true);
  std::vector<float> logits;  // [tokens.size(), n_vocab]
  teacher.Forward(kernels, batch, kv, AttentionMode::kSplit, &logits);
  kv.Release(slot);
  kernels.pool->ParallelFor(static_cast<int64_t>(tokens.size()), 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto top = TopLogProbs({logits.data() + r * n_vocab, static_cast<size_t>(n_vocab)}, k);
      for (int j = 0; j < k; ++j) {
        ids[r * k + j] = top[j].first;
        probs[r * k + j] = std::exp(top[j].second);
      }
    }
  });
}

torch::Tensor SoftTargetLoss(const torch::Tensor& log_q, const TeacherTopK& top,
                             const std::vector<int64_t>& picked, const Llama& model) {
  const int64_t k = top.k, per = top.positions * k;
  auto ids = torch::empty({static_cast<int64_t>(picked.size()), per}, torch::kInt64);
  auto probs = torch::empty({static_cast<int64_t>(picked.size()), per}, torch::kFloat32);
  for (size_t b = 0; b < picked.size(); ++b) {
    const int32_t* id = top.ids.data() + picked[b] * per;
    const float* p = top.probs.data() + picked[b] * per;
    auto* ip = ids.data_ptr<int64_t>() + b * per;
    std::copy(id, id + per, ip);
    std::memcpy(probs.data_ptr<float>() + b * per, p, per * sizeof(float));
  }
  auto index = model->HeadTargets(ids).view({-1, k});  // [rows, k], -100 outside the head
  const auto inside = index.ge(0);
  const auto gathered = log_q.gather(1, index.clamp_min(0));
  const auto weights = probs.view({-1, k}) * inside.to(torch::kFloat32);
  return -(weights * gathered).sum(1).mean();
}

TeacherTopK ComputeTeacherTopK(const std::string& teacher_gguf,
                               const std::vector<std::vector<int32_t>>& sequences, int64_t ctx,
                               int k, int threads, const TeacherRun& run,
                               const std::string& cache_path) {
  SPECD_CHECK(k >= 1 && k <= 256, "--teacher-top-k must be in 1..256, got ", k);
  SPECD_CHECK(!sequences.empty(), "teacher top-k needs teacher text (--teacher-text)");
  TeacherTopK out;
  out.k = k;
  out.positions = ctx;
  const int64_t n_sequences = static_cast<int64_t>(sequences.size());
  const int64_t bytes_per_sequence = TopKSequenceBytes(ctx, k);
  const std::string recipe = TopKRecipe(k, sequences, ctx, run);
  const std::string recipe_path = cache_path.empty() ? "" : cache_path + ".recipe";
  if (!cache_path.empty() && fs::exists(cache_path) && fs::exists(recipe_path) &&
      ReadFileBytes(recipe_path) == recipe &&
      static_cast<int64_t>(fs::file_size(cache_path)) == n_sequences * bytes_per_sequence) {
    AppendRecords(ReadFileBytes(cache_path), n_sequences, ctx, k, &out);
    std::fprintf(stderr, "teacher top-%d: %lld sequences from %s\n", k,
                 static_cast<long long>(n_sequences), cache_path.c_str());
    return out;
  }
  // A partial file of the same recipe: keep its whole sequences and continue after them.
  const std::string partial_path = cache_path.empty() ? "" : cache_path + ".partial";
  const std::string partial_recipe_path = partial_path + ".recipe";
  int64_t done = 0;
  if (!partial_path.empty() && fs::exists(partial_path) && fs::exists(partial_recipe_path) &&
      ReadFileBytes(partial_recipe_path) == recipe) {
    done = std::min<int64_t>(
        n_sequences, static_cast<int64_t>(fs::file_size(partial_path)) / bytes_per_sequence);
    fs::resize_file(partial_path, done * bytes_per_sequence);
    AppendRecords(ReadFileBytes(partial_path), done, ctx, k, &out);
    std::fprintf(stderr, "teacher top-%d: continuing after %lld sequences in %s\n", k,
                 static_cast<long long>(done), partial_path.c_str());
  } else if (!partial_path.empty()) {
    std::ofstream(partial_path, std::ios::binary | std::ios::trunc);
    std::ofstream recipe_file(partial_recipe_path, std::ios::binary | std::ios::trunc);
    recipe_file << recipe;
    SPECD_CHECK(recipe_file.good(), "cannot write ", partial_recipe_path);
  }
  std::FILE* partial = nullptr;
  if (!partial_path.empty()) {
    partial = std::fopen(partial_path.c_str(), "ab");
    SPECD_CHECK(partial != nullptr, "cannot write ", partial_path);
  }

  ThreadPool pool(threads);
  const KernelContext kernels{&pool, CpuFeatures::Detect()};
  auto teacher = LoadTeacher(teacher_gguf, run, &kernels);
  auto kv = teacher->NewKvCache({1, static_cast<int>(ctx + 1), DType::kF16});
  std::vector<int32_t> ids(ctx * k);
  std::vector<float> probs(ctx * k);
  Timer timer;
  for (int64_t s = done; s < n_sequences; ++s) {
    const auto& seq = sequences[s];
    SPECD_CHECK(static_cast<int64_t>(seq.size()) == ctx + 1, "teacher text: sequence of ",
                seq.size(), " tokens, expected ", ctx + 1);
    TeacherTopKOfTokens(*teacher, kernels, *kv, std::span(seq).first(ctx), k, ids.data(),
                        probs.data());
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.probs.insert(out.probs.end(), probs.begin(), probs.end());
    if (partial != nullptr) {
      SPECD_CHECK(
          std::fwrite(ids.data(), sizeof(int32_t), ids.size(), partial) == ids.size() &&
              std::fwrite(probs.data(), sizeof(float), probs.size(), partial) == probs.size() &&
              std::fflush(partial) == 0,
          "cannot write ", partial_path);
    }
    if ((s + 1) % 16 == 0 || s + 1 == n_sequences) {
      std::fprintf(stderr, "%steacher top-%d: %lld / %lld sequences (%.0f tok/s)%s",
                   ::isatty(2) ? "\r" : "", k, static_cast<long long>(s + 1),
                   static_cast<long long>(n_sequences),
                   (s + 1 - done) * ctx / (timer.ElapsedMs() / 1000.0), ::isatty(2) ? "" : "\n");
    }
  }
  std::fprintf(stderr, "\n");
  if (partial != nullptr) {
    SPECD_CHECK(std::fclose(partial) == 0, "cannot write ", partial_path);
    fs::rename(partial_path, cache_path);
    fs::rename(partial_recipe_path, recipe_path);
  }
  return out;
}

}  // namespace specd::train
