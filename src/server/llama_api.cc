#include "server/llama_api.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "server/request_fields.h"
#include "server/structured_output.h"
#include "tokenizer/utf8.h"

namespace specd::server {

using nlohmann::json;

namespace {

// A prompt as llama-server takes it: a string, token ids, or a list mixing both.
std::vector<int32_t> MixedPrompt(const json& prompt, const Tokenizer& tokenizer, bool add_special,
                                 bool parse_special) {
  if (prompt.is_string())
    return tokenizer.Encode(prompt.get<std::string>(), add_special, parse_special);
  if (!prompt.is_array()) {
    throw BadRequest("'prompt' must be a string, token ids, or a list of both", "prompt");
  }
  if (prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) {
    return MixedPrompt(prompt[0], tokenizer, add_special, parse_special);
  }
  std::vector<int32_t> tokens;
  bool first = true;
  for (const json& part : prompt) {
    if (part.is_string()) {
      const auto ids =
          tokenizer.Encode(part.get<std::string>(), add_special && first, parse_special);
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    } else if (part.is_number_integer()) {
      const auto ids = TokenIds(json::array({part}), tokenizer);
      tokens.push_back(ids[0]);
    } else {
      throw BadRequest("'prompt' lists may hold strings and token ids only", "prompt");
    }
    first = false;
  }
  return tokens;
}

std::string OptionalString(const json& j, const std::string& key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_string()) throw BadRequest("'" + key + "' must be a string", key);
  return it->get<std::string>();
}

std::vector<ExtraChunk> ExtraChunks(const json& j) {
  std::vector<ExtraChunk> chunks;
  const auto it = j.find("input_extra");
  if (it == j.end() || it->is_null()) return chunks;
  if (!it->is_array()) {
    throw BadRequest("'input_extra' must be a list of {\"filename\", \"text\"}", "input_extra");
  }
  for (const json& chunk : *it) {
    if (!chunk.is_object()) {
      throw BadRequest("each 'input_extra' chunk must be an object", "input_extra");
    }
    ExtraChunk c{OptionalString(chunk, "filename"), OptionalString(chunk, "text")};
    if (c.filename.empty()) c.filename = "tmp";  // llama-server's default
    chunks.push_back(std::move(c));
  }
  return chunks;
}

std::vector<std::string> ResponseFields(const json& j) {
  std::vector<std::string> fields;
  const auto it = j.find("response_fields");
  if (it == j.end() || it->is_null()) return fields;
  if (!it->is_array()) throw BadRequest("'response_fields' must be a list", "response_fields");
  for (const json& f : *it) {
    if (!f.is_string()) throw BadRequest("'response_fields' must hold strings", "response_fields");
    fields.push_back(f.get<std::string>());
  }
  return fields;
}

// What specd does not implement is refused by name, never ignored.
void RefuseUnsupportedLlama(const json& j) {
  for (const char* key : {"lora", "image_data", "multimodal_data"}) {
    const auto it = j.find(key);
    if (it != j.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()) &&
        !(it->is_array() && it->empty())) {
      throw BadRequest(std::string("'") + key + "' is not supported by this server", key);
    }
  }
  for (const char* key :
       {"presence_penalty", "frequency_penalty", "dry_multiplier", "xtc_probability", "mirostat"}) {
    if (Number(j, key, -1e9, 1e9, 0.0) != 0.0) {
      throw BadRequest(std::string("'") + key + "' is not supported by this server", key);
    }
  }
  if (const auto it = j.find("logit_bias"); it != j.end() && !it->is_null() && !it->empty()) {
    throw BadRequest("'logit_bias' is not supported by this server", "logit_bias");
  }
}

