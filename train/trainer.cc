#include "train/trainer.h"

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

namespace specd::train {
namespace fs = std::filesystem;
namespace {

// A batch of random windows: inputs [batch, ctx], targets [batch, ctx].
std::pair<torch::Tensor, torch::Tensor> SampleBatch(const std::vector<int32_t>& stream, int batch,
                                                    int64_t ctx, uint64_t seed, int64_t step) {
  auto x = torch::empty({batch, ctx}, torch::kInt64), y = torch::empty({batch, ctx}, torch::kInt64);
  auto* xp = x.data_ptr<int64_t>();
  auto* yp = y.data_ptr<int64_t>();
  const uint64_t span = stream.size() - ctx - 1;
  for (int b = 0; b < batch; ++b) {
    const RngKey key{seed, static_cast<uint64_t>(b), static_cast<uint64_t>(step),
                     RngPurpose::kSample};
    const uint64_t start = static_cast<uint64_t>(UniformDouble(key) * span);
    for (int64_t t = 0; t < ctx; ++t) {
      xp[b * ctx + t] = stream[start + t];
      yp[b * ctx + t] = stream[start + t + 1];
    }
  }
  return {x, y};
}

// A batch of whole sequences (each ctx + 1 tokens long), chosen at random; their indices go to
// `picked`.
std::pair<torch::Tensor, torch::Tensor> SampleSequences(
    const std::vector<std::vector<int32_t>>& sequences, int batch, int64_t ctx, uint64_t seed,
    int64_t step, std::vector<int64_t>* picked) {
  picked->clear();
  auto x = torch::empty({batch, ctx}, torch::kInt64), y = torch::empty({batch, ctx}, torch::kInt64);
  auto* xp = x.data_ptr<int64_t>();
  auto* yp = y.data_ptr<int64_t>();
  for (int b = 0; b < batch; ++b) {
    const RngKey key{seed, static_cast<uint64_t>(b), static_cast<uint64_t>(step),
                     RngPurpose::kDraft};
    picked->push_back(static_cast<int64_t>(UniformDouble(key) * sequences.size()));
    const auto& seq = sequences[picked->back()];
    for (int64_t t = 0; t < ctx; ++t) {
      xp[b * ctx + t] = seq[t];
      yp[b * ctx + t] = seq[t + 1];
    }
  }
  return {x, y};
}

}  // namespace

bool TakesTurn(int64_t i, double share) {
  return std::floor(double(i + 1) * share) > std::floor(double(i) * share);
}

namespace {

// The draft of `init_from`, to train further: its shape must be the one the options ask for (a
// run that silently changed width or depth would not be the run its command line reads as).
Llama ImportDraftToContinue(const TrainOptions& o) {
  Llama model = ImportGguf(o.init_from);
  const LlamaShape& got = model->shape;
  const std::pair<const char*, std::pair<int64_t, int64_t>> sizes[] = {
      {"--dim", {got.dim, o.shape.dim}},
      {"--layers", {got.n_layers, o.shape.n_layers}},
      {"--heads", {got.n_heads, o.shape.n_heads}},
      {"--kv-heads", {got.n_kv_heads, o.shape.n_kv_heads}},
      {"--ffn", {got.ffn, o.shape.ffn}},
      {"--ctx", {got.ctx, o.shape.ctx}},
      {"the vocabulary", {got.n_vocab, o.shape.n_vocab}},
      {"--head-vocab", {model->has_head() ? model->head_tokens.numel() : 0, o.head_vocab}},
  };
  for (const auto& [flag, values] : sizes) {
    SPECD_CHECK(values.first == values.second, o.init_from, " has ", flag, " ", values.first,
                ", but this run asks for ", values.second);
  }
  std::fprintf(stderr, "model: starting from %s\n", o.init_from.c_str());
  return model;
}

}  // namespace

uint64_t SequencesFingerprint(const std::vector<std::vector<int32_t>>& sequences) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& seq : sequences) {
    for (int32_t t : seq) {
      h ^= static_cast<uint32_t>(t);
      h *= 1099511628211ull;
    }
    h ^= 0xffffffffull;  // the end of a sequence: the same tokens split otherwise differ
    h *= 1099511628211ull;
  }
  return h;
}

