#include "train/sdsat_trainer.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/rng.h"
#include "base/timer.h"
#include "gguf/gguf.h"
#include "train/corpus.h"
#include "train/llama_torch.h"
#include "train/sdsat_data.h"
#include "train/train_loop.h"
#include "train/trainer.h"

namespace specd::train {
namespace {

const std::vector<GgufValue>& Vocabulary(const GgufFile& f) {
  return f.Get("tokenizer.ggml.tokens").AsArray("tokenizer.ggml.tokens").items;
}

int32_t FindToken(const GgufFile& f, const std::string& text) {
  const auto& tokens = Vocabulary(f);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].AsString("token") == text) return static_cast<int32_t>(i);
  }
  return -1;
}

FimTokens FimTokensOf(const GgufFile& f) {
  // From the metadata key, else by text: StarCoder's spelling, then Qwen2.5-Coder's.
  auto id = [&](const char* key, std::initializer_list<const char*> texts) {
    const int64_t from_key = f.GetInt(key, -1);
    if (from_key >= 0) return static_cast<int32_t>(from_key);
    for (const char* text : texts) {
      if (const int32_t found = FindToken(f, text); found >= 0) return found;
    }
    return -1;
  };
  return {id("tokenizer.ggml.fim_pre_token_id", {"<fim_prefix>", "<|fim_prefix|>"}),
          id("tokenizer.ggml.fim_mid_token_id", {"<fim_middle>", "<|fim_middle|>"}),
          id("tokenizer.ggml.fim_suf_token_id", {"<fim_suffix>", "<|fim_suffix|>"})};
}

uint64_t RowSeed(uint64_t seed, int64_t step, int row) {
  const auto words = Philox4x32(
      {seed, static_cast<uint64_t>(row), static_cast<uint64_t>(step), RngPurpose::kSample}, 7);
  return (uint64_t{words[0]} << 32) | words[1];
}

// Row `row` of a batch: plain for the first `n_plain` rows, mixed after; each from a random
// window of the stream, FIM-reordered half of the time when the tokenizer allows.
SdsatRow MakeRow(const std::vector<int32_t>& stream, int64_t ctx, int row, int n_plain,
                 const SdsatLayout& layout, const FimTokens& fim, uint64_t seed) {
  const int64_t need = ctx + layout.max_window + 1;
  const uint64_t span = stream.size() - need;
  const size_t start = static_cast<size_t>(UniformDouble({seed, 0, 0, RngPurpose::kSample}) * span);
  std::span<const int32_t> window(stream.data() + start, need);
  const FimChoice fim_choice = ChooseFim(need - 3, fim, seed);
  std::vector<int32_t> reordered;
  if (fim_choice.mode != FimMode::kNone) {
    reordered = FimReorder(window.subspan(0, need - 3), fim_choice.mode, fim, fim_choice.cut_a,
                           fim_choice.cut_b);
    window = reordered;
  }
  return row < n_plain ? PlainRow(window, ctx) : MixedRow(window, ctx, layout, seed);
}

struct BatchTensors {
  torch::Tensor tokens;     // [B, T] int64
  torch::Tensor positions;  // [B, T] int64
  torch::Tensor visible;    // [B, T, T] bool
  torch::Tensor labels;     // [B, T] int64, -100: no loss
};

BatchTensors ToTensors(const std::vector<SdsatRow>& rows) {
  const int64_t b = static_cast<int64_t>(rows.size()), t = rows.front().length();
  BatchTensors out{torch::empty({b, t}, torch::kInt64), torch::empty({b, t}, torch::kInt64),
                   torch::empty({b, t, t}, torch::kBool), torch::empty({b, t}, torch::kInt64)};
  auto* tok = out.tokens.data_ptr<int64_t>();
  auto* pos = out.positions.data_ptr<int64_t>();
  auto* vis = out.visible.data_ptr<bool>();
  auto* lab = out.labels.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    const SdsatRow& row = rows[r];
    for (int64_t i = 0; i < t; ++i) {
      tok[r * t + i] = row.tokens[i];
      pos[r * t + i] = row.positions[i];
      lab[r * t + i] = row.labels[i] < 0 ? -100 : row.labels[i];
    }
    for (int64_t i = 0; i < t * t; ++i) vis[r * t * t + i] = row.visible[i] != 0;
  }
  return out;
}

