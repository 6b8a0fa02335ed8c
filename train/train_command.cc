#include "train/train_command.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "base/cpu_features.h"
#include "base/error.h"
#include "flags/common_flags.h"
#include "gguf/gguf.h"
#include "train/corpus.h"
#include "train/eagle_trainer.h"
#include "train/sdsat_trainer.h"
#include "train/tokenizer_train.h"
#include "train/trainer.h"

namespace specd::train {

namespace {

// bf16 autocast pays only where the CPU has bf16 instructions: elsewhere LibTorch's bf16 kernels
// run on one core (an AVX2-only AMD EPYC: < 600 tokens/s for the SmolLM2 draft, ~1,130 in f32).
bool Bf16Pays(bool requested) {
  if (!requested) return false;
  if (CpuFeatures::Detect().avx512_bf16) return true;
  std::fprintf(stderr, "no bf16 instructions on this CPU: training in f32 (as --no-bf16)\n");
  return false;
}

// A train subcommand and what runs it once it is the one parsed.
struct Subcommand {
  CLI::App* app;
  std::function<int()> run;
};

constexpr int kValidationEvery = 20;  // every 20th corpus file is held out

// The same line and JSON after training a draft and for `train measure`.
void ReportDraft(const DraftReport& d, int draft_length) {
  std::fprintf(stderr,
               "draft vs target on held-out files: greedy acceptance %.3f +- %.3f (standard "
               "error; %lld prompts, %lld drafted tokens) at draft length %d (mean accepted "
               "length %.2f); per-token cost %.3f ms vs %.3f ms (ratio 1/%.1f)\n",
               d.acceptance_rate, d.acceptance_standard_error, static_cast<long long>(d.n_prompts),
               static_cast<long long>(d.n_drafted), draft_length, d.mean_accepted_length,
               d.draft_ms_per_token, d.target_ms_per_token,
               d.target_ms_per_token / d.draft_ms_per_token);
  std::string by_position;
  for (double x : d.accepted_at_position) {
    by_position += (by_position.empty() ? "" : ", ") + std::to_string(x).substr(0, 6);
  }
  std::fprintf(stderr, "accepted by draft position: %s\n", by_position.c_str());
  std::printf(
      "{\"acceptance_rate\": %.4f, \"acceptance_standard_error\": %.4f, \"n_prompts\": "
      "%lld, \"n_drafted\": %lld, \"mean_accepted_length\": %.3f, "
      "\"accepted_at_position\": [%s], "
      "\"draft_ms_per_token\": %.4f, \"target_ms_per_token\": %.4f}\n",
      d.acceptance_rate, d.acceptance_standard_error, static_cast<long long>(d.n_prompts),
      static_cast<long long>(d.n_drafted), d.mean_accepted_length, by_position.c_str(),
      d.draft_ms_per_token, d.target_ms_per_token);
}

Subcommand AddTokenizerCommand(CLI::App* train) {
  struct State {
    std::string corpus, out;
    TokenizerTrainOptions tok;
  };
  auto state = std::make_shared<State>();
  auto* tokenizer = train->add_subcommand("tokenizer", "train a SentencePiece BPE tokenizer");
  tokenizer->add_option("--corpus", state->corpus, "folder of .py files")->required();
  tokenizer->add_option("--vocab-size", state->tok.vocab_size, "vocabulary size")
      ->check(CLI::Range(512, 256000));
  tokenizer->add_option("--unused", state->tok.n_unused, "reserved <unusedN> control tokens")
      ->check(CLI::Range(16, 1000));
  tokenizer->add_option("-o,--output", state->out, "output GGUF")->required();

  return {tokenizer, [state] {
            const Corpus corpus = ListCorpus(state->corpus, {".py"}, kValidationEvery);
            WriteManifest(corpus, state->corpus, state->out + ".manifest");
            std::fprintf(stderr, "training a %d-token tokenizer on %zu files (%llu bytes)\n",
                         state->tok.vocab_size, corpus.train_files.size(),
                         static_cast<unsigned long long>(corpus.total_bytes));
            TrainTokenizer(corpus.train_files, state->tok, state->out);
            std::fprintf(stderr, "wrote %s\n", state->out.c_str());
            return 0;
          }};
}

// `train model` and `train draft`: what they share.
struct ModelState {
  TrainOptions model;
  std::string type = "f32";
  std::string embedding_type;   // "" : the same as type
  std::string teacher_weights;  // "" or "i8"
};

void AddModelFlags(CLI::App* cmd, ModelState* state) {
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
  cmd->add_option("--stop-at-step", m.stop_at_step,
                  "checkpoint and stop after this step; the same command resumes")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  cmd->add_option("--lr", m.lr, "peak learning rate")->check(CLI::Range(1e-7, 1.0));
  cmd->add_option("--warmup", m.warmup_steps, "warm-up steps")->check(CLI::Range(0, 1000000));
  cmd->add_option("--checkpoint", m.checkpoint_dir, "checkpoint folder (resumes if present)");
  cmd->add_option("--checkpoint-every", m.checkpoint_every, "steps between checkpoints")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--eval-every", m.eval_every, "steps between validations")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--type", state->type, "export type")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--embedding-type", state->embedding_type,
                  "export type of the input embedding (default: --type)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--name", m.name, "general.name of the exported model");
  cmd->add_option("--seed", m.seed, "seed");
  flags::AddThreadsFlag(cmd, &m.threads);
  cmd->add_flag("!--no-bf16", m.bf16,
                "train in fp32 instead of bf16 autocast (which is only the default where the CPU "
                "has bf16 instructions)");
}

