// The teacher's text for distillation (TeacherText), resumed batch by batch from its files, and
// the prompts it is written from (ChatPrompts, CompletionPrompts).
#include <ATen/autocast_mode.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/rng.h"
#include "base/timer.h"
#include "draft/eagle_proposer.h"
#include "engine/generate.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/prompt_file.h"
#include "tokenizer/tokenizer.h"
#include "train/corpus.h"
#include "train/teacher_targets.h"
#include "train/train_loop.h"
#include "train/trainer.h"

namespace specd::train {
namespace fs = std::filesystem;
namespace {

// The teacher's top-k at every position of one sequence it wrote, ids and probabilities
// [ctx, k] each: the prompt's rows but its last from one forward over them, the rest from the
// log-probabilities its writing recorded (row t predicts token t + 1).
void WrittenSequenceTopK(Model& teacher, const KernelContext& kernels, KvCache& kv,
                         const std::vector<int32_t>& prompt, const SequenceResult& written,
                         int64_t ctx, int k, std::vector<int32_t>* ids, std::vector<float>* probs) {
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  SPECD_CHECK(n_prompt >= 1, "teacher text: a sequence with an empty prompt");
  ids->assign(ctx * k, 0);
  probs->assign(ctx * k, 0.0f);
  TeacherTopKOfTokens(teacher, kernels, kv, std::span(prompt).first(n_prompt - 1), k, ids->data(),
                      probs->data());
  SPECD_CHECK(static_cast<int64_t>(written.token_logprobs.size()) >= ctx - n_prompt + 1,
              "teacher text: ", written.token_logprobs.size(), " recorded tokens, expected ",
              ctx - n_prompt + 1);
  for (int64_t t = n_prompt - 1; t < ctx; ++t) {
    const auto& top = written.token_logprobs[t - (n_prompt - 1)].top;
    SPECD_CHECK(static_cast<int>(top.size()) == k, "teacher text: a top-", top.size(),
                " record, expected ", k);
    for (int j = 0; j < k; ++j) {
      (*ids)[t * k + j] = top[j].first;
      (*probs)[t * k + j] = std::exp(top[j].second);
    }
  }
}

// Whole batches of sequences of `bytes` each in a partial file (0 when there is none).
int64_t WholeBatchesIn(const std::string& path, int64_t bytes, int batch, int64_t n_sequences) {
  if (path.empty() || !fs::exists(path)) return 0;
  return std::min<int64_t>(n_sequences,
                           static_cast<int64_t>(fs::file_size(path)) / bytes / batch * batch);
}

// One batch's prompts and lengths: code prefixes from the stream or chat prompts, by the batch's
// turn; each sequence's prompt chosen by its index, so a resumed run writes the same text.
GenerateRequest TeacherBatchRequest(const std::vector<int32_t>& stream, int64_t prefix,
                                    int64_t length, int64_t first, int64_t count, uint64_t seed,
                                    bool chat,
                                    const std::vector<std::vector<int32_t>>& chat_prompts) {
  GenerateRequest request;
  request.sum_logprob = false;
  const uint64_t span = stream.size() - prefix;
  for (int64_t i = 0; i < count; ++i) {
    const RngKey key{seed, static_cast<uint64_t>(first + i), 0, RngPurpose::kResidual};
    if (chat) {
      request.prompts.push_back(
          chat_prompts[static_cast<size_t>(UniformDouble(key) * chat_prompts.size())]);
    } else {
      const uint64_t start = static_cast<uint64_t>(UniformDouble(key) * span);
      request.prompts.emplace_back(stream.begin() + start, stream.begin() + start + prefix);
    }
    // Each sequence stops when it fills `length` (chat prompts vary in length). The tokens are
    // those of a batch generated to its shortest prompt's end: rows do not change each other,
    // and a sampled token's noise depends on its sequence and position only.
    request.n_predicts.push_back(static_cast<int>(length - request.prompts.back().size()));
  }
  request.stop_at_eos = false;
  return request;
}

}  // namespace

// Sequences of ctx + 1 tokens: a 32-token prefix from the training stream, continued by the
// teacher in specd's engine (f16 KV cache, as `generate` runs it); a share of the batches
// sampled (temperature 1, top-p 0.95), the rest greedy, as speculative decoding is used both
// ways. Cached in `cache_path` (int32 tokens) so that a resumed run trains on the same text, with
// its recipe (seed, sequences, sampled share) beside it in `cache_path`.recipe: a cache of
// another recipe is made again. Generation appends each finished batch to a partial file named
// after the recipe (and its top-k records, when recorded, to another), so a session that ends
// mid-way loses at most one batch; the next run continues from it.
namespace {

// TeacherText's work: its recipe and files, resumed or made afresh, batch by batch.
class TeacherTextWriter {
 public:
  struct Request {
    const std::string& teacher_gguf;
    const std::vector<int32_t>& stream;
    int64_t ctx;
    int threads;
    uint64_t seed;
    double sampled_share;
    const std::string& cache_path;
    const std::vector<std::vector<int32_t>>& chat_prompts;
    double chat_share;
    const TeacherRun& run;
    const TopKRecording& top_k;
  };
  TeacherTextWriter(const Request& r, int64_t n_tokens)
      : r_(r),
        record_(r.top_k.k > 0),
        length_(r.ctx + 1),
        sequence_bytes_(length_ * static_cast<int64_t>(sizeof(int32_t))),
        top_bytes_(TopKSequenceBytes(r.ctx, r.top_k.k)),
        n_sequences_(std::max<int64_t>(1, n_tokens / length_)) {
    Check();
    recipe_tag_ = RecipeTag();
    recipe_path_ = r.cache_path.empty() ? "" : r.cache_path + ".recipe";
    partial_path_ = r.cache_path.empty() ? "" : StrCat(r.cache_path, ".partial.", recipe_tag_);
    top_partial_path_ =
        record_ ? StrCat(r.top_k.cache_path, ".partial.", recipe_tag_, ".k", r.top_k.k) : "";
  }

