// SentencePiece-style BPE over an escaped text ("▁" for spaces): start from UTF-8 characters,
// repeatedly merge the adjacent pair whose concatenation is the vocabulary piece with the highest
// score (ties: leftmost), then emit pieces, falling back to <0xXX> byte tokens.
#include <queue>
#include <unordered_map>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace specd {
namespace {

struct Symbol {
  int32_t prev, next;
  uint32_t begin, length;  // bytes of the escaped text; length 0 once merged away
};

struct Bigram {
  float score;
  int32_t left, right;
  uint32_t length;
};

struct Lower {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::EncodeSpm(std::string_view text, std::vector<int32_t>* out) const {
  if (spm_separators_.empty() && !spm_split_before_space_) {
    EncodeSpmSegment(text, out);
    return;
  }
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;  // -> range of *out
  size_t begin = 0;
  auto flush = [&](size_t end) {
    if (end <= begin) return;
    const std::string_view segment = text.substr(begin, end - begin);
    const auto hit = cache.find(segment);
    if (hit != cache.end()) {
      const auto [from, count] = hit->second;
      for (size_t i = 0; i < count; ++i) {
        const int32_t id = (*out)[from + i];
        out->push_back(id);
      }
    } else {
      const size_t from = out->size();
      EncodeSpmSegment(segment, out);
      cache.emplace(segment, std::make_pair(from, out->size() - from));
    }
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c == '\n' || c == '\t' || c == '\r') &&
        spm_separators_.count(std::string_view(&text[i], 1))) {
      flush(i);
      begin = i;
      flush(i + 1);
      begin = i + 1;
    } else if (spm_split_before_space_ && c == '\xE2' && i > begin &&
               text.compare(i, 3, "\xE2\x96\x81") == 0 &&
               !(i >= 3 && text.compare(i - 3, 3, "\xE2\x96\x81") == 0)) {
      flush(i);
      begin = i;
    }
  }
  flush(text.size());
}

void Tokenizer::EncodeSpmSegment(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const uint32_t len = static_cast<uint32_t>(
        std::min<size_t>(utf8::SequenceLength(static_cast<uint8_t>(text[at])), text.size() - at));
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(
        {index - 1, at + len < text.size() ? index + 1 : -1, static_cast<uint32_t>(at), len});
    at += len;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const int32_t id = Find(text.substr(symbols[left].begin, length));
    if (id < 0) return;
    queue.push({scores_[id], left, right, length});
  };
  for (size_t i = 1; i < symbols.size(); ++i)
    try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != b.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].begin, symbols[i].length);
    const int32_t id = Find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte = ByteToken(static_cast<uint8_t>(c));
      if (byte >= 0) out->push_back(byte);
    }
  }
}

}  // namespace specd
