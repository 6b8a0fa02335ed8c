// The OpenAI request parser and the stop-string cutter, without a server: what a request becomes,
// which requests are refused with which status, and how a choice's text is cut and streamed.
#include "server/openai_api.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "server/fim_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specd::server {
namespace {

// SmolLM2's vocabulary and ChatML template, from the shipped draft.
class OpenAiApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    file_ = GgufFile::Open(SPECD_SOURCE_DIR "/models/specd-smollm2-draft.gguf").release();
    tokenizer_ = Tokenizer::FromGguf(*file_).release();
    chat_ = new ChatTemplate(ChatTemplate::FromGguf(*file_, *tokenizer_));
  }
  static void TearDownTestSuite() {
    delete chat_;
    delete tokenizer_;
    delete file_;
  }

  static ApiLimits Limits() {
    ApiLimits limits;
    limits.model_id = "m";
    limits.n_ctx = 256;
    limits.max_n = 4;
    return limits;
  }
  CompletionRequest Parse(const std::string& body, bool chat = false) const {
    return ParseCompletionRequest(body, chat, *tokenizer_, chat_, FimTokens{}, Limits());
  }
  // The status and the offending parameter of a refused request (0 if accepted).
  std::pair<int, std::string> Refusal(const std::string& body, bool chat = false) const {
    try {
      Parse(body, chat);
      return {0, ""};
    } catch (const ApiError& e) {
      return {e.status, e.param};
    }
  }

  static GgufFile* file_;
  static Tokenizer* tokenizer_;
  static ChatTemplate* chat_;
};

GgufFile* OpenAiApiTest::file_ = nullptr;
Tokenizer* OpenAiApiTest::tokenizer_ = nullptr;
ChatTemplate* OpenAiApiTest::chat_ = nullptr;

TEST_F(OpenAiApiTest, CompletionFieldsBecomeTheRequest) {
  const CompletionRequest r = Parse(
      R"({"model": "m", "prompt": "def f(x):", "max_tokens": 12, "temperature": 0.5,
          "top_p": 0.9, "n": 2, "seed": 7, "stop": ["\n\n", "return"], "logprobs": 3})");
  EXPECT_EQ(r.prompt, tokenizer_->Encode("def f(x):", true, false));
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "return"}));
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_FALSE(r.chat);
}

TEST_F(OpenAiApiTest, ChatMessagesGoThroughTheTemplate) {
  const CompletionRequest r = Parse(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})", true);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.prompt, EncodeChat(*tokenizer_, *chat_, {{"user", "Hi"}}, false));
  EXPECT_EQ(r.stop_tokens, chat_->stop_tokens());
}

TEST_F(OpenAiApiTest, WrongTypesAndLimitsAreFourHundreds) {
  // Found by fuzz_openai_request: a content part whose "type" is not a string threw json's own
  // type_error (a 500 in the server) instead of a 400.
  EXPECT_EQ(Refusal(R"({"messages": [{"role": "user", "content": [{"type": true, "text": "x"}]}]})",
                    true),
            (std::pair<int, std::string>{400, "messages"}));
  EXPECT_EQ(Refusal(R"({"prompt": "a", "max_tokens": "many"})").first, 400);
  EXPECT_EQ(Refusal(R"({"prompt": "a", "max_tokens": 100000})").first, 400);  // over n_ctx
  EXPECT_EQ(Refusal(R"({"prompt": "a", "n": 5})").first, 400);                // over max_n
  EXPECT_EQ(Refusal(R"({"prompt": "a", "stop": ["1", "2", "3", "4", "5"]})").first, 400);
  EXPECT_EQ(Refusal(R"({"prompt": "a", "logprobs": 21})").first, 400);
  EXPECT_EQ(Refusal(R"({"prompt": "a", "temperature": -1})").first, 400);
  EXPECT_EQ(Refusal(R"({"prompt": ""})").first, 400);
  EXPECT_EQ(Refusal(R"({"prompt": "a", "echo": true})").first, 400);  // refused by name
  EXPECT_EQ(Refusal(R"([1, 2])").first, 400);
  EXPECT_EQ(Refusal("{\"prompt\": " + std::string(100, '[') + std::string(100, ']') + "}").first,
            400);  // nested deeper than max_json_depth
  EXPECT_EQ(Refusal(R"({"prompt": "a", "max_tokens": 4})").first, 0);
}

// The text of `tokens` through a ChoiceText, as streamed deltas and as the final text.
struct Cut {
  std::string streamed, text;
  bool stopped = false;
};
Cut CutText(const Tokenizer& tokenizer, const std::string& source, std::vector<std::string> stop) {
  ChoiceText choice(tokenizer, std::move(stop));
  Cut out;
  for (int32_t t : tokenizer.Encode(source, false, false)) {
    out.stopped = choice.Push(t);
    out.streamed += choice.TakeDelta(false);
    if (out.stopped) break;
  }
  out.streamed += choice.TakeDelta(true);
  out.text = choice.text();
  return out;
}

TEST_F(OpenAiApiTest, StopStringsCutTheTextAndStreamingNeverSendsPastThem) {
  const Cut cut = CutText(*tokenizer_, "x = 1\nreturn x\n\nprint(x)", {"\n\n"});
  EXPECT_TRUE(cut.stopped);
  EXPECT_EQ(cut.text, "x = 1\nreturn x");
  EXPECT_EQ(cut.streamed, cut.text);
  // A stop string split over tokens, and one that never appears.
  EXPECT_EQ(CutText(*tokenizer_, "abc END def", {"ND d"}).text, "abc E");
  const Cut none = CutText(*tokenizer_, "héllo wörld", {"zzz"});
  EXPECT_FALSE(none.stopped);
  EXPECT_EQ(none.text, "héllo wörld");
  EXPECT_EQ(none.streamed, none.text);
}

}  // namespace
}  // namespace specd::server
