#include "train/eagle_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "base/error.h"
#include "base/timer.h"
#include "model/model.h"
#include "train/corpus.h"
#include "train/llama_torch.h"
#include "train/train_loop.h"
#include "train/trainer.h"

namespace specd::train {
namespace fs = std::filesystem;
namespace {

// The target's final normed hidden state at every position of every sequence (all of length
// `len`), from specd's forward: [n_seq, len, n_embd] f16. Cached in `cache_path` (with the
// sequences' fingerprint beside it) when given.
torch::Tensor TargetFeatures(const std::string& target_gguf,
                             const std::vector<std::vector<int32_t>>& sequences, int64_t len,
                             int threads, const std::string& cache_path) {
  ThreadPool pool(threads);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto target = Model::Load(target_gguf, &ctx);
  const int64_t d = target->config().n_embd;
  const int64_t n = static_cast<int64_t>(sequences.size());
  auto features = torch::empty({n, len, d}, torch::kHalf);
  const int64_t bytes = features.numel() * 2;
  const std::string tag = std::to_string(SequencesFingerprint(sequences)) + "\n";
  if (!cache_path.empty() && fs::exists(cache_path) && fs::exists(cache_path + ".recipe") &&
      static_cast<int64_t>(fs::file_size(cache_path)) == bytes &&
      ReadFileBytes(cache_path + ".recipe") == tag) {
    std::ifstream in(cache_path, std::ios::binary);
    in.read(static_cast<char*>(features.data_ptr()), bytes);
    SPECD_CHECK(in.good(), "cannot read ", cache_path);
    std::fprintf(stderr, "features: %lld sequences read from %s\n", static_cast<long long>(n),
                 cache_path.c_str());
    return features;
  }
  constexpr int kBatch = 8;
  auto kv = target->NewKvCache({kBatch, static_cast<int>(len)});
  std::vector<int> slots(kBatch);
  for (int& s : slots) s = kv->Acquire();
  std::vector<float> logits, hidden;
  Timer timer;
  for (int64_t first = 0; first < n; first += kBatch) {
    const int64_t rows = std::min<int64_t>(kBatch, n - first);
    Batch batch;
    for (int64_t r = 0; r < rows; ++r) {
      const auto& seq = sequences[first + r];
      SPECD_CHECK(static_cast<int64_t>(seq.size()) == len, "features: sequence of ", seq.size(),
                  " tokens, expected ", len);
      kv->Truncate(slots[r], 0);
      for (int64_t t = 0; t < len; ++t) {
        batch.Add(seq[t], static_cast<int32_t>(t), slots[r], t + 1 == len);
      }
    }
    ForwardExtras extras;
    extras.hidden = &hidden;
    target->Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits, extras);
    features.narrow(0, first, rows)
        .copy_(torch::from_blob(hidden.data(), {rows, len, d}, torch::kFloat32).to(torch::kHalf));
    if ((first / kBatch) % 25 == 0) {
      std::fprintf(stderr, "features: %lld / %lld sequences, %.0f tok/s\n",
                   static_cast<long long>(first + rows), static_cast<long long>(n),
                   double(first + rows) * len / (timer.ElapsedMs() / 1000.0));
    }
  }
  if (!cache_path.empty()) {
    {
      std::ofstream out(cache_path + ".tmp", std::ios::binary);
      out.write(static_cast<const char*>(features.data_ptr()), bytes);
      SPECD_CHECK(out.good(), "cannot write ", cache_path, ".tmp");
    }
    fs::rename(cache_path + ".tmp", cache_path);
    std::ofstream(cache_path + ".recipe") << tag;
  }
  return features;
}

// `count` windows of `len` tokens evenly spaced over the stream.
std::vector<std::vector<int32_t>> Windows(const std::vector<int32_t>& stream, int64_t count,
                                          int64_t len) {
  std::vector<std::vector<int32_t>> out;
  const int64_t room = static_cast<int64_t>(stream.size()) - len;
  if (room <= 0 || count <= 0) return out;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = room * i / count;
    out.emplace_back(stream.begin() + start, stream.begin() + start + len);
  }
  return out;
}

