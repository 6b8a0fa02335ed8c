// libFuzzer target: arbitrary bytes as a --prompts JSON Lines file. The reader must return
// prompts or throw specd::Error naming the line; every prompt it returns is non-empty, its text
// valid UTF-8 and its line numbers increasing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "base/error.h"
#include "tokenizer/prompt_file.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    int last_line = 0;
    for (const auto& p : specd::ParsePromptLines(text, "fuzz.jsonl", /*allow_tokens=*/true)) {
      if (p.line_no <= last_line) std::abort();
      last_line = p.line_no;
      if (p.has_tokens ? p.tokens.empty() : p.text.empty()) std::abort();
      if (!specd::utf8::IsValid(p.text)) std::abort();
    }
  } catch (const specd::Error&) {
  }
  return 0;
}
