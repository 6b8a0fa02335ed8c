#include "train/trainer.h"

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

namespace specd::train {
namespace fs = std::filesystem;
namespace {

// A batch of random windows: inputs [batch, ctx], targets [batch, ctx].
std::pair<torch::Tensor, torch::Tensor> SampleBatch(const std::vector<int32_t>& stream, int batch,
                                                    int64_t ctx, uint64_t seed, int64_t step) {
  auto x = torch::empty({batch, ctx}, torch::kInt64), y = torch::empty({batch, ctx}, torch::kInt64);
  auto* xp = x.data_ptr<int64_t>();
  auto* yp = y.data_ptr<int64_t>();
  const uint64_t span = stream.size() - ctx - 1;
  for (int b = 0; b < batch; ++b) {
    const RngKey key{seed, static_cast<uint64_t>(b), static_cast<uint64_t>(step),
                     RngPurpose::kSample};
    const uint64_t start = static_cast<uint64_t>(UniformDouble(key) * span);
    for (int64_t t = 0; t < ctx; ++t) {
      xp[b * ctx + t] = stream[start + t];
      yp[b * ctx + t] = stream[start + t + 1];
    }
  }
  return {x, y};
}

// A batch of whole sequences (each ctx + 1 tokens long), chosen at random; their indices go to
// `picked`.
std::pair<torch::Tensor, torch::Tensor> SampleSequences(
    const std::vector<std::vector<int32_t>>& sequences, int batch, int64_t ctx, uint64_t seed,
    int64_t step, std::vector<int64_t>* picked) {
  picked->clear();
  auto x = torch::empty({batch, ctx}, torch::kInt64), y = torch::empty({batch, ctx}, torch::kInt64);
  auto* xp = x.data_ptr<int64_t>();
  auto* yp = y.data_ptr<int64_t>();
  for (int b = 0; b < batch; ++b) {
    const RngKey key{seed, static_cast<uint64_t>(b), static_cast<uint64_t>(step),
                     RngPurpose::kDraft};
    picked->push_back(static_cast<int64_t>(UniformDouble(key) * sequences.size()));
    const auto& seq = sequences[picked->back()];
    for (int64_t t = 0; t < ctx; ++t) {
      xp[b * ctx + t] = seq[t];
      yp[b * ctx + t] = seq[t + 1];
    }
  }
  return {x, y};
}

// Whether item i of a series takes its turn when a share s of the items should, spread evenly:
// when floor((i + 1) s) passes an integer (s = 0.5: every odd item).
bool TakesTurn(int64_t i, double share) {
  return std::floor(double(i + 1) * share) > std::floor(double(i) * share);
}

// The draft of `init_from`, to train further: its shape must be the one the options ask for (a
// run that silently changed width or depth would not be the run its command line reads as).
Llama ImportDraftToContinue(const TrainOptions& o) {
  Llama model = ImportGguf(o.init_from);
  const LlamaShape& got = model->shape;
  const std::pair<const char*, std::pair<int64_t, int64_t>> sizes[] = {
      {"--dim", {got.dim, o.shape.dim}},
      {"--layers", {got.n_layers, o.shape.n_layers}},
      {"--heads", {got.n_heads, o.shape.n_heads}},
      {"--kv-heads", {got.n_kv_heads, o.shape.n_kv_heads}},
      {"--ffn", {got.ffn, o.shape.ffn}},
      {"--ctx", {got.ctx, o.shape.ctx}},
      {"the vocabulary", {got.n_vocab, o.shape.n_vocab}},
      {"--head-vocab", {model->has_head() ? model->head_tokens.numel() : 0, o.head_vocab}},
  };
  for (const auto& [flag, values] : sizes) {
    SPECD_CHECK(values.first == values.second, o.init_from, " has ", flag, " ", values.first,
                ", but this run asks for ", values.second);
  }
  std::fprintf(stderr, "model: starting from %s\n", o.init_from.c_str());
  return model;
}

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

uint64_t SequencesFingerprint(const std::vector<std::vector<int32_t>>& sequences) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& seq : sequences) {
    for (int32_t t : seq) {
      h ^= static_cast<uint32_t>(t);
      h *= 1099511628211ull;
    }
    h ^= 0xffffffffull;  // the end of a sequence: the same tokens split otherwise differ
    h *= 1099511628211ull;
  }
  return h;
}

std::unique_ptr<Model> LoadTeacher(const std::string& gguf, const TeacherRun& run,
                                   const KernelContext* kernels) {
  ModelLoadOptions load_options;
  load_options.int8_weights = run.int8_weights;
  return Model::Load(gguf, kernels, load_options);
}