std::unique_ptr<Model> LoadTeacher(const std::string& gguf, const TeacherRun& run,
                                   const KernelContext* kernels) {
  ModelLoadOptions load_options;
  load_options.int8_weights = run.int8_weights;
  return Model::Load(gguf, kernels, load_options);
}

std::vector<int64_t> MostFrequentTokens(const std::vector<int32_t>& stream,
                                        const std::vector<std::vector<int32_t>>& sequences,
                                        int64_t n_vocab, int64_t n) {
  std::vector<int64_t> counts(n_vocab, 0);
  for (int32_t t : stream) ++counts[t];
  for (const auto& seq : sequences) {
    for (int32_t t : seq) ++counts[t];
  }
  std::vector<int64_t> ids(n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) ids[i] = i;
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int64_t a, int64_t b) { return counts[a] > counts[b]; });
  ids.resize(std::min(n, n_vocab));
  int64_t covered = 0, total = 0;
  for (int64_t i = 0; i < n_vocab; ++i) total += counts[i];
  for (int64_t id : ids) covered += counts[id];
  std::sort(ids.begin(), ids.end());
  std::fprintf(stderr, "head: the %lld most frequent tokens cover %.2f%% of the training text\n",
               static_cast<long long>(ids.size()), 100.0 * covered / std::max<int64_t>(total, 1));
  return ids;
}

std::vector<int32_t> TokenizeFiles(const std::vector<std::string>& files,
                                   const std::string& tokenizer_gguf) {
  auto gguf = GgufFile::Open(tokenizer_gguf);
  const auto tokenizer = Tokenizer::FromGguf(*gguf);
  std::vector<int32_t> stream;
  for (const std::string& f : files) {
    stream.push_back(tokenizer->bos());
    const auto ids = tokenizer->Encode(ReadFileBytes(f), false, false);
    stream.insert(stream.end(), ids.begin(), ids.end());
    stream.push_back(tokenizer->eos());
  }
  return stream;
}

std::string FormatTrainLoss(double loss, const char* if_unknown) {
  if (std::isnan(loss)) return if_unknown;
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", loss);
  return text;
}

