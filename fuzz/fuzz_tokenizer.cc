// libFuzzer target: the tokenizers on arbitrary input. The first byte picks a vocabulary (every
// GGUF in the directories of SPECD_FUZZ_VOCAB_DIRS, ':'-separated: llama.cpp's test vocabularies
// and the models), the second the operation:
//   encode (flags: add_special, parse_special) then decode — for byte-level BPE vocabularies
//   without special parsing, decoding must give the input back exactly when it is valid UTF-8;
//   decode of the rest as little-endian int32 ids — ids outside the vocabulary must throw
//   specd::Error, anything else must give valid UTF-8.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

struct Vocab {
  std::string name;
  std::unique_ptr<specd::GgufFile> file;
  std::unique_ptr<specd::Tokenizer> tokenizer;
  // Byte-level BPE: decoding gives back any text whose bytes all have tokens (falcon's
  // vocabulary lacks some control characters, starcoder's the byte 0xF1: those are dropped, as
  // llama.cpp drops them).
  bool round_trips = false;
};

std::vector<Vocab> LoadVocabs() {
  const char* dirs = std::getenv("SPECD_FUZZ_VOCAB_DIRS");
  std::string list = dirs != nullptr ? dirs : SPECD_FUZZ_DEFAULT_VOCAB_DIRS;
  std::vector<Vocab> vocabs;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    const std::filesystem::path dir = list.substr(start, end - start);
    start = end + 1;
    if (dir.empty() || !std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".gguf") continue;
      try {
        Vocab v{entry.path().filename().string(), specd::GgufFile::Open(entry.path().string()),
                nullptr};
        v.tokenizer = specd::Tokenizer::FromGguf(*v.file);
        v.round_trips = v.tokenizer->kind() == specd::TokenizerKind::kBpe;
        std::fprintf(stderr, "%s: %s\n", v.name.c_str(),
                     v.round_trips ? "round trip checked" : "no round-trip check");
        vocabs.push_back(std::move(v));
      } catch (const specd::Error& e) {
        std::fprintf(stderr, "skipping %s: %s\n", entry.path().c_str(), e.what());
      }
    }
  }
  // Directory order differs between file systems: sort, so an input picks the same vocabulary
  // on every machine and a finding reproduces.
  std::sort(vocabs.begin(), vocabs.end(),
            [](const Vocab& a, const Vocab& b) { return a.name < b.name; });
  if (vocabs.empty()) {
    std::fprintf(stderr, "no vocabulary found in %s (set SPECD_FUZZ_VOCAB_DIRS)\n", list.c_str());
    std::abort();
  }
  std::fprintf(stderr, "fuzzing %zu vocabularies\n", vocabs.size());
  return vocabs;
}

void CheckValidUtf8(const std::string& text) {
  if (!specd::utf8::IsValid(text)) {
    std::fprintf(stderr, "Decode returned invalid UTF-8\n");
    std::abort();
  }
}

void EncodeDecode(const Vocab& vocab, uint8_t flags, std::string_view text) {
  const specd::Tokenizer& t = *vocab.tokenizer;
  const bool add_special = flags & 1, parse_special = flags & 2;
  const std::vector<int32_t> ids = t.Encode(text, add_special, parse_special);
  for (int32_t id : ids) {
    if (id < 0 || id >= t.n_vocab()) std::abort();
  }
  const std::string decoded = t.Decode(ids, /*strip_space_prefix=*/true);
  CheckValidUtf8(decoded);
  const bool every_byte_has_a_token = std::all_of(
      text.begin(), text.end(), [&](char c) { return t.HasByteToken(static_cast<uint8_t>(c)); });
  if (vocab.round_trips && !add_special && !parse_special && specd::utf8::IsValid(text) &&
      every_byte_has_a_token && decoded != text) {
    std::fprintf(stderr, "%s: round trip changed the text (%zu -> %zu bytes): [%.*s] -> [%s]\n",
                 vocab.name.c_str(), text.size(), decoded.size(), static_cast<int>(text.size()),
                 text.data(), decoded.c_str());
    std::abort();
  }
}

void DecodeIds(const specd::Tokenizer& t, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  bool all_valid = true;
  for (int32_t id : ids) all_valid &= id >= 0 && id < t.n_vocab();
  try {
    CheckValidUtf8(t.Decode(ids, false, /*special=*/true));
    if (!all_valid) {
      std::fprintf(stderr, "an id outside the vocabulary was decoded\n");
      std::abort();
    }
  } catch (const specd::Error&) {
    if (all_valid) throw;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Vocab> vocabs = LoadVocabs();
  if (size < 2) return 0;
  const Vocab& vocab = vocabs[data[0] % vocabs.size()];
  const uint8_t op = data[1];
  data += 2;
  size -= 2;
  if (op & 4) {
    DecodeIds(*vocab.tokenizer, data, size);
  } else {
    EncodeDecode(vocab, op, {reinterpret_cast<const char*>(data), size});
  }
  return 0;
}
