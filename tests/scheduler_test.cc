// The server's scheduler: the slots-in-use gauge counts a request before its client can see its
// first token and has dropped it before the client can see its end, whether it ended by length,
// by cancellation (client gone) or by its time budget.
#include "server/scheduler.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "server/request_fields.h"
#include "tests/test_util.h"

namespace specd::server {
namespace {

using testing::ModelPair;
using testing::Prompt;

// Records the gauge; while held, the engine thread stops after the step that gave a first token
// (in OnStep), so the test can look at the gauge between two steps without racing the engine.
class OccupancyRecorder : public SchedulerObserver {
 public:
  void OnFirstToken(double) override {
    std::lock_guard lock(mutex_);
    first_token_in_step_ = true;
  }
  void OnInterTokenGap(double) override {}
  void OnStep(const SpeculativeStats&) override {
    std::unique_lock lock(mutex_);
    if (first_token_in_step_) released_.wait(lock, [&] { return !held_; });
    first_token_in_step_ = false;
  }
  void OnOccupancy(int slots_in_use, int) override {
    std::lock_guard lock(mutex_);
    slots_in_use_ = slots_in_use;
  }
  void Hold(bool held) {
    std::lock_guard lock(mutex_);
    held_ = held;
    released_.notify_all();
  }
  int slots_in_use() const {
    std::lock_guard lock(mutex_);
    return slots_in_use_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable released_;
  bool held_ = false;
  bool first_token_in_step_ = false;
  int slots_in_use_ = -1;
};

SequenceRequest Greedy(int n_predict) {
  SequenceRequest r;
  r.prompt = Prompt(12, 3);
  r.n_predict = n_predict;
  r.stop_at_eos = false;
  return r;
}

struct Server {
  Server() : kv(pair.target->NewKvCache({2, 512})), engine(*pair.target, *kv, pair.ctx, {}) {}
  ModelPair pair{DType::kF32, 11};
  std::unique_ptr<KvCache> kv;
  Engine engine;
  OccupancyRecorder observer;
};

// Waits for the next events of `job`; returns false once it has ended.
bool Next(Job& job, std::vector<ChoiceEvent>* events) {
  events->clear();
  while (events->empty()) {
    if (!job.Wait(events, 1000)) return false;
  }
  return true;
}

TEST(Scheduler, SlotIsCountedBeforeTheFirstTokenAndFreedBeforeTheEnd) {
  Server s;
  Scheduler scheduler(s.engine, 2, 4, &s.observer);
  for (int round = 0; round < 3; ++round) {
    s.observer.Hold(true);  // the engine thread stops after the step that gives the first token
    auto job = scheduler.Submit(Greedy(6), 1, 0);
    ASSERT_NE(job, nullptr);
    std::vector<ChoiceEvent> events;
    ASSERT_TRUE(Next(*job, &events));
    EXPECT_FALSE(events.back().finished);
    EXPECT_EQ(s.observer.slots_in_use(), 1) << "round " << round;
    s.observer.Hold(false);
    bool finished = false;
    do {
      for (const auto& e : events) finished |= e.finished;
    } while (!finished && Next(*job, &events));
    ASSERT_TRUE(finished);
    EXPECT_EQ(s.observer.slots_in_use(), 0) << "round " << round;
  }
}

TEST(Scheduler, CancelledAndOverBudgetRequestsFreeTheirSlots) {
  Server s;
  Scheduler scheduler(s.engine, 2, 4, &s.observer);
  auto cancelled = scheduler.Submit(Greedy(400), 1, 0);
  // A budget of 1 us has passed before the engine thread can take the request in.
  auto budget = scheduler.Submit(Greedy(400), 1, 0.001);
  std::vector<ChoiceEvent> events;
  ASSERT_TRUE(Next(*cancelled, &events));
  cancelled->CancelAll("cancelled");
  std::string reasons;
  for (Job* job : {cancelled.get(), budget.get()}) {
    while (Next(*job, &events)) {
      for (const auto& e : events) reasons += e.finished ? e.finish_reason + " " : "";
    }
  }
  EXPECT_EQ(reasons, "cancelled budget ");
  EXPECT_EQ(s.observer.slots_in_use(), 0);
}

}  // namespace
}  // namespace specd::server

namespace specd::server {
namespace {

TEST(OpenAiRequest, JsonNestingDepthCountsBracketsOutsideStrings) {
  EXPECT_EQ(JsonNestingDepth(""), 0);
  EXPECT_EQ(JsonNestingDepth("{\"a\": [1, [2], {\"b\": 3}]}"), 3);
  EXPECT_EQ(JsonNestingDepth("{\"a\": \"[[[[{{{\"}"), 1);         // inside a string
  EXPECT_EQ(JsonNestingDepth("{\"a\": \"\\\"[[[[\"}"), 1);        // after an escaped quote
  EXPECT_EQ(JsonNestingDepth(std::string(200000, '[')), 200000);  // unclosed, still counted
  EXPECT_EQ(JsonNestingDepth("]]]]{"), 1);                        // garbage is well defined
}

}  // namespace
}  // namespace specd::server
