// Errors that reach the user. specd reports bad input (malformed files, bad flags, requests that do
// not fit) by throwing specd::Error with a message that names the problem; the CLI and server
// catch it at the top and turn it into a message and a non-zero exit / an HTTP error. Internal
// invariants that cannot be broken by input use the same mechanism so that they never crash.
#pragma once

#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace specd {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The templates below are instantiated in every source, including the kernels built with -mavx2
// or -mavx512* (src/kernels/CMakeLists.txt). The linker keeps one copy of each instance for the
// whole program, and if it kept an AVX-512 one, callers on a CPU without AVX-512 would fault on
// their first error message (it happened under ASan on 2026-12-02). So each ISA's sources get
// their own names: an inline namespace named after the widest ISA the source is compiled for.
// scripts/check-isa-inlines.py (test Build.IsaObjectsLendNoWideInlineCode) finds other cases.
#if defined(__AVX512F__)
#define SPECD_ISA_NAMESPACE isa_avx512
#elif defined(__AVX2__)
#define SPECD_ISA_NAMESPACE isa_avx2
#else
#define SPECD_ISA_NAMESPACE isa_base
#endif

inline namespace SPECD_ISA_NAMESPACE {

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

}  // namespace SPECD_ISA_NAMESPACE

// Messages from the layers below the edges name options by field, in braces: "{top_k} must be
// >= 0". No lower layer speaks in command-line flags: each edge renders the names its own way
// (the CLI as its flags, the server as JSON fields). Replaces every {name} (lower-case letters,
// digits and '_') with name_of(name); other text, other braces included, stays.
std::string RenderFieldNames(std::string_view message,
                             const std::function<std::string(std::string_view)>& name_of);

}  // namespace specd

// Throws specd::Error with the concatenated message when `cond` is false.
#define SPECD_CHECK(cond, ...)               \
  do {                                       \
    if (!(cond)) ::specd::Fail(__VA_ARGS__); \
  } while (0)
