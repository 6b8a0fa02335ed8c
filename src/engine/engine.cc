#include "engine/engine.h"

#include <algorithm>

#include "base/error.h"
#include "model/kv_shift.h"

namespace specd {

Engine::Engine(Model& target, KvCache& kv, const KernelContext& ctx, const StepOptions& options,
               Proposer* proposer, DraftLengthPolicy* policy)
    : target_(target),
      kv_(kv),
      proposer_(proposer),
      policy_(policy),
      decoder_(target, kv, ctx, options, proposer, policy) {}

Engine::~Engine() {
  for (auto& [id, s] : sequences_) Release(s);
  for (const CachedPrefix& c : cached_) kv_.Release(c.slot);
}

int Engine::AcquireSlot() {
  int in_use = 0;
  for (int slot = 0; slot < kv_.n_slots(); ++slot) in_use += kv_.InUse(slot) ? 1 : 0;
  if (in_use == kv_.n_slots() && !cached_.empty()) {
    const auto oldest =
        std::min_element(cached_.begin(), cached_.end(),
                         [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
    kv_.Release(oldest->slot);
    cached_.erase(oldest);
  }
  return kv_.Acquire();
}

bool Engine::ReuseCachedPrefix(Sequence& s) {
  // EAGLE heads need the target's features of every prompt row, which reused rows do not give.
  if (proposer_ != nullptr && proposer_->feature_reader() != nullptr) return false;
  const std::vector<int32_t>& prompt = s.request.prompt;
  auto best = cached_.end();
  size_t best_length = 0;
  for (auto it = cached_.begin(); it != cached_.end(); ++it) {
    const size_t limit = std::min(it->tokens.size(), prompt.size() - 1);
    size_t n = 0;
    while (n < limit && it->tokens[n] == prompt[n]) ++n;
    if (n > best_length) best = it, best_length = n;
  }
  const bool reuse_chunks = s.request.cache_reuse_chunk > 0;
  if (best == cached_.end() && reuse_chunks && !cached_.empty()) {
    // Nothing shares the start (an editor's window moved down): the latest may hold chunks.
    best = std::max_element(cached_.begin(), cached_.end(),
                            [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
  }
  if (best == cached_.end()) return false;
  s.slot = best->slot;
  const int n_reused = reuse_chunks
                           ? ReuseMovedChunks(best->tokens, static_cast<int>(best_length), s)
                           : static_cast<int>(best_length);
  if (n_reused == 0) {  // nothing moved: the slot stays cached
    s.slot = -1;
    return false;
  }
  kv_.Truncate(s.slot, n_reused);
  s.n_read = s.n_cached = n_reused;
  cached_.erase(best);
  return true;
}

int Engine::ReuseMovedChunks(const std::vector<int32_t>& cached, int n_shared, const Sequence& s) {
  const std::vector<int32_t>& prompt = s.request.prompt;
  const int n_cached = static_cast<int>(cached.size());
  const int n_prompt = static_cast<int>(prompt.size()) - 1;  // the last is read for its logits
  int head_c = n_shared, head_p = n_shared;                  // next cached token, next prompt token
  while (head_c < n_cached && head_p < n_prompt) {
    int n = 0;
    while (head_c + n < n_cached && head_p + n < n_prompt &&
           cached[head_c + n] == prompt[head_p + n])
      ++n;
    if (n >= s.request.cache_reuse_chunk) {
      kv_.MoveRows(s.slot, head_c, head_p, n);
      ShiftKeyPositions(target_.config(), kv_, s.slot, head_p, n, head_p - head_c);
      head_p += n;
      head_c += n;
    } else {
      ++head_c;
    }
  }
  return head_p;
}

int Engine::Add(const SequenceRequest& request) {
  SPECD_CHECK(!request.prompt.empty(), "the prompt is empty");
  SPECD_CHECK(request.n_predict >= 0, "{n_predict} must be >= 0");
  SPECD_CHECK(request.cache_reuse_chunk >= 0, "{cache_reuse} must be >= 0");
  ValidateSamplingParams(request.sampling);
  for (int32_t t : request.prompt) {
    SPECD_CHECK(t >= 0 && t < target_.config().n_vocab, "prompt token ", t,
                " is outside the vocabulary of ", target_.config().n_vocab);
  }
  // Drafts never run past the request's last token (a step drafts at most the tokens still to
  // come, less one), so speculation needs no room beyond the prompt and the new tokens.
  const int64_t room = static_cast<int64_t>(request.prompt.size()) + request.n_predict;
  SPECD_CHECK(room <= kv_.n_ctx(), "the prompt (", request.prompt.size(), " tokens) plus ",
              request.n_predict, " new tokens exceed the context of ", kv_.n_ctx(),
              " tokens (raise {n_ctx} or lower {n_predict})");
  Sequence s;
  s.id = next_id_;
  s.request = request;
  if (request.constraint != nullptr) s.constraint = request.constraint->Start();
  s.t_added_ms = clock_.ElapsedMs();
  if (!request.cache_prompt || !ReuseCachedPrefix(s)) s.slot = AcquireSlot();
  if (proposer_ != nullptr) {
    try {
      proposer_->AddSequence(s.id, request.prompt);
    } catch (...) {
      kv_.Release(s.slot);
      throw;
    }
  }
  ++next_id_;
  // n_predict 0 with cache_prompt reads the prompt for later requests (a warm-up); without, it
  // has nothing to do.
  if (request.n_predict == 0 && !request.cache_prompt) {
    s.finish_reason = "length";
    Release(s);
  }
  sequences_.emplace(s.id, std::move(s));
  return next_id_ - 1;
}

std::vector<int> Engine::AddCompletions(const SequenceRequest& request, int n) {
  SPECD_CHECK(n >= 1, "completions: n must be >= 1");
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) {
    SequenceRequest r = request;
    r.rng_sequence = request.rng_sequence + i;
    if (i > 0) {
      // Followers read no prompt: they fork the first one's KV when it has read it.
      try {
        ids.push_back(next_id_);
        Sequence s;
        s.id = next_id_;
        s.request = r;
        if (r.constraint != nullptr) s.constraint = r.constraint->Start();
        s.shared_with = ids[0];
        s.t_added_ms = clock_.ElapsedMs();
        s.slot = AcquireSlot();
        ++next_id_;
        if (r.n_predict == 0) {
          s.finish_reason = "length";
          Release(s);
        }
        sequences_.emplace(s.id, std::move(s));
      } catch (...) {
        for (int id : ids) {
          if (sequences_.count(id)) Cancel(id);
        }
        throw;
      }
    } else {
      ids.push_back(Add(r));
    }
  }
  return ids;
}

void Engine::Release(Sequence& s) {
  if (s.slot >= 0) {
    if (s.request.cache_prompt && s.shared_with < 0) {
      // The KV holds the prompt and the generated tokens but the last (never read back).
      CachedPrefix c{s.slot, s.request.prompt, ++use_counter_};
      c.tokens.insert(c.tokens.end(), s.tokens.begin(), s.tokens.end());
      c.tokens.resize(std::min<size_t>(c.tokens.size(), kv_.Length(s.slot)));
      if (!c.tokens.empty()) {
        cached_.push_back(std::move(c));
      } else {
        kv_.Release(s.slot);
      }
    } else {
      kv_.Release(s.slot);
    }
    s.slot = -1;
    // Followers never had proposer state of their own until forked.
    if (proposer_ != nullptr && s.shared_with < 0) proposer_->RemoveSequence(s.id);
  }
}

void Engine::Cancel(int id, const char* reason) {
  auto it = sequences_.find(id);
  SPECD_CHECK(it != sequences_.end(), "no sequence ", id);
  Sequence& s = it->second;
  if (s.finished()) return;
  s.finish_reason = reason;
  // Completions waiting for this prompt: the first of them reads it instead.
  int heir = -1;
  for (auto& [other_id, other] : sequences_) {
    if (other.shared_with != id || other.finished()) continue;
    if (heir < 0) {
      heir = other_id;
      other.shared_with = -1;
      other.n_read = 0;
      if (proposer_ != nullptr) proposer_->AddSequence(other_id, other.request.prompt);
    } else {
      other.shared_with = heir;
    }
  }
  Release(s);
}

void Engine::Forget(int id) {
  auto it = sequences_.find(id);
  SPECD_CHECK(it != sequences_.end(), "no sequence ", id);
  SPECD_CHECK(it->second.finished(), "sequence ", id, " is still running: cancel it first");
  sequences_.erase(it);
}

bool Engine::HasWork() const {
  for (const auto& [id, s] : sequences_) {
    if (!s.finished()) return true;
  }
  return false;
}

const Sequence& Engine::sequence(int id) const {
  auto it = sequences_.find(id);
  SPECD_CHECK(it != sequences_.end(), "no sequence ", id);
  return it->second;
}

StepReport Engine::Step() {
  std::vector<Sequence*> live;
  for (auto& [id, s] : sequences_) {
    if (!s.finished()) live.push_back(&s);
  }
  StepReport report = decoder_.Step(live, [this] { return clock_.ElapsedMs(); });
  for (int id : report.finished) Release(sequences_.at(id));
  return report;
}

}  // namespace specd