// A head initialized from the target: its embedding (frozen), its last block (with the q / k / v
// biases of a qwen2 target) and final norm, and its output rows (frozen): the embedding's when the
// target ties them, its own output matrix's otherwise (Qwen2.5-Coder's), restricted to
// `head_tokens` when given.
Llama HeadFromTarget(const std::string& target_gguf, const std::vector<int64_t>& head_tokens) {
  Llama target = ImportGguf(target_gguf);
  LlamaShape shape = target->shape;
  shape.n_layers = 1;
  Llama head(shape);
  {
    torch::NoGradGuard no_grad;
    head->embed->weight.copy_(target->embed->weight);
    head->final_norm.copy_(target->final_norm);
    auto* from = target->blocks[target->shape.n_layers - 1]->as<LlamaBlockImpl>();
    auto* to = head->blocks[0]->as<LlamaBlockImpl>();
    to->attn_norm.copy_(from->attn_norm);
    to->ffn_norm.copy_(from->ffn_norm);
    for (int m = 0; m < kNumLlamaMatrices; ++m) {
      to->matrix(m)->weight.copy_(from->matrix(m)->weight);
      if (from->matrix(m)->bias.defined()) to->matrix(m)->bias.copy_(from->matrix(m)->bias);
    }
  }
  if (!head_tokens.empty()) head->SetHeadTokens(head_tokens);
  if (target->output.defined()) head->SetOutputRows(target->output);
  head->EnableEagle();
  return head;
}

struct EagleLosses {
  torch::Tensor feature, token;  // means over the unrolled steps
  std::vector<double> top1;      // per step: the head's argmax equals the target's
};

// Which earlier rows each row of unrolled step `u` (1-based) sees, [n_u, T + n_2 + .. + n_u]
// with n_v = T - v + 1 rows at step v: row i (position i + u - 1) sees step 1's rows 0..i and
// its own row i of steps 2..u, as drafting step u does (the cache's rows read with true
// features, then this step's drafts).
torch::Tensor UnrolledVisibility(int64_t t, int u) {
  const int64_t n = t - u + 1;
  std::vector<torch::Tensor> blocks = {torch::ones({n, t}, torch::kBool).tril()};
  for (int v = 2; v <= u; ++v) {
    blocks.push_back(torch::eye(n, t - v + 1, torch::TensorOptions().dtype(torch::kBool)));
  }
  return torch::cat(blocks, 1);
}

// The loss terms of a batch: soft cross-entropy and smooth L1 per unrolled step.
EagleLosses HeadLosses(Llama& head, const torch::Tensor& tokens, const torch::Tensor& features,
                       int unroll, double noise, bool bf16) {
  auto f_in = features.narrow(1, 0, features.size(1) - 1).to(torch::kFloat32);  // [B, T, d]
  if (noise > 0.0) f_in = f_in + torch::empty_like(f_in).uniform_(-noise, noise);
  Autocast autocast(bf16);
  const std::vector<torch::Tensor> hidden = UnrolledHeadHidden(head, tokens, f_in, unroll);
  const double steps = static_cast<double>(hidden.size());
  EagleLosses l;
  l.feature = torch::zeros({}, torch::kFloat32);
  l.token = torch::zeros({}, torch::kFloat32);
  for (size_t s = 0; s < hidden.size(); ++s) {
    const int64_t n = hidden[s].size(1);
    const auto f_next = features.narrow(1, s + 1, n).to(torch::kFloat32);  // [B, n, d]
    const auto logits = head->Logits(hidden[s]).to(torch::kFloat32);       // [B, n, n_head]
    torch::Tensor target_probs;
    {
      torch::NoGradGuard no_grad;
      target_probs = torch::softmax(head->Logits(f_next).to(torch::kFloat32), -1);
    }
    l.feature =
        l.feature +
        torch::nn::functional::smooth_l1_loss(hidden[s].to(torch::kFloat32), f_next) / steps;
    l.token = l.token - (target_probs * torch::log_softmax(logits, -1)).sum(-1).mean() / steps;
    l.top1.push_back(
        (logits.argmax(-1) == target_probs.argmax(-1)).to(torch::kFloat32).mean().item<double>());
  }
  return l;
}

}  // namespace