  std::vector<std::vector<int32_t>> Make() {
    if (CacheIsCurrent()) {
      std::fprintf(stderr, "teacher text: %lld sequences from %s\n",
                   static_cast<long long>(n_sequences_), r_.cache_path.c_str());
      return ReadSequences(r_.cache_path, n_sequences_);
    }
    Resume();
    OpenPartials();
    Generate();
    Finish();
    return std::move(sequences_);
  }

 private:
  static constexpr int64_t kPrefix = 32;

  void Check() const {
    SPECD_CHECK(r_.sampled_share >= 0.0 && r_.sampled_share <= 1.0,
                "the sampled share of teacher text must be in [0, 1], got ", r_.sampled_share);
    SPECD_CHECK(r_.chat_share >= 0.0 && r_.chat_share <= 1.0,
                "the chat share of teacher text must be in [0, 1], got ", r_.chat_share);
    SPECD_CHECK(r_.chat_share == 0.0 || !r_.chat_prompts.empty(), "a chat share of ", r_.chat_share,
                " needs chat prompts");
    SPECD_CHECK(r_.run.batch >= 1, "the teacher's batch must be at least 1, got ", r_.run.batch);
    SPECD_CHECK(
        !record_ || (r_.top_k.k <= 256 && !r_.cache_path.empty() && !r_.top_k.cache_path.empty()),
        "recording the teacher's top-k needs k in 1..256 and cache files");
    for (const auto& p : r_.chat_prompts) {
      SPECD_CHECK(!p.empty() && static_cast<int64_t>(p.size()) < length_, "a chat prompt of ",
                  p.size(), " tokens does not fit a sequence of ", length_);
    }
  }

