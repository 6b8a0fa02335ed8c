// Continuous batching for the server: one engine thread owns the Engine and steps it while any
// sequence is live; requests join between steps (a request's n completions read its prompt
// once) and leave when they finish, are cancelled (client gone, stop string) or run out of their
// time budget, freeing their KV slots at once. HTTP threads talk to it through Jobs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace specd::server {

// Something that happened to one choice (completion) of a job.
struct ChoiceEvent {
  int choice = 0;
  bool finished = false;      // the last event of this choice
  int32_t token = -1;         // when !finished
  TokenLogprobs logprobs;     // when asked for
  std::string finish_reason;  // when finished: "stop", "length", "cancelled", "budget"
  TokenSource source = TokenSource::kTarget;  // how the token came (when !finished)
};

// One request's sequences, as seen by the HTTP thread that waits for them.
class Job {
 public:
  Job(int n_choices, double t_submit_ms) : n_choices_(n_choices), t_submit_ms_(t_submit_ms) {}

  // Waits up to timeout_ms for events; moves them into `out`. Returns false once every choice
  // has finished and all events were taken.
  bool Wait(std::vector<ChoiceEvent>* out, int timeout_ms);
  // Ends one choice early (a stop string) or all of them (the client went away).
  void Cancel(int choice, const std::string& reason);
  void CancelAll(const std::string& reason);
  int n_choices() const { return n_choices_; }
  // Speculation figures of this job's sequences, final once Wait returned false.
  int64_t n_drafted() const;
  int64_t n_accepted() const;
  // Prompt tokens reused from an earlier request's KV (cache_prompt), known once it started.
  int64_t n_cached() const;

 private:
  friend class Scheduler;
  const int n_choices_;
  const double t_submit_ms_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ChoiceEvent> events_;
  int n_finished_ = 0;
  std::vector<std::pair<int, std::string>> cancel_requests_;  // (choice or -1, reason)
  int64_t n_drafted_ = 0, n_accepted_ = 0;
  int64_t n_cached_ = 0;
};

// Latency and throughput figures the metrics endpoint reports (engine-thread observations).
struct SchedulerObserver {
  virtual ~SchedulerObserver() = default;
  virtual void OnFirstToken(double ttft_ms) = 0;
  virtual void OnInterTokenGap(double gap_ms) = 0;
  virtual void OnStep(const SpeculativeStats& totals) = 0;
  // Called whenever the slots in use or the queue change, before the change is visible to any
  // client (a request's first token, the end of its response), so a gauge read after either
  // already counts it.
  virtual void OnOccupancy(int slots_in_use, int queued) = 0;
};

class Scheduler {
 public:
  // The engine must have `n_slots` KV slots (and its proposer as many); `max_queued` requests
  // may wait for slots beyond those running.
  Scheduler(Engine& engine, int n_slots, int max_queued, SchedulerObserver* observer);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues n completions of `request`; nullptr when the queue is full (the caller answers 503).
  // n must be <= n_slots. time_budget_ms > 0 ends unfinished choices with "budget".
  std::shared_ptr<Job> Submit(const SequenceRequest& request, int n, double time_budget_ms);
  int n_slots() const { return n_slots_; }
  // Waits until no request is queued or running, at most timeout_ms; true when idle.
  bool WaitIdle(double timeout_ms);
  // Ends every queued and running request with "cancelled" at the engine's next turn (their
  // clients get their endings); meant for a drain, when no new requests come (one admitted
  // before that turn is cancelled too).
  void CancelAll();

 private:
  struct Pending {
    SequenceRequest request;
    int n;
    double deadline_ms;  // 0: none
    std::shared_ptr<Job> job;
  };
  struct Running {
    std::shared_ptr<Job> job;
    int choice;
    double deadline_ms;
    double t_last_token_ms = -1.0;
  };
  void Loop();
  // One engine step and its tokens dispatched (a failing step ends everyone's requests).
  void StepOnce();
  // Under mutex_: moves queued requests into the engine while slots are free.
  void AdmitLocked();
  // Cancels sequences whose job asked for it or whose budget has passed.
  void ApplyCancellations();
  void Dispatch(const StepReport& report);
  void Finish(int id, const std::string& reason);
  // Under mutex_: tells the observer the slots in use and the queue length.
  void ReportOccupancyLocked();

  Engine& engine_;
  const int n_slots_;
  const int max_queued_;
  SchedulerObserver* observer_;
  Timer clock_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  bool cancel_all_ = false;         // under mutex_: CancelAll was asked
  std::condition_variable idle_;    // notified when nothing is queued or running
  int slots_in_use_ = 0;            // engine thread and Submit (under mutex_)
  std::map<int, Running> running_;  // engine thread only: sequence id -> its job
  std::thread thread_;
};

}  // namespace specd::server
