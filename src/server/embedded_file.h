// Files compiled into the binary (cmake/embed_files.cmake): the chat page's HTML, script and
// style sheet, served by `specd serve` at `/` without anything installed beside it.
#pragma once

#include <span>
#include <string_view>

namespace specd::server {

struct EmbeddedFile {
  std::string_view url;           // where it is served ("/", "/webui/app.js")
  std::string_view content_type;  // its Content-Type
  std::string_view body;
};

// The chat page's files (src/server/webui/).
std::span<const EmbeddedFile> WebUiFiles();

}  // namespace specd::server