  // seed.sequences.sampled-share: the recipe file's text and the partial file's suffix.
  std::string RecipeTag() const {
    std::string tag = StrCat(r_.seed, ".", n_sequences_, ".");
    char number[32];
    std::snprintf(number, sizeof number, "%g", r_.sampled_share);
    tag += number;
    if (r_.chat_share > 0.0) {
      std::snprintf(number, sizeof number, "%g", r_.chat_share);
      tag += StrCat(".chat", number, ".", r_.chat_prompts.size());
    }
    // Batches of 16 and stored weights were the only recipe once: their tag stays as it was.
    if (r_.run.batch != 16 || r_.run.int8_weights) {
      tag += StrCat(".b", r_.run.batch, r_.run.int8_weights ? ".i8" : "");
    }
    return tag;
  }

  bool CacheIsCurrent() const {
    // Caches from before recipes were kept are matched by size alone.
    const bool same_recipe = recipe_path_.empty() || !fs::exists(recipe_path_) ||
                             ReadFileBytes(recipe_path_) == recipe_tag_ + "\n";
    return !r_.cache_path.empty() && fs::exists(r_.cache_path) && same_recipe &&
           static_cast<int64_t>(fs::file_size(r_.cache_path)) == n_sequences_ * sequence_bytes_;
  }

  // Reads whole sequences from a file of int32 tokens.
  std::vector<std::vector<int32_t>> ReadSequences(const std::string& path, int64_t count) const {
    const std::string bytes = ReadFileBytes(path);
    std::vector<std::vector<int32_t>> out;
    for (int64_t i = 0; i < count; ++i) {
      std::vector<int32_t> seq(length_);
      std::memcpy(seq.data(), bytes.data() + i * sequence_bytes_, sequence_bytes_);
      out.push_back(std::move(seq));
    }
    return out;
  }

  // Whole batches only: a batch's seeds and its greedy / sampled turn follow its index.
  void Resume() {
    const int batch = r_.run.batch;
    int64_t done = WholeBatchesIn(partial_path_, sequence_bytes_, batch, n_sequences_);
    if (record_) {
      done = std::min(done, WholeBatchesIn(top_partial_path_, top_bytes_, batch, n_sequences_));
    }
    if (partial_path_.empty() || !fs::exists(partial_path_)) return;
    sequences_ = ReadSequences(partial_path_, done);
    fs::resize_file(partial_path_, done * sequence_bytes_);
    if (record_ && fs::exists(top_partial_path_)) {
      fs::resize_file(top_partial_path_, done * top_bytes_);
    }
    std::fprintf(stderr, "teacher text: continuing after %lld sequences in %s\n",
                 static_cast<long long>(done), partial_path_.c_str());
  }

  void OpenPartials() {
    if (!partial_path_.empty()) {
      partial_ = std::fopen(partial_path_.c_str(), "ab");
      SPECD_CHECK(partial_ != nullptr, "cannot write ", partial_path_);
    }
    if (record_) {
      if (sequences_.empty()) std::ofstream(top_partial_path_, std::ios::binary | std::ios::trunc);
      top_partial_ = std::fopen(top_partial_path_.c_str(), "ab");
      SPECD_CHECK(top_partial_ != nullptr, "cannot write ", top_partial_path_);
    }
  }

  void Generate() {
    ThreadPool pool(r_.threads);
    const KernelContext ctx_kernels{&pool, CpuFeatures::Detect()};
    auto teacher = LoadTeacher(r_.teacher_gguf, r_.run, &ctx_kernels);
    const int batch = r_.run.batch;
    auto kv = teacher->NewKvCache({batch, static_cast<int>(length_), DType::kF16});
    auto prompt_kv =
        record_ ? teacher->NewKvCache({1, static_cast<int>(length_), DType::kF16}) : nullptr;
    Timer timer;
    const int64_t resumed = static_cast<int64_t>(sequences_.size());
    for (int64_t first = resumed; first < n_sequences_; first += batch) {
      GenerateBatch(*teacher, ctx_kernels, *kv, prompt_kv.get(), first);
      std::fprintf(
          stderr, "%steacher text: %lld / %lld sequences (%.0f tok/s)%s", ::isatty(2) ? "\r" : "",
          static_cast<long long>(sequences_.size()), static_cast<long long>(n_sequences_),
          (sequences_.size() - resumed) * (length_ - kPrefix) / (timer.ElapsedMs() / 1000.0),
          ::isatty(2) ? "" : "\n");
    }
    std::fprintf(stderr, "\n");
  }