// The samplers a request lists (llama-server's `samplers`: names, or its one-letter string such as
// "edkypmxt"); null when it lists none (all apply). Unknown names are refused.
std::optional<std::set<std::string>> ListedSamplers(const json& j) {
  const auto it = j.find("samplers");
  if (it == j.end() || it->is_null()) return std::nullopt;
  static const std::map<std::string, std::string> kNames = {{"penalties", "penalties"},
                                                            {"dry", "dry"},
                                                            {"top_n_sigma", "top_n_sigma"},
                                                            {"top_k", "top_k"},
                                                            {"typ_p", "typ_p"},
                                                            {"typical_p", "typ_p"},
                                                            {"top_p", "top_p"},
                                                            {"min_p", "min_p"},
                                                            {"xtc", "xtc"},
                                                            {"temperature", "temperature"},
                                                            {"temp", "temperature"},
                                                            {"infill", "infill"}};
  static const std::map<char, std::string> kLetters = {
      {'e', "penalties"},   {'d', "dry"},   {'s', "top_n_sigma"}, {'k', "top_k"},
      {'y', "typ_p"},       {'p', "top_p"}, {'m', "min_p"},       {'x', "xtc"},
      {'t', "temperature"}, {'i', "infill"}};
  std::set<std::string> listed;
  auto add = [&](const auto& table, const auto& key, const std::string& shown) {
    const auto found = table.find(key);
    if (found == table.end()) {
      throw BadRequest("'samplers' names an unknown sampler '" + shown + "'", "samplers");
    }
    listed.insert(found->second);
  };
  if (it->is_string()) {
    for (char c : it->get<std::string>()) add(kLetters, c, std::string(1, c));
  } else if (it->is_array()) {
    for (const json& name : *it) {
      if (!name.is_string()) throw BadRequest("'samplers' must hold names", "samplers");
      add(kNames, name.get<std::string>(), name.get<std::string>());
    }
  } else {
    throw BadRequest("'samplers' must be a list of names or a string of letters", "samplers");
  }
  return listed;
}

void ReadSampling(const json& j, LlamaRequest* r) {
  SamplingParams& s = r->completion.sampling;
  s.temperature = static_cast<float>(Number(j, "temperature", 0.0, 100.0, 0.8));
  s.top_k = static_cast<int>(std::max<int64_t>(0, Integer(j, "top_k", -1, INT32_MAX, 40)));
  s.top_p = static_cast<float>(Number(j, "top_p", 1e-9, 1.0, 0.95));
  s.min_p = static_cast<float>(Number(j, "min_p", 0.0, 1.0, 0.05));
  s.repeat_penalty = static_cast<float>(Number(j, "repeat_penalty", 0.01, 100.0, 1.0));
  s.repeat_last_n = static_cast<int>(Integer(j, "repeat_last_n", 0, 1 << 20, 64));
  // As llama-server: a sampler not listed does not apply. llama.vim and llama.vscode list
  // top_k, top_p and infill: no temperature, so their suggestions are drawn at temperature 1.
  // (specd applies the listed ones in its own order; infill is accepted and not applied.)
  if (const auto listed = ListedSamplers(j)) {
    if (!listed->count("temperature")) s.temperature = 1.0f;
    if (!listed->count("top_k")) s.top_k = 0;
    if (!listed->count("top_p")) s.top_p = 1.0f;
    if (!listed->count("min_p")) s.min_p = 0.0f;
    if (!listed->count("penalties")) s.repeat_penalty = 1.0f;
  }
  r->seed = Integer(j, "seed", -1, UINT32_MAX, -1);
  // llama-server's "random" seed is -1 (or 2^32 - 1).
  s.seed = r->seed >= 0 && r->seed != UINT32_MAX ? static_cast<uint64_t>(r->seed)
                                                 : std::random_device{}();
  r->n_probs = static_cast<int>(Integer(j, "n_probs", 0, 20, 0));
  r->completion.logprobs = r->n_probs > 0 ? r->n_probs : -1;
}

std::vector<int32_t> InfillPrompt(const json& j, const Tokenizer& tokenizer, const FimTokens& fim,
                                  const ApiLimits& limits, int n_predict) {
  if (!fim.usable()) {
    throw BadRequest("this model has no fill-in-the-middle tokens: /infill needs a FIM model");
  }
  const auto prompt_it = j.find("prompt");
  const std::vector<int32_t> prompt =
      prompt_it == j.end() || prompt_it->is_null()
          ? std::vector<int32_t>{}
          : MixedPrompt(*prompt_it, tokenizer, /*add_special=*/false, /*parse_special=*/true);
  const FimBudget budget{std::min(2048, limits.n_ctx), limits.n_ctx, std::max(n_predict, 0)};
  return FimPrompt(tokenizer, fim, OptionalString(j, "input_prefix"),
                   OptionalString(j, "input_suffix"), ExtraChunks(j), prompt, budget);
}

json TokenProbs(int32_t token, const TokenLogprobs& lp, const Tokenizer& tokenizer) {
  auto entry = [&](int32_t id, float logprob) {
    const std::string piece = tokenizer.Piece(id);
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    return json{
        {"id", id}, {"token", utf8::Sanitize(piece)}, {"bytes", bytes}, {"logprob", logprob}};
  };
  json out = entry(token, lp.logprob);
  json top = json::array();
  for (const auto& [id, logprob] : lp.top) top.push_back(entry(id, logprob));
  out["top_logprobs"] = top;
  return out;
}

