#include "server/metrics.h"

#include <cstdio>

namespace specd::server {
namespace {

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

void Header(const std::string& name, const std::string& type, const std::string& help,
            std::string* out) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Counter(const std::string& name, const std::string& help, double value, std::string* out) {
  Header(name, "counter", help, out);
  *out += name + " " + Number(value) + "\n";
}

void Gauge(const std::string& name, const std::string& help, double value, std::string* out) {
  Header(name, "gauge", help, out);
  *out += name + " " + Number(value) + "\n";
}

}  // namespace

void Histogram::Observe(double seconds) {
  for (size_t i = 0; i < bounds_s_.size(); ++i) {
    if (seconds <= bounds_s_[i]) {
      ++counts_[i];
      break;
    }
  }
  ++count_;
  sum_s_ += seconds;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  Header(name, "histogram", help, out);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_s_.size(); ++i) {
    cumulative += counts_[i];
    *out +=
        name + "_bucket{le=\"" + Number(bounds_s_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  *out += name + "_sum " + Number(sum_s_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}),
      inter_token_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                    0.4, 0.5, 0.75, 1.0, 2.5}),
      e2e_({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60}) {}

void Metrics::OnFirstToken(double ttft_ms) {
  std::lock_guard lock(mutex_);
  ttft_.Observe(ttft_ms / 1000.0);
}

void Metrics::OnInterTokenGap(double gap_ms) {
  std::lock_guard lock(mutex_);
  inter_token_.Observe(gap_ms / 1000.0);
}

void Metrics::OnStep(const SpeculativeStats& totals) {
  std::lock_guard lock(mutex_);
  spec_ = totals;
}

void Metrics::OnOccupancy(int slots_in_use, int queued) {
  std::lock_guard lock(mutex_);
  slots_in_use_ = slots_in_use;
  queued_ = queued;
}

void Metrics::OnRequest(int status, int64_t prompt_tokens, int64_t generated_tokens,
                        double e2e_ms) {
  std::lock_guard lock(mutex_);
  ++requests_by_status_[status];
  prompt_tokens_ += prompt_tokens;
  generated_tokens_ += generated_tokens;
  if (status == 200) e2e_.Observe(e2e_ms / 1000.0);
}

std::string Metrics::Render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  Counter("specd:spec_decode_num_drafts_total",
          "Drafts verified (one per sequence and step with at least one draft token).",
          static_cast<double>(spec_.n_drafts), &out);
  Counter("specd:spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
          static_cast<double>(spec_.n_drafted), &out);
  Counter("specd:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
          static_cast<double>(spec_.n_accepted), &out);
  Header("specd:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Draft tokens accepted at each draft position.", &out);
  for (size_t i = 0; i < spec_.accepted_at_position.size(); ++i) {
    out += "specd:spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(i) +
           "\"} " + std::to_string(spec_.accepted_at_position[i]) + "\n";
  }
  Counter("specd:spec_decode_num_steps_total", "Target forwards that verified or decoded.",
          static_cast<double>(spec_.n_steps), &out);
  Counter("specd:spec_decode_num_plain_steps_total", "Of those, steps without any draft.",
          static_cast<double>(spec_.n_plain_steps), &out);
  Header("specd:request_success_total", "counter", "Requests answered, by HTTP status.", &out);
  for (const auto& [status, n] : requests_by_status_) {
    out += "specd:request_success_total{status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  }
  Counter("specd:prompt_tokens_total", "Prompt tokens of answered requests.",
          static_cast<double>(prompt_tokens_), &out);
  Counter("specd:generation_tokens_total", "Generated tokens of answered requests.",
          static_cast<double>(generated_tokens_), &out);
  Gauge("specd:num_requests_waiting", "Requests queued for a KV slot.", queued_, &out);
  Gauge("specd:kv_slots_in_use", "KV cache slots (sequences) in use.", slots_in_use_, &out);
  ttft_.Render("specd:time_to_first_token_seconds", "Time to first token.", &out);
  inter_token_.Render("specd:time_per_output_token_seconds", "Time between output tokens.", &out);
  e2e_.Render("specd:e2e_request_latency_seconds", "End-to-end request latency.", &out);
  return out;
}

}  // namespace specd::server