// Distillation from a target: its text, its soft targets, FR-Spec.
void AddDraftTrainingFlags(CLI::App* draft, ModelState* state) {
  draft->add_option("--teacher", state->model.teacher, "target model GGUF")->required();
  draft->add_option("--alpha", state->model.distill_alpha, "weight of the distillation term")
      ->check(CLI::Range(0.0, 1.0));
  draft
      ->add_option("--teacher-text", state->model.teacher_text_tokens,
                   "tokens of text generated by the teacher, trained on with the corpus")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 32));
  draft
      ->add_option("--teacher-text-share", state->model.teacher_text_share,
                   "share of the training steps on teacher text (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  draft
      ->add_option("--teacher-text-sampled", state->model.teacher_text_sampled_share,
                   "share of the teacher text sampled (t = 1, top-p 0.95), the rest greedy "
                   "(default 0.5)")
      ->check(CLI::Range(0.0, 1.0));

  draft
      ->add_option("--teacher-chat", state->model.teacher_chat_file,
                   "JSONL of user messages ({\"prompt\": ...}): part of the teacher text is the "
                   "teacher's answers to them (scripts/make-chat-prompts.py makes one)")
      ->check(CLI::ExistingFile);
  draft
      ->add_option("--teacher-chat-share", state->model.teacher_chat_share,
                   "share of the teacher text that is chat (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  draft
      ->add_option("--teacher-batch", state->model.teacher_run.batch,
                   "sequences the teacher writes at once (default 16)")
      ->check(CLI::Range(1, 1024));
  draft
      ->add_option("--teacher-weights", state->teacher_weights,
                   "i8: the teacher writes with its matrices in i8 (as --weights i8)")
      ->check(CLI::IsMember({"i8"}));
  draft
      ->add_option("--teacher-top-k", state->model.teacher_top_k,
                   "soft targets on teacher-text steps: the teacher's K most likely next tokens "
                   "at every position (recorded by specd's engine while it writes the text, or in "
                   "one pass over text already written; cached in the checkpoint folder); 0: the "
                   "written tokens only (default)")
      ->check(CLI::Range(0, 256));
  draft
      ->add_option("--soft-weight", state->model.soft_weight,
                   "weight of the soft-target term with --teacher-top-k; the rest goes to the "
                   "written token (default 0.8)")
      ->check(CLI::Range(0.0, 1.0));
  draft
      ->add_option("--init", state->model.init_from,
                   "draft GGUF to start from (same shape) instead of random weights")
      ->check(CLI::ExistingFile);
  draft
      ->add_option("--head-vocab", state->model.head_vocab,
                   "output layer over the N most frequent tokens only (FR-Spec; default: all)")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 24));
}

