// `specd train eagle`: an EAGLE draft head (Li et al., 2024) for a target model. The head is one
// llama block over fc([E(t_{i+1}); f_i]) (E the target's embedding, f_i the target's final
// normed hidden state at position i); it learns to predict f_{i+1} (smooth L1) and, through the
// target's output rows of the FR-Spec head tokens, the target's distribution of t_{i+2} (soft
// cross-entropy), optionally also at the drafting steps after, reading its own predictions
// (--unroll). The features come from specd's own forward of the target over text the target wrote
// itself, so the head learns the features the engine will hand it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "train/llama_torch.h"

namespace specd::train {

struct EagleTrainOptions {
  std::string target;          // the target GGUF (any supported type)
  std::string corpus_dir;      // .py files: prompts for the target's text, and corpus windows
  std::string chat_file;       // JSONL of user messages for the target's chat answers
  std::string out;             // output GGUF
  std::string checkpoint_dir;  // features, teacher text and checkpoints; resumes from here
  std::string name = "specd-eagle";
  DType export_type = DType::kQ8_0;
  int64_t teacher_text_tokens = 1 << 20;
  int teacher_batch = 16;      // sequences the target writes at once
  double sampled_share = 0.5;  // of the target's text, sampled at t = 1 (the rest greedy)
  double chat_share = 0.5;     // of the target's text, answers to chat prompts
  double corpus_share = 0.2;   // corpus windows, as a share of the target's sequences
  int64_t head_vocab = 8192;   // FR-Spec head tokens (0: the whole vocabulary)
  int64_t ctx = 512;
  int batch = 8;
  int64_t steps = 2000;
  int64_t stop_at_step = 0;  // checkpoint and return after this step (0: run to the end)
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  int warmup_steps = 100;
  double weight_decay = 0.0;
  double grad_clip = 0.5;
  double token_weight = 0.1;   // of the soft cross-entropy, next to the feature loss (weight 1)
  double feature_noise = 0.1;  // uniform noise on the input features, +-this
  // Drafting steps each training row is unrolled over (EAGLE-3's training-time test): steps after
  // the first read the head's own predicted features, as drafting does. 1: EAGLE-1's training.
  int unroll = 1;
  int checkpoint_every = 100;
  int eval_every = 250;
  int held_out_sequences = 64;
  int threads = 2;
  bool bf16 = true;
  uint64_t seed = 1;
};

struct EagleTrainResult {
  int64_t steps = 0;
  bool finished = false;
  double feature_loss = 0.0;  // held out, at the end
  double token_loss = 0.0;
  // Held out, the head's argmax equals the target's: at draft step 1, and at steps 1..4 (reading
  // its own predicted features after step 1, the tokens before them right).
  double top1 = 0.0;
  std::vector<double> top1_by_step;
};

EagleTrainResult TrainEagle(const EagleTrainOptions& options);

// The head's final normed hidden states (predicted features) over `unroll` drafting steps
// (EAGLE-3's training-time test), tokens [B, L], features [B, L - 1, d] (the target's, f_0 ..
// f_{L-2}). Step 1's row i reads (t_{i+1}, f_i) at position i; step u's row i reads (t_{i+u},
// step u-1's prediction at row i) at position i + u - 1 and sees step 1's rows 0..i and its own
// row i of steps 2..u, as drafting step u after position i does. Step u's rows predict f_{i+u}:
// element u - 1 is [B, L - u, d].
std::vector<torch::Tensor> UnrolledHeadHidden(Llama& head, const torch::Tensor& tokens,
                                              const torch::Tensor& features, int unroll);

}  // namespace specd::train