  void GenerateBatch(Model& teacher, const KernelContext& ctx_kernels, KvCache& kv,
                     KvCache* prompt_kv, int64_t first) {
    const int batch = r_.run.batch;
    const int64_t count = std::min<int64_t>(batch, n_sequences_ - first);
    // Batches alternate code / chat in pairs, greedy / sampled within a pair (at shares of 0.5:
    // greedy code, sampled code, greedy chat, sampled chat).
    const bool chat = TakesTurn(first / batch / 2, r_.chat_share);
    GenerateRequest request = TeacherBatchRequest(r_.stream, kPrefix, length_, first, count,
                                                  r_.seed, chat, r_.chat_prompts);
    const bool sampled = TakesTurn(first / batch, r_.sampled_share);
    request.sampling = {sampled ? 1.0f : 0.0f, 0, sampled ? 0.95f : 1.0f, r_.seed + first};
    if (record_) request.logprobs = r_.top_k.k;
    const GenerateResult result = GenerateAutoregressive(teacher, ctx_kernels, kv, request);
    for (int64_t i = 0; i < count; ++i) {
      std::vector<int32_t> seq = request.prompts[i];
      const auto& tokens = result.sequences[i].tokens;
      seq.insert(seq.end(), tokens.begin(), tokens.end());
      seq.resize(std::min<size_t>(seq.size(), length_));
      SPECD_CHECK(static_cast<int64_t>(seq.size()) == length_, "teacher text: sequence of ",
                  seq.size(), " tokens, expected ", length_);
      if (partial_ != nullptr) {
        SPECD_CHECK(std::fwrite(seq.data(), sizeof(int32_t), seq.size(), partial_) == seq.size(),
                    "cannot write ", partial_path_);
      }
      if (record_) {
        WrittenSequenceTopK(teacher, ctx_kernels, *prompt_kv, request.prompts[i],
                            result.sequences[i], r_.ctx, r_.top_k.k, &top_ids_, &top_probs_);
        SPECD_CHECK(std::fwrite(top_ids_.data(), sizeof(int32_t), top_ids_.size(), top_partial_) ==
                            top_ids_.size() &&
                        std::fwrite(top_probs_.data(), sizeof(float), top_probs_.size(),
                                    top_partial_) == top_probs_.size(),
                    "cannot write ", top_partial_path_);
      }
      sequences_.push_back(std::move(seq));
    }
    // The top-k file first: a batch counts as written once its text is.
    if (top_partial_ != nullptr) {
      SPECD_CHECK(std::fflush(top_partial_) == 0, "cannot write ", top_partial_path_);
    }
    if (partial_ != nullptr) std::fflush(partial_);
  }

  // The partial files become the caches, each with its recipe.
  void Finish() {
    if (top_partial_ != nullptr) {
      SPECD_CHECK(std::fclose(top_partial_) == 0, "cannot write ", top_partial_path_);
      fs::rename(top_partial_path_, r_.top_k.cache_path);
      std::ofstream top_recipe(r_.top_k.cache_path + ".recipe", std::ios::binary | std::ios::trunc);
      top_recipe << TopKRecipe(r_.top_k.k, sequences_, r_.ctx, r_.run);
      SPECD_CHECK(top_recipe.good(), "cannot write ", r_.top_k.cache_path, ".recipe");
    }
    if (partial_ != nullptr) {
      SPECD_CHECK(std::fclose(partial_) == 0, "cannot write ", partial_path_);
      fs::rename(partial_path_, r_.cache_path);
      std::ofstream recipe_file(recipe_path_, std::ios::binary | std::ios::trunc);
      recipe_file << recipe_tag_ << "\n";
      SPECD_CHECK(recipe_file.good(), "cannot write ", recipe_path_);
    }
  }