std::vector<torch::Tensor> UnrolledHeadHidden(Llama& head, const torch::Tensor& tokens,
                                              const torch::Tensor& features, int unroll) {
  const int64_t batch = tokens.size(0), t = tokens.size(1) - 1;
  std::vector<torch::Tensor> out;
  std::vector<LayerKv> kv;                 // every earlier step's keys and values
  torch::Tensor step_features = features;  // [B, >= n, d] what this step's rows read
  for (int u = 1; u <= unroll && t - u + 1 > 0; ++u) {
    const int64_t n = t - u + 1;  // rows whose prediction has a target
    const auto x = head->eagle_fc->forward(torch::cat(
        {head->embed->forward(tokens.narrow(1, u, n)), step_features.narrow(1, 0, n)}, -1));
    std::vector<LayerKv> present;
    if (u == 1) {
      out.push_back(head->Hidden(x, {}, {}, nullptr, &present));
    } else {
      const auto positions = (torch::arange(n, torch::kInt64) + (u - 1)).unsqueeze(0);
      const auto visible = UnrolledVisibility(t, u).unsqueeze(0).expand({batch, -1, -1});
      out.push_back(head->Hidden(x, positions, visible, &kv, &present));
    }
    kv = std::move(present);
    step_features = out.back().to(features.scalar_type());
  }
  return out;
}

namespace {

// Batch `step` of a shuffled pass (a new order each epoch): sequence indices into [0, n).
std::vector<int64_t> BatchIndices(int64_t n, int batch, int64_t step, uint64_t seed) {
  std::vector<int64_t> out;
  for (int b = 0; b < batch; ++b) {
    const int64_t i = step * batch + b;
    const int64_t epoch = i / n;
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed * 1000003 + epoch));
    out.push_back(order[i % n]);
  }
  return out;
}

torch::Tensor TokenTensor(const std::vector<std::vector<int32_t>>& sequences,
                          const std::vector<int64_t>& indices) {
  const int64_t len = static_cast<int64_t>(sequences[indices[0]].size());
  auto t = torch::empty({static_cast<int64_t>(indices.size()), len}, torch::kInt64);
  for (size_t b = 0; b < indices.size(); ++b) {
    const auto& seq = sequences[indices[b]];
    for (int64_t i = 0; i < len; ++i) t[b][i] = seq[i];
  }
  return t;
}

// The head's training data: the target's text and corpus windows (training part first, then
// the held-out part), with the target's features for each.
struct EagleData {
  std::vector<int32_t> train_stream;
  std::vector<std::vector<int32_t>> sequences;  // [n_train + n_held] of ctx + 1 tokens
  int64_t n_train = 0, n_held = 0, n_teacher_train = 0;
  torch::Tensor features;
};

