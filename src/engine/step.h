// One step of decoding for every live sequence, the strategy shared by plain and speculative
// decoding (vLLM's proposer / scorer / verifier split):
//   propose  the proposer drafts up to K tokens per decoding sequence (K from the policy; none
//            without a proposer: plain decoding);
//   score    ONE target forward over all rows the sequences need: prompt chunks of new sequences,
//            [last, d1..dK] of the others;
//   verify   per sequence: greedy (longest prefix equal to the target's argmax), rejection
//            sampling (verify/), or coupled (drafts and target share Gumbel noise per position);
//   commit   accepted tokens plus the recovered / bonus one; KV caches roll back.
// Sequences finish on their own (EOS, a stop token, their length).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "draft/proposer.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "policy/completion_lengths.h"
#include "policy/draft_length.h"
#include "sampling/sampler.h"
#include "sampling/token_constraint.h"
#include "verify/verify.h"

namespace specd {

// Decides a sampled verification by rejection sampling; tests substitute wrong ones to show the
// distribution test would catch them.
using VerifyFunction = VerifyOutcome (*)(std::span<const std::vector<float>>,
                                         std::span<const std::vector<float>>,
                                         std::span<const int32_t>, const RngKey&);

// What one sequence asks for.
struct SequenceRequest {
  std::vector<int32_t> prompt;  // at least one token
  int n_predict = 128;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::vector<int32_t> stop_tokens;  // end the sequence like EOS
  uint64_t rng_sequence = 0;         // sequence component of its RNG keys
  // -1: no per-token log-probabilities; n >= 0: record each generated token's and the n most
  // likely alternatives' (OpenAI's logprobs / top_logprobs).
  int logprobs = -1;
  // Sum every generated token's log-probability (Sequence::mean_logprob: `generate` ranks and
  // reports completions by it). A full pass over the vocabulary per token: the server, which
  // never reads it, turns it off.
  bool sum_logprob = true;
  // llama.cpp's cache_prompt: start from the KV of the finished sequence that shares the longest
  // prefix with this prompt (the tokens it read and wrote), and keep this sequence's KV for later
  // requests when it finishes. Lossless: the kernels are batch-invariant, so reused KV entries
  // are the ones a fresh read would write.
  bool cache_prompt = false;
  // llama-server's --cache-reuse N (with cache_prompt; 0: off): past the shared prefix, runs of
  // at least this many cached tokens that reappear earlier in the prompt (text above them was
  // deleted, or an editor's window of lines moved down) are moved there, their keys rotated to
  // the new positions, instead of read again. Not lossless: those entries were computed after
  // the text that has gone, so the output may differ from a cold read's (as llama-server's).
  int cache_reuse_chunk = 0;
  // Structured output: the grammar the generated tokens follow (null: none). The target's
  // distribution at every position is the masked one, drafts are drawn under the same mask, and
  // the sequence ends when the grammar is complete and takes a stop token.
  std::shared_ptr<const TokenConstraintFactory> constraint;
};

// A generated token's log-probability under the raw model, with the most likely alternatives.
struct TokenLogprobs {
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

// A sequence's persistent state.
struct Sequence {
  int id = 0;
  SequenceRequest request;
  int slot = -1;                // target KV slot
  int n_read = 0;               // prompt tokens in the KV cache
  int n_cached = 0;             // of which reused from an earlier sequence (cache_prompt)
  int shared_with = -1;         // reads no prompt: forks this sequence's once it is read
  int32_t last = -1;            // the committed token that is the next input
  std::vector<int32_t> tokens;  // generated (a stopping EOS / stop token excluded)
  std::string finish_reason;    // "stop", "length", "cancelled", "budget"; "" while running
  double sum_logprob = 0.0;     // of the generated tokens under the raw model
  int n_logprob = 0;
  std::vector<TokenLogprobs> token_logprobs;  // one per generated token, when asked for
  double t_added_ms = 0.0;                    // on the engine's clock
  double elapsed_ms = 0.0;                    // from its addition to its last token
  int64_t n_drafted = 0, n_accepted = 0;      // speculation: drafted for it, and kept
  // The grammar's state after the committed tokens (request.constraint), or null.
  std::unique_ptr<TokenConstraint> constraint;