std::vector<int64_t> MostFrequentTokens(const std::vector<int32_t>& stream,
                                        const std::vector<std::vector<int32_t>>& sequences,
                                        int64_t n_vocab, int64_t n) {
  std::vector<int64_t> counts(n_vocab, 0);
  for (int32_t t : stream) ++counts[t];
  for (const auto& seq : sequences) {
    for (int32_t t : seq) ++counts[t];
  }
  std::vector<int64_t> ids(n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) ids[i] = i;
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int64_t a, int64_t b) { return counts[a] > counts[b]; });
  ids.resize(std::min(n, n_vocab));
  int64_t covered = 0, total = 0;
  for (int64_t i = 0; i < n_vocab; ++i) total += counts[i];
  for (int64_t id : ids) covered += counts[id];
  std::sort(ids.begin(), ids.end());
  std::fprintf(stderr, "head: the %lld most frequent tokens cover %.2f%% of the training text\n",
               static_cast<long long>(ids.size()), 100.0 * covered / std::max<int64_t>(total, 1));
  return ids;
}

std::vector<int32_t> TokenizeFiles(const std::vector<std::string>& files,
                                   const std::string& tokenizer_gguf) {
  auto gguf = GgufFile::Open(tokenizer_gguf);
  const auto tokenizer = Tokenizer::FromGguf(*gguf);
  std::vector<int32_t> stream;
  for (const std::string& f : files) {
    stream.push_back(tokenizer->bos());
    const auto ids = tokenizer->Encode(ReadFileBytes(f), false, false);
    stream.insert(stream.end(), ids.begin(), ids.end());
    stream.push_back(tokenizer->eos());
  }
  return stream;
}

std::string FormatTrainLoss(double loss, const char* if_unknown) {
  if (std::isnan(loss)) return if_unknown;
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", loss);
  return text;
}

