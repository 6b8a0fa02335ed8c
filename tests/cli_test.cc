// The specd binary end to end: generation with --json, synthetic models, and clear errors for bad
// flags and files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/cpu_features.h"
#include "base/escapes.h"
#include "base/file_util.h"
#include "tests/test_util.h"

namespace specd {
namespace {

using testing::CliRun;
using testing::RunSpecd;

using testing::FirstJsonLine;

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
  // An f16 KV cache runs the same request end to end.
  const CliRun f16 = RunSpecd("generate -m " + model +
                              " --tokens 1,5,9 -n 6 --batch 3 --seed 4 --temp 0.7 --top-k 20 "
                              "--top-p 0.9 --cache-type f16 --ignore-eos --json -t 1");
  EXPECT_EQ(f16.exit_code, 0) << f16.out;
  EXPECT_FALSE(tokens_of(f16.out).empty());
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
      {"generate -m " + model + " --tokens 1,2 --cache-type q8_0", "cache-type"},
      {"generate -m " + model + " --tokens 1,x", "not a token id"},
      {"generate -m " + model + " --tokens 1,999999", "outside the vocabulary"},
      {"generate -m " + model + " --tokens 1,2 -t 0", "threads"},
      {"generate -m " + model + " --tokens 1,2 -n 100 -c 50", "exceed the context"},
      {"generate -m " + model + " --tokens 1,2 -n 100 -c 50", "raise -c, up to the model's"},
      // At the model's own length, raising -c is no advice.
      {"generate -m " + model + " --tokens 1,2 -n 100000", "lower -n or shorten the prompt"},
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

TEST(Cli, SpeculativeGenerationEqualsPlainGreedy) {
  const std::string target = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string draft = testing::TinyModel("tiny", DType::kQ8_0, 11);
  const std::string common = " --tokens 1,5,9,33 -n 24 --temp 0 --ignore-eos --json -m " + target;
  const CliRun plain = RunSpecd("generate" + common + " --strategy ar");
  const CliRun spec = RunSpecd("generate" + common + " -md " + draft + " --draft-max 3");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  ASSERT_EQ(spec.exit_code, 0) << spec.out;
  std::istringstream a(plain.out), b(spec.out);
  std::string la, lb;
  std::getline(a, la);
  std::getline(b, lb);
  EXPECT_EQ(nlohmann::json::parse(la)["tokens"], nlohmann::json::parse(lb)["tokens"]);
  // Without a policy flag the draft length is cost-aware; its output is plain greedy's too.
  const CliRun automatic = RunSpecd("generate" + common + " -md " + draft);
  ASSERT_EQ(automatic.exit_code, 0) << automatic.out;
  std::istringstream c(automatic.out);
  std::string lc;
  std::getline(c, lc);
  EXPECT_EQ(nlohmann::json::parse(la)["tokens"], nlohmann::json::parse(lc)["tokens"]);
  std::getline(c, lc);
  EXPECT_EQ(nlohmann::json::parse(lc)["draft_policy"], "cost");
  const CliRun both =
      RunSpecd("generate" + common + " -md " + draft + " --draft-auto --draft-adaptive");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.out.find("--draft-auto excludes --draft-adaptive"), std::string::npos) << both.out;
  std::getline(b, lb);
  const auto summary = nlohmann::json::parse(lb);
  EXPECT_EQ(summary["strategy"], "spec");
  for (const char* k : {"n_drafted", "n_accepted", "acceptance_rate", "mean_accepted_length",
                        "acceptance_by_position", "t_draft_ms", "t_verify_ms"}) {
    EXPECT_TRUE(summary.contains(k)) << k;
  }
  // BASS: a batch of different prompts from a JSON-lines file, adaptive draft length.
  const std::string prompts = testing::TempDir() + "/prompts.jsonl";
  {
    std::ofstream out(prompts);
    out << R"({"tokens": [1, 5, 9, 33]})"
        << "\n"
        << R"({"tokens": [1, 7]})"
        << "\n"
        << R"({"tokens": [1, 12, 19, 40, 41, 42]})"
        << "\n";
  }
  const std::string bass_args = " -n 16 --temp 0 --ignore-eos --json -m " + target;
  const CliRun bass =
      RunSpecd("generate --prompts " + prompts + bass_args + " -md " + draft + " --draft-adaptive");
  ASSERT_EQ(bass.exit_code, 0) << bass.out;
  std::istringstream lines(bass.out);
  std::string line;
  std::vector<nlohmann::json> seqs;
  nlohmann::json bass_summary;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    (j.contains("type") ? bass_summary : seqs.emplace_back()) = j;
  }
  ASSERT_EQ(seqs.size(), 3u);
  EXPECT_EQ(bass_summary["strategy"], "bass");
  // Per-sequence speculation counters add up to the summary's.
  int64_t drafted = 0, accepted = 0;
  for (const auto& seq : seqs) {
    drafted += seq["n_drafted"].get<int64_t>();
    accepted += seq["n_accepted"].get<int64_t>();
  }
  EXPECT_EQ(drafted, bass_summary["n_drafted"].get<int64_t>());
  EXPECT_EQ(accepted, bass_summary["n_accepted"].get<int64_t>());
  // Per sequence and step, not summed over the batch: at most the longest draft + 1. Positions
  // never drafted are absent or null, never a 0.0 that reads as "always rejected".
  const auto& by_position = bass_summary["acceptance_by_position"];
  EXPECT_LE(bass_summary["mean_accepted_length"].get<double>(), by_position.size() + 1.0);
  EXPECT_LE(by_position.size(), 32u);
  for (const auto& rate : by_position) {
    EXPECT_TRUE(rate.is_null() || (rate.get<double>() >= 0.0 && rate.get<double>() <= 1.0));
  }
  EXPECT_EQ(bass_summary["draft_policy"], "bass");
  for (const char* k : {"ptl_first_ms", "ptl_last_ms", "ptl_all_ms"})
    EXPECT_TRUE(bass_summary.contains(k));
  const std::vector<std::string> token_lists = {"1,5,9,33", "1,7", "1,12,19,40,41,42"};
  for (size_t i = 0; i < seqs.size(); ++i) {
    const CliRun one =
        RunSpecd("generate --tokens " + token_lists[i] + bass_args + " --strategy ar");
    std::istringstream first(one.out);
    std::getline(first, line);
    EXPECT_EQ(seqs[i]["tokens"], nlohmann::json::parse(line)["tokens"]) << "sequence " << i;
  }
}

