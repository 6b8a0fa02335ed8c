// Prompt files in JSON Lines, one request per line: {"prompt": "text"} or {"tokens": [1, 2, 3]}.
// Used by `generate --prompts` and by the trainer's chat prompts, so both accept and reject the
// same files with the same messages. Blank lines are skipped; anything else that is not one of
// the two forms is an Error naming the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace specd {

struct PromptLine {
  int line_no = 0;              // 1-based line of the file
  bool has_tokens = false;      // {"tokens": [...]} rather than {"prompt": "..."}
  std::string text;             // the prompt (valid UTF-8: the JSON parser checks it)
  std::vector<int32_t> tokens;  // the ids, when has_tokens (each in [0, 2^31))
};

// Parses the whole file's bytes; `source_name` names it in errors. With allow_tokens false a
// {"tokens": ...} line is an error (callers that encode text themselves).
std::vector<PromptLine> ParsePromptLines(std::string_view jsonl, const std::string& source_name,
                                         bool allow_tokens);

}  // namespace specd
