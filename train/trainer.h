// `specd train model` and `specd train draft`: next-token training (or distillation from a
// teacher model) of a llama model on a tokenized corpus, with AdamW, warm-up and cosine decay,
// gradient clipping, bf16 autocast, held-out validation, and checkpoints to resume from.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"
#include "train/llama_torch.h"

namespace specd::train {

// How the teacher runs while it writes: sequences per batch, and whether its matrices are
// converted to i8 (BASS's INT8, `--weights i8`: on a CPU with AMX, faster at large batches; its
// text is then that of the i8 model, not exactly the stored one's).
struct TeacherRun {
  int batch = 16;
  bool int8_weights = false;
};

struct TrainOptions {
  LlamaShape shape;
  std::string corpus_dir;
  std::string tokenizer;       // GGUF with tokenizer metadata
  std::string out;             // output GGUF
  std::string checkpoint_dir;  // resume from here if a checkpoint exists
  std::string teacher;         // GGUF of the target: distill into the draft when set
  std::string name = "specd";
  DType export_type = DType::kF32;
  std::optional<DType> embedding_type;  // the input embedding's export type (default export_type)
  int batch = 8;
  double epochs = 1.0;
  int64_t max_steps = 0;  // overrides epochs when > 0
  // Checkpoint and return after this step, without validating or exporting (0: run to the end).
  // Splits a run across sessions; the same options resume it to exactly where one run goes.
  int64_t stop_at_step = 0;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  int warmup_steps = 100;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double distill_alpha = 0.9;  // weight of the KL term when distilling (rest: cross-entropy)
  // Tokens of text written by the teacher itself (specd's engine continues prompts from the
  // training files); every other step then trains on it. The draft sees what the target
  // writes, which is what speculative decoding asks it to predict (sequence-level / on-policy
  // distillation as in DistillSpec). 0: corpus only.
  int64_t teacher_text_tokens = 0;
  double teacher_text_share = 0.5;  // of the training steps, when teacher text is given
  // Of the teacher-text batches, the share sampled (t = 1, top-p 0.95); the rest are greedy, the
  // text greedy speculative decoding asks the draft to predict.
  double teacher_text_sampled_share = 0.5;
  // JSONL of user messages ({"prompt": ...}): a `teacher_chat_share` of the teacher-text batches
  // are the teacher's answers to them, in its chat template.
  std::string teacher_chat_file;
  double teacher_chat_share = 0.5;
  TeacherRun teacher_run;  // --teacher-batch, --teacher-weights
  // Soft targets on the teacher-text steps: the teacher's `teacher_top_k` most likely next tokens
  // at each position (computed once in specd's engine, cached beside the text), trained on by
  // cross-entropy against their probabilities with weight `soft_weight` (the rest: the written
  // token). 0: written tokens only.
  int teacher_top_k = 0;
  double soft_weight = 0.8;
  // A draft GGUF to start from instead of random weights (its shape and FR-Spec head are kept;
  // the shape options must agree with it). A checkpoint, when present, still wins.
  std::string init_from;
  // FR-Spec: an output layer over the `head_vocab` tokens most frequent in the training text
  // (corpus and teacher text) instead of the whole vocabulary. 0: the whole vocabulary.
  int64_t head_vocab = 0;
  int checkpoint_every = 200;
  int eval_every = 500;
  int eval_windows = 64;
  int threads = 2;
  bool bf16 = true;
  uint64_t seed = 1;
  int validation_every = 20;  // every 20th corpus file is held out
};

struct TrainResult {
  int64_t steps = 0;
  bool finished = false;    // false when stopped at `stop_at_step`: nothing validated or exported
  double train_loss = 0.0;  // smoothed; NaN when a checkpoint written before it was saved
  double validation_loss = 0.0;
  double validation_perplexity = 0.0;
  double tokens_per_s = 0.0;
  int64_t parameters = 0;
};

TrainResult Train(const TrainOptions& options);

// Whether item i of a series takes its turn when a share s of the items should, spread evenly:
// when floor((i + 1) s) passes an integer (s = 0.5: every odd item).
bool TakesTurn(int64_t i, double share);

// "%.4f" of a training loss, or `if_unknown` when it is NaN (a checkpoint from before the loss
// was saved in it).
std::string FormatTrainLoss(double loss, const char* if_unknown);

// Soft targets recorded while the teacher writes (ComputeTeacherTopK's records and cache file,
// from the logits the writing computes anyway, plus one forward over each prompt's rows): half
// the teacher's time of writing the text first and reading it again. k = 0: none.
struct TopKRecording {
  int k = 0;
  std::string cache_path;  // required when k > 0
};

// Text the teacher writes: n_tokens / (ctx + 1) sequences, each a 32-token prefix from `stream`
// continued by the teacher (specd's engine), a `sampled_share` of the batches sampled, the rest
// greedy. A `chat_share` of the batches starts from `chat_prompts` instead (whole prompts, the
// answer filling the sequence). Cached in `cache_path` when given (resumable: see trainer.cc).
// With `top_k.k` > 0 and the text not cached yet, the teacher's top-k at every position is
// written to `top_k.cache_path` as well.
std::vector<std::vector<int32_t>> TeacherText(
    const std::string& teacher_gguf, const std::vector<int32_t>& stream, int64_t n_tokens,
    int64_t ctx, int threads, uint64_t seed, double sampled_share, const std::string& cache_path,
    const std::vector<std::vector<int32_t>>& chat_prompts = {}, double chat_share = 0.0,
    const TeacherRun& run = {}, const TopKRecording& top_k = {});

// Chat prompts for TeacherText: each line of a JSONL file ({"prompt": "..."}) as a user message
// in the teacher's chat template, with the assistant's turn opened. Prompts longer than
// max_tokens are left out.
std::vector<std::vector<int32_t>> ChatPrompts(const std::string& teacher_gguf,
                                              const std::string& jsonl_path, int64_t max_tokens);

struct DraftReport {
  double acceptance_rate = 0.0;  // accepted draft tokens / drafted tokens, greedy, K = 4
  // Standard error of acceptance_rate over prompts (a ratio estimate, prompts as clusters: the
  // tokens of one continuation are not independent draws).
  double acceptance_standard_error = 0.0;
  int64_t n_prompts = 0;
  int64_t n_drafted = 0;
  double mean_accepted_length = 0.0;
  // Of the steps whose drafts 0..i-1 (0-based) were all accepted, the share that accepted draft
  // i too: a conditional rate, so it may rise with i (their product is about the share of steps
  // that accepted every draft).
  std::vector<double> accepted_at_position;
  double draft_ms_per_token = 0.0;  // one decode step in specd's engine
  double target_ms_per_token = 0.0;
};

// Runs greedy speculative decoding with specd's engine (target and draft GGUF files) from
// prompts taken out of held-out files (`prompts_per_file` evenly spaced 64-token prompts each,
// 96 new tokens), and times one decode step of each model.
DraftReport MeasureDraft(const std::string& target_gguf, const std::string& draft_gguf,
                         const std::vector<std::string>& held_out_files, int threads,
                         int draft_length = 4, int prompts_per_file = 8);
// The same on given prompts (token ids), n_new greedy tokens each.
// Completion prompts of a JSONL file ({"prompt": ...}), tokenized as `generate -p` does; those
// longer than max_tokens are left out.
std::vector<std::vector<int32_t>> CompletionPrompts(const std::string& target_gguf,
                                                    const std::string& jsonl_path,
                                                    int64_t max_tokens);
DraftReport MeasureDraftOnPrompts(const std::string& target_gguf, const std::string& draft_gguf,
                                  const std::vector<std::vector<int32_t>>& prompts, int threads,
                                  int draft_length = 4, int n_new = 96);

// Acceptance rate sum(accepted) / sum(drafted) and its standard error with prompts as clusters:
// sqrt(n / (n - 1) * sum_i (accepted_i - rate * drafted_i)^2) / sum(drafted). Returns {rate, se}.
std::pair<double, double> ClusteredAcceptance(const std::vector<int64_t>& drafted,
                                              const std::vector<int64_t>& accepted);

// FNV-1a over every token of the sequences: names what a cache (teacher top-k, EAGLE features)
// was computed from.
uint64_t SequencesFingerprint(const std::vector<std::vector<int32_t>>& sequences);

// The teacher as specd's engine runs it for the trainers: matrices as stored, or in i8.
std::unique_ptr<Model> LoadTeacher(const std::string& gguf, const TeacherRun& run,
                                   const KernelContext* kernels);

// The `n` tokens most frequent in the stream and sequences, in increasing id order (an FR-Spec
// head's tokens); prints the share of the text they cover.
std::vector<int64_t> MostFrequentTokens(const std::vector<int32_t>& stream,
                                        const std::vector<std::vector<int32_t>>& sequences,
                                        int64_t n_vocab, int64_t n);

// Tokenizes files with the GGUF's tokenizer into one stream: <s> file </s> <s> file </s> ...
std::vector<int32_t> TokenizeFiles(const std::vector<std::string>& files,
                                   const std::string& tokenizer_gguf);

}  // namespace specd::train
