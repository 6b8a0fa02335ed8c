// UTF-8 helpers shared by the tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace specd::utf8 {

// Length of the sequence a lead byte announces (1 for continuation or invalid bytes, so scanning
// always advances).
inline int SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Length of the valid UTF-8 sequence at s[0..n), or 0 if it is invalid (overlong, surrogate,
// out of range, bad continuation), or -1 if it is a valid but incomplete prefix.
int ValidSequenceAt(const uint8_t* s, size_t n);

// Replaces every byte that is not part of a valid UTF-8 sequence with U+FFFD.
std::string Sanitize(std::string_view text);

// Whether the whole text is valid, complete UTF-8.
bool IsValid(std::string_view text);

// Appends the UTF-8 encoding of a code point.
void Append(uint32_t cp, std::string* out);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace specd::utf8