// --trace-steps writes one JSON line per speculative step, whose committed tokens add up to the
// output; the output is unchanged; a plain run asked to trace is an error.
TEST(Cli, TraceStepsWritesEveryStepAndKeepsTheOutput) {
  const std::string target = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string draft = testing::TinyModel("tiny", DType::kQ8_0, 11);
  const std::string trace = testing::TempDir() + "/cli_trace.jsonl";
  std::remove(trace.c_str());
  const std::string common =
      " --tokens 1,5,9,33 -n 24 --temp 0 --ignore-eos --json -m " + target + " -md " + draft;
  const CliRun traced = RunSpecd("generate" + common + " --trace-steps " + trace);
  const CliRun untraced = RunSpecd("generate" + common);
  ASSERT_EQ(traced.exit_code, 0) << traced.out;
  ASSERT_EQ(untraced.exit_code, 0) << untraced.out;
  EXPECT_EQ(FirstJsonLine(traced)["tokens"], FirstJsonLine(untraced)["tokens"]);
  std::ifstream in(trace);
  int steps = 0, tokens = 0;
  for (std::string line; std::getline(in, line); ++steps) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"], steps);
    EXPECT_EQ(j["policy"], "cost");
    tokens += j["tokens"].get<int>();
  }
  EXPECT_GT(steps, 0);
  EXPECT_EQ(tokens, 24);  // the prompt step's first token included
  const CliRun plain =
      RunSpecd("generate --tokens 1,5 -n 4 -m " + target + " --trace-steps " + trace);
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_NE(plain.out.find("--trace-steps"), std::string::npos) << plain.out;
  const CliRun unwritable = RunSpecd("generate" + common + " --trace-steps " + testing::TempDir() +
                                     "/no-such-dir/trace.jsonl");
  EXPECT_NE(unwritable.exit_code, 0);
  EXPECT_NE(unwritable.out.find("cannot open the step trace file"), std::string::npos)
      << unwritable.out;
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

namespace specd {
namespace {

TEST(Cli, EmptyModelPathNegativeSeedAndStrategyAreReportedAsGiven) {
  const std::string target = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string draft = testing::TinyModel("tiny", DType::kQ8_0, 11);
  testing::CliRun r = testing::RunSpecd("generate -m '' --tokens 1,2 -n 2");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("error: -m was given an empty path"), std::string::npos) << r.out;
  r = testing::RunSpecd("generate -m " + target + " --tokens 1,2 -n 2 --seed -1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--seed must be a non-negative integer"), std::string::npos) << r.out;
  EXPECT_LT(r.out.size(), 300u) << "no 309-digit bound: " << r.out;
  // --strategy bass at batch 1 is reported as asked; the text comes before the statistics even
  // when both go to one pipe.
  r = testing::RunSpecd("generate -m " + target + " -md " + draft +
                        " --tokens 1,5,9 -n 6 --temp 0 --ignore-eos --strategy bass");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("strategy bass, batch 1"), std::string::npos) << r.out;
  r = testing::RunSpecd("generate -m " + target + " -p 'hello there' -n 4 --temp 0 --strategy ar");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t stats_at = r.out.find("strategy ar");
  ASSERT_NE(stats_at, std::string::npos) << r.out;
  EXPECT_LT(r.out.find("hello there"), stats_at) << r.out;
  EXPECT_EQ(r.out[stats_at - 1], '\n') << "the text's last line is glued to the statistics";
}

}  // namespace
}  // namespace specd