json Probabilities(const std::vector<int32_t>& tokens, const std::vector<TokenLogprobs>& lps,
                   const Tokenizer& tokenizer) {
  json out = json::array();
  for (size_t i = 0; i < tokens.size() && i < lps.size(); ++i) {
    out.push_back(TokenProbs(tokens[i], lps[i], tokenizer));
  }
  return out;
}

// response_fields: only the fields asked for; "a/b" brings field b of object a to the top as
// "a/b" (llama-server's rule); a field that is missing is left out.
json SelectFields(const json& full, const std::vector<std::string>& fields) {
  if (fields.empty()) return full;
  json out = json::object();
  for (const std::string& path : fields) {
    const json* at = &full;
    size_t start = 0;
    bool found = true;
    while (found) {
      const size_t slash = path.find('/', start);
      const std::string key = path.substr(start, slash - start);
      found = at->is_object() && at->contains(key);
      if (found) at = &(*at)[key];
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    if (found) out[path] = *at;
  }
  return out;
}

}  // namespace

LlamaRequest ParseLlamaCompletion(const std::string& body, bool infill, const Tokenizer& tokenizer,
                                  const FimTokens& fim, const ApiLimits& limits) {
  const json j = ParseJsonObject(body, limits.max_json_depth);
  RefuseUnsupportedLlama(j);
  LlamaRequest r;
  CompletionRequest& c = r.completion;
  const int64_t n_predict = Integer(j, "n_predict", -1, INT32_MAX, -1);
  if (infill) {
    c.prompt =
        InfillPrompt(j, tokenizer, fim, limits, static_cast<int>(n_predict < 0 ? 128 : n_predict));
  } else {
    const auto it = j.find("prompt");
    if (it == j.end() || it->is_null()) throw BadRequest("'prompt' is required", "prompt");
    c.prompt = MixedPrompt(*it, tokenizer, /*add_special=*/true, /*parse_special=*/true);
  }
  if (c.prompt.empty()) throw BadRequest("'prompt' is empty", "prompt");
  const int64_t room = limits.n_ctx - static_cast<int64_t>(c.prompt.size());
  if (room < 1) {
    throw ApiError(400, "invalid_request_error",
                   "the prompt (" + std::to_string(c.prompt.size()) +
                       " tokens) leaves no room in the context of " + std::to_string(limits.n_ctx) +
                       " positions",
                   "prompt", "context_length_exceeded");
  }
  // -1: until EOS or the context is full (llama-server's default).
  c.max_tokens = static_cast<int>(n_predict < 0 ? room : std::min(n_predict, room));
  ReadSampling(j, &r);
  c.stop = StopStrings(j, 16);
  c.stream = Boolean(j, "stream", false);
  c.ignore_eos = Boolean(j, "ignore_eos", false);
  c.cache_prompt = Boolean(j, "cache_prompt", true);
  c.text_limits.n_indent = static_cast<int>(Integer(j, "n_indent", 0, 1 << 16, 0));
  c.text_limits.t_max_predict_ms = Number(j, "t_max_predict_ms", 0.0, 1e9, 0.0);
  c.time_budget_ms = Number(j, "time_budget_ms", 0.0, 1e9, 0.0);
  r.response_fields = ResponseFields(j);
  c.structured = ParseStructuredRequest(body, /*chat=*/false);
  r.prompt_text = tokenizer.Decode(c.prompt, /*strip_space_prefix=*/false, /*special=*/true);
  return r;
}

