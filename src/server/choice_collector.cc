#include "server/choice_collector.h"

namespace specd::server {

std::map<int, ChoiceOutput> TakeDeltas(ChoiceCollector& collector,
                                       const std::vector<ChoiceEvent>& events) {
  std::map<int, ChoiceOutput> deltas;
  for (const auto& e : events) {
    const int c = collector.Take(e);
    ChoiceOutput& d = deltas.try_emplace(c, ChoiceOutput{.index = c}).first->second;
    if (!e.finished && !collector.text(c).stopped()) {
      d.tokens.push_back(e.token);
      d.logprobs.push_back(e.logprobs);
    }
  }
  return deltas;
}

std::string LlamaStopType(const ChoiceText& text, const std::string& finish_reason) {
  if (!text.stop_type().empty()) return text.stop_type();
  if (finish_reason == "stop") return "eos";
  if (finish_reason == "length" || finish_reason == "budget") return "limit";
  return "none";
}

LlamaOutcome OutcomeOf(ChoiceCollector& collector, const Job& job, int64_t prompt_tokens) {
  LlamaOutcome o;
  o.cached_tokens = job.n_cached();
  o.choice = collector.outputs()[0];
  const ChoiceText& text = collector.text(0);
  o.stop_type = LlamaStopType(text, o.choice.finish_reason);
  o.stopping_word = text.stopping_word();
  o.has_new_line = text.has_new_line();
  o.prompt_tokens = prompt_tokens;
  const double total = collector.elapsed_ms(), first = collector.first_token_ms();
  o.prompt_ms = first >= 0 ? first : total;
  o.predicted_ms = total - o.prompt_ms;
  return o;
}

}  // namespace specd::server
