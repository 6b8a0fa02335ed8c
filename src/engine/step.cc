#include "engine/step.h"

#include <algorithm>
#include <deque>

#include "base/error.h"
#include "base/timer.h"
#include "engine/step_plan.h"
#include "verify/tree.h"

namespace specd {

void SpeculativeStats::Add(const SpeculativeStats& o) {
  n_drafted += o.n_drafted;
  n_accepted += o.n_accepted;
  n_steps += o.n_steps;
  n_plain_steps += o.n_plain_steps;
  n_verified += o.n_verified;
  n_drafts += o.n_drafts;
  if (accepted_at_position.size() < o.accepted_at_position.size()) {
    accepted_at_position.resize(o.accepted_at_position.size());
    drafted_at_position.resize(o.drafted_at_position.size());
  }
  for (size_t i = 0; i < o.accepted_at_position.size(); ++i) {
    accepted_at_position[i] += o.accepted_at_position[i];
    drafted_at_position[i] += o.drafted_at_position[i];
  }
  t_draft_ms += o.t_draft_ms;
  t_verify_ms += o.t_verify_ms;
  t_mask_ms += o.t_mask_ms;
}

StepDecoder::StepDecoder(Model& target, KvCache& kv, const KernelContext& ctx,
                         const StepOptions& options, Proposer* proposer, DraftLengthPolicy* policy)
    : target_(target), kv_(kv), ctx_(ctx), options_(options), proposer_(proposer), policy_(policy) {
  SPECD_CHECK((proposer == nullptr) == (policy == nullptr),
              "a proposer needs a draft-length policy and a policy a proposer");
}

namespace {
// The sampling a sequence's tokens are drawn with: coupled speculation draws every token, drafted
// or not, by Gumbel-max, so its output is plain Gumbel sampling's.
SamplingParams EffectiveSampling(const Sequence& s, SpecSampling mode) {
  SamplingParams p = s.request.sampling;
  if (mode == SpecSampling::kCoupled) p.method = SamplingMethod::kGumbel;
  return p;
}
}  // namespace

bool StepDecoder::Commit(Sequence& s, int32_t token, TokenSource source, std::span<const float> row,
                         double now, StepReport* report) {
  if (s.request.sum_logprob) {
    s.sum_logprob += LogProb(row, token);
    ++s.n_logprob;
  }
  s.elapsed_ms = now - s.t_added_ms;
  // Every committed token was drawn from a masked row, so the grammar takes it.
  if (s.constraint != nullptr) {
    const bool taken = s.constraint->Advance(token);
    SPECD_CHECK(taken, "token ", token, " was committed against the request's grammar");
  }
  // A complete grammar that took its stop token ends the output, even with ignore_eos.
  const bool grammar_done = s.constraint != nullptr && s.constraint->terminated();
  const auto& stops = s.request.stop_tokens;
  const bool stop = target_.config().IsEndOfGeneration(token) ||
                    std::find(stops.begin(), stops.end(), token) != stops.end();
  if ((s.request.stop_at_eos && stop) || grammar_done) {
    s.finish_reason = "stop";
    lengths_.Finished(static_cast<int>(s.tokens.size()));
    return true;
  }
  s.tokens.push_back(token);
  if (s.request.logprobs >= 0) {
    s.token_logprobs.push_back(
        {static_cast<float>(LogProb(row, token)), TopLogProbs(row, s.request.logprobs)});
  }
  report->tokens.emplace_back(s.id, token);
  report->sources.push_back(source);
  if (static_cast<int>(s.tokens.size()) >= s.request.n_predict) {
    s.finish_reason = "length";
    lengths_.Finished(static_cast<int>(s.tokens.size()));
    return true;
  }
  return false;
}

void StepDecoder::FirstToken(Sequence& s, std::span<const float> row, double now,
                             StepReport* report) {
  const SamplingParams sampling = EffectiveSampling(s, options_.spec_sampling);
  const RngKey key{sampling.seed, s.request.rng_sequence, s.request.prompt.size(),
                   RngPurpose::kSample};
  const int32_t token = SampleToken(row, sampling, key);
  s.last = token;
  if (Commit(s, token, TokenSource::kTarget, row, now, report)) return;
  if (proposer_ != nullptr) proposer_->Accept(s.id, 0, token);
}

void StepDecoder::PenalizeRow(const Sequence& s, std::span<const int32_t> extra, float* row) {
  const SamplingParams& p = s.request.sampling;
  if (p.repeat_penalty == 1.0f || p.repeat_last_n == 0) return;
  // The last repeat_last_n tokens of prompt + generated + extra.
  const size_t total = s.request.prompt.size() + s.tokens.size() + extra.size();
  const size_t window = p.repeat_last_n < 0 ? total : std::min<size_t>(total, p.repeat_last_n);
  history_.clear();
  size_t skip = total - window;
  for (auto part :
       {std::span<const int32_t>(s.request.prompt), std::span<const int32_t>(s.tokens), extra}) {
    const size_t drop = std::min(skip, part.size());
    history_.insert(history_.end(), part.begin() + drop, part.end());
    skip -= drop;
  }
  PenalizeRepeats(std::span<float>(row, target_.config().n_vocab), history_, p.repeat_penalty);
}

void StepDecoder::CountDrafts(int position, bool accepted) {
  if (stats_.drafted_at_position.size() <= static_cast<size_t>(position)) {
    stats_.drafted_at_position.resize(position + 1);
    stats_.accepted_at_position.resize(position + 1);
  }
  ++stats_.drafted_at_position[position];
  if (accepted) ++stats_.accepted_at_position[position];
}

int StepDecoder::VerifyTree(Sequence& s, const Proposal& proposal, const float* rows, int base,
                            double now, StepReport* report) {
  const int64_t n_vocab = target_.config().n_vocab;
  const TokenTree tree{proposal.tokens, proposal.parents};
  tree.Validate();
  const int k = tree.size();
  const SamplingParams sampling = EffectiveSampling(s, options_.spec_sampling);
  // Row 0 is the root (the last committed token), row 1 + i node i.
  auto row = [&](int r) { return std::span<const float>(rows + r * n_vocab, n_vocab); };
  TreeOutcome outcome;
  if (sampling.greedy() || options_.spec_sampling == SpecSampling::kCoupled) {
    std::vector<int32_t> choices(k + 1);
    for (int r = 0; r <= k; ++r) {
      const int depth = r == 0 ? 0 : tree.Depth(r - 1);
      const RngKey key{sampling.seed, s.request.rng_sequence,
                       static_cast<uint64_t>(base + 1 + depth), RngPurpose::kSample};
      choices[r] = SampleToken(row(r), sampling, key);
    }
    outcome = VerifyTreeByMatch(tree, choices);
  } else {
    SPECD_CHECK(proposal.probs.size() == static_cast<size_t>(k) + 1,
                "a sampled token tree needs the draft distribution of every row");
    target_probs_.resize(k + 1);
    for (int r = 0; r <= k; ++r) target_probs_[r] = ProcessedProbs(row(r), sampling);
    const RngKey key{sampling.seed, s.request.rng_sequence, static_cast<uint64_t>(base + 1),
                     RngPurpose::kAccept};
    outcome = VerifyTreeSampled(tree, std::span(target_probs_.data(), k + 1), proposal.probs, key);
  }
  int max_depth = 0;
  for (int i = 0; i < k; ++i) max_depth = std::max(max_depth, tree.Depth(i));
  for (int d = 0; d < max_depth; ++d) CountDrafts(d, d < static_cast<int>(outcome.path.size()));
  const int accepted = static_cast<int>(outcome.path.size());
  stats_.n_drafted += k;
  stats_.n_accepted += accepted;
  s.n_drafted += k;
  s.n_accepted += accepted;
  // Each kept token was chosen at its parent's row; `next` at the last kept node's.
  int at = 0;
  for (int node : outcome.path) {
    if (Commit(s, tree.tokens[node], proposal.source, row(at), now, report)) return accepted;
    at = 1 + node;
  }
  if (Commit(s, outcome.next, TokenSource::kTarget, row(at), now, report)) return accepted;
  std::vector<int> keep = {base};
  for (int node : outcome.path) keep.push_back(base + 1 + node);
  kv_.KeepPath(s.slot, base, keep);
  if (proposer_ != nullptr) proposer_->AcceptPath(s.id, outcome.path, outcome.next);
  s.last = outcome.next;
  return accepted;
}

int StepDecoder::Verify(Sequence& s, const Proposal& proposal, const float* rows, int base,
                        double now, StepReport* report) {
  if (proposal.is_tree()) return VerifyTree(s, proposal, rows, base, now, report);
  const int64_t n_vocab = target_.config().n_vocab;
  const int k = static_cast<int>(proposal.tokens.size());
  const SamplingParams sampling = EffectiveSampling(s, options_.spec_sampling);
  auto row = [&](int i) { return std::span<const float>(rows + i * n_vocab, n_vocab); };
  int accepted = 0;
  int32_t next = -1;
  bool done = false;
  const bool by_rejection =
      !sampling.greedy() && options_.spec_sampling == SpecSampling::kRejection && k > 0;
  if (!by_rejection) {
    // Greedy, coupled, or a step without drafts: the target's own choice at each position
    // (argmax, or its Gumbel-max / inverse-CDF sample keyed by the position), drafts kept while
    // they equal it.
    for (int i = 0; i <= k; ++i) {
      const RngKey key{sampling.seed, s.request.rng_sequence, static_cast<uint64_t>(base + 1 + i),
                       RngPurpose::kSample};
      const int32_t want = SampleToken(row(i), sampling, key);
      const bool match = i < k && proposal.tokens[i] == want;
      if (i < k) CountDrafts(i, match);
      const TokenSource source = match ? proposal.source : TokenSource::kTarget;
      if (Commit(s, want, source, row(i), now, report)) {
        done = true;
        break;
      }
      if (!match) {
        next = want;
        break;
      }
      ++accepted;
    }
  } else {
    target_probs_.resize(k + 1);
    for (int i = 0; i <= k; ++i) target_probs_[i] = ProcessedProbs(row(i), sampling);
    const RngKey key{sampling.seed, s.request.rng_sequence, static_cast<uint64_t>(base + 1),
                     RngPurpose::kAccept};
    const VerifyOutcome outcome = options_.verify(std::span(target_probs_.data(), k + 1),
                                                  proposal.probs, proposal.tokens, key);
    for (int i = 0; i < k; ++i) CountDrafts(i, i < outcome.n_accepted);
    for (int i = 0; i <= outcome.n_accepted && !done; ++i) {
      const bool drafted = i < outcome.n_accepted;
      const int32_t token = drafted ? proposal.tokens[i] : outcome.next;
      done =
          Commit(s, token, drafted ? proposal.source : TokenSource::kTarget, row(i), now, report);
    }
    accepted = outcome.n_accepted;
    next = outcome.next;
  }
  stats_.n_drafted += k;
  stats_.n_accepted += accepted;
  s.n_drafted += k;
  s.n_accepted += accepted;
  if (done) return accepted;
  // Keep last + the accepted drafts; `next` (correction or bonus) is the next input.
  kv_.Truncate(s.slot, base + 1 + accepted);
  if (proposer_ != nullptr) proposer_->Accept(s.id, accepted, next);
  s.last = next;
  return accepted;
}

void StepDecoder::PlanSequences(const std::vector<Sequence*>& live, Plan* plan) const {
  int budget = options_.max_prefill_rows;
  for (Sequence* s : live) {
    if (s->finished()) continue;
    if (s->shared_with >= 0) {
      plan->followers.push_back(s);
    } else if (s->prefilling()) {
      if (budget <= 0) continue;
      const int size = static_cast<int>(s->request.prompt.size());
      const int end = std::min(size, s->n_read + budget);
      budget -= end - s->n_read;
      plan->prefill.push_back({s, s->n_read, end});
    } else {
      plan->decode.push_back(s);
    }
  }
}

void StepDecoder::Propose(Plan* plan) {
  const auto& decode = plan->decode;
  plan->proposals.assign(decode.size(), {});
  if (policy_ == nullptr || decode.empty()) return;
  // The longest expected remainder (max_tokens is an upper bound only: completions usually end
  // on a stop), and what a first drafting step would read first.
  int remaining = 0;
  std::vector<int> ids;
  for (Sequence* s : decode) {
    const int n = static_cast<int>(s->tokens.size());
    remaining = std::max(remaining, lengths_.ExpectedRemaining(n, s->request.n_predict));
    ids.push_back(s->id);
  }
  policy_->SetStartRows(proposer_->RowsBeforeFirstDraft(ids));
  plan->k = policy_->Next(static_cast<int>(decode.size()), remaining);
  if (plan->k <= 0) return;
  Timer draft_timer;
  std::vector<SamplingParams> sampling(decode.size());  // outlives the Propose call
  std::vector<DraftInput> inputs(decode.size());
  // Grammars the proposer advances along its drafts; each goes back to the committed state when
  // this function returns.
  std::deque<DraftingConstraint> drafting;
  for (size_t j = 0; j < decode.size(); ++j) {
    Sequence& s = *decode[j];
    sampling[j] = EffectiveSampling(s, options_.spec_sampling);
    const int left = s.request.n_predict - static_cast<int>(s.tokens.size());
    inputs[j] = {s.id,
                 std::min(plan->k, std::max(left - 1, 0)),
                 kv_.Length(s.slot) + 1,
                 &sampling[j],
                 s.request.rng_sequence,
                 options_.spec_sampling};
    if (s.constraint != nullptr) inputs[j].constraint = &drafting.emplace_back(s.constraint.get());
  }
  proposer_->Propose(inputs, &plan->proposals, &plan->timings);
  plan->t_draft_ms = draft_timer.ElapsedMs();
  for (const DraftingConstraint& d : drafting) stats_.t_mask_ms += d.mask_ms();
}

// Adds decoding sequence j's rows: its last token, its chain of drafts and the proposer's rider
// rows after them, or its token tree.
void StepDecoder::AddDecodeRows(size_t j, Plan* plan) {
  Sequence& s = *plan->decode[j];
  const Proposal& prop = plan->proposals[j];
  Plan::Rows& r = plan->rows[j];
  Batch& batch = plan->batch;
  r.base = kv_.Length(s.slot);
  r.batch_row = static_cast<int64_t>(batch.size());
  r.n_drafts = static_cast<int>(prop.tokens.size());
  const int root_row = static_cast<int>(batch.size());
  batch.Add(s.last, r.base, s.slot, true);
  if (prop.is_tree()) {
    const TokenTree tree{prop.tokens, prop.parents};
    tree.Validate();
    for (int i = 0; i < tree.size(); ++i) {
      const int parent = tree.parents[i];
      batch.AddNode(tree.tokens[i], r.base + tree.Depth(i), s.slot, true,
                    parent < 0 ? root_row : root_row + 1 + parent);
    }
    return;
  }
  for (int i = 0; i < r.n_drafts; ++i) batch.Add(prop.tokens[i], r.base + 1 + i, s.slot, true);
  if (plan->k <= 0) return;
  std::vector<int32_t>& riders = plan->riders[j];
  const int room = std::max(kv_.n_ctx() - (r.base + 1 + r.n_drafts), 0);
  riders.clear();
  if (RiderRows* rider_rows = proposer_->rider_rows()) rider_rows->RiderTokens(s.id, room, &riders);
  SPECD_CHECK(static_cast<int>(riders.size()) <= room,
              "a proposer asked for more rider rows than the KV slot has room for");
  r.n_riders = static_cast<int>(riders.size());
  for (int i = 0; i < r.n_riders; ++i) {
    batch.Add(riders[i], r.base + 1 + r.n_drafts + i, s.slot, true);
  }
}

// The batch: prompt chunks first (only a prompt's last row has an output), then each decoding
// sequence's rows (all with outputs).
void StepDecoder::PlanRows(Plan* plan) {
  int64_t out_row = 0;
  for (const Plan::Chunk& c : plan->prefill) {
    const int size = static_cast<int>(c.s->request.prompt.size());
    for (int i = c.begin; i < c.end; ++i) {
      plan->batch.Add(c.s->request.prompt[i], i, c.s->slot, i + 1 == size);
    }
    out_row += c.end == size ? 1 : 0;
  }
  plan->riders.assign(plan->decode.size(), {});
  plan->rows.assign(plan->decode.size(), {});
  for (size_t j = 0; j < plan->decode.size(); ++j) {
    AddDecodeRows(j, plan);
    plan->rows[j].out_row = out_row;
    out_row += 1 + plan->rows[j].n_drafts + plan->rows[j].n_riders;
  }
}

// One target forward over every row; the features go to a proposer that reads them.
void StepDecoder::Score(Plan* plan) {
  Timer target_timer;
  ForwardExtras extras;
  TargetFeatureReader* features = proposer_ != nullptr ? proposer_->feature_reader() : nullptr;
  if (features != nullptr) extras.hidden = &hidden_;
  target_.Forward(ctx_, plan->batch, kv_, options_.attention, &logits_, extras);
  plan->t_target_ms = target_timer.ElapsedMs();
  if (features != nullptr) {
    const int64_t d = target_.config().n_embd;
    int64_t row = 0;
    for (const Plan::Chunk& c : plan->prefill) {
      const int64_t n = c.end - c.begin;
      features->TakeTargetFeatures(c.s->id, c.begin, {hidden_.data() + row * d, size_t(n * d)});
      row += n;
    }
    // A tree's nodes are not a chain: only its root row (the last token) is handed out.
    for (size_t j = 0; j < plan->decode.size(); ++j) {
      const Plan::Rows& r = plan->rows[j];
      const int64_t n = plan->proposals[j].is_tree() ? 1 : 1 + r.n_drafts;
      features->TakeTargetFeatures(plan->decode[j]->id, r.base,
                                   {hidden_.data() + r.batch_row * d, size_t(n * d)});
    }
  }
  if (!plan->prefill.empty() && proposer_ != nullptr) proposer_->Prefill(&plan->timings);
}

// The repetition penalty, row by row with each row's own history, so that every token below
// (plain or verified) is drawn from the penalized distribution.
void StepDecoder::PenalizeRows(const Plan& plan) {
  const int64_t n_vocab = target_.config().n_vocab;
  int64_t row = 0;
  for (const Plan::Chunk& c : plan.prefill) {
    if (c.end < static_cast<int>(c.s->request.prompt.size())) continue;
    PenalizeRow(*c.s, {}, logits_.data() + row++ * n_vocab);
  }
  std::vector<int32_t> path;
  for (size_t j = 0; j < plan.decode.size(); ++j) {
    const Proposal& prop = plan.proposals[j];
    const int64_t first = plan.rows[j].out_row;
    for (int r = 0; r <= plan.rows[j].n_drafts; ++r) {
      path.clear();
      if (!prop.is_tree()) {
        path.assign(prop.tokens.begin(), prop.tokens.begin() + r);
      } else if (r > 0) {
        for (int node = r - 1; node >= 0; node = prop.parents[node])
          path.push_back(prop.tokens[node]);
        std::reverse(path.begin(), path.end());
      }
      PenalizeRow(*plan.decode[j], path, logits_.data() + (first + r) * n_vocab);
    }
  }
}

// Sequences whose prompt is now read get their first token; completions of the same prompt
// fork its KV (and the proposer's) first.
void StepDecoder::CommitPrefills(const Plan& plan, double now, StepReport* report) {
  const int64_t n_vocab = target_.config().n_vocab;
  int64_t out_row = 0;
  for (const Plan::Chunk& c : plan.prefill) {
    Sequence& s = *c.s;
    s.n_read = c.end;
    if (s.prefilling()) continue;
    const std::span<const float> row(logits_.data() + out_row++ * n_vocab, n_vocab);
    if (s.request.n_predict == 0) {  // a warm-up of the prompt cache: read, nothing generated
      s.finish_reason = "length";
      s.elapsed_ms = now - s.t_added_ms;
      report->finished.push_back(s.id);
      continue;
    }
    std::vector<Sequence*> forked;
    for (Sequence* f : plan.followers) {
      if (f->shared_with != s.id) continue;
      kv_.Fork(s.slot, f->slot, s.n_read);
      f->n_read = s.n_read;
      f->shared_with = -1;
      if (proposer_ != nullptr) proposer_->ForkSequence(s.id, f->id);
      forked.push_back(f);
    }
    FirstToken(s, row, now, report);
    if (s.finished()) report->finished.push_back(s.id);
    for (Sequence* f : forked) {
      FirstToken(*f, row, now, report);
      if (f->finished()) report->finished.push_back(f->id);
    }
  }
}

// Verifies every decoding sequence's drafts and commits what it keeps; (drafted, accepted) of
// each go to `verified`.
void StepDecoder::VerifyDecodes(const Plan& plan, double now, StepReport* report,
                                std::vector<std::pair<int, int>>* verified) {
  const int64_t n_vocab = target_.config().n_vocab;
  for (size_t j = 0; j < plan.decode.size(); ++j) {
    Sequence& s = *plan.decode[j];
    const Plan::Rows& r = plan.rows[j];
    if (r.n_riders > 0) {
      proposer_->rider_rows()->TakeRiderRows(
          s.id, {logits_.data() + (r.out_row + r.n_drafts + 1) * n_vocab,
                 static_cast<size_t>(r.n_riders * n_vocab)});
    }
    // Rider KV entries go with Verify's truncation.
    const int accepted =
        Verify(s, plan.proposals[j], logits_.data() + r.out_row * n_vocab, r.base, now, report);
    verified->emplace_back(r.n_drafts, accepted);
    if (r.n_drafts > 0) ++stats_.n_drafts;
    if (s.finished()) report->finished.push_back(s.id);
  }
}

// The step's counters, and what the draft-length policy learns from it.
void StepDecoder::Observe(const Plan& plan, const StepReport& report, double t_verify_ms,
                          double step_ms, std::vector<std::pair<int, int>> verified) {
  if (!plan.decode.empty()) {
    ++stats_.n_steps;
    stats_.n_verified += static_cast<int64_t>(plan.decode.size());
    if (plan.k == 0) ++stats_.n_plain_steps;
    stats_.t_draft_ms += plan.t_draft_ms;
    stats_.t_verify_ms += t_verify_ms;
  }
  if (policy_ == nullptr) return;
  StepObservation o;
  o.n_sequences = static_cast<int>(plan.decode.size());
  o.k = plan.k;
  o.verified = std::move(verified);
  o.draft_forwards = plan.timings.forwards;
  o.target_rows = static_cast<int>(plan.batch.size());
  o.target_ms = plan.t_target_ms;
  for (const Plan::Chunk& c : plan.prefill) o.prefill_target_rows += c.end - c.begin;
  o.prefill_draft_rows = plan.timings.prefill_rows;
  o.prefill_draft_ms = plan.timings.prefill_ms;
  o.step_ms = step_ms;
  o.forward_ms = plan.t_target_ms + plan.timings.prefill_ms;
  for (const auto& [rows, ms] : plan.timings.forwards) o.forward_ms += ms;
  o.tokens = static_cast<int>(report.tokens.size());
  o.catch_up = plan.timings.caught_up;
  policy_->Observe(o);
}

StepReport StepDecoder::Step(const std::vector<Sequence*>& live,
                             const std::function<double()>& now_ms) {
  Timer step_timer;
  StepReport report;
  Plan plan;
  PlanSequences(live, &plan);
  if (plan.prefill.empty() && plan.decode.empty()) return report;
  Propose(&plan);
  Timer cut_timer;
  CutDisallowedDrafts(&plan);
  stats_.t_mask_ms += cut_timer.ElapsedMs();
  PlanRows(&plan);
  Timer verify_timer;
  Score(&plan);
  PenalizeRows(plan);
  Timer mask_timer;
  MaskRows(plan);
  stats_.t_mask_ms += mask_timer.ElapsedMs();
  const double now = now_ms();
  CommitPrefills(plan, now, &report);
  std::vector<std::pair<int, int>> verified;
  VerifyDecodes(plan, now, &report, &verified);
  Observe(plan, report, verify_timer.ElapsedMs(), step_timer.ElapsedMs(), std::move(verified));
  return report;
}

}  // namespace specd
