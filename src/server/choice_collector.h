// A request's choices as the scheduler's events arrive: each choice's tokens, text (cut at stop
// strings and editor limits) and finish reason, for a whole response or a stream.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/timer.h"
#include "server/llama_api.h"
#include "server/openai_api.h"
#include "server/scheduler.h"

namespace specd::server {

// A request's choices as they are collected (whole responses) or streamed.
class ChoiceCollector {
 public:
  ChoiceCollector(const CompletionRequest& r, const Tokenizer& tokenizer, Job& job) : job_(job) {
    for (int c = 0; c < r.n; ++c) {
      texts_.emplace_back(tokenizer, r.stop, r.text_limits);
      outputs_.push_back(ChoiceOutput{.index = c});
    }
  }
  // Takes one event; returns the index of the choice it touched.
  int Take(const ChoiceEvent& e) {
    ChoiceOutput& out = outputs_[e.choice];
    if (e.finished) {
      if (out.finish_reason.empty()) out.finish_reason = e.finish_reason;
      done_[e.choice] = true;
      return e.choice;
    }
    if (texts_[e.choice].stopped()) return e.choice;  // past a stop string: dropped
    if (first_token_ms_ < 0) first_token_ms_ = since_submit_.ElapsedMs();
    last_token_ms_ = since_submit_.ElapsedMs();
    out.tokens.push_back(e.token);
    out.logprobs.push_back(e.logprobs);
    if (texts_[e.choice].Push(e.token, e.source)) {
      // A stop string ends a choice as "stop"; an editor limit (n_indent, t_max_predict_ms)
      // as "length".
      out.finish_reason = texts_[e.choice].stop_type() == "word" ? "stop" : "length";
      job_.Cancel(e.choice, out.finish_reason);
    }
    return e.choice;
  }
  // ms from the collector's creation (just after the request was queued) to its first token.
  double first_token_ms() const { return first_token_ms_; }
  // ms from the collector's creation to its latest token.
  double last_token_ms() const { return last_token_ms_; }
  double elapsed_ms() const { return since_submit_.ElapsedMs(); }
  bool done(int c) const { return done_.count(c) > 0; }
  ChoiceText& text(int c) { return texts_[c]; }
  std::vector<ChoiceOutput>& outputs() { return outputs_; }
  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const auto& o : outputs_) n += static_cast<int64_t>(o.tokens.size());
    return n;
  }

 private:
  Job& job_;
  Timer since_submit_;
  double first_token_ms_ = -1;
  double last_token_ms_ = 0;
  std::vector<ChoiceText> texts_;
  std::vector<ChoiceOutput> outputs_;
  std::map<int, bool> done_;
};

// Takes a batch of events into the collector; the new tokens and logprobs of each choice they
// touched (text filled in by the caller).
std::map<int, ChoiceOutput> TakeDeltas(ChoiceCollector& collector,
                                       const std::vector<ChoiceEvent>& events);

// llama-server's stop_type of a finished choice.
std::string LlamaStopType(const ChoiceText& text, const std::string& finish_reason);

// A /completion request's outcome from its only choice.
LlamaOutcome OutcomeOf(ChoiceCollector& collector, const Job& job, int64_t prompt_tokens);

}  // namespace specd::server