int RunTrainModel(const ModelState& state, const CLI::App* draft) {
  TrainOptions options = state.model;
  options.export_type = *DTypeFromName(state.type);
  if (!state.embedding_type.empty()) options.embedding_type = *DTypeFromName(state.embedding_type);
  options.bf16 = Bf16Pays(options.bf16);
  options.teacher_run.int8_weights = state.teacher_weights == "i8";
  SPECD_CHECK(draft->count("--soft-weight") == 0 || options.teacher_top_k > 0,
              "--soft-weight weighs the soft targets of --teacher-top-k, which is not set");
  auto tok = GgufFile::Open(options.tokenizer);
  options.shape.n_vocab = static_cast<int64_t>(
      tok->Get("tokenizer.ggml.tokens").AsArray("tokenizer.ggml.tokens").items.size());
  const Corpus corpus = ListCorpus(options.corpus_dir, {".py"}, options.validation_every);
  WriteManifest(corpus, options.corpus_dir, options.out + ".manifest");
  const TrainResult r = Train(options);
  if (!r.finished) {
    std::printf("{\"steps\": %lld, \"finished\": false}\n", static_cast<long long>(r.steps));
    return 0;
  }
  if (!options.teacher.empty()) {
    ReportDraft(
        MeasureDraft(options.teacher, options.out, corpus.validation_files, options.threads), 4);
  }
  const std::string train_loss = FormatTrainLoss(r.train_loss, "null");
  std::printf(
      "{\"steps\": %lld, \"parameters\": %lld, \"train_loss\": %s, "
      "\"validation_loss\": %.4f, \"validation_perplexity\": %.3f, \"tokens_per_s\": %.0f}\n",
      static_cast<long long>(r.steps), static_cast<long long>(r.parameters), train_loss.c_str(),
      r.validation_loss, r.validation_perplexity, r.tokens_per_s);
  return 0;
}

std::vector<Subcommand> AddModelCommands(CLI::App* train) {
  auto state = std::make_shared<ModelState>();
  auto* model = train->add_subcommand("model", "train a llama model by next-token prediction");
  AddModelFlags(model, state.get());
  auto* draft = train->add_subcommand("draft", "distill a draft model from a target model");
  AddModelFlags(draft, state.get());
  AddDraftTrainingFlags(draft, state.get());
  const auto run = [state, draft] { return RunTrainModel(*state, draft); };
  return {{model, run}, {draft, run}};
}

// The training loop's flags, shared by the trainers whose options name them alike.
template <typename Options>
void AddLoopFlags(CLI::App* cmd, Options& o) {
  cmd->add_option("--ctx", o.ctx, "training context")->check(CLI::Range(16, 65536));
  cmd->add_option("--batch", o.batch, "rows per step")->check(CLI::Range(1, 4096));
  cmd->add_option("--steps", o.steps, "steps")->check(CLI::Range(1, 100000000));
  cmd->add_option("--stop-at-step", o.stop_at_step,
                  "checkpoint and stop after this step; the same command resumes")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  cmd->add_option("--warmup", o.warmup_steps, "warm-up steps")->check(CLI::Range(0, 1000000));
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--eval-every", o.eval_every, "steps between held-out evaluations")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--seed", o.seed, "seed");
  flags::AddThreadsFlag(cmd, &o.threads);
  cmd->add_flag("!--no-bf16", o.bf16,
                "train in fp32 instead of bf16 autocast (which is only the default where the CPU "
                "has bf16 instructions)");
}

