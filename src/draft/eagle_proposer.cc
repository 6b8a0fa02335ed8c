#include "draft/eagle_proposer.h"

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"

namespace specd {

EagleProposer::EagleProposer(const Model& target, Model& head, KvCache& kv,
                             const KernelContext& ctx, AttentionMode attention, int catch_up_limit)
    : target_(target),
      head_(head),
      kv_(kv),
      ctx_(ctx),
      attention_(attention),
      catch_up_limit_(catch_up_limit) {
  SPECD_CHECK(head.config().eagle, "EAGLE: ", head.config().name, " is not an EAGLE head");
  SPECD_CHECK(head.config().n_embd == target.config().n_embd &&
                  head.config().n_vocab == target.config().n_vocab,
              "EAGLE: the head (d=", head.config().n_embd, ", vocab ", head.config().n_vocab,
              ") does not fit the target (d=", target.config().n_embd, ", vocab ",
              target.config().n_vocab, ")");
  SPECD_CHECK(catch_up_limit >= 1, "EAGLE: the catch-up limit must be at least 1");
}

EagleProposer::~EagleProposer() {
  for (auto& [seq, s] : seqs_) kv_.Release(s.slot);
}

void EagleProposer::AddSequence(int seq, std::span<const int32_t> prompt) {
  SPECD_CHECK(!prompt.empty(), "EAGLE: empty prompt");
  SPECD_CHECK(!seqs_.count(seq), "EAGLE: sequence ", seq, " already exists");
  State s;
  s.slot = kv_.Acquire();
  s.tokens.assign(prompt.begin(), prompt.end());
  seqs_.emplace(seq, std::move(s));
}

void EagleProposer::ForkSequence(int src, int dst) {
  auto it = seqs_.find(src);
  SPECD_CHECK(it != seqs_.end(), "EAGLE: no sequence ", src, " to fork");
  SPECD_CHECK(!seqs_.count(dst), "EAGLE: sequence ", dst, " already exists");
  State s = it->second;
  s.slot = kv_.Acquire();
  kv_.Fork(it->second.slot, s.slot, kv_.Length(it->second.slot));
  seqs_.emplace(dst, std::move(s));
}

void EagleProposer::RemoveSequence(int seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  kv_.Release(it->second.slot);
  seqs_.erase(it);
}

void EagleProposer::TakeTargetFeatures(int seq, int64_t first_position,
                                       std::span<const float> rows) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  State& s = it->second;
  const int64_t d = target_.config().n_embd;
  const int64_t n = static_cast<int64_t>(rows.size()) / d;
  const int64_t have = static_cast<int64_t>(s.features.size()) / d;
  if (first_position > s.fed + have) {
    // A gap (rows the target read without handing them out, e.g. a token tree's path): the head
    // restarts its context here.
    kv_.Truncate(s.slot, 0);
    s.fed = first_position;
    s.features.clear();
  }
  const int64_t skip = std::max<int64_t>(0, s.fed - first_position);  // rows already read
  if (skip >= n) return;
  // Rows from first_position on replace what is stored there (rejected drafts' features).
  s.features.resize((first_position + skip - s.fed) * d);
  s.features.insert(s.features.end(), rows.begin() + skip * d, rows.end());
  CatchUp(s);  // bounded even when no step drafts for a long time
}

int64_t EagleProposer::PendingRows(const State& s) const {
  const int64_t have = static_cast<int64_t>(s.features.size()) / target_.config().n_embd;
  // Row j needs tokens[j + 1]: committed positions end at tokens.size() - 1.
  const int64_t readable = static_cast<int64_t>(s.tokens.size()) - 1 - s.fed;
  return std::max<int64_t>(0, std::min(have, readable));
}

void EagleProposer::CatchUp(State& s) {
  const int64_t pending = PendingRows(s);
  if (pending <= catch_up_limit_) return;
  const int64_t drop = pending - catch_up_limit_;
  const int64_t d = target_.config().n_embd;
  kv_.Truncate(s.slot, 0);
  s.fed += drop;
  s.features.erase(s.features.begin(), s.features.begin() + drop * d);
}

