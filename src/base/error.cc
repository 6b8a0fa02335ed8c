#include "base/error.h"

#include <algorithm>
#include <cctype>

namespace specd {

std::string RenderFieldNames(std::string_view message,
                             const std::function<std::string(std::string_view)>& name_of) {
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    const size_t open = message.find('{', i);
    if (open == std::string_view::npos) break;
    size_t close = open + 1;
    while (close < message.size() &&
           (std::islower(static_cast<unsigned char>(message[close])) ||
            std::isdigit(static_cast<unsigned char>(message[close])) || message[close] == '_')) {
      ++close;
    }
    out.append(message.substr(i, open - i));
    if (close < message.size() && message[close] == '}' && close > open + 1) {
      out += name_of(message.substr(open + 1, close - open - 1));
      i = close + 1;
    } else {
      out += '{';
      i = open + 1;
    }
  }
  out.append(message.substr(std::min(i, message.size())));
  return out;
}

}  // namespace specd