void AddSdsatTrainingFlags(CLI::App* sdsat, SdsatTrainOptions& s, std::string* type) {
  AddLoopFlags(sdsat, s);
  sdsat->add_option("--base", s.base, "model GGUF to fine-tune (any supported type)")
      ->required()
      ->check(CLI::ExistingFile);
  sdsat->add_option("--corpus", s.corpus_dir, "folder of .py files")->required();
  sdsat->add_option("-o,--output", s.out, "output GGUF")->required();
  sdsat
      ->add_option("--adaptive-token", s.adaptive_token,
                   "the adaptive token: an id or a token's text (e.g. '<unused0>')")
      ->required();
  sdsat->add_option("--max-window", s.max_window, "L: adaptive windows are 1..L tokens long")
      ->check(CLI::Range(1, 64));
  sdsat->add_option("--window-share", s.window_share, "share of positions followed by a window")
      ->check(CLI::Range(0.001, 1.0));
  sdsat->add_option("--plain-share", s.plain_share, "share of each batch's rows kept plain")
      ->check(CLI::Range(0.0, 1.0));
  sdsat->add_option("--adaptive-weight", s.adaptive_weight, "w: weight of the adaptive loss")
      ->check(CLI::Range(0.0, 100.0));
  sdsat
      ->add_option("--plain-loss", s.plain_loss,
                   "what the plain rows teach: next-token (cross-entropy on the corpus, the "
                   "paper's) or kl-to-base (KL from the frozen base's predictions; LoRA only)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, PlainLoss>{
          {"next-token", PlainLoss::kNextToken}, {"kl-to-base", PlainLoss::kKlToBase}}));
  sdsat->add_flag("!--no-fim", s.fim, "no fill-in-the-middle reordering");
  sdsat
      ->add_option("--lora-rank", s.lora_rank,
                   "train a LoRA of this rank (frozen base) and write it as a llama.cpp "
                   "adapter for --lora; 0 (default): full fine-tune")
      ->check(CLI::Range(0, 4096));
  sdsat->add_option("--lora-alpha", s.lora_alpha, "LoRA alpha (default 2 x rank)")
      ->check(CLI::Range(0.0, 1e6));
  sdsat->add_option("--lr", s.lr, "peak learning rate (default 5e-5, the paper's)")
      ->check(CLI::Range(1e-8, 1.0));
  sdsat->add_option("--min-lr-ratio", s.min_lr_ratio, "final / peak learning rate")
      ->check(CLI::Range(0.0, 1.0));
  sdsat->add_option("--checkpoint", s.checkpoint_dir, "checkpoint folder (resumes if present)");
  sdsat->add_option("--type", *type, "export type")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  sdsat->add_option("--name", s.name, "general.name of the exported model");
}

Subcommand AddSdsatCommand(CLI::App* train) {
  auto options = std::make_shared<SdsatTrainOptions>();
  auto type = std::make_shared<std::string>("f32");
  auto* sdsat = train->add_subcommand(
      "sdsat", "fine-tune a model so that appended adaptive tokens draft for it (SDSAT)");
  AddSdsatTrainingFlags(sdsat, *options, type.get());
  return {sdsat, [options, type] {
            SdsatTrainOptions o = *options;
            o.export_type = *DTypeFromName(*type);
            o.bf16 = Bf16Pays(o.bf16);
            WriteManifest(ListCorpus(o.corpus_dir, {".py"}, o.validation_every), o.corpus_dir,
                          o.out + ".manifest");
            const SdsatTrainResult r = TrainSdsat(o);
            std::string accuracy;
            for (double a : r.adaptive.accuracy) {
              accuracy += (accuracy.empty() ? "" : ", ") + std::to_string(a);
            }
            std::printf(
                "{\"steps\": %lld, \"finished\": %s, \"adaptive_token\": %d, \"train_loss\": "
                "%s, \"base_perplexity\": %.4f, \"validation_perplexity\": %.4f, "
                "\"base_adaptive_loss\": %.4f, \"adaptive_loss\": %.4f, \"adaptive_accuracy\": "
                "[%s], \"tokens_per_s\": %.0f}\n",
                static_cast<long long>(r.steps), r.finished ? "true" : "false", r.adaptive_token,
                FormatTrainLoss(r.train_loss, "null").c_str(), r.base_perplexity,
                r.validation_perplexity, r.base_adaptive.loss, r.adaptive.loss, accuracy.c_str(),
                r.tokens_per_s);
            return 0;
          }};
}

