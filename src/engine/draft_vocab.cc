#include "engine/draft_vocab.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "base/error.h"

namespace specd {

TokenRanking ReadTokenRanking(const std::string& path) {
  std::ifstream in(path);
  SPECD_CHECK(in.good(), "cannot open token ranking '", path, "'");
  std::string line;
  std::getline(in, line);
  TokenRanking r;
  long long n_vocab = 0;
  SPECD_CHECK(std::sscanf(line.c_str(), "specd-token-ranking 1 n_vocab=%lld", &n_vocab) == 1 &&
                  n_vocab >= 1 && n_vocab <= (int64_t{1} << 24),
              path,
              ": not a token ranking (its first line should be "
              "'specd-token-ranking 1 n_vocab=N', see scripts/make-token-ranking.py)");
  r.n_vocab = n_vocab;
  std::vector<char> seen(r.n_vocab, 0);
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    if (line.empty() || line[0] == '#') continue;
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(line, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SPECD_CHECK(used == line.size() && id >= 0 && id < r.n_vocab && !seen[id], path, ":", line_no,
                ": expected a token id in 0..", r.n_vocab - 1, " not listed before, got '", line,
                "'");
    seen[id] = 1;
    r.tokens.push_back(static_cast<int32_t>(id));
  }
  SPECD_CHECK(!r.tokens.empty(), path, ": the ranking lists no tokens");
  return r;
}

int DraftVocabSize(const DraftModelConfig& flags) {
  if (flags.vocab_ranking.empty()) return 0;
  return flags.vocab < 0 ? SpeculationDefaults::kDraftVocab : flags.vocab;
}

DraftVocab DraftVocabFor(const DraftModelConfig& flags) {
  SPECD_CHECK(flags.vocab <= 0 || !flags.vocab_ranking.empty(), "{draft_vocab} ", flags.vocab,
              " needs a token ranking ({draft_vocab_file}); this draft has none by default");
  const int size = DraftVocabSize(flags);
  if (size == 0) return {};
  TokenRanking ranking = ReadTokenRanking(flags.vocab_ranking);
  DraftVocab v;
  v.n_vocab = ranking.n_vocab;
  ranking.tokens.resize(std::min<size_t>(ranking.tokens.size(), size));
  v.head_tokens = std::move(ranking.tokens);
  return v;
}

}  // namespace specd
