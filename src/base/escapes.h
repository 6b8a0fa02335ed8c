// llama.cpp's -e: escape sequences in a prompt typed on a command line.
#pragma once

#include <string>

namespace specd {

// The escapes \n \t \r \\ \' \" \a \b \f \v \xHH as the characters they name; an unknown or
// incomplete escape is kept as written.
std::string ProcessEscapes(const std::string& text);

}  // namespace specd