namespace specd {
namespace {

TEST(Cli, PromptSourcesAndWriteErrorsAreHandledAsLlamaCppUsersExpect) {
  const std::string model = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string base = "generate -m " + model + " -n 3 --temp 0 --strategy ar";
  testing::CliRun r = testing::RunSpecd(base + " -f " + testing::TempDir());
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("is a directory, not a file"), std::string::npos) << r.out;
  // -f - reads the prompt from standard input, as a pipe gives it.
  r = testing::RunSpecd(base + " -f - --json", "piped prompt");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const testing::CliRun same = testing::RunSpecd(base + " -p 'piped prompt' --json");
  EXPECT_EQ(r.out.substr(0, r.out.find("elapsed")), same.out.substr(0, same.out.find("elapsed")));
  r = testing::RunSpecd(base + " -p ''");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("error: the prompt (-p) is empty"), std::string::npos) << r.out;
  const std::string empty = testing::TempDir() + "/empty-prompt.txt";
  std::ofstream(empty).close();
  r = testing::RunSpecd(base + " -f " + empty);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("is empty"), std::string::npos) << r.out;
  // Output that cannot be written is an error, not a silent success (its message goes to the
  // same full device here, so only the exit code is seen).
  for (const std::string& cmd : {base + " -p hello", "tokenize -m " + model + " -p hello"}) {
    r = testing::RunSpecd(cmd + " >/dev/full");
    EXPECT_EQ(r.exit_code, 1) << cmd << ": " << r.out;
  }
  r = testing::RunSpecd(base + " -p hello -t 64");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: -t 64 is more than the"), std::string::npos) << r.out;
}

TEST(Cli, CommandAndFlagErrorsAreErrorLinesWithExitCodeOne) {
  testing::CliRun r = testing::RunSpecd("generat -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("error: unknown command 'generat' (did you mean 'generate'?)"),
            std::string::npos)
      << r.out;
  r = testing::RunSpecd("generate -n abc -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out.rfind("error: --n-predict", 0), 0u) << r.out;
  r = testing::RunSpecd("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("train"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bench"), std::string::npos) << r.out;
  // tokenize and info default to generate's model, as generate does.
  r = testing::RunSpecd("tokenize -p 'def f' --ids-only");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("[", 0), 0u) << r.out;
  r = testing::RunSpecd("info");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("general.name (string) = specd-target-16m"), std::string::npos) << r.out;
}

TEST(Cli, PromptsBatchAndMemoryLimitsAreStated) {
  const std::string model = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string base = "generate -m " + model + " -n 2 --temp 0 --strategy ar";
  const std::string prompts = testing::TempDir() + "/three.jsonl";
  std::ofstream(prompts) << "{\"prompt\": \"a\"}\n{\"prompt\": \"bb\"}\n{\"prompt\": \"c c\"}\n";
  testing::CliRun r = testing::RunSpecd(base + " --prompts " + prompts);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("KV cache: 3 sequences"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reserved (committed as positions are written)"), std::string::npos);
  // The summary counts every prompt's tokens, not the first one's.
  r = testing::RunSpecd(base + " --prompts " + prompts + " --json");
  const auto summary = nlohmann::json::parse(r.out.substr(r.out.rfind("{\"batch\"")));
  int64_t total = 0;
  for (const char* p : {"a", "bb", "c c"}) {
    const testing::CliRun t =
        testing::RunSpecd("tokenize --ids-only -m " + model + " -p '" + p + "'");
    total += nlohmann::json::parse(t.out).size();
  }
  EXPECT_EQ(summary["n_prompt_tokens"].get<int64_t>(), total) << r.out;
  r = testing::RunSpecd(base + " --prompts " + prompts + " --batch 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("error: --batch 2 with --prompts"), std::string::npos) << r.out;
  // A KV cache the machine could not hold is refused up front, with its size.
  r = testing::RunSpecd(base + " -p hi --batch 4096 -c 1000000");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("GiB, more than this machine's"), std::string::npos) << r.out;
  // A prompt without room for -n new tokens is named (its --prompts line) before any output;
  // speculation needs no room beyond that.
  const std::string uneven = testing::TempDir() + "/uneven.jsonl";
  std::ofstream(uneven) << "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n"
                        << "{\"prompt\": \"a longer third prompt\"}\n";
  const size_t first =
      nlohmann::json::parse(testing::RunSpecd("tokenize --ids-only -m " + model + " -p a").out)
          .size();
  const std::string no_n = "generate -m " + model + " --temp 0 --strategy ar --ignore-eos";
  const std::string fill = " -n " + std::to_string(256 - first) + " -c 256";
  r = testing::RunSpecd(no_n + " --prompts " + uneven + fill);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("error: " + uneven + ":3: the prompt ("), std::string::npos) << r.out;
  r = testing::RunSpecd(no_n + " -p a" + fill);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // 9 prompt tokens + 247 = 256: the whole context, drafting 8 at a time.
  const std::string spec = "generate -m " + model + " -md " + model + " -n 247 -c 256 --temp 0";
  r = testing::RunSpecd(spec + " -p 'a b' --draft-max 8 --ignore-eos");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // A time budget nothing meets says so (and the JSON summary counts what was left out).
  r = testing::RunSpecd(no_n + " -p hi --batch 3 -n 200 --time-budget-ms 0.001 --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: 3 of 3 sequences did not finish within --time-budget-ms"),
            std::string::npos)
      << r.out;
  const auto budget = nlohmann::json::parse(r.out.substr(r.out.rfind("{\"batch\"")));
  EXPECT_EQ(budget["n_over_budget"], 3);
  EXPECT_EQ(budget["n_sequences_returned"], 0);
  // A context beyond training is said to be so.
  r = testing::RunSpecd(base + " -p hi -c 100000");
  EXPECT_NE(r.out.find("warning: -c 100000 is beyond the"), std::string::npos) << r.out;
}