EagleData LoadEagleData(const EagleTrainOptions& o) {
  EagleData d;
  const Corpus corpus = ListCorpus(o.corpus_dir, {".py"}, 20);
  d.train_stream = TokenizeFiles(corpus.train_files, o.target);
  const std::vector<int32_t> valid_stream = TokenizeFiles(corpus.validation_files, o.target);
  const int64_t len = o.ctx + 1;
  // The target's text and the features come first, before LibTorch starts its threads.
  std::vector<std::vector<int32_t>> chat_prompts;
  if (!o.chat_file.empty()) chat_prompts = ChatPrompts(o.target, o.chat_file, o.ctx / 2);
  d.sequences =
      TeacherText(o.target, d.train_stream, o.teacher_text_tokens, o.ctx, o.threads, o.seed,
                  o.sampled_share, o.checkpoint_dir + "/teacher_text.bin", chat_prompts,
                  chat_prompts.empty() ? 0.0 : o.chat_share, TeacherRun{o.teacher_batch});
  const int64_t n_teacher = static_cast<int64_t>(d.sequences.size());
  const int64_t n_held_teacher = std::min<int64_t>(o.held_out_sequences, n_teacher / 4);
  SPECD_CHECK(n_teacher - n_held_teacher >= o.batch, "train eagle: ", n_teacher,
              " sequences of the target's text is too few for batches of ", o.batch);
  d.n_teacher_train = n_teacher - n_held_teacher;
  // Layout: training teacher text, corpus windows, then held-out teacher text and held-out
  // corpus windows.
  std::vector<std::vector<int32_t>> held(d.sequences.end() - n_held_teacher, d.sequences.end());
  d.sequences.resize(d.n_teacher_train);
  for (auto& w : Windows(d.train_stream, static_cast<int64_t>(o.corpus_share * n_teacher), len)) {
    d.sequences.push_back(std::move(w));
  }
  d.n_train = static_cast<int64_t>(d.sequences.size());
  for (auto& w : Windows(valid_stream, n_held_teacher / 2, len)) held.push_back(std::move(w));
  d.n_held = static_cast<int64_t>(held.size());
  d.sequences.insert(d.sequences.end(), held.begin(), held.end());
  d.features =
      TargetFeatures(o.target, d.sequences, len, o.threads, o.checkpoint_dir + "/features.f16");
  return d;
}

// Held out, unrolled as many steps as the default draft length drafts: step u's top-1 is the
// head's agreement with the target at draft position u when the drafts before it were right.
void EvaluateHead(const EagleTrainOptions& o, const EagleData& d, Llama& head, int64_t step,
                  EagleTrainResult* r) {
  constexpr int kEvalSteps = 4;
  torch::NoGradGuard no_grad;
  head->eval();
  double feature = 0, token = 0;
  std::vector<double> top1(kEvalSteps, 0.0);
  int64_t batches = 0;
  for (int64_t first = 0; first < d.n_held; first += 8, ++batches) {
    std::vector<int64_t> idx;
    for (int64_t i = first; i < std::min(first + 8, d.n_held); ++i) idx.push_back(d.n_train + i);
    const auto l =
        HeadLosses(head, TokenTensor(d.sequences, idx),
                   d.features.index_select(0, torch::tensor(idx)), kEvalSteps, 0.0, o.bf16);
    feature += l.feature.item<double>();
    token += l.token.item<double>();
    for (size_t u = 0; u < l.top1.size(); ++u) top1[u] += l.top1[u];
  }
  head->train();
  r->feature_loss = feature / batches;
  r->token_loss = token / batches;
  r->top1_by_step.clear();
  for (double x : top1) r->top1_by_step.push_back(x / batches);
  r->top1 = r->top1_by_step[0];
  std::fprintf(stderr,
               "%sstep %lld: held out, %d draft steps: feature loss %.4f, token loss %.4f, "
               "top-1 by step",
               ::isatty(2) ? "\n" : "", static_cast<long long>(step), kEvalSteps, r->feature_loss,
               r->token_loss);
  for (double x : r->top1_by_step) std::fprintf(stderr, " %.3f", x);
  std::fprintf(stderr, "\n");
}