// Mean cross-entropy over labelled slots of rows [first, first + count); 0 when there are none.
torch::Tensor RowsLoss(const torch::Tensor& logits, const torch::Tensor& labels, int64_t first,
                       int64_t count) {
  if (count == 0) return torch::zeros({}, torch::kFloat32);
  const auto l = logits.narrow(0, first, count).to(torch::kFloat32);
  const auto y = labels.narrow(0, first, count);
  if ((y != -100).sum().item<int64_t>() == 0) return torch::zeros({}, torch::kFloat32);
  return torch::nn::functional::cross_entropy(l.reshape({-1, l.size(-1)}), y.reshape({-1}));
}

// Adaptive tokens on mixed rows of held-out text: top-1 accuracy by their place in a window, and
// cross-entropy.
AdaptiveScore ScoreAdaptive(Llama& model, const std::vector<int32_t>& stream, int64_t ctx,
                            const SdsatLayout& layout, int windows, bool bf16) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> hits(layout.max_window, 0), total(layout.max_window, 0);
  double loss_sum = 0.0;
  const FimTokens no_fim;
  for (int w = 0; w < windows; w += 8) {
    std::vector<SdsatRow> rows;
    for (int r = w; r < std::min(windows, w + 8); ++r) {
      rows.push_back(MakeRow(stream, ctx, r, 0, layout, no_fim, RowSeed(12345, -1, r)));
    }
    const BatchTensors batch = ToTensors(rows);
    torch::Tensor logits;  // [rows, T, n_vocab]
    {
      Autocast autocast(bf16);
      logits = model->forward(batch.tokens, batch.positions, batch.visible);
    }
    const auto flat = logits.to(torch::kFloat32).reshape({-1, logits.size(-1)});
    loss_sum += torch::nn::functional::cross_entropy(
                    flat, batch.labels.reshape({-1}),
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    const auto argmax = logits.argmax(-1).contiguous();  // [rows, T]
    const auto* best = argmax.data_ptr<int64_t>();
    for (size_t r = 0; r < rows.size(); ++r) {
      for (int64_t i = 0; i < ctx; ++i) {
        const int j = rows[r].offsets[i];
        if (j == 0) continue;
        ++total[j - 1];
        hits[j - 1] += best[r * ctx + i] == rows[r].labels[i];
      }
    }
  }
  model->train();
  AdaptiveScore score;
  int64_t n = 0;
  for (int j = 0; j < layout.max_window; ++j) {
    score.accuracy.push_back(total[j] > 0 ? double(hits[j]) / total[j] : 0.0);
    n += total[j];
  }
  score.loss = n > 0 ? loss_sum / n : 0.0;
  return score;
}

std::string Describe(const AdaptiveScore& score) {
  std::string s =
      "adaptive loss " + std::to_string(score.loss).substr(0, 6) + ", accuracy by place";
  for (double a : score.accuracy) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), " %.3f", a);
    s += buf;
  }
  return s;
}

}  // namespace

int32_t ResolveToken(const std::string& tokenizer_gguf, const std::string& token) {
  auto f = GgufFile::Open(tokenizer_gguf);
  const int64_t n_vocab = static_cast<int64_t>(Vocabulary(*f).size());
  int64_t id = -1;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), id);
  if (ec != std::errc() || end != token.data() + token.size()) id = FindToken(*f, token);
  SPECD_CHECK(id >= 0, "--adaptive-token '", token, "' is neither a token id nor a token of ",
              tokenizer_gguf);
  SPECD_CHECK(id < n_vocab, "--adaptive-token ", id, " is outside the vocabulary of ", n_vocab,
              " tokens");
  return static_cast<int32_t>(id);
}

