// `specd train sdsat`: fine-tunes a llama model so that appended adaptive tokens predict the
// tokens after the next one (SDSAT, Semantic Adaptive Tokens; the paper's improved approach):
// a share of each batch is plain rows (next-token loss, or KL to the frozen base), the rest mixed
// rows with windows of 1..L adaptive tokens after 10% of positions (loss on the adaptive tokens
// only); loss = 1/2 (f(plain) + w f(adaptive)). FIM reordering where the tokenizer has FIM tokens;
// AdamW (0.9, 0.95), warm-up + cosine; checkpoints; GGUF export with specd.sdsat.* metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace specd::train {

// What the plain rows teach.
enum class PlainLoss {
  kNextToken,  // cross-entropy against the corpus's next token (the paper's loss)
  // KL divergence from the frozen base's next-token distribution (LoRA only): the plain rows then
  // hold the model's predictions where they were instead of pulling them toward the corpus's style.
  kKlToBase,
};

struct SdsatTrainOptions {
  std::string base;            // GGUF to fine-tune (any supported type; dequantized)
  std::string corpus_dir;      // folder of .py files
  std::string out;             // output GGUF
  std::string checkpoint_dir;  // resume from here if a checkpoint exists
  std::string adaptive_token;  // a token id or a token's text, e.g. "<unused0>"
  std::string name;            // general.name of the export ("" : the base's name + "-sdsat")
  DType export_type = DType::kF32;
  int max_window = 5;            // L
  double window_share = 0.10;    // of real positions followed by a window
  double plain_share = 0.5;      // of each batch's rows
  double adaptive_weight = 1.0;  // w
  PlainLoss plain_loss = PlainLoss::kNextToken;
  bool fim = true;  // when the tokenizer has FIM tokens
  // LoRA instead of a full fine-tune: the output is then a llama.cpp LoRA adapter (plus the
  // adaptive token's embedding row) for `specd generate --lora`. 0: full fine-tune.
  int lora_rank = 0;
  double lora_alpha = 0.0;  // 0: 2 x rank
  int64_t ctx = 256;
  int batch = 8;
  int64_t steps = 1000;
  int64_t stop_at_step = 0;  // checkpoint and return after this step (0: run to the end)
  double lr = 5e-5;
  double min_lr_ratio = 0.2;
  int warmup_steps = 100;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  int checkpoint_every = 200;
  int eval_every = 500;
  int eval_windows = 64;
  int threads = 2;
  bool bf16 = true;
  uint64_t seed = 1;
  int validation_every = 20;  // every 20th corpus file is held out
};

// Adaptive tokens on mixed rows of held-out text.
struct AdaptiveScore {
  std::vector<double> accuracy;  // top-1 accuracy of the j-th token of a window (index j - 1)
  double loss = 0.0;             // mean cross-entropy
};

struct SdsatTrainResult {
  int64_t steps = 0;
  bool finished = false;  // false when stopped at `stop_at_step`
  double train_loss = 0.0;
  int32_t adaptive_token = -1;
  double base_perplexity = 0.0;  // held-out plain text, before fine-tuning
  double validation_perplexity = 0.0;
  AdaptiveScore base_adaptive;  // before fine-tuning
  AdaptiveScore adaptive;       // after (left empty when stopped at a step)
  double tokens_per_s = 0.0;
};

SdsatTrainResult TrainSdsat(const SdsatTrainOptions& options);

// A token id given as a number or as a token's text in the GGUF's vocabulary.
int32_t ResolveToken(const std::string& tokenizer_gguf, const std::string& token);

}  // namespace specd::train