// The head, its embedding and output taken from the target (restricted to the most frequent
// tokens when head_vocab is set).
Llama NewHead(const EagleTrainOptions& o, const EagleData& d) {
  std::vector<int64_t> head_tokens;
  if (o.head_vocab > 0) {
    const std::vector<std::vector<int32_t>> train_part(d.sequences.begin(),
                                                       d.sequences.begin() + d.n_train);
    const int64_t n_vocab = GgufFile::Open(o.target)->GetTensor("token_embd.weight").shape[1];
    head_tokens = MostFrequentTokens(d.train_stream, train_part, n_vocab, o.head_vocab);
  }
  return HeadFromTarget(o.target, head_tokens);
}

}  // namespace

EagleTrainResult TrainEagle(const EagleTrainOptions& o) {
  SPECD_CHECK(!o.checkpoint_dir.empty(), "train eagle needs a checkpoint folder (--checkpoint)");
  const FolderLock lock(o.checkpoint_dir);
  const EagleData d = LoadEagleData(o);
  torch::set_num_threads(o.threads);
  torch::manual_seed(o.seed);
  Llama head = NewHead(o, d);
  auto optimizer = MakeAdamW(head, o.lr, o.weight_decay);
  int64_t step = 0;
  double smoothed = std::nan("");
  Checkpoint checkpoint(o.checkpoint_dir);
  checkpoint.Load(head, *optimizer, &step, &smoothed);
  int64_t trainable = 0;
  for (const auto& p : head->parameters()) trainable += p.requires_grad() ? p.numel() : 0;
  std::fprintf(stderr,
               "EAGLE head: %lld trainable parameters; %lld training sequences of %lld tokens "
               "(%lld of the target's text), %lld held out; %lld steps\n",
               static_cast<long long>(trainable), static_cast<long long>(d.n_train),
               static_cast<long long>(o.ctx + 1), static_cast<long long>(d.n_teacher_train),
               static_cast<long long>(d.n_held), static_cast<long long>(o.steps));
  EagleTrainResult result;
  const int64_t tokens_per_step = int64_t{o.batch} * o.ctx;
  const int64_t first_step = step;
  Timer timer;
  head->train();
  while (step < o.steps) {
    const double lr_scale = LearningRateScale(step, o.warmup_steps, o.steps, o.min_lr_ratio);
    SetLearningRate(*optimizer, o.lr * lr_scale);
    const auto idx = BatchIndices(d.n_train, o.batch, step, o.seed);
    const auto l = HeadLosses(head, TokenTensor(d.sequences, idx),
                              d.features.index_select(0, torch::tensor(idx)), o.unroll,
                              o.feature_noise, o.bf16);
    const auto loss = l.feature + o.token_weight * l.token;
    smoothed = SmoothLoss(smoothed, OptimizerStep(*optimizer, head, loss, o.grad_clip));
    ++step;
    const double tps =
        double(step - first_step) * tokens_per_step / std::max(timer.ElapsedMs() / 1000.0, 1e-9);
    ReportProgress(step, o.steps, smoothed, o.lr * lr_scale, tps, tokens_per_step);
    if (step == o.stop_at_step && step < o.steps) {
      checkpoint.Save(head, *optimizer, step, smoothed);
      result.steps = step;
      std::fprintf(stderr, "\nstopped at step %lld; checkpoint in %s\n",
                   static_cast<long long>(step), o.checkpoint_dir.c_str());
      return result;
    }
    if (step % o.checkpoint_every == 0) checkpoint.Save(head, *optimizer, step, smoothed);
    if (step % o.eval_every == 0) EvaluateHead(o, d, head, step, &result);
  }
  checkpoint.Save(head, *optimizer, step, smoothed);
  if (step % o.eval_every != 0 || step == first_step) EvaluateHead(o, d, head, step, &result);
  result.steps = step;
  result.finished = true;
  if (!o.out.empty()) {
    head->shape.ctx = GgufFile::Open(o.target)->GetInt(head->shape.arch + ".context_length", 2048);
    ExportGguf(head, o.target, o.export_type, o.name, o.out);
    std::fprintf(stderr, "wrote %s\n", o.out.c_str());
  }
  return result;
}

}  // namespace specd::train
