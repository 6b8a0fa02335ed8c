#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace specd {

std::string StreamingDecoder::Push(int32_t token) {
  std::string piece = tokenizer_.Piece(token, special_);
  if (first_ && !piece.empty()) {
    if (strip_ && tokenizer_.add_space_prefix() && piece[0] == ' ') piece.erase(0, 1);
    first_ = false;
  }
  pending_ += piece;
  return TakeComplete(false);
}

std::string StreamingDecoder::Finish() { return TakeComplete(true); }

std::string StreamingDecoder::TakeComplete(bool final) {
  std::string out;
  const auto* s = reinterpret_cast<const uint8_t*>(pending_.data());
  size_t i = 0;
  while (i < pending_.size()) {
    const int len = utf8::ValidSequenceAt(s + i, pending_.size() - i);
    if (len > 0) {
      out.append(pending_, i, len);
      i += len;
    } else if (len < 0 && !final) {
      break;  // an incomplete character: wait for the next token
    } else {
      out.append(utf8::kReplacement);
      ++i;
    }
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace specd
