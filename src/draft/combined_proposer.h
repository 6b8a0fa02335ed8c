// Two proposers in order of preference, per sequence and step: the first (e.g. prompt lookup)
// where it has something to propose, the second (e.g. a draft model) for the others. Each keeps
// its own state; the one that did not draft for a sequence reads what was committed as context.
#pragma once

#include <map>

#include "draft/proposer.h"

namespace specd {

class CombinedProposer : public Proposer, public TargetFeatureReader {
 public:
  // Both must outlive this; `first` must return empty proposals when it has nothing.
  CombinedProposer(Proposer& first, Proposer& second) : first_(first), second_(second) {}

  void AddSequence(int seq, std::span<const int32_t> prompt) override;
  void ForkSequence(int src, int dst) override;
  void RemoveSequence(int seq) override;
  void Prefill(ProposerTimings* timings) override { second_.Prefill(timings); }
  int RowsBeforeFirstDraft(std::span<const int> seqs) const override {
    return first_.RowsBeforeFirstDraft(seqs) + second_.RowsBeforeFirstDraft(seqs);
  }
  void Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
               ProposerTimings* timings) override;
  void Accept(int seq, int n_accepted, int32_t next) override;
  void Append(int seq, std::span<const int32_t> tokens) override;
  TargetFeatureReader* feature_reader() override {
    return first_.feature_reader() || second_.feature_reader() ? this : nullptr;
  }
  void TakeTargetFeatures(int seq, int64_t first_position, std::span<const float> rows) override {
    for (Proposer* p : {&first_, &second_}) {
      if (TargetFeatureReader* reader = p->feature_reader()) {
        reader->TakeTargetFeatures(seq, first_position, rows);
      }
    }
  }

  // Steps in which each proposer drafted for a sequence.
  int64_t n_first = 0, n_second = 0;

 private:
  Proposer& first_;
  Proposer& second_;
  std::map<int, std::vector<int32_t>> drafted_by_first_;  // this step's, by sequence
  std::map<int, std::vector<int32_t>> drafted_by_second_;
};

}  // namespace specd
