#include "draft/draft_model_proposer.h"

#include <algorithm>
#include <functional>
#include <set>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "base/timer.h"
#include "verify/verify.h"

namespace specd {

DraftModelProposer::DraftModelProposer(Model& draft, KvCache& kv, const KernelContext& ctx,
                                       AttentionMode attention, DraftModelOptions options)
    : options_(std::move(options)), model_(draft), kv_(kv), ctx_(ctx), attention_(attention) {
  SPECD_CHECK(options_.catch_up_limit >= 1, "draft: the catch-up limit must be at least 1");
  SPECD_CHECK(options_.prompt_limit >= 1, "draft: the prompt limit must be at least 1");
  SPECD_CHECK(options_.tree_width >= 0 && options_.tree_depth >= 0,
              "draft: tree width and depth must not be negative");
  options_.fuzzy.Validate(draft.config().n_layer);
}

DraftModelProposer::~DraftModelProposer() {
  for (auto& [seq, s] : seqs_) kv_.Release(s.slot);
}

void DraftModelProposer::AddSequence(int seq, std::span<const int32_t> prompt) {
  SPECD_CHECK(!prompt.empty(), "draft: empty prompt");
  SPECD_CHECK(!seqs_.count(seq), "draft: sequence ", seq, " already exists");
  State s;
  s.slot = kv_.Acquire();
  const size_t n_read = std::min<size_t>(prompt.size(), options_.prompt_limit);
  s.prefill.assign(prompt.end() - n_read, prompt.end() - 1);
  s.pending = {prompt.back()};
  s.prompt_group = seq;
  seqs_.emplace(seq, std::move(s));
}

void DraftModelProposer::ForkSequence(int src, int dst) {
  auto it = seqs_.find(src);
  SPECD_CHECK(it != seqs_.end(), "draft: no sequence ", src, " to fork");
  SPECD_CHECK(!seqs_.count(dst), "draft: sequence ", dst, " already exists");
  // An unread prompt stays unread (the copies share its group): the b completions of a request
  // where plain steps win must not pay the draft's reading of it (HumanEval at b = 4: ~100 ms a
  // request, a tenth of its time).
  const State& from = it->second;
  State s = from;
  s.slot = kv_.Acquire();
  kv_.Fork(from.slot, s.slot, kv_.Length(from.slot));
  seqs_.emplace(dst, std::move(s));
}

int DraftModelProposer::RowsBeforeFirstDraft(std::span<const int> seqs) const {
  int rows = 0;
  std::set<int> groups;  // prompts counted
  for (int seq : seqs) {
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) continue;
    const State& s = it->second;
    if (s.prefill.empty()) return 0;  // this one has drafted (or given its prompt up)
    const int pending = static_cast<int>(s.pending.size());
    if (pending > options_.catch_up_limit) {  // restarts from its last tokens (RunPrefill)
      rows += options_.catch_up_limit;
      continue;
    }
    if (groups.insert(s.prompt_group).second) rows += static_cast<int>(s.prefill.size());
    rows += pending;
  }
  return rows;
}

void DraftModelProposer::RemoveSequence(int seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  kv_.Release(it->second.slot);
  seqs_.erase(it);
}

void DraftModelProposer::RunPrefill(ProposerTimings* timings,
                                    const std::function<bool(int)>& wanted) {
  ProposerTimings untimed;
  if (timings == nullptr) timings = &untimed;
  Batch batch;
  std::map<int, State*> reader_of_group;
  std::vector<std::pair<State*, State*>> copies;  // (sequence, the reader of its prompt)
  for (auto& [seq, s] : seqs_) {
    if (s.prefill.empty() || !wanted(seq)) continue;
    // Plain steps left the prompt unread and wrote more than a catch-up reads: the draft will
    // restart from the last tokens (BeginStep), so the prompt is not worth reading.
    if (static_cast<int>(s.pending.size()) > options_.catch_up_limit) {
      s.prefill.clear();
      continue;
    }
    const auto [reader, first] = reader_of_group.try_emplace(s.prompt_group, &s);
    const State& r = *reader->second;
    if (!first && r.prefill == s.prefill && kv_.Length(r.slot) == kv_.Length(s.slot)) {
      copies.emplace_back(&s, reader->second);
      continue;
    }
    const int base = kv_.Length(s.slot);
    for (size_t i = 0; i < s.prefill.size(); ++i) {
      batch.Add(s.prefill[i], base + static_cast<int>(i), s.slot, false);
    }
  }
  if (batch.size() > 0) {
    Timer timer;
    model_.Forward(ctx_, batch, kv_, attention_, &logits_);
    timings->prefill_rows += static_cast<int>(batch.size());
    timings->prefill_ms += timer.ElapsedMs();
  }
  for (auto [s, reader] : copies) kv_.Fork(reader->slot, s->slot, kv_.Length(reader->slot));
  for (auto& [seq, s] : seqs_) {
    if (wanted(seq)) s.prefill.clear();
  }
}

int DraftModelProposer::BeginStep(std::span<const DraftInput> inputs, ProposerTimings* timings) {
  int k_max = 0;
  for (const DraftInput& in : inputs) {
    State& s = seqs_.at(in.seq);
    s.drafted.clear();
    s.parents.clear();
    s.pending_before = 0;
    if (in.k <= 0) continue;
    k_max = std::max(k_max, in.k);
    if (timings != nullptr && s.pending.size() > 2) timings->caught_up = true;
    if (static_cast<int>(s.pending.size()) > options_.catch_up_limit) {
      kv_.Truncate(s.slot, 0);
      s.pending.erase(s.pending.begin(), s.pending.end() - options_.catch_up_limit);
    }
    s.kv_before = kv_.Length(s.slot);
    s.pending_before = static_cast<int>(s.pending.size());
  }
  return k_max;
}