namespace {

// What the fine-tune reads: where the adaptive tokens go, FIM tokens, the corpus's streams.
struct SdsatData {
  SdsatLayout layout;
  FimTokens fim;
  std::string base_name;  // general.name of the base model
  std::vector<int32_t> train_stream, valid_stream;
};

SdsatData LoadSdsatData(const SdsatTrainOptions& o) {
  SdsatData d;
  d.layout = {ResolveToken(o.base, o.adaptive_token), o.max_window, o.window_share};
  {
    auto base_file = GgufFile::Open(o.base);
    d.fim = o.fim ? FimTokensOf(*base_file) : FimTokens{};
    d.base_name = base_file->Find("general.name") != nullptr
                      ? base_file->Get("general.name").AsString("general.name")
                      : "model";
  }
  const Corpus corpus = ListCorpus(o.corpus_dir, {".py"}, o.validation_every);
  d.train_stream = TokenizeFiles(corpus.train_files, o.base);
  d.valid_stream = TokenizeFiles(corpus.validation_files, o.base);
  SPECD_CHECK(static_cast<int64_t>(d.train_stream.size()) > (o.ctx + o.max_window + 1) * 4,
              "the corpus is too small for a context of ", o.ctx);
  std::fprintf(stderr,
               "corpus: %zu training files (%zu tokens), %zu held out (%zu tokens); adaptive "
               "token %d, windows 1..%d after %.0f%% of positions, FIM %s\n",
               corpus.train_files.size(), d.train_stream.size(), corpus.validation_files.size(),
               d.valid_stream.size(), d.layout.adaptive_token, d.layout.max_window,
               100.0 * d.layout.window_share,
               d.fim.ok() ? "on" : (o.fim ? "off (no FIM tokens)" : "off"));
  return d;
}

// The frozen base's next-token distribution on the first `count` rows: the model with its LoRA
// switched off. Computed before the model's own forward, so that only the probabilities stay
// alive beside its activations (Qwen's vocabulary makes each [rows, T, n_vocab] tensor 0.6 GB).
struct BaseDistribution {
  torch::Tensor probs;    // [count * T, n_vocab] f32
  torch::Tensor entropy;  // [] mean entropy over the slots
};

BaseDistribution BaseDistributionOf(Llama& model, const BatchTensors& batch, int64_t count,
                                    bool bf16) {
  torch::NoGradGuard no_grad;
  model->SetLoraActive(false);
  torch::Tensor log_probs;  // [count * T, n_vocab]
  {
    Autocast autocast(bf16);
    const auto logits =
        model->forward(batch.tokens.narrow(0, 0, count), batch.positions.narrow(0, 0, count),
                       batch.visible.narrow(0, 0, count));  // [count, T, n_vocab]
    log_probs = torch::log_softmax(logits.to(torch::kFloat32).reshape({-1, logits.size(-1)}), -1);
  }
  model->SetLoraActive(true);
  BaseDistribution base{log_probs.exp(), {}};
  base.entropy = -(base.probs * log_probs).sum(-1).mean();
  return base;
}

// KL(base || model) over every slot of the first rows: the cross-entropy against the base's
// distribution minus its entropy (a constant for the gradient, subtracted so the loss reads as a
// KL, 0 at the start of a LoRA).
torch::Tensor RowsKlToBase(const torch::Tensor& logits, const BaseDistribution& base) {
  if (!base.probs.defined()) return torch::zeros({}, torch::kFloat32);
  const int64_t rows = base.probs.size(0) / logits.size(1);
  const auto l = logits.narrow(0, 0, rows).to(torch::kFloat32);
  return torch::nn::functional::cross_entropy(l.reshape({-1, l.size(-1)}), base.probs) -
         base.entropy;
}

// The paper's improved loss: half plain rows, half with windows of adaptive tokens (their loss on
// the adaptive positions only), the second half weighted by adaptive_weight.
torch::Tensor SdsatLoss(const SdsatTrainOptions& o, const SdsatData& d, Llama& model,
                        int64_t step) {
  const int n_plain = static_cast<int>(std::lround(o.batch * o.plain_share));
  std::vector<SdsatRow> rows;
  for (int r = 0; r < o.batch; ++r) {
    rows.push_back(
        MakeRow(d.train_stream, o.ctx, r, n_plain, d.layout, d.fim, RowSeed(o.seed, step, r)));
  }
  const BatchTensors batch = ToTensors(rows);
  const bool kl_to_base = o.plain_loss == PlainLoss::kKlToBase;
  const BaseDistribution base = kl_to_base && n_plain > 0
                                    ? BaseDistributionOf(model, batch, n_plain, o.bf16)
                                    : BaseDistribution{};
  torch::Tensor logits;  // [B, T, n_vocab]
  {
    Autocast autocast(o.bf16);
    logits = model->forward(batch.tokens, batch.positions, batch.visible);
  }
  const auto plain_loss =
      kl_to_base ? RowsKlToBase(logits, base) : RowsLoss(logits, batch.labels, 0, n_plain);
  const auto adaptive_loss = RowsLoss(logits, batch.labels, n_plain, o.batch - n_plain);
  return 0.5 * (plain_loss + o.adaptive_weight * adaptive_loss);
}

// The fine-tuned model, or its LoRA adapter, with the adaptive token in its metadata.
void ExportSdsat(const SdsatTrainOptions& o, const SdsatData& d, Llama& model) {
  const std::vector<std::pair<std::string, GgufValue>> metadata = {
      {"specd.sdsat.adaptive_token", GgufValue::U32(d.layout.adaptive_token)},
      {"specd.sdsat.max_window", GgufValue::U32(d.layout.max_window)}};
  const std::string name = o.name.empty() ? d.base_name + "-sdsat" : o.name;
  if (model->has_lora()) {
    ExportLoraAdapter(model, o.export_type, name, o.out, metadata);
  } else {
    ExportGguf(model, o.base, o.export_type, name, o.out, metadata);
  }
  std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

// The untouched model's evaluation, kept in the checkpoint folder: it costs as much as 10-20
// training steps (Qwen2.5-Coder) and would otherwise be redone on every resume. The key names what
// it depends on.
std::string BaseEvaluationKey(const SdsatTrainOptions& o, const SdsatData& d) {
  std::ostringstream key;
  key << o.base << " ctx " << o.ctx << " windows " << o.eval_windows << " token "
      << d.layout.adaptive_token << " max_window " << o.max_window << " held-out tokens "
      << d.valid_stream.size() << " bf16 " << o.bf16;
  return key.str();
}

bool LoadBaseEvaluation(const std::string& path, const std::string& key, double* perplexity,
                        AdaptiveScore* score) {
  std::ifstream in(path);
  std::string stored_key;
  if (!in || !std::getline(in, stored_key) || stored_key != key) return false;
  std::vector<double> accuracy;
  double loss = 0.0;
  if (!(in >> *perplexity >> loss)) return false;
  for (double a; in >> a;) accuracy.push_back(a);
  score->loss = loss;
  score->accuracy = std::move(accuracy);
  return true;
}

void SaveBaseEvaluation(const std::string& path, const std::string& key, double perplexity,
                        const AdaptiveScore& score) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out.precision(17);
    out << key << "\n" << perplexity << " " << score.loss;
    for (double a : score.accuracy) out << " " << a;
    out << "\n";
    SPECD_CHECK(out.good(), "cannot write ", tmp);
  }
  std::filesystem::rename(tmp, path);
}