namespace {

// What a draft trains on: the corpus's token streams and, with a teacher, its text and top-k.
struct TrainingText {
  std::vector<int32_t> train_stream, valid_stream;
  std::vector<std::vector<int32_t>> teacher_text;
  TeacherTopK teacher_top;
};

TrainingText LoadTrainingText(const TrainOptions& o) {
  TrainingText t;
  const Corpus corpus = ListCorpus(o.corpus_dir, {".py"}, o.validation_every);
  t.train_stream = TokenizeFiles(corpus.train_files, o.tokenizer);
  t.valid_stream = TokenizeFiles(corpus.validation_files, o.tokenizer);
  SPECD_CHECK(static_cast<int64_t>(t.train_stream.size()) > o.shape.ctx * 4,
              "the corpus is too small for a context of ", o.shape.ctx);
  std::fprintf(stderr,
               "corpus: %zu training files (%zu tokens), %zu held out (%zu tokens), "
               "fingerprint %016llx\n",
               corpus.train_files.size(), t.train_stream.size(), corpus.validation_files.size(),
               t.valid_stream.size(), static_cast<unsigned long long>(corpus.fingerprint));
  // Teacher text comes first, before LibTorch starts its own threads: specd's spinning pool
  // runs several times slower next to them on 2 cores.
  if (!o.teacher.empty() && o.teacher_text_tokens > 0) {
    std::vector<std::vector<int32_t>> chat_prompts;
    if (!o.teacher_chat_file.empty()) {
      chat_prompts = ChatPrompts(o.teacher, o.teacher_chat_file, o.shape.ctx / 2);
    }
    // Soft targets are recorded while the text is written, when both are cached.
    TopKRecording record;
    if (!o.checkpoint_dir.empty()) {
      record = {o.teacher_top_k, o.checkpoint_dir + "/teacher_topk.bin"};
    }
    t.teacher_text = TeacherText(
        o.teacher, t.train_stream, o.teacher_text_tokens, o.shape.ctx, o.threads, o.seed,
        o.teacher_text_sampled_share,
        o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/teacher_text.bin", chat_prompts,
        chat_prompts.empty() ? 0.0 : o.teacher_chat_share, o.teacher_run, record);
  }
  if (o.teacher_top_k > 0) {
    SPECD_CHECK(!t.teacher_text.empty(), "--teacher-top-k needs teacher text (--teacher-text)");
    SPECD_CHECK(o.soft_weight >= 0.0 && o.soft_weight <= 1.0,
                "--soft-weight must be in [0, 1], got ", o.soft_weight);
    t.teacher_top = ComputeTeacherTopK(
        o.teacher, t.teacher_text, o.shape.ctx, o.teacher_top_k, o.threads, o.teacher_run,
        o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/teacher_topk.bin");
  }
  return t;
}

// The teacher's logits for distillation, or null: without a distillation term the teacher is
// only the author of the teacher text.
Llama DistillationTeacher(const TrainOptions& o) {
  if (o.teacher.empty() || o.distill_alpha <= 0.0) return Llama{nullptr};
  Llama teacher = ImportGguf(o.teacher);
  SPECD_CHECK(teacher->shape.n_vocab == o.shape.n_vocab, "the teacher's vocabulary (",
              teacher->shape.n_vocab, ") differs from the draft's (", o.shape.n_vocab, ")");
  teacher->eval();
  for (auto& p : teacher->parameters()) p.set_requires_grad(false);
  return teacher;
}

// One step's loss: cross-entropy on the batch's next tokens, mixed with the KL to the teacher's
// distribution (distillation) and with the recorded top-k soft targets on teacher-text steps.
// *ce gets the plain cross-entropy.
torch::Tensor StepLoss(const TrainOptions& o, const TrainingText& text, Llama& model,
                       Llama& teacher, int64_t step, double* ce) {
  const bool teacher_step = !text.teacher_text.empty() && TakesTurn(step, o.teacher_text_share);
  std::vector<int64_t> picked;
  auto [x, y] =
      teacher_step ? SampleSequences(text.teacher_text, o.batch, o.shape.ctx, o.seed, step, &picked)
                   : SampleBatch(text.train_stream, o.batch, o.shape.ctx, o.seed, step);
  torch::Tensor logits, teacher_logits;
  {
    Autocast autocast(o.bf16);
    logits = model->forward(x);
    if (teacher) {
      torch::NoGradGuard no_grad;
      teacher_logits = teacher->forward(x);
    }
  }
  const auto flat = logits.to(torch::kFloat32).view({-1, logits.size(-1)});
  auto loss = torch::nn::functional::cross_entropy(flat, model->HeadTargets(y).view({-1}));
  *ce = loss.item<double>();
  if (teacher) {
    if (model->has_head()) teacher_logits = teacher_logits.index_select(-1, model->head_tokens);
    const auto target =
        torch::softmax(teacher_logits.to(torch::kFloat32).view({-1, logits.size(-1)}), -1);
    const auto kl = torch::nn::functional::kl_div(
        torch::log_softmax(flat, -1), target,
        torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
    loss = o.distill_alpha * kl + (1.0 - o.distill_alpha) * loss;
  }
  if (teacher_step && text.teacher_top.k > 0) {
    const auto soft = SoftTargetLoss(torch::log_softmax(flat, -1), text.teacher_top, picked, model);
    loss = o.soft_weight * soft + (1.0 - o.soft_weight) * loss;
  }
  return loss;
}

// The end of a finished run: held-out loss, and the draft exported when asked for.
void FinishTraining(const TrainOptions& o, const TrainingText& text, Llama& model, int64_t step,
                    TrainResult* result) {
  result->steps = step;
  result->finished = true;
  result->validation_loss =
      HeldOutLoss(model, text.valid_stream, o.shape.ctx, o.eval_windows, o.bf16);
  result->validation_perplexity = std::exp(result->validation_loss);
  std::fprintf(stderr,
               "%sdone: %lld steps, train loss %s, validation loss %.4f (perplexity %.2f)\n",
               ::isatty(2) ? "\n" : "", static_cast<long long>(step),
               FormatTrainLoss(result->train_loss, "unknown").c_str(), result->validation_loss,
               result->validation_perplexity);
  if (!o.out.empty()) {
    ExportGguf(model, o.tokenizer, o.export_type, o.name, o.out, {}, o.embedding_type);
    std::fprintf(stderr, "wrote %s\n", o.out.c_str());
  }
}

}  // namespace

TrainResult Train(const TrainOptions& o) {
  const FolderLock lock(o.checkpoint_dir);
  torch::set_num_threads(o.threads);
  torch::manual_seed(o.seed);
  SPECD_CHECK(o.stop_at_step == 0 || !o.checkpoint_dir.empty(),
              "stopping at a step needs a checkpoint folder to resume from");
  const TrainingText text = LoadTrainingText(o);
  Llama model = o.init_from.empty() ? Llama(o.shape) : ImportDraftToContinue(o);
  if (o.head_vocab > 0 && o.init_from.empty()) {
    model->SetHeadTokens(
        MostFrequentTokens(text.train_stream, text.teacher_text, o.shape.n_vocab, o.head_vocab));
  }
  Llama teacher = DistillationTeacher(o);
  const int64_t tokens_per_step = static_cast<int64_t>(o.batch) * o.shape.ctx;
  const int64_t total_steps =
      o.max_steps > 0
          ? o.max_steps
          : std::max<int64_t>(
                1, static_cast<int64_t>(o.epochs * text.train_stream.size() / tokens_per_step));
  auto optimizer = MakeAdamW(model, o.lr, o.weight_decay);
  int64_t step = 0;
  // Smoothed training loss; carried in the checkpoint so that a resumed run (or a re-export of a
  // finished one) reports it instead of starting from nothing.
  double smoothed = std::nan("");
  Checkpoint checkpoint(o.checkpoint_dir);
  checkpoint.Load(model, *optimizer, &step, &smoothed);
  auto save_checkpoint = [&] { checkpoint.Save(model, *optimizer, step, smoothed); };
  std::fprintf(stderr, "model: %lld parameters; %lld steps of %lld tokens (%.2f epochs)%s\n",
               static_cast<long long>(model->NumParameters()), static_cast<long long>(total_steps),
               static_cast<long long>(tokens_per_step),
               double(total_steps) * tokens_per_step / text.train_stream.size(),
               teacher ? ", distilling from the teacher" : "");
  const bool tty = ::isatty(2);
  TrainResult result;
  result.parameters = model->NumParameters();
  Timer timer;
  const int64_t first_step = step;
  result.train_loss = smoothed;
  model->train();
  while (step < total_steps) {
    const double lr_scale = LearningRateScale(step, o.warmup_steps, total_steps, o.min_lr_ratio);
    SetLearningRate(*optimizer, o.lr * lr_scale);
    double ce = 0.0;
    torch::Tensor loss = StepLoss(o, text, model, teacher, step, &ce);
    optimizer->zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), o.grad_clip);
    optimizer->step();
    ++step;
    smoothed = std::isnan(smoothed) ? ce : 0.98 * smoothed + 0.02 * ce;
    result.train_loss = smoothed;
    const double elapsed_s = timer.ElapsedMs() / 1000.0;
    result.tokens_per_s = double(step - first_step) * tokens_per_step / std::max(elapsed_s, 1e-9);
    ReportProgress(step, total_steps, smoothed, o.lr * lr_scale, result.tokens_per_s,
                   tokens_per_step);
    if (step == o.stop_at_step && step < total_steps) {
      save_checkpoint();
      result.steps = step;
      std::fprintf(stderr, "%sstopped at step %lld of %lld; checkpoint in %s\n", tty ? "\n" : "",
                   static_cast<long long>(step), static_cast<long long>(total_steps),
                   o.checkpoint_dir.c_str());
      return result;
    }
    if (step % o.checkpoint_every == 0) save_checkpoint();
    if (step % o.eval_every == 0 && !text.valid_stream.empty()) {
      const double v = HeldOutLoss(model, text.valid_stream, o.shape.ctx, o.eval_windows, o.bf16);
      std::fprintf(stderr, "%sstep %lld: validation loss %.4f, perplexity %.2f\n", tty ? "\n" : "",
                   static_cast<long long>(step), v, std::exp(v));
    }
  }
  save_checkpoint();
  FinishTraining(o, text, model, step, &result);
  return result;
}

