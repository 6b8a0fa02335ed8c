// Errors that reach the user. specd reports bad input (malformed files, bad flags, requests that do
// not fit) by throwing specd::Error with a message that names the problem; the CLI and server
// catch it at the top and turn it into a message and a non-zero exit / an HTTP error. Internal
// invariants that cannot be broken by input use the same mechanism so that they never crash.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace specd {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Parts>
std::string StrCat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <typename... Parts>
[[noreturn]] void Fail(Parts&&... parts) {
  throw Error(StrCat(std::forward<Parts>(parts)...));
}

}  // namespace specd

// Throws specd::Error with the concatenated message when `cond` is false.
#define SPECD_CHECK(cond, ...)               \
  do {                                       \
    if (!(cond)) ::specd::Fail(__VA_ARGS__); \
  } while (0)