  const Request& r_;
  const bool record_;
  const int64_t length_;  // tokens per sequence: ctx + 1
  const int64_t sequence_bytes_;
  const int64_t top_bytes_;
  const int64_t n_sequences_;
  std::string recipe_tag_, recipe_path_, partial_path_, top_partial_path_;
  std::vector<std::vector<int32_t>> sequences_;
  std::FILE* partial_ = nullptr;
  std::FILE* top_partial_ = nullptr;
  std::vector<int32_t> top_ids_;  // [ctx, k]
  std::vector<float> top_probs_;  // [ctx, k]
};

}  // namespace

std::vector<std::vector<int32_t>> TeacherText(const std::string& teacher_gguf,
                                              const std::vector<int32_t>& stream, int64_t n_tokens,
                                              int64_t ctx, int threads, uint64_t seed,
                                              double sampled_share, const std::string& cache_path,
                                              const std::vector<std::vector<int32_t>>& chat_prompts,
                                              double chat_share, const TeacherRun& run,
                                              const TopKRecording& top_k) {
  const TeacherTextWriter::Request request{teacher_gguf, stream,        ctx,        threads,
                                           seed,         sampled_share, cache_path, chat_prompts,
                                           chat_share,   run,           top_k};
  return TeacherTextWriter(request, n_tokens).Make();
}

std::vector<std::vector<int32_t>> ChatPrompts(const std::string& teacher_gguf,
                                              const std::string& jsonl_path, int64_t max_tokens) {
  auto gguf = GgufFile::Open(teacher_gguf);
  const auto tokenizer = Tokenizer::FromGguf(*gguf);
  const ChatTemplate chat = ChatTemplate::FromGguf(*gguf, *tokenizer);
  std::vector<std::vector<int32_t>> prompts;
  int64_t too_long = 0;
  for (const PromptLine& line :
       ParsePromptLines(ReadFileBytes(jsonl_path), jsonl_path, /*allow_tokens=*/false)) {
    auto ids = EncodeChat(*tokenizer, chat, {{"user", line.text}}, false);
    if (static_cast<int64_t>(ids.size()) > max_tokens) {
      ++too_long;
      continue;
    }
    prompts.push_back(std::move(ids));
  }
  SPECD_CHECK(!prompts.empty(), jsonl_path, " has no chat prompt of at most ", max_tokens,
              " tokens");
  std::fprintf(stderr, "chat prompts: %zu from %s (%lld longer than %lld tokens left out)\n",
               prompts.size(), jsonl_path.c_str(), static_cast<long long>(too_long),
               static_cast<long long>(max_tokens));
  return prompts;
}

std::vector<std::vector<int32_t>> CompletionPrompts(const std::string& target_gguf,
                                                    const std::string& jsonl_path,
                                                    int64_t max_tokens) {
  auto gguf = GgufFile::Open(target_gguf);
  const auto tokenizer = Tokenizer::FromGguf(*gguf);
  std::vector<std::vector<int32_t>> prompts;
  for (const PromptLine& line :
       ParsePromptLines(ReadFileBytes(jsonl_path), jsonl_path, /*allow_tokens=*/false)) {
    auto ids = tokenizer->Encode(line.text, /*add_special=*/true, /*parse_special=*/false);
    if (static_cast<int64_t>(ids.size()) <= max_tokens) prompts.push_back(std::move(ids));
  }
  SPECD_CHECK(!prompts.empty(), jsonl_path, " has no prompt of at most ", max_tokens, " tokens");
  return prompts;
}

}  // namespace specd::train