namespace {

// What a draft trains on: the corpus's token streams and, with a teacher, its text and top-k.
struct TrainingText {
  std::vector<int32_t> train_stream, valid_stream;
  std::vector<std::vector<int32_t>> teacher_text;
  TeacherTopK teacher_top;
};

TrainingText LoadTrainingText(const TrainOptions& o) {
  TrainingText t;
  const Corpus corpus = ListCorpus(o.corpus_dir, {".py"}, o.validation_every);
  t.train_stream = TokenizeFiles(corpus.train_files, o.tokenizer);
  t.valid_stream = TokenizeFiles(corpus.validation_files, o.tokenizer);
  SPECD_CHECK(static_cast<int64_t>(t.train_stream.size()) > o.shape.ctx * 4,
              "the corpus is too small for a context of ", o.shape.ctx);
  std::fprintf(stderr,
               "corpus: %zu training files (%zu tokens), %zu held out (%zu tokens), "
               "fingerprint %016llx\n",
               corpus.train_files.size(), t.train_stream.size(), corpus.validation_files.size(),
               t.valid_stream.size(), static_cast<unsigned long long>(corpus.fingerprint));
  // Teacher text comes first, before LibTorch starts its own threads: specd's spinning pool
  // runs several times slower next to them on 2 cores.
  if (!o.teacher.empty() && o.teacher_text_tokens > 0) {
    std::vector<std::vector<int32_t>> chat_prompts;
    if (!o.teacher_chat_file.empty()) {
      chat_prompts = ChatPrompts(o.teacher, o.teacher_chat_file, o.shape.ctx / 2);
    }
    // Soft targets are recorded while the text is written, when both are cached.
    TopKRecording record;
    if (!o.checkpoint_dir.empty()) {
      record = {o.teacher_top_k, o.checkpoint_dir + "/teacher_topk.bin"};
    }
    t.teacher_text = TeacherText(
        o.teacher, t.train_stream, o.teacher_text_tokens, o.shape.ctx, o.threads, o.seed,
        o.teacher_text_sampled_share,
        o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/teacher_text.bin", chat_prompts,
        chat_prompts.empty() ? 0.0 : o.teacher_chat_share, o.teacher_run, record);
  }
  if (o.teacher_top_k > 0) {
    SPECD_CHECK(!t.teacher_text.empty(), "--teacher-top-k needs teacher text (--teacher-text)");
    SPECD_CHECK(o.soft_weight >= 0.0 && o.soft_weight <= 1.0,
                "--soft-weight must be in [0, 1], got ", o.soft_weight);
    t.teacher_top = ComputeTeacherTopK(
        o.teacher, t.teacher_text, o.shape.ctx, o.teacher_top_k, o.threads, o.teacher_run,
        o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/teacher_topk.bin");
  }
  return t;
}

// The teacher's logits for distillation, or null: without a distillation term the teacher is
// only the author of the teacher text.
Llama DistillationTeacher(const TrainOptions& o) {
  if (o.teacher.empty() || o.distill_alpha <= 0.0) return Llama{nullptr};
  Llama teacher = ImportGguf(o.teacher);
  SPECD_CHECK(teacher->shape.n_vocab == o.shape.n_vocab, "the teacher's vocabulary (",
              teacher->shape.n_vocab, ") differs from the draft's (", o.shape.n_vocab, ")");
  teacher->eval();
  for (auto& p : teacher->parameters()) p.set_requires_grad(false);
  return teacher;
}

// One step's loss: cross-entropy on the batch's next tokens, mixed with the KL to the teacher's
// distribution (distillation) and with the recorded top-k soft targets on teacher-text steps.
// *ce gets the plain cross-entropy.
torch::Tensor StepLoss(const TrainOptions& o, const TrainingText& text, Llama& model,
                       Llama& teacher, int64_t step, double* ce) {
  const bool teacher_step = !text.teacher_text.empty() && TakesTurn(step, o.teacher_text_share);
  std::vector<int64_t> picked;
  auto [x, y] =
      teacher_step ? SampleSequences(text.teacher_text, o.batch, o.shape.ctx, o.seed, step, &picked)
                   : SampleBatch(text.train_stream, o.batch, o.shape.ctx, o.seed, step);
  torch::Tensor logits, teacher_logits;
  {
    Autocast autocast(o.bf16);
    logits = model->forward(x);
    if (teacher) {
      torch::NoGradGuard no_grad;
      teacher_logits = teacher->forward(x);
    }
  }
  const auto flat = logits.to(torch::kFloat32).view({-1, logits.size(-1)});
  auto loss = torch::nn::functional::cross_entropy(flat, model->HeadTargets(y).view({-1}));
  *ce = loss.item<double>();
  if (teacher) {
    if (model->has_head()) teacher_logits = teacher_logits.index_select(-1, model->head_tokens);
    const auto target =
        torch::softmax(teacher_logits.to(torch::kFloat32).view({-1, logits.size(-1)}), -1);
    const auto kl = torch::nn::functional::kl_div(
        torch::log_softmax(flat, -1), target,
        torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
    loss = o.distill_alpha * kl + (1.0 - o.distill_alpha) * loss;
  }
  if (teacher_step && text.teacher_top.k > 0) {
    const auto soft = SoftTargetLoss(torch::log_softmax(flat, -1), text.teacher_top, picked, model);
    loss = o.soft_weight * soft + (1.0 - o.soft_weight) * loss;
  }
  return loss;
}

// The end of a finished run: held-out loss, and the draft exported when asked for.
void FinishTraining(const TrainOptions& o, const TrainingText& text, Llama& model, int64_t step,
                    TrainResult* result) {
  result->steps = step;
  result->finished = true;
  result->validation_loss =
      HeldOutLoss(model, text.valid_stream, o.shape.ctx, o.eval_windows, o.bf16);
  result->validation_perplexity = std::exp(result->validation_loss);
  std::fprintf(stderr,
               "%sdone: %lld steps, train loss %s, validation loss %.4f (perplexity %.2f)\n",
               ::isatty(2) ? "\n" : "", static_cast<long long>(step),
               FormatTrainLoss(result->train_loss, "unknown").c_str(), result->validation_loss,
               result->validation_perplexity);
  if (!o.out.empty()) {
    ExportGguf(model, o.tokenizer, o.export_type, o.name, o.out, {}, o.embedding_type);
    std::fprintf(stderr, "wrote %s\n", o.out.c_str());
  }
}

}  // namespace

TrainResult Train(const TrainOptions& o) {
  const FolderLock lock(o.checkpoint_dir);
  torch::set_num_threads(o.threads);
  torch::manual_seed(o.seed);
  SPECD_CHECK(o.stop_at_step == 0 || !o.checkpoint_dir.empty(),
              "stopping at a step needs a checkpoint folder to resume from");
  const TrainingText text = LoadTrainingText(o);
  Llama model = o.init_from.empty() ? Llama(o.shape) : ImportDraftToContinue(o);
  if (o.head_vocab > 0 && o.init_from.empty()) {
    model->SetHeadTokens(
        MostFrequentTokens(text.train_stream, text.teacher_text, o.shape.n_vocab, o.head_vocab));
  }
  Llama teacher = DistillationTeacher(o);
  const int64_t tokens_per_step = static_cast<int64_t>(o.batch) * o.shape.ctx;
  const int64_t total_steps =
      o.max_steps > 0
          ? o.max_steps
          : std::max<int64_t>(
                1, static_cast<int64_t>(o.epochs * text.train_stream.size() / tokens_per_step));
  auto optimizer = MakeAdamW(model, o.lr, o.weight_decay);
  int64_t step = 0;
  // Smoothed training loss; carried in the checkpoint so that a resumed run (or a re-export of a
  // finished one) reports it instead of starting from nothing.
  double smoothed = std::nan("");
  Checkpoint checkpoint(o.checkpoint_dir);
  checkpoint.Load(model, *optimizer, &step, &smoothed);
  auto save_checkpoint = [&] { checkpoint.Save(model, *optimizer, step, smoothed); };
  std::fprintf(stderr, "model: %lld parameters; %lld steps of %lld tokens (%.2f epochs)%s\n",
               static_cast<long long>(model->NumParameters()), static_cast<long long>(total_steps),
               static_cast<long long>(tokens_per_step),
               double(total_steps) * tokens_per_step / text.train_stream.size(),
               teacher ? ", distilling from the teacher" : "");
  const bool tty = ::isatty(2);
  TrainResult result;
  result.parameters = model->NumParameters();
  Timer timer;
  const int64_t first_step = step;
  result.train_loss = smoothed;
  model->train();
  while (step < total_steps) {
    const double lr_scale = LearningRateScale(step, o.warmup_steps, total_steps, o.min_lr_ratio);
    SetLearningRate(*optimizer, o.lr * lr_scale);
    double ce = 0.0;
    torch::Tensor loss = StepLoss(o, text, model, teacher, step, &ce);
    optimizer->zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), o.grad_clip);
    optimizer->step();
    ++step;
    smoothed = std::isnan(smoothed) ? ce : 0.98 * smoothed + 0.02 * ce;
    result.train_loss = smoothed;
    const double elapsed_s = timer.ElapsedMs() / 1000.0;
    result.tokens_per_s = double(step - first_step) * tokens_per_step / std::max(elapsed_s, 1e-9);
    ReportProgress(step, total_steps, smoothed, o.lr * lr_scale, result.tokens_per_s,
                   tokens_per_step);
    if (step == o.stop_at_step && step < total_steps) {
      save_checkpoint();
      result.steps = step;
      std::fprintf(stderr, "%sstopped at step %lld of %lld; checkpoint in %s\n", tty ? "\n" : "",
                   static_cast<long long>(step), static_cast<long long>(total_steps),
                   o.checkpoint_dir.c_str());
      return result;
    }
    if (step % o.checkpoint_every == 0) save_checkpoint();
    if (step % o.eval_every == 0 && !text.valid_stream.empty()) {
      const double v = HeldOutLoss(model, text.valid_stream, o.shape.ctx, o.eval_windows, o.bf16);
      std::fprintf(stderr, "%sstep %lld: validation loss %.4f, perplexity %.2f\n", tty ? "\n" : "",
                   static_cast<long long>(step), v, std::exp(v));
    }
  }
  save_checkpoint();
  FinishTraining(o, text, model, step, &result);
  return result;
}

}  // namespace specd::train
