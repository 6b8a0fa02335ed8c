#include "server/request_fields.h"

#include <algorithm>

namespace specd::server {

using nlohmann::json;

ApiError BadRequest(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", message, param);
}

// An optional number in [lo, hi]; `fallback` when absent or null.
double Number(const json& j, const std::string& key, double lo, double hi, double fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw BadRequest("'" + key + "' must be a number", key);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    throw BadRequest(
        "'" + key + "' must be between " + Dump(lo) + " and " + Dump(hi) + ", got " + it->dump(),
        key);
  }
  return v;
}

int64_t Integer(const json& j, const std::string& key, int64_t lo, int64_t hi, int64_t fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw BadRequest("'" + key + "' must be an integer", key);
  const int64_t v =
      it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX ? INT64_MAX : it->get<int64_t>();
  if (v < lo || v > hi) {
    throw BadRequest("'" + key + "' must be between " + std::to_string(lo) + " and " +
                         std::to_string(hi) + ", got " + it->dump(),
                     key);
  }
  return v;
}

bool Boolean(const json& j, const std::string& key, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw BadRequest("'" + key + "' must be true or false", key);
  return it->get<bool>();
}

std::vector<int32_t> TokenIds(const json& ids, const Tokenizer& tokenizer) {
  std::vector<int32_t> out;
  for (const auto& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= tokenizer.n_vocab()) {
      throw BadRequest("prompt token ids must be integers in [0, " +
                           std::to_string(tokenizer.n_vocab()) + "), got " + id.dump(),
                       "prompt");
    }
    out.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return out;
}

std::vector<std::string> StopStrings(const json& j, size_t max_strings) {
  const auto it = j.find("stop");
  if (it == j.end() || it->is_null()) return {};
  const std::string too_many =
      "'stop' must be a string or up to " + std::to_string(max_strings) + " strings";
  std::vector<std::string> stop;
  if (it->is_string()) {
    stop.push_back(it->get<std::string>());
  } else if (it->is_array() && it->size() <= max_strings) {
    for (const auto& s : *it) {
      if (!s.is_string()) throw BadRequest(too_many, "stop");
      stop.push_back(s.get<std::string>());
    }
  } else {
    throw BadRequest(too_many, "stop");
  }
  for (const auto& s : stop) {
    if (s.empty()) throw BadRequest("'stop' strings must not be empty", "stop");
  }
  return stop;
}

int JsonNestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

json ParseJsonObject(const std::string& body, int max_depth) {
  // Checked before parsing: a value nested 200,000 deep parses, but its recursive destruction
  // overflows the stack of the thread that handles the request (the whole server dies).
  if (JsonNestingDepth(body) > max_depth) {
    throw BadRequest("the request body is nested deeper than " + std::to_string(max_depth) +
                     " levels");
  }
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw BadRequest("the request body is not valid JSON (in UTF-8)");
  if (!j.is_object()) throw BadRequest("the request body must be a JSON object");
  return j;
}

}  // namespace specd::server
