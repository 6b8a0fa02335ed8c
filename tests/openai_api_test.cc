// The OpenAI request parser and the stop-string cutter, without a server: what a request becomes,
// which requests are refused with which status, and how a choice's text is cut and streamed.
#include "server/openai_api.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "base/error.h"
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

// return_token_sources: the deltas' runs cover their text exactly, change where the source does,
// count each token once, and stop where a stop string cuts the text.
TEST_F(OpenAiApiTest, SourceRunsCoverTheStreamedTextAndCountTokens) {
  EXPECT_FALSE(Parse(R"({"prompt": "a"})").token_sources);
  EXPECT_TRUE(Parse(R"({"prompt": "a", "return_token_sources": true})").token_sources);
  EXPECT_EQ(Refusal(R"({"prompt": "a", "return_token_sources": "yes"})").first, 400);
  const std::vector<int32_t> tokens =
      tokenizer_->Encode("héllo wörld, x = 1; END more", false, false);
  ChoiceText choice(*tokenizer_, {"END"});
  std::string streamed, from_runs;
  int n_tokens = 0;
  std::vector<TokenSource> runs_sources;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenSource source = i % 3 == 0   ? TokenSource::kTarget
                               : i % 3 == 1 ? TokenSource::kDraft
                                            : TokenSource::kLookup;
    const bool stopped = choice.Push(tokens[i], source);
    std::vector<SourceRun> runs;
    streamed += choice.TakeDelta(stopped, &runs);
    for (const SourceRun& run : runs) {
      from_runs += run.text;
      n_tokens += run.n_tokens;
      EXPECT_FALSE(run.text.empty());
      runs_sources.push_back(run.source);
    }
    if (stopped) break;
  }
  EXPECT_EQ(streamed, "héllo wörld, x = 1; ");
  EXPECT_EQ(from_runs, streamed);
  EXPECT_GT(n_tokens, 5);
  EXPECT_LE(n_tokens, static_cast<int>(tokens.size()));
  EXPECT_NE(std::find(runs_sources.begin(), runs_sources.end(), TokenSource::kLookup),
            runs_sources.end());
  EXPECT_STREQ(SourceName(TokenSource::kDraft), "draft");
}

// --chat-template chatml on a vocabulary without ChatML's tokens: the markers are text and the
// end-of-turn marker is a stop string of chat requests.
TEST(ChatTemplateByName, MarkersTheVocabularyLacksAreTextAndStopStrings) {
  const auto file = GgufFile::Open(SPECD_SOURCE_DIR "/models/specd-tokenizer.gguf");
  const auto tokenizer = Tokenizer::FromGguf(*file);
  EXPECT_THROW(ChatTemplate::FromGguf(*file, *tokenizer), Error);
  const ChatTemplate chat = ChatTemplate::Named("chatml", *tokenizer);
  EXPECT_EQ(chat.stop_strings(), std::vector<std::string>{"<|im_end|>"});
  EXPECT_EQ(chat.stop_tokens(), std::vector<int32_t>{tokenizer->eos()});
  const std::vector<int32_t> prompt = EncodeChat(*tokenizer, chat, {{"user", "hi"}}, false);
  EXPECT_EQ(tokenizer->Decode(prompt).find("<|im_start|>user\nhi<|im_end|>"), 0u);
  ApiLimits limits;
  limits.model_id = "m";
  limits.n_ctx = 256;
  const CompletionRequest r =
      ParseCompletionRequest(R"({"messages": [{"role": "user", "content": "hi"}], "stop": "x"})",
                             true, *tokenizer, &chat, FimTokens{}, limits);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "<|im_end|>"}));
  EXPECT_THROW(ChatTemplate::Named("llama3", *tokenizer), Error);
}

}  // namespace
}  // namespace specd::server

namespace specd::server {
namespace {

// The structured-output fields: what each becomes, and what is refused naming which field.
StructuredRequest Structured(const std::string& body, bool chat = true) {
  return ParseStructuredRequest(body, chat);
}

std::string RefusedField(const std::string& body, bool chat = true) {
  try {
    ParseStructuredRequest(body, chat);
    return "";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    return e.param;
  }
}

const char* kWeatherTool =
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"]}, "strict": true}})";

TEST(StructuredRequest, ResponseFormatsBecomeGrammars) {
  EXPECT_FALSE(Structured(R"({"response_format": {"type": "text"}})").grammar);
  EXPECT_EQ(Structured(R"({"response_format": {"type": "json_object"}})").grammar->kind,
            GrammarKind::kJson);
  const StructuredRequest schema = Structured(
      R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
          "schema": {"type": "object", "properties": {"z": {}, "a": {}}}}}})");
  EXPECT_EQ(schema.grammar->kind, GrammarKind::kJsonSchema);
  EXPECT_TRUE(schema.grammar->strict);
  EXPECT_EQ(schema.grammar_field, "response_format");
  // The schema's properties keep their order: the answer's keys come in it.
  EXPECT_LT(schema.grammar->text.find("\"z\""), schema.grammar->text.find("\"a\""));
  EXPECT_EQ(Structured(R"({"grammar": "root ::= \"a\""})").grammar->kind, GrammarKind::kGbnf);
  EXPECT_EQ(Structured(R"({"json_schema": {"type": "integer"}})", false).grammar_field,
            "json_schema");
}

