// The server's metrics in Prometheus' text format, named after vLLM's (`vllm:` becomes
// `specd:`): speculative decoding counters (drafts, draft tokens, accepted tokens, accepted per
// position), requests by status, latency histograms (time to first token, inter-token,
// end to end), prompt and generated tokens, KV slots in use and requests waiting.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/scheduler.h"

namespace specd::server {

// A cumulative histogram over fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds_s)
      : bounds_s_(std::move(bounds_s)), counts_(bounds_s_.size(), 0) {}
  void Observe(double seconds);
  // Appends `name`'s _bucket / _sum / _count lines.
  void Render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_s_;
  std::vector<int64_t> counts_;  // observations <= bound (not yet cumulative)
  int64_t count_ = 0;
  double sum_s_ = 0.0;
};

class Metrics : public SchedulerObserver {
 public:
  Metrics();
  void OnFirstToken(double ttft_ms) override;
  void OnInterTokenGap(double gap_ms) override;
  void OnStep(const SpeculativeStats& totals) override;
  void OnOccupancy(int slots_in_use, int queued) override;
  // A request answered with `status` (HTTP code), its token counts and wall time.
  void OnRequest(int status, int64_t prompt_tokens, int64_t generated_tokens, double e2e_ms);
  std::string Render() const;

 private:
  mutable std::mutex mutex_;
  Histogram ttft_, inter_token_, e2e_;
  std::map<int, int64_t> requests_by_status_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  SpeculativeStats spec_;  // the engine's running totals
  int slots_in_use_ = 0, queued_ = 0;
};

}  // namespace specd::server
