// A draft-length policy that writes down every step: what the policy chose and what the step
// measured, one JSON object per line (`--trace-steps FILE`). For finding out why a policy chose
// what it did on a real run; the wrapped policy decides exactly as it would alone.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "policy/draft_length.h"

namespace specd {

class TracedDraftLength : public DraftLengthPolicy {
 public:
  // Appends to `path`. Several requests (and processes) may share the file: each line names its
  // request by the file's length when the request began. Throws Error when the file cannot be
  // opened.
  // `label` (may be empty) is written on every line: which run of a benchmark it was.
  TracedDraftLength(std::unique_ptr<DraftLengthPolicy> inner, const std::string& path,
                    std::string label);

  int Next(int n_sequences, int remaining_tokens) override;
  void SetStartRows(int rows) override { inner_->SetStartRows(rows); }
  void Observe(const StepObservation& step) override;
  int max_length() const override { return inner_->max_length(); }
  const char* name() const override { return inner_->name(); }

 private:
  std::unique_ptr<DraftLengthPolicy> inner_;
  std::ofstream out_;
  std::string label_;
  long long request_;
  int step_ = 0;
};

// One step as a JSON line: the request, label and step number, the observation, and for the
// cost-aware policy its acceptance estimate and expected rate of every K after the step.
std::string StepTraceLine(long long request, const std::string& label, int step,
                          const StepObservation& observation, const DraftLengthPolicy& policy);

}  // namespace specd