template <typename HeldOut, typename Adaptive>
void EvaluateBase(const SdsatTrainOptions& o, const SdsatData& d, Llama& model,
                  const HeldOut& held_out, const Adaptive& adaptive, SdsatTrainResult* result) {
  const std::string path = o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/base-eval.txt";
  const std::string key = BaseEvaluationKey(o, d);
  if (!path.empty() &&
      LoadBaseEvaluation(path, key, &result->base_perplexity, &result->base_adaptive)) {
    std::fprintf(stderr, "base evaluation read from %s\n", path.c_str());
  } else {
    result->base_perplexity = held_out(model);
    result->base_adaptive = adaptive(model);
    if (!path.empty())
      SaveBaseEvaluation(path, key, result->base_perplexity, result->base_adaptive);
  }
  std::fprintf(stderr, "base: held-out perplexity %.3f, %s\n", result->base_perplexity,
               Describe(result->base_adaptive).c_str());
}

void CheckSdsatOptions(const SdsatTrainOptions& o) {
  SPECD_CHECK(o.plain_loss != PlainLoss::kKlToBase || o.lora_rank > 0,
              "the plain rows' KL to the base needs a LoRA (--lora-rank): a full fine-tune keeps "
              "no frozen copy of the base");
  SPECD_CHECK(o.stop_at_step == 0 || !o.checkpoint_dir.empty(),
              "stopping at a step needs a checkpoint folder to resume from");
}

}  // namespace

