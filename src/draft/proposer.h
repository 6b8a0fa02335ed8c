// Proposers: whatever drafts tokens for the target to verify. The engine (engine/) asks every
// proposer the same things, so adding one (an n-gram table, the target's own adaptive tokens, a
// layer-parallel draft) means adding a file here, not changing the engine:
//   AddSequence / ForkSequence / RemoveSequence  follow the engine's sequences;
//   Propose                                       drafts up to k tokens per sequence, in one pass
//                                                 over all of them (one draft forward per draft
//                                                 position for a model proposer);
//   Accept                                        reports what the target kept, so the proposer
//                                                 can roll its own state back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/token_constraint.h"

namespace specd {

// How drafted tokens are checked, which decides how a proposer must draw them.
enum class SpecSampling {
  kRejection,  // modified rejection sampling: draw from q, report q
  kCoupled,    // Gumbel-max with the target's own per-position noise; no q needed
};

// How a committed token came: drafted by a model (a draft model, EAGLE's head, the target's own
// adaptive tokens) and accepted, copied by prompt lookup and accepted, or chosen by the target
// itself (a plain step, the first token, a correction at a rejection, the bonus after a fully
// accepted draft). The server's chat page colours tokens by it.
enum class TokenSource : uint8_t { kTarget, kDraft, kLookup };

// One sequence's drafting request for a step.
struct DraftInput {
  int seq = 0;                 // the engine's sequence id
  int k = 0;                   // tokens wanted (0: none this step)
  int64_t first_position = 0;  // the target position of the first drafted token
  const SamplingParams* sampling = nullptr;
  uint64_t rng_sequence = 0;  // sequence component of RNG keys
  SpecSampling mode = SpecSampling::kRejection;
  // Structured output: the grammar at the sequence's committed state (null: none). Chain
  // drafters draw each token under its mask and advance it (DrawDraftToken does both); the step
  // restores it after Propose.
  DraftingConstraint* constraint = nullptr;
};

// What was drafted for one sequence: a chain of tokens or, with `parents`, a token tree (node i's
// parent node, -1 for the sequence's last committed token, parents before children; at most k
// nodes). When drawn for rejection sampling, `probs` holds the draft distributions q
// ([n_vocab] each): for a chain, the one each token was drawn from (k rows); for a tree, the one
// each row's children were drawn from, independently (k + 1 rows: the root, then each node);
// empty for greedy and coupled drafts.
struct Proposal {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;
  std::vector<std::vector<float>> probs;
  TokenSource source = TokenSource::kDraft;  // what its tokens are, once accepted

  bool is_tree() const { return !parents.empty(); }
};

// Wall time of the forwards a proposer ran during one call, for draft-length policies.
struct ProposerTimings {
  std::vector<std::pair<int, double>> forwards;  // (rows, ms) of each drafting forward
  int prefill_rows = 0;                          // prompt rows read (not in `forwards`)
  double prefill_ms = 0.0;
  bool caught_up = false;  // a sequence first read tokens skipped by steps without drafts
};

// Draws draft token i of `in` (at position in.first_position + i) from a logits row: argmax when
// greedy; coupled, the Gumbel-max under the target's own noise at that position; for rejection
// sampling, a draw from the processed distribution, which is appended to out->probs. Under a
// constraint the row is masked first and the constraint advanced by the token; kNoDraft when the
// grammar allows nothing the row gives a chance (an FR-Spec head without the token it needs):
// the chain ends there.
inline constexpr int32_t kNoDraft = -1;
int32_t DrawDraftToken(const DraftInput& in, int i, std::span<const float> row, Proposal* out);

// A node's children candidates for greedy and coupled token trees, best first, with their
// log-probabilities: greedy, the row's likeliest tokens; coupled, the draft's Gumbel-max
// choices under the target's noise at position in.first_position + i (the first is what a chain
// would draft). At most `width`.
std::vector<std::pair<int32_t, float>> RankedDraftTokens(const DraftInput& in, int i,
                                                         std::span<const float> row, int width);

// A flag's "A[,B]" (--draft-tree WIDTH[,DEPTH], --sdsat-tree NODES[,WIDTH]): A in 1..max_first,
// B in 1..max_second or 0 when absent; nullopt when malformed or out of range.
std::optional<std::pair<int, int>> ParseNumberPair(const std::string& text, int max_first,
                                                   int max_second);

// SDSAT's capability: tokens that ride on the target's verification forward right after a
// sequence's drafts, at the positions that follow them (its adaptive tokens). Their KV entries are
// dropped after the step whatever is accepted; their output rows come back through TakeRiderRows
// before Accept. Asked after Propose, only in steps that speculate.
class RiderRows {
 public:
  virtual ~RiderRows() = default;
  // At most `max_tokens` rider tokens for `seq` this step.
  virtual void RiderTokens(int seq, int max_tokens, std::vector<int32_t>* tokens) = 0;
  // The target's output rows for them, [n, n_vocab] (penalty-free logits).
  virtual void TakeRiderRows(int seq, std::span<const float> rows) = 0;
  // The most it asks for in a step (KV room beyond the longest draft).
  virtual int max_rider_tokens() const = 0;
};

// EAGLE's capability: drafting from the target's features. The engine hands it the final normed
// hidden state [n, n_embd] of the rows the target read for `seq` at positions first_position ..
// first_position + n - 1 (prompt rows, or the last token and this step's drafts), right after
// the target's forward, before Prefill / Accept; rows past what Accept then keeps read rejected
// drafts.
class TargetFeatureReader {
 public:
  virtual ~TargetFeatureReader() = default;
  virtual void TakeTargetFeatures(int seq, int64_t first_position, std::span<const float> rows) = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // A new sequence whose committed tokens are `prompt` (the last one is the next input).
  virtual void AddSequence(int seq, std::span<const int32_t> prompt) = 0;
  // `dst` starts as a copy of `src` (several completions of one prompt).
  virtual void ForkSequence(int src, int dst) = 0;
  virtual void RemoveSequence(int seq) = 0;
  // Reads the prompts of new sequences now, when the target reads them (otherwise the next
  // Propose does).
  virtual void Prefill(ProposerTimings* timings) { (void)timings; }
  // Rows a first drafting step for `seqs` would read before drafting (their unread prompts, a
  // shared prompt once, and what they wrote since), when it has drafted for none of them yet: a
  // fresh batch's start cost, which the draft-length policy weighs. 0 once any of them drafted.
  virtual int RowsBeforeFirstDraft(std::span<const int> seqs) const {
    (void)seqs;
    return 0;
  }
  // Drafts for each input (out[i] for inputs[i]).
  virtual void Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
                       ProposerTimings* timings) = 0;
  // The target kept `n_accepted` of the tokens last proposed for `seq` (0 if none were) and then
  // committed `next`.
  virtual void Accept(int seq, int n_accepted, int32_t next) = 0;
  // Tokens committed to `seq` that this proposer did not propose (another proposer drafted them
  // in a combination): it reads them as context.
  virtual void Append(int seq, std::span<const int32_t> tokens) = 0;
  // The same for a token tree: the target kept the nodes `path` (root to leaf). A proposer that
  // drafts only chains gets their count.
  virtual void AcceptPath(int seq, std::span<const int> path, int32_t next) {
    Accept(seq, static_cast<int>(path.size()), next);
  }
  // The capabilities one strategy needs, or null: SDSAT's rider rows, EAGLE's target features.
  virtual RiderRows* rider_rows() { return nullptr; }
  virtual TargetFeatureReader* feature_reader() { return nullptr; }
};

}  // namespace specd