TEST(StructuredRequest, ToolChoicesShapeTheAnswer) {
  const std::string tools = std::string(R"({"tools": [)") + kWeatherTool + "]";
  const StructuredRequest automatic = Structured(tools + "}");
  EXPECT_FALSE(automatic.grammar);
  EXPECT_TRUE(automatic.parse_tool_calls);
  ASSERT_EQ(automatic.tools.size(), 1u);
  EXPECT_EQ(
      automatic.tools[0].rfind(R"({"type": "function", "function": {"name": "get_weather")", 0),
      0u);  // as the template's tojson writes it
  const StructuredRequest none = Structured(tools + R"(, "tool_choice": "none"})");
  EXPECT_TRUE(none.tools.empty());
  EXPECT_FALSE(none.parse_tool_calls);
  const StructuredRequest required = Structured(tools + R"(, "tool_choice": "required"})");
  ASSERT_TRUE(required.grammar);
  EXPECT_EQ(required.grammar->kind, GrammarKind::kToolCalls);
  EXPECT_GT(required.grammar->max_calls, 1);
  const StructuredRequest named = Structured(
      tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                 "parallel_tool_calls": false})");
  ASSERT_TRUE(named.grammar);
  EXPECT_EQ(named.grammar->max_calls, 1);
  EXPECT_NE(named.grammar->tool_schemas.at(0).find(R"("const":"get_weather")"), std::string::npos);
}

TEST(StructuredRequest, BadFieldsAreFourHundredsNamingThem) {
  const std::string tools = std::string(R"("tools": [)") + kWeatherTool + "]";
  EXPECT_EQ(RefusedField(R"({"response_format": {"type": "yaml"}})"), "response_format");
  EXPECT_EQ(RefusedField(R"({"response_format": {"type": "json_schema"}})"), "response_format");
  EXPECT_EQ(RefusedField(R"({"response_format": 3})"), "response_format");
  EXPECT_EQ(RefusedField(R"({"grammar": 7})"), "grammar");
  EXPECT_EQ(RefusedField(R"({"response_format": {"type": "json_object"}, "grammar": "x"})"),
            "grammar");
  EXPECT_EQ(RefusedField(R"({"tools": [{"type": 5}]})"), "tools");
  EXPECT_EQ(RefusedField(R"({"tools": {}})"), "tools");
  EXPECT_EQ(RefusedField(R"({"functions": []})"), "functions");
  EXPECT_EQ(RefusedField("{" + tools + R"(, "tool_choice": "sometimes"})"), "tool_choice");
  EXPECT_EQ(RefusedField("{" + tools +
                         R"(, "tool_choice": {"type": "function", "function": {"name": "x"}}})"),
            "tool_choice");
  EXPECT_EQ(RefusedField(R"({"tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(RefusedField("{" + tools + "}", /*chat=*/false), "tools");
  EXPECT_EQ(
      RefusedField("{" + tools +
                   R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})"),
      "tool_choice");
  EXPECT_EQ(RefusedField(R"({"parallel_tool_calls": "yes"})"), "parallel_tool_calls");
  EXPECT_EQ(RefusedField(R"({"reasoning_effort": "high"})"), "reasoning_effort");
  EXPECT_EQ(RefusedField(R"({"store": true})"), "store");
  EXPECT_EQ(RefusedField(R"({"store": false})"), "");
}

TEST(ToolCalls, SplitFromTheTextWholeOrStreamed) {
  const std::string text =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
      "</tool_call>";
  const ToolCallOutput whole = SplitToolCalls(text, /*parallel=*/true);
  EXPECT_EQ(whole.content, "Let me look.");
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.calls[0].name, "get_weather");
  EXPECT_EQ(whole.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(whole.calls[1].name, "now");
  EXPECT_EQ(whole.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_NE(whole.calls[0].id, whole.calls[1].id);
  EXPECT_EQ(SplitToolCalls(text, /*parallel=*/false).calls.size(), 1u);
  // Streamed a character at a time: the same content and calls, no call text leaking.
  ToolCallStream stream(true);
  std::vector<ToolCall> calls;
  std::string content;
  for (size_t i = 0; i < text.size(); ++i) {
    content += stream.Push(text.substr(i, 1), i + 1 == text.size(), &calls);
  }
  EXPECT_EQ(content, "Let me look.\n");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].name, "now");
  // A block that is not a call stays text, as does a cut one.
  EXPECT_EQ(SplitToolCalls("<tool_call>not json</tool_call>", true).content,
            "<tool_call>not json</tool_call>");
  const ToolCallOutput cut = SplitToolCalls("<tool_call>\n{\"name\": \"now\", \"argu", true);
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, "<tool_call>\n{\"name\": \"now\", \"argu");
}

}  // namespace
}  // namespace specd::server
