// The specd binary end to end: generation with --json, synthetic models, and clear errors for bad
// flags and files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/test_util.h"

namespace specd {
namespace {

struct CliRun {
  int exit_code;
  std::string out;  // stdout and stderr together
};

CliRun RunSpecd(const std::string& args) {
  const std::string cmd = std::string(SPECD_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(Cli, GenerateJsonLinesAndSummary) {
  const std::string model = testing::TinyModel("tiny", DType::kQ8_0);
  const CliRun r = RunSpecd("generate -m " + model +
                            " --tokens 1,5,9 -n 6 --batch 3 --seed 4 --temp 0.7 --top-k 20 "
                            "--top-p 0.9 --attention pad --ignore-eos --json -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  int n_seq = 0;
  bool summary = false;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("type")) {
      EXPECT_EQ(j["type"], "summary");
      EXPECT_EQ(j["strategy"], "ar");
      EXPECT_EQ(j["batch"], 3);
      EXPECT_EQ(j["n_tokens"], 18);
      for (const char* k : {"tokens_per_s", "t_prefill_ms", "t_decode_ms"})
        EXPECT_TRUE(j.contains(k));
      summary = true;
    } else {
      EXPECT_EQ(j["index"], n_seq);
      EXPECT_EQ(j["tokens"].size(), 6u);
      EXPECT_EQ(j["n_tokens"], 6);
      EXPECT_EQ(j["finish_reason"], "length");
      EXPECT_LT(j["mean_logprob"].get<double>(), 0.0);
      for (const char* k : {"text", "elapsed_ms"}) EXPECT_TRUE(j.contains(k));
      ++n_seq;
    }
  }
  EXPECT_EQ(n_seq, 3);
  EXPECT_TRUE(summary);
  // Same seed, same output; split attention gives the same tokens as pad.
  const CliRun again = RunSpecd("generate -m " + model +
                                " --tokens 1,5,9 -n 6 --batch 3 --seed 4 --temp 0.7 --top-k 20 "
                                "--top-p 0.9 --attention split --ignore-eos --json -t 1");
  auto tokens_of = [](const std::string& out) {
    std::string all;
    std::istringstream in(out);
    std::string l;
    while (std::getline(in, l)) {
      const auto j = nlohmann::json::parse(l);
      if (!j.contains("type")) all += j["tokens"].dump();
    }
    return all;
  };
  EXPECT_EQ(tokens_of(r.out), tokens_of(again.out));
}

TEST(Cli, BadFlagsAndInputsGiveMessagesAndNonZeroExit) {
  const std::string model = testing::TinyModel();
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"generate -m " + model + " --tokens 1,2 --temp -1", "temp"},
      {"generate -m " + model + " --tokens 1,2 --top-p 2", "top-p"},
      {"generate -m " + model + " --tokens 1,2 --attention diagonal", "attention"},
      {"generate -m " + model + " --tokens 1,x", "not a token id"},
      {"generate -m " + model + " --tokens 1,999999", "outside the vocabulary"},
      {"generate -m " + model + " --tokens 1,2 -t 0", "threads"},
      {"generate -m " + model + " --tokens 1,2 -n 100 -c 50", "exceed the context"},
      {"generate -m /nonexistent.gguf --tokens 1", "cannot open model file"},
      {"generate -m " + model, "exactly one of"},
      {"generate --bogus", "bogus"},
      {"synth --shape huge -o /tmp/x.gguf", "unknown model shape"},
      {"info -m " + std::string(SPECD_SOURCE_DIR) + "/CMakeLists.txt", "not a GGUF file"},
  };
  for (const auto& c : cases) {
    const CliRun r = RunSpecd(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << c.args;
  }
}

TEST(Cli, SynthWritesEveryTypeAndInfoReadsIt) {
  for (const char* type : {"f32", "f16", "bf16", "q8_0", "q4_0"}) {
    const std::string path = testing::TempDir() + "/cli-" + type + ".gguf";
    ASSERT_EQ(
        RunSpecd("synth --shape tiny-qwen2 --type " + std::string(type) + " -o " + path).exit_code,
        0);
    const CliRun info = RunSpecd("info -m " + path);
    ASSERT_EQ(info.exit_code, 0) << info.out;
    EXPECT_NE(info.out.find("qwen2"), std::string::npos);
    EXPECT_NE(info.out.find("tokenizer.ggml.tokens"), std::string::npos);
    const CliRun gen = RunSpecd("generate -m " + path + " --tokens 1,2,3 -n 4 --temp 0");
    EXPECT_EQ(gen.exit_code, 0) << gen.out;
  }
}

}  // namespace
}  // namespace specd
