#include "tokenizer/prompt_file.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace specd {
namespace {

std::vector<int32_t> TokenIds(const nlohmann::json& ids, const std::string& where) {
  SPECD_CHECK(ids.is_array(), where, ": \"tokens\" must be an array of token ids");
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (const auto& id : ids) {
    SPECD_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                    id.get<int64_t>() <= std::numeric_limits<int32_t>::max(),
                where, ": token ids must be integers in [0, 2^31), got ", id.dump());
    out.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return out;
}

PromptLine ParseOne(std::string_view line, int line_no, const std::string& source_name,
                    bool allow_tokens) {
  const std::string where = source_name + ":" + std::to_string(line_no);
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  SPECD_CHECK(!j.is_discarded(), where, ": not a JSON value (each line is one JSON object)");
  SPECD_CHECK(j.is_object(), where, ": needs a JSON object like {\"prompt\": \"...\"}");
  PromptLine out;
  out.line_no = line_no;
  if (allow_tokens && j.contains("tokens")) {
    out.has_tokens = true;
    out.tokens = TokenIds(j["tokens"], where);
    SPECD_CHECK(!out.tokens.empty(), where, ": empty prompt");
    return out;
  }
  const auto prompt = j.find("prompt");
  SPECD_CHECK(prompt != j.end() && prompt->is_string(), where, ": needs a \"prompt\" string",
              allow_tokens ? " (or a \"tokens\" array)" : "");
  out.text = prompt->get<std::string>();
  SPECD_CHECK(!out.text.empty(), where, ": empty prompt");
  return out;
}

}  // namespace

std::vector<PromptLine> ParsePromptLines(std::string_view jsonl, const std::string& source_name,
                                         bool allow_tokens) {
  std::vector<PromptLine> lines;
  int line_no = 0;
  size_t start = 0;
  while (start < jsonl.size()) {
    size_t end = jsonl.find('\n', start);
    if (end == std::string_view::npos) end = jsonl.size();
    const std::string_view line = jsonl.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    lines.push_back(ParseOne(line, line_no, source_name, allow_tokens));
  }
  return lines;
}

}  // namespace specd
