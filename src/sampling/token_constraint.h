// What a grammar allows a sequence to write next (structured output: JSON schemas, grammars,
// tool calls). The step masks the target's logits with it, so the target's distribution is the
// constrained one; proposers draft under the same mask, advancing it along their drafts and
// rolling it back, so drafts stay acceptable. The grammar library (src/grammar/) implements it;
// the layers that use it see only this interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>

namespace specd {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits ([n_vocab]) of tokens the grammar does not allow next to -inf.
  virtual void Mask(std::span<float> logits) = 0;
  // Takes one token; false, and no change, when the grammar does not allow it.
  virtual bool Advance(int32_t token) = 0;
  // Takes back the last n tokens Advance took.
  virtual void Rollback(int n) = 0;
  // The grammar is complete and took a stop token: nothing may follow.
  virtual bool terminated() const = 0;
};

// Whether a masked row leaves any token a chance (some logit above -inf).
inline bool AnyAllowed(std::span<const float> logits) {
  for (float v : logits) {
    if (v > -std::numeric_limits<float>::infinity()) return true;
  }
  return false;
}

// Makes a sequence's constraint in its start state; shared by the sequences of one request.
class TokenConstraintFactory {
 public:
  virtual ~TokenConstraintFactory() = default;
  virtual std::unique_ptr<TokenConstraint> Start() const = 0;
};

// A constraint seen while drafting: counts what a proposer advanced so that the step can restore
// the committed state afterwards (Restore), whatever the proposer did.
class DraftingConstraint {
 public:
  explicit DraftingConstraint(TokenConstraint* constraint) : constraint_(constraint) {}
  ~DraftingConstraint() { Restore(); }
  DraftingConstraint(const DraftingConstraint&) = delete;
  DraftingConstraint& operator=(const DraftingConstraint&) = delete;

  void Mask(std::span<float> logits) {
    const auto start = std::chrono::steady_clock::now();
    constraint_->Mask(logits);
    mask_ms_ +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  bool Advance(int32_t token) {
    const bool ok = constraint_->Advance(token);
    advanced_ += ok ? 1 : 0;
    return ok;
  }
  // Time spent masking draft rows.
  double mask_ms() const { return mask_ms_; }
  // Back to the state it was given in.
  void Restore() {
    if (advanced_ > 0) constraint_->Rollback(advanced_);
    advanced_ = 0;
  }

 private:
  TokenConstraint* constraint_;
  int advanced_ = 0;
  double mask_ms_ = 0.0;
};

}  // namespace specd