std::pair<double, double> ClusteredAcceptance(const std::vector<int64_t>& drafted,
                                              const std::vector<int64_t>& accepted) {
  SPECD_CHECK(drafted.size() == accepted.size(), "acceptance: ", drafted.size(),
              " drafted counts but ", accepted.size(), " accepted counts");
  double sum_drafted = 0.0, sum_accepted = 0.0;
  for (size_t i = 0; i < drafted.size(); ++i) {
    sum_drafted += static_cast<double>(drafted[i]);
    sum_accepted += static_cast<double>(accepted[i]);
  }
  if (sum_drafted == 0.0) return {0.0, 0.0};
  const double rate = sum_accepted / sum_drafted;
  const size_t n = drafted.size();
  if (n < 2) return {rate, 0.0};
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double residual =
        static_cast<double>(accepted[i]) - rate * static_cast<double>(drafted[i]);
    sum_sq += residual * residual;
  }
  return {rate, std::sqrt(double(n) / double(n - 1) * sum_sq) / sum_drafted};
}

DraftReport MeasureDraft(const std::string& target_gguf, const std::string& draft_gguf,
                         const std::vector<std::string>& held_out_files, int threads,
                         int draft_length, int prompts_per_file) {
  SPECD_CHECK(prompts_per_file >= 1, "prompts per file must be at least 1, got ", prompts_per_file);
  constexpr int kPromptTokens = 64;
  auto gguf = GgufFile::Open(target_gguf);
  const auto tokenizer = Tokenizer::FromGguf(*gguf);
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& file : held_out_files) {
    const auto ids = tokenizer->Encode(ReadFileBytes(file), false, false);
    for (int p = 0; p < prompts_per_file; ++p) {
      const size_t start = ids.size() * (2 * p + 1) / (2 * prompts_per_file);
      if (start + kPromptTokens > ids.size()) continue;
      prompts.emplace_back(ids.begin() + start, ids.begin() + start + kPromptTokens);
    }
  }
  return MeasureDraftOnPrompts(target_gguf, draft_gguf, prompts, threads, draft_length);
}

