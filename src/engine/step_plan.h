// StepDecoder's plan of one step (private to engine/step*.cc).
#pragma once

#include <vector>

#include "engine/step.h"

namespace specd {

// One step's plan, built once and read by every stage: who takes part, what was drafted, and
// where each sequence's rows sit in the target's batch (vLLM's cu_num_tokens).
struct StepDecoder::Plan {
  struct Chunk {  // prompt rows [begin, end) of a sequence that is reading its prompt
    Sequence* s;
    int begin, end;
  };
  // A decoding sequence's rows: its last token, then its drafts (a chain or a tree), then rider
  // rows; batch_row indexes the batch (and the features), out_row the logits.
  struct Rows {
    int base = 0;  // its KV length before the step (the last token's position)
    int64_t batch_row = 0, out_row = 0;
    int n_drafts = 0, n_riders = 0;
  };
  std::vector<Chunk> prefill;
  std::vector<Sequence*> decode;             // sequences with a token to verify
  std::vector<Sequence*> followers;          // completions waiting for a shared prompt
  int k = 0;                                 // the draft length the policy gave
  std::vector<Proposal> proposals;           // [decode]
  std::vector<std::vector<int32_t>> riders;  // [decode] rider tokens after the drafts
  std::vector<Rows> rows;                    // [decode]
  Batch batch;
  ProposerTimings timings;
  double t_draft_ms = 0.0, t_target_ms = 0.0;
};

}  // namespace specd