TEST(Cli, SynthIntoAFolderIsAClearErrorAndLeavesNothingBehind) {
  const std::string dir = testing::TempDir() + "/synth-dir";
  std::filesystem::create_directories(dir);
  const testing::CliRun r = testing::RunSpecd("synth --shape tiny --type f32 -o " + dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("error: cannot write '" + dir + "': it is a directory"), std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + ".tmp"));
}

TEST(Cli, LlamaCppFlagsAreTakenOrNotedNeverMisparsed) {
  const std::string model = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string base = "generate -m " + model + " -n 4 --temp 0 --strategy ar --json";
  const std::string want = testing::RunSpecd(base + " -p hello -c 64 --seed 5").out;
  // The first sequence's JSON up to its timing (notes on stderr come before it).
  auto tokens = [](const std::string& out) {
    const size_t start = out.find('{');
    return start == std::string::npos ? out : out.substr(start, out.find("\"elapsed") - start);
  };
  // Spellings of the same thing give the same output.
  for (const std::string flags :
       {"--ctx-size 64 -s 5", "-c 64 --seed 5 -ngl 99", "-c 64 -s 5 -fa",
        "-c 64 -s 5 -fa on --mlock --no-mmap", "-c 64 -s 5 -b 512 -ub 256"}) {
    const testing::CliRun r = testing::RunSpecd(base + " -p hello " + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.out;
    EXPECT_EQ(tokens(r.out), tokens(want)) << flags;
  }
  // Flags without an effect here say so.
  testing::CliRun r = testing::RunSpecd(base + " -p hello -ngl 99 -fa");
  EXPECT_NE(r.out.find("note: -ngl: no GPU offload"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note: -fa:"), std::string::npos) << r.out;
  // An unknown several-letter short flag is named, not read as -n / -c / -f with a value.
  r = testing::RunSpecd(base + " -p hello -xyz 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("error: unknown option -xyz"), std::string::npos) << r.out;
  // -e turns escapes into characters; --no-display-prompt prints only the generated text.
  const std::string text_base = "generate -m " + model + " -n 2 --temp 0 --strategy ar";
  r = testing::RunSpecd(text_base + " -p 'a\\tb' -e");
  EXPECT_NE(r.out.find("\na\tb"), std::string::npos) << r.out;
  r = testing::RunSpecd(text_base + " -p 'a\\tb'");
  EXPECT_NE(r.out.find("\na\\tb"), std::string::npos) << r.out;
  r = testing::RunSpecd(text_base + " -p 'QQQ' --no-display-prompt");
  EXPECT_EQ(r.out.find("QQQ"), std::string::npos) << r.out;
  EXPECT_EQ(ProcessEscapes("x\\n\\x41\\q\\"), "x\nA\\q\\");
  // Sampler stages in llama.cpp's spelling.
  r = testing::RunSpecd(base + " -p hello --min-p 0.1 --repeat-penalty 1.3 --repeat-last-n 8");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = testing::RunSpecd(base + " -p hello --repeat-penalty 0");
  EXPECT_NE(r.exit_code, 0) << r.out;
}

}  // namespace
}  // namespace specd

namespace specd {
namespace {

// EasySpec's flags end to end: fuzzy and tree drafting keep greedy output, and misuse is named.
TEST(Cli, EasySpecFlagsKeepGreedyOutputAndRejectMisuse) {
  const std::string target = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string draft = testing::TinyModel("tiny", DType::kQ8_0, 11);
  const std::string common = " --tokens 1,5,9,33 -n 24 --temp 0 --ignore-eos --json -m " + target;
  const CliRun plain = RunSpecd("generate" + common + " --strategy ar");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const auto first_line = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(0, out.find('\n')))["tokens"];
  };
  for (const char* flags : {" --draft-lp-groups 0-1", " --draft-lp-groups 0-1 --no-calibration",
                            " --draft-tree 2", " --draft-tree 3,2 --draft-lp-groups 0-1"}) {
    const CliRun spec = RunSpecd("generate" + common + " -md " + draft + " --draft-max 4" + flags);
    ASSERT_EQ(spec.exit_code, 0) << flags << "\n" << spec.out;
    EXPECT_EQ(first_line(spec.out), first_line(plain.out)) << flags;
  }
  struct Case {
    std::string args;
    std::string message;
  };
  const std::string spec = "generate" + common + " -md " + draft;
  const std::vector<Case> cases = {
      // The tiny draft has 2 layers: packed groups of 2 leave nothing between first and last.
      {spec + " --draft-lp 2", "name the groups"},
      {spec + " --draft-lp-groups 1-5", "outside the model's 2 layers"},
      {spec + " --draft-lp-groups 1-x", "not a layer number"},
      {spec + " --draft-tree 1", "a width of 1 is a chain"},
      {spec + " --draft-tree 2,x", "WIDTH[,DEPTH]"},
      {"generate" + common + " --spec-type ngram --draft-lp 2", "need a draft model"},
      {"generate" + common + " --strategy ar --draft-lp 2", "only speculative decoding reads"},
      {"generate" + common + " --spec-type ngram --draft-prompt-tokens 8", "need a draft model"},
      {spec + " --draft-prompt-tokens 0", "--draft-prompt-tokens"},
      {spec + " --spec-type draft+ngram --draft-tree 2", "--spec-type draft only"},
  };
  for (const auto& c : cases) {
    const CliRun r = RunSpecd(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }
}

// --weights i8 from the CLI: speculative greedy output equals plain greedy output of the same
// i8 model (on both i8 kernels and every attention variant), the i8 model really differs from
// the file's own types, and misuse is named.
TEST(Cli, Int8WeightsKeepGreedyOutputAndRejectMisuse) {
  const std::string target = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string draft = testing::TinyModel("tiny", DType::kQ8_0, 11);
  const std::string common = " --tokens 1,5,9,33 -n 24 --temp 0 --ignore-eos --json -m " + target;
  const auto first_line = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(0, out.find('\n')))["tokens"];
  };
  const CliRun as_stored = RunSpecd("generate" + common + " --strategy ar");
  const CliRun plain = RunSpecd("generate" + common + " --strategy ar --weights i8");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  ASSERT_EQ(as_stored.exit_code, 0) << as_stored.out;
  for (const char* flags : {"", " --int8-kernel specd --attention pad",
                            " --int8-kernel onednn --attention row", " --smooth-alpha 0"}) {
    const CliRun spec =
        RunSpecd("generate" + common + " -md " + draft + " --draft-max 3 --weights i8" + flags);
    // oneDNN's int8 matmul is exact only with VNNI (AVX2's vpmaddubsw saturates), so without
    // it the kernel is refused by name.
    if (std::string(flags).find("onednn") != std::string::npos && !CpuFeatures::Detect().avx512) {
      EXPECT_NE(spec.exit_code, 0);
      EXPECT_NE(spec.out.find("needs AVX-512 VNNI"), std::string::npos) << spec.out;
      continue;
    }
    ASSERT_EQ(spec.exit_code, 0) << flags << "\n" << spec.out;
    if (std::string(flags) != " --smooth-alpha 0") {
      EXPECT_EQ(first_line(spec.out), first_line(plain.out)) << flags;
    }
  }
  const struct {
    std::string args, message;
  } cases[] = {
      {"generate" + common + " --int8-kernel onednn", "add --weights i8"},
      {"generate" + common + " --weights i4", "--weights"},
      {"generate" + common + " --weights i8 --smooth-alpha 2", "--smooth-alpha"},
      {"generate" + common + " --weights i8 --calibration /nonexistent", "/nonexistent"},
  };
  for (const auto& c : cases) {
    const CliRun r = RunSpecd(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST(Cli, SdsatKeepsGreedyOutputAndRejectsMisuse) {
  const std::string target = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string draft = testing::TinyModel("tiny", DType::kQ8_0, 11);
  const std::string common = " --tokens 1,5,9,33 -n 32 --temp 0 --ignore-eos --json -m " + target;
  const auto parse = [](const std::string& out) {
    std::vector<nlohmann::json> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
    }
    return lines;
  };
  const CliRun plain = RunSpecd("generate" + common + " --strategy ar");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  for (const char* flags :
       {" --adaptive-k 1", " --adaptive-k 4", " --adaptive-k 13",
        " --adaptive-k 3 --sdsat-loop merged", " --batch 3 --attention pad",
        " --adaptive-k 3 --sdsat-tree 8", " --adaptive-k 5 --sdsat-tree 12,3 --batch 2"}) {
    const CliRun r = RunSpecd("generate" + common + " --strategy sdsat --adaptive-token 4" + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.out;
    const auto lines = parse(r.out);
    ASSERT_GE(lines.size(), 2u) << r.out;
    EXPECT_EQ(lines[0]["tokens"], parse(plain.out)[0]["tokens"]) << flags;
    EXPECT_EQ(lines.back()["strategy"], "sdsat");
    EXPECT_GT(lines.back()["n_drafted"].get<int>(), 0) << flags;
  }
  const struct {
    std::string args, message;
  } cases[] = {
      {"generate" + common + " --strategy sdsat", "--adaptive-token"},
      {"generate" + common + " --adaptive-k 3", "--strategy sdsat"},
      {"generate" + common + " --strategy sdsat --adaptive-token 4 -md " + draft, "drop -md"},
      {"generate" + common + " --strategy sdsat --adaptive-token 4 --draft-max 3", "--draft-max"},
      {"generate" + common + " --strategy sdsat --adaptive-token 100000", "outside the vocab"},
      {"generate" + common + " --strategy sdsat --adaptive-token 4 --adaptive-k 0", "--adaptive-k"},
      {"generate" + common + " --sdsat-tree 8", "--strategy sdsat"},
      {"generate" + common +
           " --strategy sdsat --adaptive-token 4 --sdsat-tree 8 --sdsat-loop merged",
       "two-step loop"},
      {"generate" + common + " --strategy sdsat --adaptive-token 4 --sdsat-tree 0",
       "NODES[,WIDTH]"},
      {"generate" + common + " --strategy sdsat --adaptive-token 4 --sdsat-tree 4,x",
       "NODES[,WIDTH]"},
      {"bench spec --adaptive-ks 3 -m " + target, "--strategy sdsat"},
      {"bench spec --sdsat-trees 3 -m " + target, "--strategy sdsat"},
      {"bench spec --strategy sdsat --draft-lengths 2 -m " + target, "drop --draft-lengths"},
  };
  for (const auto& c : cases) {
    const CliRun r = RunSpecd(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }
  // The benchmark on the shipped 16.5M target (it has a tokenizer for the bench prompts).
  const std::string out_dir = testing::TempDir() + "/sdsat_bench";
  const CliRun bench =
      RunSpecd("bench spec --strategy sdsat -m " SPECD_SOURCE_DIR
               "/models/specd-target-q8_0.gguf --adaptive-token 5 "
               "--adaptive-ks 2 --sdsat-trees 4 --batches 1,2 --reps 1 -n 8 --temps 1 "
               "--spec-samplings coupled --out " +
               out_dir);
  ASSERT_EQ(bench.exit_code, 0) << bench.out;
  const std::string table = ReadFileBytes(out_dir + "/sdsat.md");
  for (const char* row : {"| greedy | 1 | 2 | merged |", "| greedy | 2 | 2 | two-step |",
                          "| t=1.0 top-k=10 top-p=0.95 coupled | 2 | 2 | merged |",
                          "| t=1.0 top-k=10 top-p=0.95 coupled | 1 | 2 | two-step, tree of 4 |"}) {
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  }
}

// `bench forward` times M-row forwards after a given context, in the KV cache type asked for,
// and profiles only the timed forwards.
TEST(Cli, BenchForwardTimesRowsAfterAContext) {
  const std::string out_dir = testing::TempDir() + "/forward_bench";
  const CliRun r = RunSpecd("bench forward -m " SPECD_SOURCE_DIR
                            "/models/specd-target-q8_0.gguf --threads 1 --rows 1,3 --context 100 "
                            "--reps 1 --decode 2 --profile --out " +
                            out_dir);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto report = nlohmann::json::parse(ReadFileBytes(out_dir + "/forward.json"));
  EXPECT_EQ(report["context"], 100);
  EXPECT_EQ(report["cache_type"], "f16");
  const auto& model = report["models"][0];
  // Each M's cost is reported relative to the first M's, and the profile's total is its ops.
  const auto& rows = model["rows"];
  EXPECT_DOUBLE_EQ(rows["3"]["relative"].get<double>(),
                   rows["3"]["ms"].get<double>() / rows["1"]["ms"].get<double>());
  double ops_ms = 0.0;
  for (const auto& [op, ms] : model["profile"]["3"].items()) {
    if (op != "total" && op != "forwards") ops_ms += ms.get<double>();
  }
  EXPECT_NEAR(model["profile"]["3"]["total"].get<double>(), ops_ms, 1e-9 + 1e-9 * ops_ms);
  // The per-op times are of the one timed forward of 3 rows (--reps 1), not also of the
  // 100-position prefill and the warm-up.
  EXPECT_EQ(model["profile"]["3"]["forwards"], 1);
  EXPECT_NE(ReadFileBytes(out_dir + "/forward.md").find("after 100 positions (f16 KV cache)"),
            std::string::npos);
  const CliRun bad = RunSpecd("bench forward --cache-type q8_0 --out " + out_dir);
  EXPECT_NE(bad.exit_code, 0);
}

}  // namespace
}  // namespace specd

namespace specd {
namespace {

// llama.cpp users' spellings: -n -1 runs to the end of the context, -no-cnv is taken, an
// unknown single-dash word is named rather than read as -n with a value, and `specd` alone
// prints its usage.
TEST(Cli, LlamaCppSpellingsOfANewUser) {
  const std::string model = SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf";
  CliRun r = RunSpecd("generate -m " + model +
                      " -p 'def f' -n -1 -c 64 --temp 0 --ignore-eos --json --strategy ar");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const CliRun ids = RunSpecd("tokenize -m " + model + " -p 'def f' --ids-only");
  const auto prompt = nlohmann::json::parse(ids.out).size();
  EXPECT_EQ(testing::FirstJsonLine(r)["n_tokens"].get<size_t>(), 64 - prompt) << r.out;
  r = RunSpecd("generate -m " + model + " -p x -n 2 -no-cnv --strategy ar");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = RunSpecd("generate -m " + model + " -p x -n 2 -no-cnv -cnv");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("contradict"), std::string::npos) << r.out;
  r = RunSpecd("generate -m " + model + " -p x -no-display-prompt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("unknown option -no-display-prompt"), std::string::npos) << r.out;
  r = RunSpecd("");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("generate"), std::string::npos) << r.out;
}

// More of a new user's rough edges: -np N is the batch, flags only speculation reads are refused
// where nothing speculates, decode speed is reported apart from the prompt's, a greedy run prints
// no seed, "tokens per step" is called that, --help shows defaults, and chat on a file without a
// template says which format it guessed.
TEST(Cli, FlagsWithoutEffectAreRefusedAndTheSummaryReadsAsLlamaCpps) {
  const std::string model = SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf";
  CliRun r = RunSpecd("generate -m " + model + " -p x -n 4 -np 2 --temp 0 --json --strategy ar");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"index\":1"), std::string::npos) << r.out;  // two sequences
  for (const std::string flags : {"--strategy ar --draft-max 3", "--strategy ar --spec-type ngram",
                                  "--strategy ar --draft-auto"}) {
    r = RunSpecd("generate -m " + model + " -p x -n 2 " + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.out.find("only speculative decoding reads"), std::string::npos) << r.out;
  }
  r = RunSpecd("generate -m " + model + " -p 'def f(x):' -n 8 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("decode 7 tokens in"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("seed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens per step"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("mean accepted length"), std::string::npos) << r.out;
  r = RunSpecd("generate -m " + model + " -p 'def f(x):' -n 8 --temp 0.7 --seed 3");
  EXPECT_NE(r.out.find(", seed 3"), std::string::npos) << r.out;
  r = RunSpecd("serve --help");
  EXPECT_NE(r.out.find("--parallel INT:INT in [1 - 256]=4"), std::string::npos) << r.out;
  // SmolLM2's vocabulary without its template: ChatML, said on stderr.
  auto file = GgufFile::Open(SPECD_SOURCE_DIR "/models/specd-smollm2-draft.gguf");
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) {
    if (key != "tokenizer.chat_template") w.Set(key, value);
  }
  for (const GgufTensorInfo& t : file->tensors()) {
    w.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  const std::string base = testing::TempDir() + "/no-template.gguf";
  w.Write(base);
  r = RunSpecd("generate -m " + base + " --chat -p hi -n 2 --temp 0 --strategy ar");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("has no chat template (tokenizer.chat_template): its vocabulary has "
                       "ChatML's turn tokens"),
            std::string::npos)
      << r.out;
}

// llama.cpp's habits with llama.cpp's meaning: --draft-max is the cap under which the default
// policy adapts (with llama.cpp's aliases and --draft-min), a fixed length has its own flag,
// -r stops at a text, serve takes the same no-op flags as generate, llama-quantize's positional
// type and names work, an unknown flag is named as typed, info lists the tensors.
TEST(Cli, LlamaCppHabitsMeanWhatTheyMeanInLlamaCpp) {
  const std::string pair =
      " -m " SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf -md " SPECD_SOURCE_DIR
      "/models/specd-draft-q8_0.gguf -p 'def f(x):' -n 24 --temp 0 --json";
  const auto summary_of = [](const std::string& out) {
    std::istringstream lines(out);
    nlohmann::json summary;
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line[0] == '{') {
        const auto j = nlohmann::json::parse(line);
        if (j.contains("type")) summary = j;
      }
    }
    return summary;
  };
  const std::vector<std::tuple<std::string, std::string, int, int>> cases = {
      {" --draft-max 3", "cost", 3, 0},
      {" --spec-draft-n-max 5 --spec-draft-n-min 2", "cost", 5, 2},
      {" --draft 6 --draft-n-min 1", "cost", 6, 1},
      {" --draft-fixed 3", "fixed", 3, 0},
      {" --draft-policy bass --draft-max 6", "bass", 6, 0},
      {"", "cost", 8, 0}};
  std::string plain_tokens;
  for (const auto& [flags, policy, draft_max, draft_min] : cases) {
    const CliRun r = RunSpecd("generate" + pair + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.out;
    const nlohmann::json summary = summary_of(r.out);
    EXPECT_EQ(summary["draft_policy"], policy) << flags;
    EXPECT_EQ(summary["draft_max"], draft_max) << flags;
    EXPECT_EQ(summary["draft_min"], draft_min) << flags;
    const std::string tokens = testing::FirstJsonLine(r)["tokens"].dump();
    if (plain_tokens.empty()) plain_tokens = tokens;
    EXPECT_EQ(tokens, plain_tokens) << flags;  // every policy writes greedy's output
  }
  CliRun r = RunSpecd("generate" + pair + " --draft-min 2 --draft-policy fixed");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("--draft-min is the cost-aware policy's floor"), std::string::npos) << r.out;
  // -r: the tokens stop where the text first shows it, the one that completes it kept.
  const nlohmann::json plain = testing::FirstJsonLine(RunSpecd("generate" + pair));
  const std::string text = plain["text"];
  ASSERT_GT(text.size(), 12u) << text;
  const std::string reverse = text.substr(6, 4);
  r = RunSpecd("generate" + pair + " -r '" + reverse + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json stopped = testing::FirstJsonLine(r);
  EXPECT_EQ(stopped["finish_reason"], "stop");
  const std::string stopped_text = stopped["text"];
  EXPECT_NE(stopped_text.find(reverse), std::string::npos) << stopped_text;
  EXPECT_EQ(text.substr(0, stopped_text.size()), stopped_text);
  EXPECT_LT(stopped_text.size(), text.size());
  // serve takes generate's llama.cpp flags without effect, each said to be ignored.
  r = RunSpecd("serve -m /nonexistent.gguf -ngl 99 -fa on --no-mmap --jinja --metrics -cb -td 2");
  EXPECT_EQ(r.exit_code, 1);
  for (const char* note : {"note: -ngl", "note: -fa", "note: --no-mmap", "note: --jinja",
                           "note: --metrics", "note: -cb", "note: -td", "cannot open model file"}) {
    EXPECT_NE(r.out.find(note), std::string::npos) << note << "\n" << r.out;
  }
  // Unknown flags as typed, the nearest one suggested; a missing value under -md, not its alias.
  r = RunSpecd("generate --tmep 3 -p x");
  EXPECT_NE(r.out.find("unknown option '--tmep' (did you mean --temp?)"), std::string::npos)
      << r.out;
  r = RunSpecd("generate -p x -md");
  EXPECT_NE(r.out.find("error: -md:"), std::string::npos) << r.out;
  // llama-quantize's IN OUT TYPE with its type names; info lists the tensors and their types.
  const std::string tiny = testing::TinyModel();
  const std::string out = testing::TempDir() + "/positional-q8_0.gguf";
  r = RunSpecd("quantize " + tiny + " " + out + " Q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = RunSpecd("info -m " + out);
  EXPECT_NE(r.out.find("blk.0.attn_q.weight q8_0 ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensors by type: f32"), std::string::npos) << r.out;
  r = RunSpecd("quantize " + tiny + " " + out + " Q5_K_M");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("type 'q5_k_m' is not one specd writes"), std::string::npos) << r.out;
}

// The lines of a run's output that are generated text, not the log on stderr.
std::vector<std::string> TextLines(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    bool log = false;
    for (const char* prefix : {"chat:", "specd:", "note:", "model:", "prompt", "strategy ",
                               "per-token latency", "draft "}) {
      log = log || line.rfind(prefix, 0) == 0;
    }
    if (!log) lines.push_back(line);
  }
  return lines;
}