DraftReport MeasureDraftOnPrompts(const std::string& target_gguf, const std::string& draft_gguf,
                                  const std::vector<std::vector<int32_t>>& prompts, int threads,
                                  int draft_length, int n_new) {
  SPECD_CHECK(!prompts.empty(), "no prompts to measure the draft on");
  ThreadPool pool(threads);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto target = Model::Load(target_gguf, &ctx);
  auto draft = Model::Load(draft_gguf, &ctx);
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int n_ctx = static_cast<int>(longest) + n_new + draft_length + 2;
  auto target_kv = target->NewKvCache({1, n_ctx});
  auto draft_kv = draft->NewKvCache({1, n_ctx});
  SpeculativeStats stats;
  std::vector<int64_t> drafted_per_prompt, accepted_per_prompt;
  for (const auto& prompt : prompts) {
    GenerateRequest request;
    request.sum_logprob = false;
    request.prompt = prompt;
    request.n_predict = n_new;
    request.sampling.temperature = 0.0f;
    request.stop_at_eos = false;
    SpeculativeStats prompt_stats;
    GenerateSpeculativeGreedy(*target, *draft, ctx, *target_kv, *draft_kv, request, draft_length,
                              &prompt_stats);
    drafted_per_prompt.push_back(prompt_stats.n_drafted);
    accepted_per_prompt.push_back(prompt_stats.n_accepted);
    stats.Add(prompt_stats);
  }
  DraftReport report;
  report.acceptance_rate = stats.acceptance_rate();
  report.acceptance_standard_error =
      ClusteredAcceptance(drafted_per_prompt, accepted_per_prompt).second;
  report.n_prompts = static_cast<int64_t>(drafted_per_prompt.size());
  report.n_drafted = stats.n_drafted;
  report.mean_accepted_length = stats.mean_accepted_length();
  for (size_t i = 0; i < stats.drafted_at_position.size(); ++i) {
    const int64_t drafted = stats.drafted_at_position[i];
    report.accepted_at_position.push_back(
        drafted > 0 ? double(stats.accepted_at_position[i]) / drafted : 0.0);
  }
  // Decode-step cost: 64 single-row forwards after a 64-token prompt, best of three. An EAGLE
  // head's step includes its input projection and the embedding lookup in the target.
  auto step_ms = [&](Model& model) {
    const std::vector<float> features(64 * model.config().n_embd, 0.5f);  // [rows, n_embd]
    std::vector<float> concat, input;
    MatmulScratch scratch;
    auto forward = [&](const Batch& batch, KvCache& kv, std::vector<float>* logits) {
      ForwardExtras extras;
      if (model.config().eagle) {
        EagleInputRows(ctx, *target, model, batch.tokens, features.data(), &concat, &input,
                       &scratch);
        extras.input_rows = input.data();
      }
      model.Forward(ctx, batch, kv, AttentionMode::kSplit, logits, extras);
    };
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto kv = model.NewKvCache({1, 256});
      const int seq = kv->Acquire();
      std::vector<float> logits;
      Batch batch;
      for (int i = 0; i < 64; ++i) batch.Add(5 + i, i, seq, i == 63);
      forward(batch, *kv, &logits);
      Timer t;
      for (int i = 0; i < 64; ++i) {
        batch.Clear();
        batch.Add(7 + i, 64 + i, seq, true);
        forward(batch, *kv, &logits);
      }
      best = std::min(best, t.ElapsedMs() / 64);
    }
    return best;
  };
  report.target_ms_per_token = step_ms(*target);
  report.draft_ms_per_token = step_ms(*draft);
  return report;
}

}  // namespace specd::train