SdsatTrainResult TrainSdsat(const SdsatTrainOptions& o) {
  CheckSdsatOptions(o);
  const FolderLock lock(o.checkpoint_dir);
  torch::set_num_threads(o.threads);
  torch::manual_seed(o.seed);
  const SdsatData d = LoadSdsatData(o);
  const auto held_out = [&](Llama& m) {
    return std::exp(HeldOutLoss(m, d.valid_stream, o.ctx, o.eval_windows, o.bf16));
  };
  const auto adaptive = [&](Llama& m) {
    return ScoreAdaptive(m, d.valid_stream, o.ctx, d.layout, o.eval_windows, o.bf16);
  };
  Llama model = ImportGguf(o.base);
  SdsatTrainResult result;
  result.adaptive_token = d.layout.adaptive_token;
  EvaluateBase(o, d, model, held_out, adaptive, &result);
  if (o.lora_rank > 0) {
    model->EnableLora(o.lora_rank, o.lora_alpha > 0.0 ? o.lora_alpha : 2.0 * o.lora_rank,
                      d.layout.adaptive_token);
  }
  auto optimizer = MakeAdamW(model, o.lr, o.weight_decay);
  int64_t step = 0;
  double smoothed = std::nan("");
  Checkpoint checkpoint(o.checkpoint_dir);
  checkpoint.Load(model, *optimizer, &step, &smoothed);
  const int64_t tokens_per_step = static_cast<int64_t>(o.batch) * o.ctx;
  Timer timer;
  const int64_t first_step = step;
  model->train();
  while (step < o.steps) {
    const double lr = o.lr * LearningRateScale(step, o.warmup_steps, o.steps, o.min_lr_ratio);
    SetLearningRate(*optimizer, lr);
    const auto loss = SdsatLoss(o, d, model, step);
    smoothed = SmoothLoss(smoothed, OptimizerStep(*optimizer, model, loss, o.grad_clip));
    ++step;
    result.tokens_per_s =
        double(step - first_step) * tokens_per_step / std::max(timer.ElapsedMs() / 1000.0, 1e-9);
    ReportProgress(step, o.steps, smoothed, lr, result.tokens_per_s, tokens_per_step);
    if (step == o.stop_at_step && step < o.steps) {
      checkpoint.Save(model, *optimizer, step, smoothed);
      std::fprintf(stderr, "stopped at step %lld of %lld; checkpoint in %s\n",
                   static_cast<long long>(step), static_cast<long long>(o.steps),
                   o.checkpoint_dir.c_str());
      result.steps = step;
      result.train_loss = smoothed;
      return result;
    }
    if (step % o.checkpoint_every == 0) checkpoint.Save(model, *optimizer, step, smoothed);
    if (step % o.eval_every == 0 && step < o.steps) {
      std::fprintf(stderr, "step %lld: held-out perplexity %.3f, %s\n",
                   static_cast<long long>(step), held_out(model),
                   Describe(adaptive(model)).c_str());
    }
  }
  checkpoint.Save(model, *optimizer, step, smoothed);
  result.steps = step;
  result.finished = true;
  result.train_loss = smoothed;
  result.validation_perplexity = held_out(model);
  result.adaptive = adaptive(model);
  std::fprintf(stderr, "done: %lld steps; held-out perplexity %.3f (base %.3f, %+.2f%%), %s\n",
               static_cast<long long>(step), result.validation_perplexity, result.base_perplexity,
               100.0 * (result.validation_perplexity / result.base_perplexity - 1.0),
               Describe(result.adaptive).c_str());
  if (!o.out.empty()) ExportSdsat(o, d, model);
  return result;
}

}  // namespace specd::train