// The interactive chat runs on the engine: its first turn is the one-shot chat's for the same
// seed and every sampling flag, the flags change what it writes, and -st ends after one answer.
TEST(Cli, InteractiveChatAppliesEverySamplingFlag) {
  const std::string model =
      " -m " SPECD_SOURCE_DIR "/models/specd-smollm2-draft.gguf --chat -n 16 -s 5";
  const std::string flags = " --temp 1.2 --top-k 30 --top-p 0.9 --min-p 0.05 --repeat-penalty 1.3";
  const CliRun one_shot =
      RunSpecd("generate" + model + flags + " --no-display-prompt -p 'hello there'");
  ASSERT_EQ(one_shot.exit_code, 0) << one_shot.out;
  const CliRun chat = RunSpecd("generate" + model + flags, "hello there\nagain\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.out;
  const std::vector<std::string> answers = TextLines(chat.out);
  ASSERT_GE(answers.size(), 2u) << chat.out;
  ASSERT_FALSE(TextLines(one_shot.out).empty()) << one_shot.out;
  const std::string first_answer = TextLines(one_shot.out)[0];
  EXPECT_EQ(answers[0], first_answer) << chat.out;
  int differing = 0;
  for (const char* other : {" --temp 1.2 --top-k 30 --top-p 0.9 --min-p 0.5 --repeat-penalty 1.3",
                            " --temp 1.2 --top-k 30 --top-p 0.9 --min-p 0.05"}) {
    const CliRun changed = RunSpecd("generate" + model + other, "hello there\n");
    ASSERT_FALSE(TextLines(changed.out).empty()) << changed.out;
    differing += TextLines(changed.out)[0] != first_answer;
  }
  EXPECT_EQ(differing, 2) << "--min-p and --repeat-penalty must change the chat's answer";
  const CliRun single = RunSpecd("generate" + model + " -st --temp 0", "hi\nagain\n");
  ASSERT_EQ(single.exit_code, 0) << single.out;
  EXPECT_EQ(TextLines(single.out).size(), 1u) << single.out;
}

// --chat-template names a format for a file without one (the shipped 16.5M target has neither a
// template nor turn tokens): one-shot and interactive chats run in ChatML with the markers as
// text (the rendering itself: ChatTemplateByName in openai_api_test), an unknown name is refused.
TEST(Cli, ChatTemplateByNameChatsWithAModelThatHasNone) {
  const std::string model =
      " -m " SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf --chat -n 8 --temp 0";
  CliRun r = RunSpecd("generate" + model + " -p hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("has no chat template"), std::string::npos) << r.out;
  r = RunSpecd("generate" + model + " -p hi --chat-template chatml");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("chat template"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("strategy spec, batch 1"), std::string::npos) << r.out;
  r = RunSpecd("generate" + model + " --chat-template chatml", "hello\nagain\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("chatml format"), std::string::npos) << r.out;
  r = RunSpecd("generate" + model + " -p hi --chat-template llama3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("--chat-template: llama3 not in {chatml,gemma}"), std::string::npos)
      << r.out;
}

// Ctrl-C ends generate's sequences where they are; their text and the statistics follow. (8
// sequences of 20,000 positions take seconds; the signal comes after half of one.)
TEST(Cli, InterruptedGenerateStillPrintsItsStatistics) {
  const CliRun r =
      RunSpecd("generate -m " SPECD_SOURCE_DIR
               "/models/specd-target-q8_0.gguf -p 'def f(x):' -n -1 "
               "--ignore-eos --batch 8 -c 20000 --temp 0 2>&1 & pid=$!; sleep 0.5; kill -INT $pid; "
               "wait $pid");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("interrupted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("per-token latency"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[7] "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace specd
