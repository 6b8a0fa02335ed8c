#include "server/scheduler.h"

#include <chrono>

#include "base/error.h"

namespace specd::server {
namespace {

// A lower layer's message with its option fields as a request names them ('top_k').
std::string RequestFieldNames(const char* message) {
  return RenderFieldNames(message,
                          [](std::string_view field) { return "'" + std::string(field) + "'"; });
}

}  // namespace

bool Job::Wait(std::vector<ChoiceEvent>* out, int timeout_ms) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                  [&] { return !events_.empty() || n_finished_ == n_choices_; });
  const bool got = !events_.empty();
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return got || n_finished_ < n_choices_;
}

void Job::Cancel(int choice, const std::string& reason) {
  std::lock_guard lock(mutex_);
  cancel_requests_.emplace_back(choice, reason);
}

void Job::CancelAll(const std::string& reason) { Cancel(-1, reason); }

int64_t Job::n_drafted() const {
  std::lock_guard lock(mutex_);
  return n_drafted_;
}

int64_t Job::n_accepted() const {
  std::lock_guard lock(mutex_);
  return n_accepted_;
}

int64_t Job::n_cached() const {
  std::lock_guard lock(mutex_);
  return n_cached_;
}

Scheduler::Scheduler(Engine& engine, int n_slots, int max_queued, SchedulerObserver* observer)
    : engine_(engine), n_slots_(n_slots), max_queued_(max_queued), observer_(observer) {
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<Job> Scheduler::Submit(const SequenceRequest& request, int n,
                                       double time_budget_ms) {
  SPECD_CHECK(n >= 1 && n <= n_slots_, "n = ", n, " is more than the server's ", n_slots_,
              " slots");
  const double now = clock_.ElapsedMs();
  auto job = std::make_shared<Job>(n, now);
  {
    std::lock_guard lock(mutex_);
    if (static_cast<int>(queue_.size()) >= max_queued_) return nullptr;
    queue_.push_back({request, n, time_budget_ms > 0 ? now + time_budget_ms : 0.0, job});
    ReportOccupancyLocked();
  }
  wake_.notify_all();
  return job;
}

void Scheduler::Loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !running_.empty() ||
               (!queue_.empty() && queue_.front().n <= n_slots_ - slots_in_use_);
      });
      if (stopping_) break;
      AdmitLocked();
    }
    ApplyCancellations();
    if (engine_.HasWork()) StepOnce();
    if (observer_ != nullptr) observer_->OnStep(engine_.stats());
  }
  // Shutting down: every waiter gets its ending.
  std::vector<int> ids;
  for (const auto& [id, r] : running_) ids.push_back(id);
  for (int id : ids) {
    engine_.Cancel(id, "cancelled");
    Finish(id, "cancelled");
  }
}

void Scheduler::StepOnce() {
  {
    StepReport report;
    try {
      report = engine_.Step();
    } catch (const Error& e) {
      // A step that fails (it should not) ends everyone's request rather than the server.
      std::fprintf(stderr, "serve: step failed: %s\n", RequestFieldNames(e.what()).c_str());
      std::vector<int> ids;
      for (const auto& [id, r] : running_) ids.push_back(id);
      for (int id : ids) {
        engine_.Cancel(id, "error");
        Finish(id, "error");
      }
      return;
    }
    Dispatch(report);
  }
}

void Scheduler::AdmitLocked() {
  while (!queue_.empty() && queue_.front().n <= n_slots_ - slots_in_use_) {
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    Job& job = *p.job;
    bool cancelled = false;
    {
      std::lock_guard lock(job.mutex_);
      for (const auto& [choice, reason] : job.cancel_requests_) cancelled |= choice < 0;
    }
    std::vector<int> ids;
    std::string error;
    if (!cancelled) {
      try {
        ids = engine_.AddCompletions(p.request, p.n);
      } catch (const Error& e) {
        error = RequestFieldNames(e.what());
      }
    }
    if (ids.empty()) {  // never started: every choice ends at once
      std::fprintf(stderr, "%s", error.empty() ? "" : ("serve: " + error + "\n").c_str());
      std::lock_guard lock(job.mutex_);
      for (int c = 0; c < p.n; ++c) {
        job.events_.push_back({c, true, -1, {}, error.empty() ? "cancelled" : "error"});
      }
      job.n_finished_ = p.n;
      job.ready_.notify_all();
      continue;
    }
    slots_in_use_ += p.n;
    for (int c = 0; c < p.n; ++c) running_[ids[c]] = {p.job, c, p.deadline_ms};
    {
      std::lock_guard lock(job.mutex_);
      job.n_cached_ = engine_.sequence(ids[0]).n_cached;
    }
  }
  ReportOccupancyLocked();
}