void AddEagleFlags(CLI::App* eagle, EagleTrainOptions& e, std::string* type) {
  AddLoopFlags(eagle, e);
  eagle->add_option("--teacher", e.target, "target model GGUF (llama or qwen2, any type)")
      ->required()
      ->check(CLI::ExistingFile);
  eagle->add_option("--corpus", e.corpus_dir, "folder of .py files")->required();
  eagle->add_option("-o,--output", e.out, "output GGUF")->required();
  eagle
      ->add_option("--checkpoint", e.checkpoint_dir,
                   "folder for the target's text, its "
                   "features and checkpoints (resumes if present)")
      ->required();
  eagle
      ->add_option("--teacher-chat", e.chat_file,
                   "JSONL of user messages: part of the target's text answers them")
      ->check(CLI::ExistingFile);
  eagle->add_option("--teacher-text", e.teacher_text_tokens, "tokens of the target's text")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32));
  eagle->add_option("--teacher-batch", e.teacher_batch, "sequences the target writes at once")
      ->check(CLI::Range(1, 1024));
  eagle->add_option("--teacher-chat-share", e.chat_share, "share of it that is chat")
      ->check(CLI::Range(0.0, 1.0));
  eagle->add_option("--teacher-text-sampled", e.sampled_share, "share of it sampled at t = 1")
      ->check(CLI::Range(0.0, 1.0));
  eagle
      ->add_option("--corpus-share", e.corpus_share,
                   "corpus windows, as a share of the target's sequences")
      ->check(CLI::Range(0.0, 10.0));
  eagle->add_option("--head-vocab", e.head_vocab, "FR-Spec head tokens (0: the whole vocabulary)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  eagle->add_option("--lr", e.lr, "peak learning rate")->check(CLI::Range(1e-8, 1.0));
  eagle->add_option("--token-weight", e.token_weight, "weight of the token loss")
      ->check(CLI::Range(0.0, 100.0));
  eagle
      ->add_option("--unroll", e.unroll,
                   "drafting steps each row is trained over, the later ones reading the head's "
                   "own predicted features (EAGLE-3's training-time test; 1: EAGLE-1)")
      ->check(CLI::Range(1, 8));
  eagle->add_option("--feature-noise", e.feature_noise, "uniform noise on input features")
      ->check(CLI::Range(0.0, 10.0));
  eagle->add_option("--type", *type, "export type")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  eagle->add_option("--name", e.name, "general.name of the exported head");
}

Subcommand AddEagleCommand(CLI::App* train) {
  auto options = std::make_shared<EagleTrainOptions>();
  auto type = std::make_shared<std::string>("q8_0");
  auto* eagle = train->add_subcommand(
      "eagle", "train an EAGLE draft head that drafts from the target's own features");
  AddEagleFlags(eagle, *options, type.get());
  return {eagle, [options, type] {
            EagleTrainOptions o = *options;
            o.export_type = *DTypeFromName(*type);
            o.bf16 = Bf16Pays(o.bf16);
            const EagleTrainResult r = TrainEagle(o);
            std::printf(
                "{\"steps\": %lld, \"finished\": %s, \"feature_loss\": %.4f, "
                "\"token_loss\": %.4f, \"top1\": %.4f}\n",
                static_cast<long long>(r.steps), r.finished ? "true" : "false", r.feature_loss,
                r.token_loss, r.top1);
            return 0;
          }};
}

