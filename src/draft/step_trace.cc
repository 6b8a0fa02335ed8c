#include "draft/step_trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.h"

namespace specd {

TracedDraftLength::TracedDraftLength(std::unique_ptr<DraftLengthPolicy> inner,
                                     const std::string& path, std::string label)
    : inner_(std::move(inner)), out_(path, std::ios::app), label_(std::move(label)) {
  SPECD_CHECK(inner_ != nullptr, "a traced policy needs a policy");
  SPECD_CHECK(out_.good(), "cannot open the step trace file ", path, " for appending");
  out_.seekp(0, std::ios::end);
  request_ = static_cast<long long>(out_.tellp());
}

int TracedDraftLength::Next(int n_sequences, int remaining_tokens) {
  return inner_->Next(n_sequences, remaining_tokens);
}

void TracedDraftLength::Observe(const StepObservation& step) {
  inner_->Observe(step);
  out_ << StepTraceLine(request_, label_, step_++, step, *inner_) << '\n';
  out_.flush();  // a trace is read while a run goes on, or after it was cut off
}

std::string StepTraceLine(long long request, const std::string& label, int step,
                          const StepObservation& o, const DraftLengthPolicy& policy) {
  double t_draft_ms = 0.0;
  for (const auto& forward : o.draft_forwards) t_draft_ms += forward.second;
  nlohmann::ordered_json line = {
      {"request", request},
      {"label", label},
      {"step", step},
      {"policy", policy.name()},
      {"n_sequences", o.n_sequences},
      {"k", o.k},
      {"tokens", o.tokens},
      {"catch_up", o.catch_up},
      {"verified", o.verified},              // [drafted, accepted] per sequence
      {"draft_forwards", o.draft_forwards},  // [rows, ms] per forward
      {"t_draft_ms", t_draft_ms},
      {"target_rows", o.target_rows},
      {"t_target_ms", o.target_ms},
      {"prefill_target_rows", o.prefill_target_rows},
      {"prefill_draft_rows", o.prefill_draft_rows},
      {"t_prefill_draft_ms", o.prefill_draft_ms},
      {"t_step_ms", o.step_ms},
  };
  if (const auto* cost = dynamic_cast<const CostAwarePolicy*>(&policy)) {
    // Its expected tokens per ms per sequence of each K after this step (0: unmeasured).
    std::vector<double> rates;
    for (int k = 0; k <= policy.max_length(); ++k) {
      rates.push_back(cost->model().ExpectedTokensPerMs(k, std::max(o.n_sequences, 1)));
    }
    line["acceptance"] = cost->model().acceptance();
    line["rates"] = rates;
  }
  return line.dump();
}

}  // namespace specd