void Scheduler::ReportOccupancyLocked() {
  if (observer_ != nullptr) observer_->OnOccupancy(slots_in_use_, static_cast<int>(queue_.size()));
  if (slots_in_use_ == 0 && queue_.empty()) idle_.notify_all();
}

bool Scheduler::WaitIdle(double timeout_ms) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, std::chrono::duration<double, std::milli>(timeout_ms),
                        [&] { return slots_in_use_ == 0 && queue_.empty(); });
}

void Scheduler::CancelAll() {
  {
    std::lock_guard lock(mutex_);
    cancel_all_ = slots_in_use_ > 0;  // taken by the engine thread at its next turn
    for (const Pending& p : queue_) p.job->CancelAll("cancelled");
  }
  wake_.notify_all();
}

void Scheduler::ApplyCancellations() {
  const double now = clock_.ElapsedMs();
  bool cancel_all = false;
  {
    std::lock_guard lock(mutex_);
    std::swap(cancel_all, cancel_all_);
  }
  std::vector<std::pair<int, std::string>> to_cancel;
  for (const auto& [id, r] : running_) {
    std::string reason = cancel_all ? "cancelled" : "";
    {
      std::lock_guard lock(r.job->mutex_);
      for (const auto& [choice, why] : r.job->cancel_requests_) {
        if (choice < 0 || choice == r.choice) reason = why;
      }
    }
    if (reason.empty() && r.deadline_ms > 0 && now > r.deadline_ms) reason = "budget";
    if (!reason.empty()) to_cancel.emplace_back(id, reason);
  }
  for (const auto& [id, reason] : to_cancel) {
    engine_.Cancel(id, reason.c_str());
    Finish(id, reason);
  }
}

void Scheduler::Dispatch(const StepReport& report) {
  const double now = clock_.ElapsedMs();
  // A token's index among its sequence's: those before this step, plus this step's earlier ones.
  std::map<int, int> new_in_step, emitted;
  for (const auto& [id, token] : report.tokens) ++new_in_step[id];
  // Each job's events of this step, handed over together: its HTTP thread then wakes once and
  // sends the step's tokens in one chunk, not a chunk per token.
  std::map<Job*, std::vector<ChoiceEvent>> step_events;
  for (size_t t = 0; t < report.tokens.size(); ++t) {
    const auto [id, token] = report.tokens[t];
    auto it = running_.find(id);
    if (it == running_.end()) continue;
    Running& r = it->second;
    const Sequence& s = engine_.sequence(id);
    ChoiceEvent event{r.choice, false, token, {}, "", report.sources[t]};
    if (s.request.logprobs >= 0) {
      const size_t index = s.tokens.size() - new_in_step[id] + emitted[id]++;
      if (index < s.token_logprobs.size()) event.logprobs = s.token_logprobs[index];
    }
    if (observer_ != nullptr) {
      if (r.t_last_token_ms < 0) {
        observer_->OnFirstToken(now - r.job->t_submit_ms_);
      } else {
        observer_->OnInterTokenGap(now - r.t_last_token_ms);
      }
    }
    r.t_last_token_ms = now;
    step_events[r.job.get()].push_back(std::move(event));
  }
  for (auto& [job, events] : step_events) {
    std::lock_guard lock(job->mutex_);
    for (auto& e : events) job->events_.push_back(std::move(e));
    job->ready_.notify_all();
  }
  for (int id : report.finished) {
    if (running_.count(id)) Finish(id, engine_.sequence(id).finish_reason);
  }
}

void Scheduler::Finish(int id, const std::string& reason_in) {
  const std::string reason = reason_in;  // may be the sequence's own, which Forget frees
  auto it = running_.find(id);
  if (it == running_.end()) return;
  const Running r = it->second;
  running_.erase(it);
  const Sequence& s = engine_.sequence(id);
  const int64_t n_drafted = s.n_drafted, n_accepted = s.n_accepted;
  engine_.Forget(id);
  {  // The slot is free before the client can see its choice end.
    std::lock_guard lock(mutex_);
    --slots_in_use_;
    ReportOccupancyLocked();
  }
  std::lock_guard lock(r.job->mutex_);
  r.job->n_drafted_ += n_drafted;
  r.job->n_accepted_ += n_accepted;
  r.job->events_.push_back({r.choice, true, -1, {}, reason});
  ++r.job->n_finished_;
  r.job->ready_.notify_all();
}

}  // namespace specd::server
