#include "train/train_command.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/error.h"
#include "gguf/gguf.h"
#include "train/corpus.h"
#include "train/tokenizer_train.h"
#include "train/trainer.h"

namespace specd::train {

std::function<int()> AddTrainCommands(CLI::App& app) {
  auto* train = app.add_subcommand("train", "train a tokenizer, a model, or a distilled draft");
  train->require_subcommand(1);

  struct State {
    std::string corpus, out;
    int validation_every = 20;
    TokenizerTrainOptions tok;
    TrainOptions model;
    std::string type = "f32";
  };
  auto state = std::make_shared<State>();

  auto* tokenizer = train->add_subcommand("tokenizer", "train a SentencePiece BPE tokenizer");
  tokenizer->add_option("--corpus", state->corpus, "folder of .py files")->required();
  tokenizer->add_option("--vocab-size", state->tok.vocab_size, "vocabulary size")
      ->check(CLI::Range(512, 256000));
  tokenizer->add_option("--unused", state->tok.n_unused, "reserved <unusedN> control tokens")
      ->check(CLI::Range(16, 1000));
  tokenizer->add_option("-o,--output", state->out, "output GGUF")->required();

  auto add_model_options = [&](CLI::App* cmd) {
    TrainOptions& m = state->model;
    cmd->add_option("--corpus", m.corpus_dir, "folder of .py files")->required();
    cmd->add_option("--tokenizer", m.tokenizer, "tokenizer GGUF")->required();
    cmd->add_option("-o,--output", m.out, "output GGUF")->required();
    cmd->add_option("--dim", m.shape.dim, "embedding width")->check(CLI::Range(32, 8192));
    cmd->add_option("--layers", m.shape.n_layers, "layers")->check(CLI::Range(1, 128));
    cmd->add_option("--heads", m.shape.n_heads, "attention heads")->check(CLI::Range(1, 128));
    cmd->add_option("--kv-heads", m.shape.n_kv_heads, "key/value heads")->check(CLI::Range(1, 128));
    cmd->add_option("--ffn", m.shape.ffn, "feed-forward width")->check(CLI::Range(32, 65536));
    cmd->add_option("--ctx", m.shape.ctx, "training context")->check(CLI::Range(8, 65536));
    cmd->add_option("--batch", m.batch, "sequences per step")->check(CLI::Range(1, 4096));
    cmd->add_option("--epochs", m.epochs, "passes over the training tokens")
        ->check(CLI::Range(0.0001, 1000.0));
    cmd->add_option("--steps", m.max_steps, "steps (overrides --epochs)")
        ->check(CLI::Range(0, 100000000));
    cmd->add_option("--lr", m.lr, "peak learning rate")->check(CLI::Range(1e-7, 1.0));
    cmd->add_option("--warmup", m.warmup_steps, "warm-up steps")->check(CLI::Range(0, 1000000));
    cmd->add_option("--checkpoint", m.checkpoint_dir, "checkpoint folder (resumes if present)");
    cmd->add_option("--checkpoint-every", m.checkpoint_every, "steps between checkpoints")
        ->check(CLI::Range(1, 1000000));
    cmd->add_option("--eval-every", m.eval_every, "steps between validations")
        ->check(CLI::Range(1, 1000000));
    cmd->add_option("--type", state->type, "export type")
        ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
    cmd->add_option("--name", m.name, "general.name of the exported model");
    cmd->add_option("--seed", m.seed, "seed");
    cmd->add_option("-t,--threads", m.threads, "threads")->check(CLI::Range(1, 256));
    cmd->add_flag("!--no-bf16", m.bf16, "train in fp32 instead of bf16 autocast");
  };
  auto* model = train->add_subcommand("model", "train a llama model by next-token prediction");
  add_model_options(model);
  auto* draft = train->add_subcommand("draft", "distill a draft model from a target model");
  add_model_options(draft);
  draft->add_option("--teacher", state->model.teacher, "target model GGUF")->required();
  draft->add_option("--alpha", state->model.distill_alpha, "weight of the distillation term")
      ->check(CLI::Range(0.0, 1.0));

  return [=]() -> int {
    if (*tokenizer) {
      const Corpus corpus = ListCorpus(state->corpus, {".py"}, state->validation_every);
      WriteManifest(corpus, state->corpus, state->out + ".manifest");
      std::fprintf(stderr, "training a %d-token tokenizer on %zu files (%llu bytes)\n",
                   state->tok.vocab_size, corpus.train_files.size(),
                   static_cast<unsigned long long>(corpus.total_bytes));
      TrainTokenizer(corpus.train_files, state->tok, state->out);
      std::fprintf(stderr, "wrote %s\n", state->out.c_str());
      return 0;
    }
    TrainOptions options = state->model;
    options.export_type = *DTypeFromName(state->type);
    auto tok = GgufFile::Open(options.tokenizer);
    options.shape.n_vocab = static_cast<int64_t>(
        tok->Get("tokenizer.ggml.tokens").AsArray("tokenizer.ggml.tokens").items.size());
    const Corpus corpus = ListCorpus(options.corpus_dir, {".py"}, options.validation_every);
    WriteManifest(corpus, options.corpus_dir, options.out + ".manifest");
    const TrainResult r = Train(options);
    if (!options.teacher.empty()) {
      const DraftReport d =
          MeasureDraft(options.teacher, options.out, corpus.validation_files, options.threads);
      std::fprintf(
          stderr,
          "draft vs target on held-out files: greedy acceptance %.3f at draft length 4 "
          "(mean accepted length %.2f); per-token cost %.3f ms vs %.3f ms (ratio 1/%.1f)\n",
          d.acceptance_rate, d.mean_accepted_length, d.draft_ms_per_token, d.target_ms_per_token,
          d.target_ms_per_token / d.draft_ms_per_token);
      std::printf(
          "{\"acceptance_rate\": %.4f, \"mean_accepted_length\": %.3f, "
          "\"draft_ms_per_token\": %.4f, \"target_ms_per_token\": %.4f}\n",
          d.acceptance_rate, d.mean_accepted_length, d.draft_ms_per_token, d.target_ms_per_token);
    }
    std::printf(
        "{\"steps\": %lld, \"parameters\": %lld, \"train_loss\": %.4f, "
        "\"validation_loss\": %.4f, \"validation_perplexity\": %.3f, \"tokens_per_s\": %.0f}\n",
        static_cast<long long>(r.steps), static_cast<long long>(r.parameters), r.train_loss,
        r.validation_loss, r.validation_perplexity, r.tokens_per_s);
    return 0;
  };
}

}  // namespace specd::train
