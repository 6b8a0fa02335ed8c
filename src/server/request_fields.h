// Reading a request's JSON fields with the checks every route shares: types and ranges named in
// the error (a 400 naming the field), token ids inside the vocabulary, stop strings, and a body
// nested no deeper than a limit.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace specd::server {

// A 400 invalid_request_error naming `param`.
ApiError BadRequest(const std::string& message, const std::string& param = "");
// Optional fields in [lo, hi]; `fallback` when absent or null; a 400 otherwise.
double Number(const nlohmann::json& j, const std::string& key, double lo, double hi,
              double fallback);
int64_t Integer(const nlohmann::json& j, const std::string& key, int64_t lo, int64_t hi,
                int64_t fallback);
bool Boolean(const nlohmann::json& j, const std::string& key, bool fallback);
// Token ids inside the vocabulary (a 400 naming "prompt" otherwise).
std::vector<int32_t> TokenIds(const nlohmann::json& ids, const Tokenizer& tokenizer);
// "stop": a string or a list of at most max_strings non-empty strings.
std::vector<std::string> StopStrings(const nlohmann::json& j, size_t max_strings);
// The deepest nesting of arrays and objects in JSON text (brackets inside strings not counted);
// well defined for any bytes, valid JSON or not.
int JsonNestingDepth(std::string_view text);
// The body as a JSON object; a 400 for invalid JSON, another value, or nesting deeper than
// max_depth (checked before parsing).
nlohmann::json ParseJsonObject(const std::string& body, int max_depth);

}  // namespace specd::server