  bool finished() const { return !finish_reason.empty(); }
  bool prefilling() const { return n_read < static_cast<int>(request.prompt.size()); }
  double mean_logprob() const { return n_logprob ? sum_logprob / n_logprob : 0.0; }
};

// Speculation counters in vLLM's names.
struct SpeculativeStats {
  int64_t n_drafted = 0;
  int64_t n_accepted = 0;
  int64_t n_steps = 0;                        // verification forwards with decoding rows
  int64_t n_plain_steps = 0;                  // of which without drafts
  int64_t n_verified = 0;                     // sequences verified, summed over steps
  int64_t n_drafts = 0;                       // of which with at least one draft (vLLM's
                                              // num_drafts)
  std::vector<int64_t> accepted_at_position;  // [K]: drafts accepted at position i
  std::vector<int64_t> drafted_at_position;   // [K]: drafts proposed at position i
  double t_draft_ms = 0.0;
  double t_verify_ms = 0.0;
  // Structured output: masking rows by grammars (the target's, and the draft's within
  // t_draft_ms), cutting drafts and advancing grammars.
  double t_mask_ms = 0.0;

  double acceptance_rate() const { return n_drafted ? double(n_accepted) / n_drafted : 0.0; }
  // Tokens a sequence gains per verification: 1 + its accepted drafts (the bonus / correction
  // token included), averaged over every (sequence, step) verified — not per batch step.
  double mean_accepted_length() const {
    return n_verified ? 1.0 + double(n_accepted) / n_verified : 0.0;
  }
  void Add(const SpeculativeStats& other);
};

struct StepOptions {
  AttentionMode attention = AttentionMode::kSplit;
  SpecSampling spec_sampling = SpecSampling::kRejection;
  int max_prefill_rows = 2048;  // prompt rows per step (longer prompts are read in chunks)
  VerifyFunction verify = VerifySampled;
};

// What a step did, for streaming and bookkeeping.
struct StepReport {
  std::vector<std::pair<int, int32_t>> tokens;  // (sequence id, token) in commit order
  std::vector<TokenSource> sources;             // how each of `tokens` came
  std::vector<int> finished;                    // ids of sequences that finished
};

class StepDecoder {
 public:
  // proposer and policy may be null (plain decoding).
  StepDecoder(Model& target, KvCache& kv, const KernelContext& ctx, const StepOptions& options,
              Proposer* proposer, DraftLengthPolicy* policy);

  // Runs one step over the live (unfinished) sequences; `now_ms` gives timestamps.
  StepReport Step(const std::vector<Sequence*>& live, const std::function<double()>& now_ms);
  const SpeculativeStats& stats() const { return stats_; }

 private:
  struct Plan;
  // The stages of Step, in order.
  void PlanSequences(const std::vector<Sequence*>& live, Plan* plan) const;
  void Propose(Plan* plan);
  void PlanRows(Plan* plan);
  void AddDecodeRows(size_t j, Plan* plan);
  void Score(Plan* plan);
  void PenalizeRows(const Plan& plan);
  // Structured output: drafts cut where the grammar stops allowing them, and every output row
  // masked by the grammar's state at its position.
  void CutDisallowedDrafts(Plan* plan);
  void MaskRows(const Plan& plan);
  void MaskDecodeRows(Sequence& s, const Proposal& proposal, float* rows);
  void CommitPrefills(const Plan& plan, double now, StepReport* report);
  void VerifyDecodes(const Plan& plan, double now, StepReport* report,
                     std::vector<std::pair<int, int>>* verified);
  void Observe(const Plan& plan, const StepReport& report, double t_verify_ms, double step_ms,
               std::vector<std::pair<int, int>> verified);
  // Samples the first token of a sequence whose prompt was just read.
  void FirstToken(Sequence& s, std::span<const float> row, double now, StepReport* report);
  // Verifies one decoding sequence's rows; returns the accepted draft count.
  int Verify(Sequence& s, const Proposal& proposal, const float* rows, int base, double now,
             StepReport* report);
  // The same for a token tree.
  int VerifyTree(Sequence& s, const Proposal& proposal, const float* rows, int base, double now,
                 StepReport* report);
  // Counts drafted / accepted tokens at each draft position (tree nodes by depth).
  void CountDrafts(int position, bool accepted);
  // The repetition penalty on one output row of `s`: `extra` are the tokens (drafts) between
  // its committed text and the row's prediction.
  void PenalizeRow(const Sequence& s, std::span<const int32_t> extra, float* row);
  // Records a generated token; returns true when the sequence finished.
  bool Commit(Sequence& s, int32_t token, TokenSource source, std::span<const float> row,
              double now, StepReport* report);

  Model& target_;
  KvCache& kv_;
  const KernelContext& ctx_;
  StepOptions options_;
  Proposer* proposer_;
  DraftLengthPolicy* policy_;
  SpeculativeStats stats_;
  std::vector<float> logits_;  // [rows, n_vocab]
  std::vector<float> hidden_;  // [rows, n_embd] the target's features, for proposers that read them
  std::vector<std::vector<float>> target_probs_;
  std::vector<int32_t> history_;  // scratch of PenalizeRow
  CompletionLengths lengths_;     // of the finished sequences, for the draft-length policy
};

}  // namespace specd