json LlamaCompletionResponse(const LlamaRequest& r, const LlamaOutcome& o,
                             const std::string& model_id, const Tokenizer& tokenizer) {
  const CompletionRequest& c = r.completion;
  const auto n = static_cast<int64_t>(o.choice.tokens.size());
  const auto per = [](double ms, int64_t count) { return count > 0 ? ms / count : 0.0; };
  const auto rate = [](double ms, int64_t count) { return ms > 0 ? 1e3 * count / ms : 0.0; };
  json settings = {{"n_predict", c.max_tokens},
                   {"seed", r.seed},
                   {"temperature", c.sampling.temperature},
                   {"top_k", c.sampling.top_k},
                   {"top_p", c.sampling.top_p},
                   {"min_p", c.sampling.min_p},
                   {"repeat_penalty", c.sampling.repeat_penalty},
                   {"repeat_last_n", c.sampling.repeat_last_n},
                   {"stop", c.stop},
                   {"n_probs", r.n_probs},
                   {"ignore_eos", c.ignore_eos},
                   {"n_indent", c.text_limits.n_indent},
                   {"t_max_predict_ms", c.text_limits.t_max_predict_ms},
                   {"stream", c.stream}};
  const int64_t prompt_read = o.prompt_tokens - o.cached_tokens;  // llama-server's prompt_n
  json full = {{"index", 0},
               {"content", utf8::Sanitize(o.choice.text)},
               {"tokens", json::array()},
               {"id_slot", 0},
               {"stop", true},
               {"model", model_id},
               {"tokens_predicted", n},
               {"tokens_evaluated", o.prompt_tokens},
               {"generation_settings", settings},
               {"prompt", utf8::Sanitize(r.prompt_text)},
               {"has_new_line", o.has_new_line},
               {"truncated", false},
               {"stop_type", o.stop_type},
               {"stopping_word", o.stopping_word},
               {"tokens_cached", o.cached_tokens},
               {"timings",
                {{"prompt_n", prompt_read},
                 {"prompt_ms", o.prompt_ms},
                 {"prompt_per_token_ms", per(o.prompt_ms, prompt_read)},
                 {"prompt_per_second", rate(o.prompt_ms, prompt_read)},
                 {"predicted_n", n},
                 {"predicted_ms", o.predicted_ms},
                 {"predicted_per_token_ms", per(o.predicted_ms, n)},
                 {"predicted_per_second", rate(o.predicted_ms, n)}}}};
  if (r.n_probs > 0) {
    full["completion_probabilities"] = Probabilities(o.choice.tokens, o.choice.logprobs, tokenizer);
  }
  return SelectFields(full, r.response_fields);
}

json LlamaStreamChunk(const std::string& content, const std::vector<int32_t>& tokens,
                      const std::vector<TokenLogprobs>& logprobs, int n_probs,
                      int64_t tokens_predicted, int64_t prompt_tokens, const Tokenizer& tokenizer) {
  json chunk = {{"index", 0},
                {"content", utf8::Sanitize(content)},
                {"tokens", json::array()},
                {"stop", false},
                {"id_slot", 0},
                {"tokens_predicted", tokens_predicted},
                {"tokens_evaluated", prompt_tokens}};
  if (n_probs > 0) chunk["completion_probabilities"] = Probabilities(tokens, logprobs, tokenizer);
  return chunk;
}

json TokenizeResponse(const std::string& body, const Tokenizer& tokenizer,
                      const ApiLimits& limits) {
  const json j = ParseJsonObject(body, limits.max_json_depth);
  const auto it = j.find("content");
  if (it == j.end() || !it->is_string()) throw BadRequest("'content' must be a string", "content");
  const auto ids = tokenizer.Encode(it->get<std::string>(), Boolean(j, "add_special", false),
                                    Boolean(j, "parse_special", true));
  if (!Boolean(j, "with_pieces", false)) return {{"tokens", ids}};
  json tokens = json::array();
  for (int32_t id : ids) {
    const std::string piece = tokenizer.Piece(id, /*special=*/true);
    json shown;
    if (utf8::IsValid(piece)) {
      shown = piece;
    } else {  // a partial character: its bytes, as llama-server gives them
      shown = json::array();
      for (unsigned char ch : piece) shown.push_back(static_cast<int>(ch));
    }
    tokens.push_back({{"id", id}, {"piece", shown}});
  }
  return {{"tokens", tokens}};
}

json DetokenizeResponse(const std::string& body, const Tokenizer& tokenizer,
                        const ApiLimits& limits) {
  const json j = ParseJsonObject(body, limits.max_json_depth);
  const auto it = j.find("tokens");
  if (it == j.end() || !it->is_array()) {
    throw BadRequest("'tokens' must be a list of token ids", "tokens");
  }
  std::string content;
  for (int32_t id : TokenIds(*it, tokenizer)) content += tokenizer.Piece(id, /*special=*/true);
  return {{"content", utf8::Sanitize(content)}};
}

json PropsResponse(const PropsInfo& info, const ApiLimits& limits) {
  return {{"default_generation_settings",
           {{"n_ctx", limits.n_ctx},
            {"params",
             {{"n_predict", -1},
              {"temperature", 0.8},
              {"top_k", 40},
              {"top_p", 0.95},
              {"min_p", 0.05},
              {"repeat_penalty", 1.0},
              {"speculative", info.speculative}}}}},
          {"total_slots", info.total_slots},
          {"model_path", info.model_path},
          {"model_alias", limits.model_id},
          {"chat_template", info.chat_template},
          {"modalities", {{"vision", false}, {"audio", false}}},
          {"build_info", "specd 0.1.0"}};
}

}  // namespace specd::server
