#include "grammar/grammar.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "base/error.h"

namespace specd {
namespace {

// Whitespace xgrammar lets the model write between JSON tokens, at most this many characters
// in a run: a model may indent as it likes but cannot loop on whitespace forever.
constexpr int kMaxWhitespaceRun = 32;
constexpr size_t kMaxCachedGrammars = 64;

// One sequence's matcher and its bitmask buffer.
class XgrammarConstraint final : public TokenConstraint {
 public:
  XgrammarConstraint(const xgrammar::CompiledGrammar& grammar, int32_t n_vocab)
      : matcher_(grammar), bitmask_((n_vocab + 31) / 32), n_vocab_(n_vocab) {}

  void Mask(std::span<float> logits) override {
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    if (matcher_.IsTerminated()) {  // past the stop token nothing may follow
      std::fill(logits.begin(), logits.end(), kMasked);
      return;
    }
    DLTensor tensor{};
    int64_t shape = static_cast<int64_t>(bitmask_.size());
    tensor.data = bitmask_.data();
    tensor.device = DLDevice{kDLCPU, 0};
    tensor.ndim = 1;
    tensor.dtype = DLDataType{kDLInt, 32, 1};
    tensor.shape = &shape;
    matcher_.FillNextTokenBitmask(&tensor);
    const size_t n = std::min(logits.size(), static_cast<size_t>(n_vocab_));
    // Most words are all allowed or (inside a JSON structure) all refused: both without a loop
    // over their bits.
    for (size_t word = 0; word * 32 < n; ++word) {
      const uint32_t bits = static_cast<uint32_t>(bitmask_[word]);
      if (bits == 0xFFFFFFFFu) continue;
      const size_t begin = word * 32, end = std::min(n, begin + 32);
      if (bits == 0) {
        std::fill(logits.begin() + begin, logits.begin() + end, kMasked);
        continue;
      }
      for (size_t t = begin; t < end; ++t) {
        if (((bits >> (t - begin)) & 1u) == 0) logits[t] = kMasked;
      }
    }
    // Tokens past the grammar's vocabulary (a wider draft head) are never allowed.
    for (size_t t = n; t < logits.size(); ++t) logits[t] = kMasked;
  }
  bool Advance(int32_t token) override {
    if (token < 0 || token >= n_vocab_ || matcher_.IsTerminated()) return false;
    return matcher_.AcceptToken(token);
  }
  void Rollback(int n) override {
    if (n > 0) matcher_.Rollback(n);
  }
  bool terminated() const override { return matcher_.IsTerminated(); }

 private:
  xgrammar::GrammarMatcher matcher_;
  std::vector<int32_t> bitmask_;  // [ceil(n_vocab / 32)] bit t: token t allowed
  int32_t n_vocab_;
};

class XgrammarFactory final : public TokenConstraintFactory {
 public:
  XgrammarFactory(xgrammar::CompiledGrammar grammar, int32_t n_vocab)
      : grammar_(std::move(grammar)), n_vocab_(n_vocab) {}
  std::unique_ptr<TokenConstraint> Start() const override {
    return std::make_unique<XgrammarConstraint>(grammar_, n_vocab_);
  }

 private:
  xgrammar::CompiledGrammar grammar_;
  int32_t n_vocab_;
};

// A GBNF string literal for `text`.
std::string EbnfLiteral(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        out += c;
    }
  }
  return out + "\"";
}

xgrammar::Grammar JsonSchemaGrammar(const std::string& schema, bool strict) {
  return xgrammar::Grammar::FromJSONSchema(schema, /*any_whitespace=*/true, std::nullopt,
                                           std::nullopt, strict, kMaxWhitespaceRun);
}

// One to max_calls calls, each `open` + one tool's JSON + `close`, separated by a newline.
xgrammar::Grammar ToolCallsGrammar(const GrammarSpec& spec) {
  SPECD_CHECK(!spec.tool_schemas.empty(), "a tool-call grammar needs at least one tool");
  std::vector<xgrammar::Grammar> calls;
  for (const std::string& schema : spec.tool_schemas) {
    calls.push_back(JsonSchemaGrammar(schema, true));
  }
  const xgrammar::Grammar any_call = calls.size() == 1 ? calls[0] : xgrammar::Grammar::Union(calls);
  const xgrammar::Grammar one = xgrammar::Grammar::Concat(
      {xgrammar::Grammar::FromEBNF("root ::= " + EbnfLiteral(spec.tool_format.open)), any_call,
       xgrammar::Grammar::FromEBNF("root ::= " + EbnfLiteral(spec.tool_format.close))});
  const xgrammar::Grammar separator = xgrammar::Grammar::FromEBNF("root ::= \"\\n\"");
  std::vector<xgrammar::Grammar> choices;
  std::vector<xgrammar::Grammar> sequence = {one};
  for (int n = 1; n <= std::max(spec.max_calls, 1); ++n) {
    choices.push_back(sequence.size() == 1 ? one : xgrammar::Grammar::Concat(sequence));
    sequence.push_back(separator);
    sequence.push_back(one);
  }
  return choices.size() == 1 ? choices[0] : xgrammar::Grammar::Union(choices);
}

