// The rows of one forward pass.
#pragma once

#include <cstdint>
#include <vector>

namespace specd {

// Rows of one forward pass, struct-of-arrays. Rows of one sequence must be contiguous; row j of a
// sequence writes its keys / values at KV index (the sequence's KV length + j). A row follows
// the previous row of its sequence (a chain: position one more, seeing every earlier row), or,
// in a token tree, names its parent row: its position is the parent's + 1 and it sees the
// sequence's committed keys, its ancestors and itself only.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> slots;    // the KV-cache slot each row reads and writes
  std::vector<uint8_t> output;   // 1: return logits for this row
  std::vector<int32_t> parents;  // batch row of each row's parent, -1: the previous row (a
                                 // chain), kCommittedParent; empty: every row is a chain row

  void Add(int32_t token, int32_t position, int32_t slot, bool want_logits) {
    tokens.push_back(token);
    positions.push_back(position);
    slots.push_back(slot);
    output.push_back(want_logits ? 1 : 0);
    if (!parents.empty()) parents.push_back(-1);
  }
  // A token-tree node whose parent is batch row `parent` (of the same sequence, earlier), or
  // kCommittedParent: a child of the sequence's last committed token (the root of a tree whose
  // root is already in the cache), seeing the committed keys and itself only.
  static constexpr int32_t kCommittedParent = -2;
  void AddNode(int32_t token, int32_t position, int32_t slot, bool want_logits, int32_t parent) {
    if (parents.empty()) parents.assign(tokens.size(), -1);
    tokens.push_back(token);
    positions.push_back(position);
    slots.push_back(slot);
    output.push_back(want_logits ? 1 : 0);
    parents.push_back(parent);
  }
  void Clear() {
    tokens.clear();
    positions.clear();
    slots.clear();
    output.clear();
    parents.clear();
  }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_outputs() const;
};

}  // namespace specd