void DraftModelProposer::DraftForward(const Batch& batch, bool first, ProposerTimings* timings) {
  const bool fuzzy = !options_.fuzzy.empty() && !(first && options_.calibrate);
  Timer timer;
  model_.Forward(ctx_, batch, kv_, attention_, &logits_, fuzzy ? &options_.fuzzy : nullptr);
  if (timings != nullptr)
    timings->forwards.emplace_back(static_cast<int>(batch.size()), timer.ElapsedMs());
}

void DraftModelProposer::Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
                                 ProposerTimings* timings) {
  // The prompts of the sequences that draft now (others wait: while plain steps win at their
  // batch size, the same engine without speculation would not read them).
  RunPrefill(timings, [inputs](int seq) {
    return std::any_of(inputs.begin(), inputs.end(),
                       [seq](const DraftInput& in) { return in.seq == seq && in.k > 0; });
  });
  out->assign(inputs.size(), Proposal{});
  if (options_.tree_width > 1) return ProposeTrees(inputs, out, timings);
  const int64_t n_vocab = model_.config().n_vocab;
  const int k_max = BeginStep(inputs, timings);
  // Each sequence's chain length: in.k, or where its grammar allowed nothing the draft offers.
  std::vector<int> k_of(inputs.size());
  for (size_t j = 0; j < inputs.size(); ++j) k_of[j] = inputs[j].k;
  Batch batch;
  std::vector<size_t> rows_of;  // input index of each output row
  for (int i = 0; i < k_max; ++i) {
    batch.Clear();
    rows_of.clear();
    for (size_t j = 0; j < inputs.size(); ++j) {
      const DraftInput& in = inputs[j];
      if (i >= k_of[j]) continue;
      State& s = seqs_.at(in.seq);
      const int base = kv_.Length(s.slot);
      const std::vector<int32_t> feed = i == 0 ? s.pending : std::vector<int32_t>{s.drafted.back()};
      for (size_t t = 0; t < feed.size(); ++t) {
        batch.Add(feed[t], base + static_cast<int>(t), s.slot, t + 1 == feed.size());
      }
      rows_of.push_back(j);
    }
    DraftForward(batch, i == 0, timings);
    for (size_t r = 0; r < rows_of.size(); ++r) {
      const DraftInput& in = inputs[rows_of[r]];
      State& s = seqs_.at(in.seq);
      const std::span<const float> row(logits_.data() + r * n_vocab, n_vocab);
      const int32_t token = DrawDraftToken(in, i, row, &(*out)[rows_of[r]]);
      if (token != kNoDraft) {
        s.drafted.push_back(token);
        continue;
      }
      k_of[rows_of[r]] = i;
      // Without a draft the step is a plain one for this sequence: its pending inputs go back.
      if (i == 0) kv_.Truncate(s.slot, s.kv_before);
    }
  }
  for (size_t j = 0; j < inputs.size(); ++j) (*out)[j].tokens = seqs_.at(inputs[j].seq).drafted;
}

void DraftModelProposer::KeepDrafts(State& s, std::span<const int32_t> kept, int32_t next) {
  kv_.Truncate(s.slot, s.kv_before + s.pending_before);
  s.pending.assign(kept.begin(), kept.end());
  s.pending.push_back(next);
  s.drafted.clear();
  s.parents.clear();
}

void DraftModelProposer::Accept(int seq, int n_accepted, int32_t next) {
  State& s = seqs_.at(seq);
  const int k = static_cast<int>(s.drafted.size());
  if (k == 0) {
    s.pending.push_back(next);  // the draft did not run for this sequence this step
    return;
  }
  if (!options_.fuzzy.empty() && options_.calibrate) {
    // Bonus calibration: the drafts' fuzzy entries go; the next step re-reads the accepted
    // drafts and the bonus token exactly, in its first forward.
    return KeepDrafts(s, std::span(s.drafted).first(n_accepted), next);
  }
  // The cache now holds the step's pending inputs and d_1..d_{k-1}; keep the inputs and the
  // accepted drafts among those. After full acceptance d_k is still to be read.
  kv_.Truncate(s.slot, s.kv_before + s.pending_before + std::min(n_accepted, k - 1));
  s.pending.clear();
  if (n_accepted == k) s.pending.push_back(s.drafted.back());
  s.pending.push_back(next);
  s.drafted.clear();
}

void DraftModelProposer::AcceptPath(int seq, std::span<const int> path, int32_t next) {
  State& s = seqs_.at(seq);
  if (s.parents.empty()) return Accept(seq, static_cast<int>(path.size()), next);
  // A tree's nodes were read in tree order; the accepted path is re-read as a chain.
  std::vector<int32_t> kept;
  for (int node : path) kept.push_back(s.drafted.at(node));
  KeepDrafts(s, kept, next);
}

void DraftModelProposer::Append(int seq, std::span<const int32_t> tokens) {
  State& s = seqs_.at(seq);
  SPECD_CHECK(s.drafted.empty(), "draft: tokens appended while drafts await verification");
  s.pending.insert(s.pending.end(), tokens.begin(), tokens.end());
}

}  // namespace specd