// xgrammar's message without the time and source location it starts with ("[11:26:41]
// /path/json_schema_converter.cc:4950: Cannot find field ..."), and without the final new line.
std::string LibraryReason(std::string message) {
  if (!message.empty() && message[0] == '[') {
    const size_t location = message.find(".cc:");
    const size_t colon = location == std::string::npos ? location : message.find(": ", location);
    if (colon != std::string::npos) message.erase(0, colon + 2);
  }
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

std::string CacheKey(const GrammarSpec& spec) {
  std::string key = std::to_string(static_cast<int>(spec.kind)) + (spec.strict ? "s" : "n") +
                    std::to_string(spec.max_calls) + "\x1f" + spec.text;
  for (const std::string& s : spec.tool_schemas) key += "\x1f" + s;
  return key + "\x1f" + spec.tool_format.open + "\x1f" + spec.tool_format.close;
}

// The vocabulary xgrammar matches against: each token's bytes; "" marks a token the output never
// holds (control and unknown tokens).
std::vector<std::string> EncodedVocabulary(const Tokenizer& tokenizer) {
  std::vector<std::string> vocab(tokenizer.n_vocab());
  for (int32_t t = 0; t < tokenizer.n_vocab(); ++t) vocab[t] = tokenizer.Piece(t);
  return vocab;
}

}  // namespace

struct GrammarCompiler::Impl {
  Impl(const Tokenizer& tokenizer, int32_t n_vocab, std::vector<int32_t> stop_tokens, int n_threads)
      : info(EncodedVocabulary(tokenizer), xgrammar::VocabType::RAW, n_vocab, stop_tokens),
        compiler(info, std::max(n_threads, 1), /*cache_enabled=*/false),
        n_vocab(n_vocab) {}

  xgrammar::CompiledGrammar CompileUncached(const GrammarSpec& spec) {
    switch (spec.kind) {
      case GrammarKind::kJson:
        return compiler.CompileBuiltinJSONGrammar();
      case GrammarKind::kJsonSchema:
        return compiler.CompileGrammar(JsonSchemaGrammar(spec.text, spec.strict));
      case GrammarKind::kGbnf:
        return compiler.CompileGrammar(spec.text, "root");
      case GrammarKind::kRegex:
        return compiler.CompileRegex(spec.text);
      case GrammarKind::kToolCalls:
        return compiler.CompileGrammar(ToolCallsGrammar(spec));
    }
    throw Error("unknown grammar kind");
  }

  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
  int32_t n_vocab;
  std::mutex mutex;  // guards cache
  std::map<std::string, std::shared_ptr<const TokenConstraintFactory>> cache;
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int32_t n_vocab,
                                 std::vector<int32_t> stop_tokens, int n_threads) {
  SPECD_CHECK(n_vocab >= tokenizer.n_vocab(), "the model's vocabulary (", n_vocab,
              ") is smaller than its tokenizer's (", tokenizer.n_vocab(), ")");
  std::erase_if(stop_tokens, [&](int32_t t) { return t < 0 || t >= n_vocab; });
  impl_ = std::make_unique<Impl>(tokenizer, n_vocab, std::move(stop_tokens), n_threads);
}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<const TokenConstraintFactory> GrammarCompiler::Compile(const GrammarSpec& spec) {
  const std::string key = CacheKey(spec);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto it = impl_->cache.find(key);
    if (it != impl_->cache.end()) return it->second;
  }
  std::shared_ptr<const TokenConstraintFactory> factory;
  try {
    factory = std::make_shared<XgrammarFactory>(impl_->CompileUncached(spec), impl_->n_vocab);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(LibraryReason(e.what()));
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // A server compiles whatever schemas clients send: the cache stays bounded.
  if (impl_->cache.size() >= kMaxCachedGrammars) impl_->cache.clear();
  return impl_->cache.emplace(key, factory).first->second;
}

}  // namespace specd