struct MeasureState {
  std::string target, draft, corpus, chat, prompts;
  int max_prompts = 1000000;
  int draft_length = 4;
  int prompts_per_file = 8;
  int threads = 2;
};

int RunMeasure(const MeasureState& m) {
  SPECD_CHECK(m.corpus.empty() + m.chat.empty() + m.prompts.empty() == 2,
              "give one of --corpus, --chat or --prompts");
  if (!m.chat.empty() || !m.prompts.empty()) {
    auto prompts = m.chat.empty() ? CompletionPrompts(m.target, m.prompts, 1024)
                                  : ChatPrompts(m.target, m.chat, 256);
    if (static_cast<int>(prompts.size()) > m.max_prompts) prompts.resize(m.max_prompts);
    ReportDraft(MeasureDraftOnPrompts(m.target, m.draft, prompts, m.threads, m.draft_length),
                m.draft_length);
    return 0;
  }
  const Corpus corpus = ListCorpus(m.corpus, {".py"}, kValidationEvery);
  SPECD_CHECK(!corpus.validation_files.empty(), "no held-out .py files under ", m.corpus);
  ReportDraft(MeasureDraft(m.target, m.draft, corpus.validation_files, m.threads, m.draft_length,
                           m.prompts_per_file),
              m.draft_length);
  return 0;
}

Subcommand AddMeasureCommand(CLI::App* train) {
  auto measure_state = std::make_shared<MeasureState>();
  auto* measure = train->add_subcommand(
      "measure",
      "a draft's greedy acceptance and per-token cost against a target on held-out files");
  measure->add_option("--teacher", measure_state->target, "target model GGUF")->required();
  measure->add_option("--draft", measure_state->draft, "draft model GGUF")->required();
  measure->add_option("--corpus", measure_state->corpus, "folder of .py files (the held-out ones)");
  measure
      ->add_option("--chat", measure_state->chat,
                   "JSONL of user messages: measure on the target's answers to them instead")
      ->check(CLI::ExistingFile);
  measure
      ->add_option("--prompts", measure_state->prompts,
                   "JSONL of completion prompts ({\"prompt\": ...}, e.g. function signatures "
                   "with docstrings): measure on the target's continuations of them instead")
      ->check(CLI::ExistingFile);
  measure->add_option("--max-prompts", measure_state->max_prompts, "use at most this many")
      ->check(CLI::Range(1, 1000000));
  measure->add_option("--draft-length", measure_state->draft_length, "tokens drafted per step")
      ->check(CLI::Range(1, 32));
  measure
      ->add_option("--prompts-per-file", measure_state->prompts_per_file,
                   "evenly spaced 64-token prompts per held-out file (more: a tighter estimate)")
      ->check(CLI::Range(1, 64));
  flags::AddThreadsFlag(measure, &measure_state->threads);

  return {measure, [measure_state] { return RunMeasure(*measure_state); }};
}

}  // namespace

std::function<int()> AddTrainCommands(CLI::App& app) {
  auto* train = app.add_subcommand("train", "train a tokenizer, a model, or a distilled draft");
  train->require_subcommand(1);
  std::vector<Subcommand> subcommands = {AddTokenizerCommand(train)};
  for (Subcommand& s : AddModelCommands(train)) subcommands.push_back(std::move(s));
  subcommands.push_back(AddSdsatCommand(train));
  subcommands.push_back(AddEagleCommand(train));
  subcommands.push_back(AddMeasureCommand(train));
  return [subcommands]() -> int {
    for (const Subcommand& s : subcommands) {
      if (*s.app) return s.run();
    }
    return 1;  // CLI11 requires one: not reached
  };
}

}  // namespace specd::train
