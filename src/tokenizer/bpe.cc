// Byte-level BPE: pre-tokenize, map each word's bytes to symbols, then repeatedly merge the
// adjacent pair of lowest merge rank (ties: leftmost). Symbols are token ids (or virtual ids for
// texts that are not tokens), so a merge is a hash lookup of two integers.
#include <queue>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace specd {
namespace {

struct Symbol {
  int32_t prev, next;
  int32_t id;  // -1 once merged away
};

struct Bigram {
  int32_t rank;
  int32_t left, right;
  int32_t left_id, right_id, merged;
};

struct Later {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::EncodeBpe(std::string_view text, std::vector<int32_t>* out) const {
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  std::vector<Symbol> symbols;
  std::string mapped;
  for (std::string_view word : pre_->Split(text)) {
    const auto hit = cache.find(word);
    if (hit != cache.end()) {
      out->insert(out->end(), hit->second.begin(), hit->second.end());
      continue;
    }
    std::vector<int32_t> ids;
    if (ignore_merges_) {
      mapped.clear();
      for (char c : word) {
        const int32_t s = byte_symbol_[static_cast<uint8_t>(c)];
        mapped += s < n_vocab() ? tokens_[s] : virtual_text_[s - n_vocab()];
      }
      const int32_t whole = Find(mapped);
      if (whole >= 0) ids.push_back(whole);
    }
    if (ids.empty()) {
      symbols.clear();
      for (size_t i = 0; i < word.size(); ++i) {
        symbols.push_back({static_cast<int32_t>(i) - 1,
                           i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1,
                           byte_symbol_[static_cast<uint8_t>(word[i])]});
      }
      std::priority_queue<Bigram, std::vector<Bigram>, Later> queue;
      auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const uint64_t key = (static_cast<uint64_t>(symbols[left].id) << 32) |
                             static_cast<uint32_t>(symbols[right].id);
        const auto it = merges_.find(key);
        if (it == merges_.end()) return;
        queue.push(
            {it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.merged});
      };
      for (size_t i = 1; i < symbols.size(); ++i) {
        try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
      }
      while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        Symbol& left = symbols[b.left];
        Symbol& right = symbols[b.right];
        // Stale if either side has merged since the pair was queued.
        if (left.id != b.left_id || right.id != b.right_id || left.next != b.right) continue;
        left.id = b.merged;
        right.id = -1;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = b.left;
        try_add(left.prev, b.left);
        try_add(b.left, left.next);
      }
      for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
        const int32_t id = symbols[i].id;
        if (id < n_vocab()) {
          ids.push_back(id);
          continue;
        }
        // Not a token: its single bytes, where those are tokens (as llama.cpp does).
        for (char c : virtual_text_[id - n_vocab()]) {
          const int32_t single = Find(std::string_view(&c, 1));
          if (single >= 0) ids.push_back(single);
        }
      }
    }
    out->insert(out->end(), ids.begin(), ids.end());
    cache.emplace(word, std::move(ids));
  }
}

}  // namespace specd