void EagleInputRows(const KernelContext& ctx, const Model& target, const Model& head,
                    std::span<const int32_t> tokens, const float* features,
                    std::vector<float>* concat, std::vector<float>* out, MatmulScratch* scratch) {
  const int64_t m = static_cast<int64_t>(tokens.size());
  const int64_t d = target.config().n_embd;
  concat->resize(m * 2 * d);  // [m, 2 n_embd]: [E(token); feature] per row
  out->resize(m * d);         // [m, n_embd]
  for (int64_t r = 0; r < m; ++r) {
    target.EmbedTokens(tokens.subspan(r, 1), concat->data() + r * 2 * d);
    std::copy_n(features + r * d, d, concat->data() + r * 2 * d + d);
  }
  Matmul(ctx, concat->data(), m, *head.eagle_fc(), out->data(), scratch);
}

void EagleProposer::HeadForward(const Batch& batch, const float* features,
                                std::vector<std::pair<int, double>>* forwards) {
  Timer timer;
  EagleInputRows(ctx_, target_, head_, batch.tokens, features, &concat_, &input_, &matmul_scratch_);
  ForwardExtras extras;
  extras.input_rows = input_.data();
  extras.hidden = &hidden_;
  head_.Forward(ctx_, batch, kv_, attention_, &logits_, extras);
  if (forwards != nullptr) {
    forwards->emplace_back(static_cast<int>(batch.size()), timer.ElapsedMs());
  }
}

void EagleProposer::Prefill(ProposerTimings* timings) {
  // Reads every sequence's pending rows but the last, which the next Propose reads to draft.
  Batch batch;
  std::vector<float> features;  // [rows, n_embd]
  const int64_t d = target_.config().n_embd;
  std::vector<std::pair<State*, int64_t>> fed;
  for (auto& [seq, s] : seqs_) {
    CatchUp(s);
    const int64_t n = PendingRows(s) - 1;
    if (n <= 0) continue;
    const int base = kv_.Length(s.slot);  // positions follow the head's cache (as a draft's)
    for (int64_t r = 0; r < n; ++r) {
      batch.Add(s.tokens[s.fed + r + 1], base + static_cast<int32_t>(r), s.slot, false);
    }
    features.insert(features.end(), s.features.begin(), s.features.begin() + n * d);
    fed.emplace_back(&s, n);
  }
  if (batch.size() == 0) return;
  Timer timer;
  HeadForward(batch, features.data(), nullptr);
  for (auto& [s, n] : fed) {
    s->fed += n;
    s->features.erase(s->features.begin(), s->features.begin() + n * d);
  }
  if (timings != nullptr) {
    timings->prefill_rows += static_cast<int>(batch.size());
    timings->prefill_ms += timer.ElapsedMs();
  }
}

void EagleProposer::Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
                            ProposerTimings* timings) {
  out->assign(inputs.size(), Proposal{});
  const int64_t d = target_.config().n_embd;
  const int64_t n_vocab = head_.config().n_vocab;
  std::vector<int> ks(inputs.size(), 0);  // drafts wanted, 0 where the head has no row to read
  std::vector<float> features;            // [rows, n_embd]
  std::vector<int64_t> out_of;            // input index of each output row
  Batch batch;
  for (size_t j = 0; j < inputs.size(); ++j) {
    State& s = seqs_.at(inputs[j].seq);
    s.drafted.clear();
    if (inputs[j].k <= 0) continue;
    CatchUp(s);
    const int64_t n = PendingRows(s);
    if (n == 0) continue;  // no feature yet (the target has not read this sequence)
    if (timings != nullptr && n > 2) timings->caught_up = true;
    ks[j] = inputs[j].k;
    const int base = kv_.Length(s.slot);
    for (int64_t r = 0; r < n; ++r) {
      batch.Add(s.tokens[s.fed + r + 1], base + static_cast<int32_t>(r), s.slot, r + 1 == n);
    }
    features.insert(features.end(), s.features.begin(), s.features.begin() + n * d);
    // These rows read true features: they stay in the cache whatever is accepted.
    s.fed += n;
    s.features.clear();
    s.kv_kept = kv_.Length(s.slot) + static_cast<int>(n);
    out_of.push_back(static_cast<int64_t>(j));
  }
  const int k_max = ks.empty() ? 0 : *std::max_element(ks.begin(), ks.end());
  std::vector<float> predicted;  // [outputs, n_embd] each drafting row's predicted feature
  for (int i = 0; i < k_max && batch.size() > 0; ++i) {
    HeadForward(batch, features.data(), timings != nullptr ? &timings->forwards : nullptr);
    // The last row of each sequence (its output row) gives the next draft and its feature.
    predicted.clear();
    for (int64_t r = 0, o = 0; r < batch.size(); ++r) {
      if (!batch.output[r]) continue;
      const int64_t j = out_of[o];
      const DraftInput& in = inputs[j];
      State& s = seqs_.at(in.seq);
      const std::span<const float> row(logits_.data() + o * n_vocab, n_vocab);
      const int32_t token = DrawDraftToken(in, i, row, &(*out)[j]);
      if (token == kNoDraft) {
        ks[j] = static_cast<int>(s.drafted.size());  // the grammar ends this chain here
      } else {
        s.drafted.push_back(token);
      }
      predicted.insert(predicted.end(), hidden_.begin() + r * d, hidden_.begin() + (r + 1) * d);
      ++o;
    }
    // The next forward: one row per sequence still drafting, its draft with its predicted
    // feature, at the position after the last row read.
    Batch next;
    std::vector<int64_t> next_out_of;
    features.clear();
    for (size_t o = 0; o < out_of.size(); ++o) {
      const int64_t j = out_of[o];
      State& s = seqs_.at(inputs[j].seq);
      if (static_cast<int>(s.drafted.size()) >= ks[j]) continue;
      next.Add(s.drafted.back(), kv_.Length(s.slot), s.slot, true);
      features.insert(features.end(), predicted.begin() + o * d, predicted.begin() + (o + 1) * d);
      next_out_of.push_back(j);
    }
    batch = std::move(next);
    out_of = std::move(next_out_of);
  }
  for (size_t j = 0; j < inputs.size(); ++j) (*out)[j].tokens = seqs_.at(inputs[j].seq).drafted;
}

void EagleProposer::Accept(int seq, int n_accepted, int32_t next) {
  State& s = seqs_.at(seq);
  if (!s.drafted.empty()) {
    // Rows that read predicted features go; the accepted drafts are re-read with true ones.
    kv_.Truncate(s.slot, s.kv_kept);
    s.tokens.insert(s.tokens.end(), s.drafted.begin(), s.drafted.begin() + n_accepted);
    s.drafted.clear();
  }
  s.tokens.push_back(next);
}

void EagleProposer::Append(int seq, std::span<const int32_t> tokens) {
  State& s = seqs_.at(seq);
  SPECD_CHECK(s.drafted.empty(), "EAGLE: tokens appended while drafts await verification");
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
}

std::unique_ptr<Proposer> MakeModelProposer(const Model& target, Model& draft, KvCache& draft_kv,
                                            const KernelContext& ctx, AttentionMode attention,
                                            const DraftModelOptions& options) {
  if (!draft.config().eagle) {
    return std::make_unique<DraftModelProposer>(draft, draft_kv, ctx, attention, options);
  }
  SPECD_CHECK(options.fuzzy.empty() && options.tree_width <= 1,
              "{draft_lp}, {draft_lp_groups} and {draft_tree} need a draft model; ",
              draft.config().name, " is an EAGLE head (one layer, chains only)");
  return std::make_unique<EagleProposer>(target, draft, draft_kv, ctx, attention);
}

}  // namespace specd
