// The trainer: a model trained for a few steps, exported to GGUF and run by specd's engine,
// gives the trainer's own logits; a trained tokenizer encodes exactly as SentencePiece does.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "draft/sdsat_proposer.h"
#include "engine/generate.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/corpus.h"
#include "train/eagle_trainer.h"
#include "train/llama_torch.h"
#include "train/sdsat_data.h"
#include "train/sdsat_trainer.h"
#include "train/teacher_targets.h"
#include "train/tokenizer_train.h"
#include "train/train_loop.h"
#include "train/trainer.h"

namespace specd::train {
namespace {

namespace fs = std::filesystem;

// A small corpus of Python files from the system's standard library, copied to a temp folder.
std::string SmallCorpus() {
  const std::string dir = specd::testing::TempDir() + "/corpus";
  if (fs::exists(dir)) return dir;
  fs::create_directories(dir);
  int copied = 0;
  for (const char* name : {"argparse.py", "textwrap.py", "string.py", "heapq.py", "bisect.py",
                           "fnmatch.py", "shlex.py", "colorsys.py", "keyword.py", "glob.py",
                           "queue.py", "random.py", "copy.py", "dataclasses.py"}) {
    const std::string src = std::string("/usr/lib/python3.11/") + name;
    if (fs::exists(src)) {
      fs::copy_file(src, dir + "/" + name);
      ++copied;
    }
  }
  if (copied < 8) {  // no Python installed: generate some code-like text
    for (int f = 0; f < 10; ++f) {
      std::ofstream out(dir + "/gen" + std::to_string(f) + ".py");
      for (int i = 0; i < 400; ++i) {
        out << "def function_" << i << "(x, y=" << f << "):\n    return x * y + " << i << "\n\n";
      }
    }
  }
  return dir;
}

std::string ReadFileBytesForTest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string TrainedTokenizer() {
  const std::string path = specd::testing::TempDir() + "/tok.gguf";
  if (!fs::exists(path)) {
    const Corpus corpus = ListCorpus(SmallCorpus(), {".py"}, 5);
    TokenizerTrainOptions options;
    options.vocab_size = 1024;
    TrainTokenizer(corpus.train_files, options, path);
  }
  return path;
}

std::vector<int32_t> SpmEncode(const std::string& model, const std::string& text) {
  const std::string input = specd::testing::TempDir() + "/spm_input.txt";
  std::ofstream(input, std::ios::binary) << text;
  const std::string cmd = "spm_encode --model=" + model + " --output_format=id < " + input;
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  pclose(pipe);
  // spm_encode handles one line per output line; the newline itself is our <0x0A> token.
  std::vector<int32_t> ids;
  std::istringstream lines(out);
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    if (!first) ids.push_back(-1);  // newline marker, replaced below
    first = false;
    std::istringstream in(line);
    int32_t id;
    while (in >> id) ids.push_back(id);
  }
  return ids;
}

TEST(Train, TrainedTokenizerEncodesLikeSentencePiece) {
  const std::string path = TrainedTokenizer();
  auto file = GgufFile::Open(path);
  const auto tokenizer = Tokenizer::FromGguf(*file);
  EXPECT_EQ(tokenizer->n_vocab(), 1024);
  const int32_t newline = tokenizer->Find("<0x0A>");
  ASSERT_GE(newline, 0);
  for (int32_t id : {tokenizer->Find("<fim_prefix>"), tokenizer->Find("<unused0>"),
                     tokenizer->Find("<unused19>")}) {
    ASSERT_GE(id, 0);
    EXPECT_EQ(tokenizer->Type(id), TokenType::kControl);
  }
  // Held-out code with indentation, blank-free lines and unicode.
  const std::string text =
      "class Point:\n    def __init__(self, x, y):\n        self.x = x  # ünïcode\n"
      "        self.y = y\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5";
  auto expected = SpmEncode(path + ".spm.model", text);
  for (auto& id : expected) {
    if (id == -1) id = newline;
  }
  EXPECT_EQ(tokenizer->Encode(text, false, false), expected);
  EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(text, false, false)), text);
}

// Options for a tiny model trained on the small corpus: steps and shape set by each test.
// A small llama with 4 query heads sharing 2 key / value heads (GQA), for exactness tests.
LlamaShape SmallShape(int64_t n_vocab, int64_t dim, int64_t n_layers, int64_t ffn) {
  LlamaShape shape;
  shape.n_vocab = n_vocab;
  shape.dim = dim;
  shape.n_layers = n_layers;
  shape.n_heads = 4;
  shape.n_kv_heads = 2;
  shape.ffn = ffn;
  return shape;
}

TrainOptions TinyTrainOptions(int n_layers, int n_heads, int n_kv_heads, int ffn, int ctx) {
  TrainOptions options;
  options.corpus_dir = SmallCorpus();
  options.tokenizer = TrainedTokenizer();
  options.shape.n_vocab = 1024;
  options.shape.dim = 64;
  options.shape.n_layers = n_layers;
  options.shape.n_heads = n_heads;
  options.shape.n_kv_heads = n_kv_heads;
  options.shape.ffn = ffn;
  options.shape.ctx = ctx;
  options.eval_every = 1000;
  options.validation_every = 5;
  return options;
}

// n token ids spread over a vocabulary of `vocab`.
std::vector<int32_t> TestTokens(int n, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return tokens;
}

// The trainer's logits of `tokens` at positions 0..n-1: [n, outputs] f32.
torch::Tensor TrainerLogits(Llama& model, const std::vector<int32_t>& tokens) {
  model->eval();
  const int64_t n = static_cast<int64_t>(tokens.size());
  auto input = torch::empty({1, n}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) input[0][i] = tokens[i];
  torch::NoGradGuard no_grad;
  return model->forward(input).squeeze(0).contiguous();
}

// specd's logits of `tokens` at positions 0..n-1, in one forward: [n, n_vocab].
std::vector<float> SpecdLogits(const KernelContext& ctx, Model& model,
                               const std::vector<int32_t>& tokens) {
  auto kv = model.NewKvCache({1, static_cast<int>(tokens.size()) + 24});
  const int seq = kv->Acquire();
  Batch batch;
  for (size_t i = 0; i < tokens.size(); ++i) batch.Add(tokens[i], static_cast<int>(i), seq, true);
  std::vector<float> logits;
  model.Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
  return logits;
}

// The trainer's logits for `path` (ImportGguf) equal specd's forward of the same file to float
// rounding, and their argmax on every row.
void ExpectSpecdGivesTheTrainersLogits(const std::string& path, int64_t vocab) {
  Llama reference = ImportGguf(path);
  const std::vector<int32_t> tokens = TestTokens(40, vocab);
  const auto expected = TrainerLogits(reference, tokens);  // [40, vocab]

  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(path, &ctx);
  const std::vector<float> logits = SpecdLogits(ctx, *model, tokens);
  ASSERT_EQ(logits.size(), 40u * static_cast<size_t>(vocab));
  const float* e = expected.data_ptr<float>();
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(logits[i]) - e[i]));
    max_abs = std::max(max_abs, std::fabs(double(e[i])));
  }
  // f32 file, f32 engine: agreement to float rounding, far inside bf16 tolerance (2^-8).
  EXPECT_LT(max_diff, 1e-3 * std::max(1.0, max_abs)) << path << ": max |logit| " << max_abs;
  int same_argmax = 0;
  for (int r = 0; r < 40; ++r) {
    same_argmax += Argmax(std::span<const float>(logits.data() + r * vocab, vocab)) ==
                   expected[r].argmax().item<int64_t>();
  }
  EXPECT_EQ(same_argmax, 40) << path;
}

TEST(Train, ExportedModelGivesTheTrainersLogitsInSpecd) {
  TrainOptions options = TinyTrainOptions(2, 4, 2, 160, 64);
  options.out = specd::testing::TempDir() + "/parity.gguf";
  options.batch = 4;
  options.max_steps = 30;
  options.warmup_steps = 5;
  options.eval_windows = 4;
  const TrainResult result = Train(options);
  EXPECT_EQ(result.steps, 30);
  EXPECT_LT(result.train_loss, 7.0);  // below log(1024) = 6.93 + noise: it learned something

  // Reload the trained weights from the exported file into torch and into specd.
  ExpectSpecdGivesTheTrainersLogits(options.out, 1024);
}

// A qwen2 file (q / k / v biases, NeoX rotary pairs) and a llama file with its own output matrix
// (as Qwen2.5-Coder-0.5B's GGUF has) import into the trainer as specd reads them: the SDSAT
// fine-tune of Qwen2.5-Coder starts from the model specd runs.
TEST(Train, ImportedQwen2AndUntiedModelsGiveSpecdsLogits) {
  for (const char* shape : {"tiny-qwen2", "tiny"}) {
    const std::string path = specd::testing::TinyModel(shape);
    const Llama imported = ImportGguf(path);
    EXPECT_EQ(imported->shape.arch, shape == std::string("tiny") ? "llama" : "qwen2");
    EXPECT_EQ(imported->output.defined(), shape == std::string("tiny")) << shape;
    ExpectSpecdGivesTheTrainersLogits(path, Model::Load(path, nullptr)->config().n_vocab);
  }
}

TEST(Train, ARestrictedHeadGivesTheTrainersLogitsAndMinusInfinityElsewhere) {
  TrainOptions options = TinyTrainOptions(1, 2, 2, 128, 32);
  options.out = specd::testing::TempDir() + "/head.gguf";
  options.batch = 2;
  options.max_steps = 10;
  options.warmup_steps = 2;
  options.eval_windows = 2;
  options.head_vocab = 200;
  const TrainResult result = Train(options);
  ASSERT_TRUE(result.finished);

  Llama reference = ImportGguf(options.out);
  ASSERT_TRUE(reference->has_head());
  ASSERT_EQ(reference->head_tokens.numel(), 200);
  const std::vector<int32_t> tokens = TestTokens(20, 1024);
  const auto expected = TrainerLogits(reference, tokens);  // [20, 200]

  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(options.out, &ctx);
  ASSERT_EQ(model->config().head_tokens.size(), 200u);
  const std::vector<float> logits = SpecdLogits(ctx, *model, tokens);  // [20, 1024]
  ASSERT_EQ(logits.size(), 20u * 1024u);
  std::vector<int> head_index(1024, -1);
  for (int j = 0; j < 200; ++j) head_index[model->config().head_tokens[j]] = j;
  for (int r = 0; r < 20; ++r) {
    for (int t = 0; t < 1024; ++t) {
      const float got = logits[r * 1024 + t];
      if (head_index[t] < 0) {
        ASSERT_TRUE(std::isinf(got) && got < 0) << "row " << r << " token " << t;
      } else {
        ASSERT_NEAR(got, expected[r][head_index[t]].item<float>(), 1e-3) << r << " " << t;
      }
    }
  }
  // Its input embedding restricted (the head's tokens keep their rows, the rest share one): the
  // trainer imports it as specd runs it.
  const std::string restricted = specd::testing::TempDir() + "/head-restricted-input.gguf";
  const auto run = specd::testing::RunSpecd("quantize " + options.out + " " + restricted +
                                            " --type copy --restrict-input-embedding");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  Llama imported = ImportGguf(restricted);
  auto restricted_model = Model::Load(restricted, &ctx);
  const auto trainer_logits = TrainerLogits(imported, tokens);  // [20, 200]
  const std::vector<float> specd_logits = SpecdLogits(ctx, *restricted_model, tokens);
  int n_unlisted = 0;
  for (int32_t t : tokens) n_unlisted += head_index[t] < 0;
  EXPECT_GT(n_unlisted, 0);  // the tokens read the shared row too
  for (int r = 0; r < 20; ++r) {
    for (int t = 0; t < 1024; ++t) {
      if (head_index[t] < 0) continue;
      ASSERT_NEAR(specd_logits[r * 1024 + t], trainer_logits[r][head_index[t]].item<float>(), 1e-3)
          << r << " " << t;
    }
  }
}

// A folder written before checkpoints held only the trainable parameters (the whole model in
// model.pt) still resumes, and the next save replaces model.pt with trainable.pt.
TEST(Train, AWholeModelCheckpointStillLoadsAndIsReplacedOnSave) {
  const std::string dir = specd::testing::TempDir() + "/whole-model-checkpoint";
  torch::manual_seed(3);
  Llama saved(SmallShape(/*n_vocab=*/128, /*dim=*/32, /*n_layers=*/1, /*ffn=*/64));
  auto saved_optimizer = MakeAdamW(saved, 1e-3, 0.0);
  fs::create_directories(dir);
  torch::save(saved, dir + "/model.pt");
  torch::save(*saved_optimizer, dir + "/optimizer.pt");
  std::ofstream(dir + "/step.txt") << "42 1.5\n";

  torch::manual_seed(4);
  Llama loaded(SmallShape(128, 32, 1, 64));
  auto optimizer = MakeAdamW(loaded, 1e-3, 0.0);
  Checkpoint checkpoint(dir);
  int64_t step = 0;
  double loss = 0.0;
  ASSERT_TRUE(checkpoint.Load(loaded, *optimizer, &step, &loss));
  EXPECT_EQ(step, 42);
  EXPECT_EQ(loss, 1.5);
  EXPECT_TRUE(torch::equal(loaded->embed->weight, saved->embed->weight));
  checkpoint.Save(loaded, *optimizer, 43, 1.4);
  EXPECT_FALSE(fs::exists(dir + "/model.pt"));
  ASSERT_TRUE(fs::exists(dir + "/trainable.pt"));
  torch::manual_seed(5);
  Llama again(SmallShape(128, 32, 1, 64));
  checkpoint.LoadModel(again);
  for (const auto& p : saved->named_parameters()) {
    EXPECT_TRUE(torch::equal(again->named_parameters()[p.key()], p.value())) << p.key();
  }
}

TEST(Train, RunStoppedAtACheckpointResumesToTheSameModel) {
  const std::string dir = specd::testing::TempDir() + "/resume";
  fs::remove_all(dir);
  TrainOptions options = TinyTrainOptions(1, 2, 2, 128, 32);
  options.batch = 2;
  options.max_steps = 12;
  options.warmup_steps = 3;
  options.checkpoint_every = 5;  // the stop at 7 must save on its own, off this grid
  options.eval_windows = 2;

  TrainOptions straight = options;
  straight.checkpoint_dir = dir + "/straight";
  straight.out = dir + "/straight.gguf";
  const TrainResult whole = Train(straight);
  ASSERT_TRUE(whole.finished);

  TrainOptions split = options;
  split.checkpoint_dir = dir + "/split";
  split.out = dir + "/split.gguf";
  split.stop_at_step = 7;
  const TrainResult first = Train(split);
  EXPECT_FALSE(first.finished);
  EXPECT_EQ(first.steps, 7);
  EXPECT_FALSE(fs::exists(split.out));      // nothing exported before the end
  const TrainResult second = Train(split);  // the same options: resumes at 7, runs to the end
  ASSERT_TRUE(second.finished);
  EXPECT_EQ(second.steps, 12);
  EXPECT_NEAR(second.train_loss, whole.train_loss, 1e-3 * whole.train_loss);
  EXPECT_NEAR(second.validation_loss, whole.validation_loss, 1e-3 * whole.validation_loss);

  // Same weights, optimizer state and batches: the two exports hold the same model.
  Llama a = ImportGguf(straight.out), b = ImportGguf(split.out);
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) {
    const auto& q = pb[p.key()];
    EXPECT_LT((p.value() - q).abs().max().item<double>(), 1e-4) << p.key();
  }

  // Re-running a finished run only re-exports, and still reports its training loss.
  split.out = dir + "/again.gguf";
  const TrainResult again = Train(split);
  EXPECT_EQ(again.steps, 12);
  EXPECT_NEAR(again.train_loss, second.train_loss, 1e-4);
  EXPECT_EQ(ReadFileBytesForTest(split.out), ReadFileBytesForTest(dir + "/split.gguf"));
}

TEST(Train, ASecondRunOnTheSameCheckpointFolderIsRefused) {
  // Two runs on one folder appended their teacher text to the same partial file (a session's
  // `pkill` missed a run): the second must stop at once with a clear error, and a run may take
  // the folder again once the first is gone.
  const std::string dir = specd::testing::TempDir() + "/locked";
  fs::remove_all(dir);
  TrainOptions options = TinyTrainOptions(1, 2, 2, 128, 32);
  options.max_steps = 1;
  options.checkpoint_dir = dir;
  options.out = dir + "/out.gguf";
  {
    const FolderLock first(dir);
    EXPECT_THROW(Train(options), Error);
    EXPECT_FALSE(fs::exists(dir + "/step.txt"));
    EXPECT_THROW(FolderLock second(dir), Error);
  }
  EXPECT_TRUE(Train(options).finished);
  const FolderLock none("");  // no folder, no lock
}

TEST(Train, ADraftContinuedFromAFileStartsFromItsWeightsAndHead) {
  TrainOptions options = TinyTrainOptions(1, 2, 2, 128, 32);
  const std::string dir = specd::testing::TempDir() + "/continue";
  fs::remove_all(dir);
  fs::create_directories(dir);
  options.out = dir + "/first.gguf";
  options.batch = 2;
  options.max_steps = 6;
  options.warmup_steps = 1;
  options.eval_windows = 2;
  options.head_vocab = 200;
  ASSERT_TRUE(Train(options).finished);

  // One step at a learning rate too small to move a weight visibly: the result is the file it
  // started from, its restricted head carried over.
  TrainOptions next = options;
  next.init_from = options.out;
  next.out = dir + "/next.gguf";
  next.max_steps = 1;
  next.warmup_steps = 0;
  next.lr = 1e-7;
  next.seed = 9;
  ASSERT_TRUE(Train(next).finished);
  Llama before = ImportGguf(options.out), after = ImportGguf(next.out);
  ASSERT_TRUE(after->has_head());
  EXPECT_TRUE(torch::equal(before->head_tokens, after->head_tokens));
  const auto a = before->parameters(), b = after->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT((a[i] - b[i]).abs().max().item<float>(), 1e-4) << "parameter " << i;
  }
  // Another shape is refused, naming the flag, before anything is trained.
  TrainOptions wider = next;
  wider.shape.dim = 96;
  try {
    Train(wider);
    ADD_FAILURE() << "a draft of another width was continued";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dim 64, but this run asks for 96"), std::string::npos)
        << e.what();
  }
}

// Token ids the teacher-text tests take their 32-token code prefixes from.
std::vector<int32_t> TeacherPrefixStream() {
  std::vector<int32_t> stream;
  for (int i = 0; i < 5000; ++i) stream.push_back((i * 131 + 7) % 384);
  return stream;
}

std::vector<std::vector<int32_t>> ChatPromptsOfThreeLengths() {
  return {{1, 5, 9}, {1, 7, 7, 7, 7, 7, 7, 2}, {1, 300}};
}

TEST(Train, TeacherTextInI8AndOtherBatchesIsARecipeOfItsOwn) {
  const std::string teacher = specd::testing::TinyModel("tiny", DType::kQ8_0);
  const std::vector<int32_t> stream = TeacherPrefixStream();
  const int64_t ctx = 40, n_tokens = 41 * 12;
  const std::string dir = specd::testing::TempDir() + "/teacher_text_i8";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/text.bin";
  const TeacherRun run{8, true};
  const auto text = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, path, {}, 0.0, run);
  ASSERT_EQ(text.size(), 12u);
  EXPECT_EQ(ReadFileBytesForTest(path + ".recipe"), "3.12.0.5.b8.i8\n");
  // The same recipe reads the cache back; the stored weights' recipe writes its own text.
  EXPECT_EQ(TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, path, {}, 0.0, run), text);
  const auto stored = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, path, {}, 0.0, {8});
  EXPECT_EQ(ReadFileBytesForTest(path + ".recipe"), "3.12.0.5.b8\n");
  ASSERT_EQ(stored.size(), 12u);
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_EQ(text[i].size(), 41u);
    EXPECT_EQ(std::vector<int32_t>(text[i].begin(), text[i].begin() + 32),
              std::vector<int32_t>(stored[i].begin(), stored[i].begin() + 32))
        << "sequence " << i << " starts from another prefix";
  }
}

TEST(Train, TeacherTextResumesFromAPartialFileToTheSameText) {
  const std::string teacher = specd::testing::TinyModel("tiny", DType::kQ8_0);
  const std::vector<int32_t> stream = TeacherPrefixStream();
  const int64_t ctx = 40, n_tokens = 41 * 40;  // 40 sequences: batches of 16, 16 and 8
  const std::string dir = specd::testing::TempDir() + "/teacher_text";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string full_path = dir + "/full.bin";
  const auto full = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, full_path);
  ASSERT_EQ(full.size(), 40u);
  ASSERT_EQ(fs::file_size(full_path), 40u * 41u * 4u);
  EXPECT_NE(full[0], full[16]);

  // A run cut off after 1.5 batches: whole batches are kept, the rest regenerated.
  const std::string cut_path = dir + "/cut.bin";
  const std::string partial_path = cut_path + ".partial.3.40.0.5";
  {
    std::ofstream out(partial_path, std::ios::binary);
    for (int i = 0; i < 24; ++i) {
      out.write(reinterpret_cast<const char*>(full[i].data()), full[i].size() * sizeof(int32_t));
    }
  }
  const auto resumed = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, cut_path);
  EXPECT_EQ(resumed, full);
  EXPECT_FALSE(fs::exists(partial_path));
  EXPECT_EQ(ReadFileBytesForTest(cut_path), ReadFileBytesForTest(full_path));
  // A finished cache is read back as it is.
  EXPECT_EQ(TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, cut_path), full);
}

// Soft targets: row t of a sequence holds the engine's top-k after tokens 0..t (checked against a
// forward of that prefix alone), probabilities falling; a cut-off run continues to the same file.
TEST(Train, TeacherTopKIsTheEnginesNextTokenTopKAndResumesFromAPartialFile) {
  const std::string teacher = specd::testing::TinyModel("tiny", DType::kQ8_0);
  const int64_t ctx = 24;
  const int k = 4;
  std::vector<std::vector<int32_t>> text;
  for (int s = 0; s < 5; ++s) {
    std::vector<int32_t> seq;
    for (int t = 0; t <= ctx; ++t) seq.push_back((s * 97 + t * 131 + 7) % 384);
    text.push_back(seq);
  }
  const std::string dir = specd::testing::TempDir() + "/teacher_topk";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/topk.bin";
  const TeacherTopK top = ComputeTeacherTopK(teacher, text, ctx, k, 2, {}, path);
  ASSERT_EQ(top.ids.size(), 5u * ctx * k);
  ASSERT_EQ(top.probs.size(), top.ids.size());

  ThreadPool pool(1);
  const KernelContext kernels{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(teacher, &kernels);
  for (const auto& [s, t] : {std::pair{0, 0}, std::pair{3, 10}, std::pair{4, 23}}) {
    auto kv = model->NewKvCache({1, static_cast<int>(ctx + 1), DType::kF16});
    const int slot = kv->Acquire();
    Batch batch;
    for (int i = 0; i <= t; ++i) batch.Add(text[s][i], i, slot, i == t);
    std::vector<float> logits;
    model->Forward(kernels, batch, *kv, AttentionMode::kSplit, &logits);
    const auto want = TopLogProbs(logits, k);
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
      const int64_t at = (s * ctx + t) * k + j;
      EXPECT_EQ(top.ids[at], want[j].first) << "sequence " << s << " row " << t << " rank " << j;
      EXPECT_NEAR(top.probs[at], std::exp(want[j].second), 1e-5);
      if (j > 0) {
        EXPECT_LE(top.probs[at], top.probs[at - 1]);
      }
      sum += top.probs[at];
    }
    EXPECT_LE(sum, 1.0 + 1e-5);
  }

  // A run cut off after 2 of 5 sequences (plus part of the third) continues to the same file.
  const std::string full = ReadFileBytesForTest(path);
  const std::string recipe = ReadFileBytesForTest(path + ".recipe");
  const int64_t per_sequence = ctx * k * 8;
  fs::remove(path);
  fs::remove(path + ".recipe");
  std::ofstream(path + ".partial", std::ios::binary) << full.substr(0, 2 * per_sequence + 40);
  std::ofstream(path + ".partial.recipe", std::ios::binary) << recipe;
  const TeacherTopK resumed = ComputeTeacherTopK(teacher, text, ctx, k, 2, {}, path);
  EXPECT_EQ(resumed.ids, top.ids);
  EXPECT_EQ(resumed.probs, top.probs);
  EXPECT_EQ(ReadFileBytesForTest(path), full);
  EXPECT_FALSE(fs::exists(path + ".partial"));
  // Other text is another recipe: computed again, not read from the cache.
  text[1][5] = (text[1][5] + 1) % 384;
  const TeacherTopK other = ComputeTeacherTopK(teacher, text, ctx, k, 2, {}, path);
  EXPECT_NE(other.ids, top.ids);
}

// Top-k recorded while the teacher writes (batches of 8, code and chat prompts of other lengths)
// is what a later pass over the written text computes; a run cut off mid-way continues both files
// to the same bytes.
TEST(Train, TeacherTopKRecordedWhileWritingEqualsAPassOverTheText) {
  const std::string teacher = specd::testing::TinyModel("tiny", DType::kQ8_0);
  const std::vector<int32_t> stream = TeacherPrefixStream();
  const auto chat = ChatPromptsOfThreeLengths();
  const int64_t ctx = 40, n_tokens = 41 * 32;  // 32 sequences: four batches of 8
  const int k = 4;
  const TeacherRun run{8, false};
  const std::string dir = specd::testing::TempDir() + "/teacher_topk_recorded";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string text_path = dir + "/text.bin", top_path = dir + "/topk.bin";
  const auto text = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, text_path, chat, 0.5,
                                run, {k, top_path});
  ASSERT_EQ(text.size(), 32u);
  // Recording changes nothing in the text.
  EXPECT_EQ(TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, "", chat, 0.5, run), text);
  ASSERT_TRUE(fs::exists(top_path));
  ASSERT_EQ(fs::file_size(top_path), 32u * ctx * k * 8);

  const TeacherTopK fresh = ComputeTeacherTopK(teacher, text, ctx, k, 2, run, "");
  const TeacherTopK cached = ComputeTeacherTopK(teacher, text, ctx, k, 2, run, top_path);
  ASSERT_EQ(cached.ids.size(), fresh.ids.size());
  EXPECT_EQ(cached.ids, fresh.ids);
  for (size_t i = 0; i < fresh.probs.size(); ++i) {
    ASSERT_NEAR(cached.probs[i], fresh.probs[i], 1e-5) << "record " << i;
  }
  // The cache was read, not recomputed: a changed record shows through.
  const std::string full_top = ReadFileBytesForTest(top_path);
  {
    std::fstream f(top_path, std::ios::in | std::ios::out | std::ios::binary);
    const int32_t other = (cached.ids[0] + 1) % 384;
    f.write(reinterpret_cast<const char*>(&other), sizeof other);
  }
  EXPECT_NE(ComputeTeacherTopK(teacher, text, ctx, k, 2, run, top_path).ids[0], fresh.ids[0]);

  // Cut off after 2.5 batches of text and 1.5 of top-k: both continue from one whole batch.
  const std::string tag = ".partial.3.32.0.5.chat0.5.3.b8";
  const std::string full_text = ReadFileBytesForTest(text_path);
  const int64_t text_bytes = 41 * 4, top_bytes = ctx * k * 8;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(text_path + tag, std::ios::binary) << full_text.substr(0, 20 * text_bytes);
  std::ofstream(top_path + tag + ".k4", std::ios::binary) << full_top.substr(0, 12 * top_bytes);
  const auto resumed = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, text_path, chat, 0.5,
                                   run, {k, top_path});
  EXPECT_EQ(resumed, text);
  EXPECT_EQ(ReadFileBytesForTest(text_path), full_text);
  EXPECT_EQ(ReadFileBytesForTest(top_path), full_top);
  EXPECT_FALSE(fs::exists(top_path + tag + ".k4"));
  EXPECT_EQ(ComputeTeacherTopK(teacher, text, ctx, k, 2, run, top_path).ids, fresh.ids);
}

TEST(Train, SoftWeightWithoutTeacherTopKIsAnError) {
  const std::string model = specd::testing::TinyModel("tiny", DType::kQ8_0);
  const specd::testing::CliRun r = specd::testing::RunSpecd(
      "train draft --teacher " + model + " --tokenizer " + model + " --corpus " + SmallCorpus() +
      " --soft-weight 0.5 -o " + specd::testing::TempDir() + "/soft_weight.gguf");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("--soft-weight weighs the soft targets of --teacher-top-k"),
            std::string::npos)
      << r.out;
}

// The soft-target term by its definition: -sum_j p_j log q(id_j) per row, averaged, skipping
// tokens outside the draft's FR-Spec head.
TEST(Train, SoftTargetLossIsTheCrossEntropyAgainstTheTeachersTopK) {
  LlamaShape shape;
  shape.n_vocab = 16;
  shape.dim = 32;
  shape.n_layers = 1;
  shape.n_heads = 2;
  shape.n_kv_heads = 2;
  shape.ffn = 32;
  shape.ctx = 3;
  Llama model(shape);
  model->SetHeadTokens({1, 2, 3, 5, 8, 13});
  TeacherTopK top;
  top.k = 2;
  top.positions = 3;
  // 2 sequences x 3 positions x 2 candidates; token 4 is outside the head.
  top.ids = {1, 2, 3, 4, 5, 8, 13, 1, 2, 3, 8, 5};
  top.probs = {0.5f, 0.25f, 0.9f, 0.05f, 0.6f, 0.3f, 0.7f, 0.2f, 0.4f, 0.4f, 0.8f, 0.1f};
  const std::vector<int64_t> picked = {1, 0, 1};  // rows: sequence 1, 0, 1
  torch::manual_seed(5);
  const auto log_q = torch::log_softmax(torch::randn({9, 6}), -1);
  const auto index = [](int32_t id) {
    const std::vector<int32_t> head = {1, 2, 3, 5, 8, 13};
    return static_cast<int64_t>(std::find(head.begin(), head.end(), id) - head.begin());
  };
  double want = 0.0;
  for (int r = 0; r < 9; ++r) {
    const int64_t seq = picked[r / 3], pos = r % 3;
    for (int j = 0; j < 2; ++j) {
      const int32_t id = top.ids[(seq * 3 + pos) * 2 + j];
      if (id == 4) continue;
      want -= top.probs[(seq * 3 + pos) * 2 + j] * log_q[r][index(id)].item<double>();
    }
  }
  EXPECT_NEAR(SoftTargetLoss(log_q, top, picked, model).item<double>(), want / 9, 1e-6);
}

TEST(Train, TeacherTextChatShareStartsBatchesFromChatPrompts) {
  const std::string teacher = specd::testing::TinyModel("tiny", DType::kQ8_0);
  const std::vector<int32_t> stream = TeacherPrefixStream();
  // Prompts of different lengths; every sequence still comes out ctx + 1 tokens long.
  const auto chat = ChatPromptsOfThreeLengths();
  const int64_t ctx = 40, n_tokens = 41 * 64;  // 64 sequences: four batches of 16
  const auto text = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, "", chat, 0.5);
  ASSERT_EQ(text.size(), 64u);
  auto starts_with_chat = [&](const std::vector<int32_t>& seq) {
    for (const auto& p : chat) {
      if (std::equal(p.begin(), p.end(), seq.begin())) return true;
    }
    return false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_EQ(text[i].size(), 41u) << i;
    // Batches in pairs: code, code, chat, chat (greedy and sampled within each pair).
    EXPECT_EQ(starts_with_chat(text[i]), i >= 32) << i;
  }
  EXPECT_THROW(TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, "", {}, 0.5), Error);
}

TEST(Train, TeacherTextSampledShareChoosesGreedyOrSampledBatches) {
  const std::string teacher = specd::testing::TinyModel("tiny", DType::kQ8_0);
  const std::vector<int32_t> stream = TeacherPrefixStream();
  const int64_t ctx = 40, n_tokens = 41 * 32;  // 32 sequences: two batches of 16
  auto batch = [](const std::vector<std::vector<int32_t>>& text, int b) {
    return std::vector<std::vector<int32_t>>(text.begin() + 16 * b, text.begin() + 16 * (b + 1));
  };
  const auto half = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, "");
  const auto greedy = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.0, "");
  const auto sampled = TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 1.0, "");
  EXPECT_EQ(batch(half, 0), batch(greedy, 0));   // half: greedy first,
  EXPECT_EQ(batch(half, 1), batch(sampled, 1));  // then sampled
  EXPECT_NE(batch(half, 1), batch(greedy, 1));
  EXPECT_NE(batch(half, 0), batch(sampled, 0));
  // A greedy sequence is the teacher's own greedy continuation of its prefix.
  ThreadPool pool(1);
  const KernelContext kernels{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(teacher, &kernels);
  auto kv = model->NewKvCache({1, static_cast<int>(ctx + 1), DType::kF16});
  GenerateRequest request;
  request.prompts.emplace_back(greedy[17].begin(), greedy[17].begin() + 32);
  request.n_predict = static_cast<int>(ctx + 1 - 32);
  request.stop_at_eos = false;
  request.sampling.temperature = 0.0f;
  const auto result = GenerateAutoregressive(*model, kernels, *kv, request);
  EXPECT_EQ(std::vector<int32_t>(greedy[17].begin() + 32, greedy[17].end()),
            result.sequences[0].tokens);

  // A cache made by another recipe is made again, not reused because its size matches.
  const std::string dir = specd::testing::TempDir() + "/teacher_text_recipe";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/text.bin";
  EXPECT_EQ(TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.5, path), half);
  EXPECT_EQ(TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.0, path), greedy);
  EXPECT_EQ(TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 0.0, path), greedy);
  EXPECT_THROW(TeacherText(teacher, stream, n_tokens, ctx, 2, 3, 1.5, ""), Error);
}

TEST(Train, MeasureDraftAcceptsEveryTokenOfTheTargetItself) {
  TrainOptions options = TinyTrainOptions(1, 2, 2, 128, 64);
  options.out = specd::testing::TempDir() + "/measure.gguf";
  options.batch = 2;
  options.max_steps = 3;
  options.eval_windows = 2;
  Train(options);
  const Corpus corpus = ListCorpus(options.corpus_dir, {".py"}, 5);
  ASSERT_FALSE(corpus.validation_files.empty());
  const DraftReport same = MeasureDraft(options.out, options.out, corpus.validation_files, 2, 3, 1);
  EXPECT_EQ(same.acceptance_rate, 1.0);
  EXPECT_GT(same.mean_accepted_length, 3.5);       // up to 3 drafted + the target's own token
  EXPECT_EQ(same.acceptance_standard_error, 0.0);  // every prompt accepts everything
  EXPECT_EQ(same.accepted_at_position, std::vector<double>(3, 1.0));
  EXPECT_GT(same.n_prompts, 0);
  EXPECT_GT(same.n_drafted, 0);
  const DraftReport more = MeasureDraft(options.out, options.out, corpus.validation_files, 2, 3, 4);
  EXPECT_GT(more.n_prompts, same.n_prompts);
}

// The EAGLE head at `head_path` loads in specd's engine as a one-block head over `n_head` tokens
// and drafts for the target at `target_path` losslessly (greedy).
void ExpectEagleHeadDraftsLosslessly(const std::string& target_path, const std::string& head_path,
                                     size_t n_head) {
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto target = Model::Load(target_path, &ctx);
  auto head = Model::Load(head_path, &ctx);
  ASSERT_TRUE(head->config().eagle);
  EXPECT_EQ(head->config().n_layer, 1);
  EXPECT_EQ(head->config().head_tokens.size(), n_head);
  auto target_kv = target->NewKvCache({1, 160});
  auto head_kv = head->NewKvCache({1, 160});
  const std::vector<int32_t> prompt = {1, 40, 41, 42, 43, 44, 45, 46};
  const auto plain =
      GenerateAutoregressive(*target, ctx, *target_kv, specd::testing::Greedy(prompt, 48));
  SpeculativeStats stats;
  const auto spec = GenerateSpeculative(*target, *head, ctx, *target_kv, *head_kv,
                                        specd::testing::Greedy(prompt, 48), 3, &stats);
  EXPECT_EQ(spec.sequences[0].tokens, plain.sequences[0].tokens);
  EXPECT_GT(stats.n_drafted, 0);
}

// EAGLE training options for a tiny target: `steps` steps, checkpoints and the head under `name`.
EagleTrainOptions TinyEagleOptions(const std::string& target, const std::string& corpus,
                                   int64_t steps, const std::string& name) {
  EagleTrainOptions o;
  o.target = target;
  o.corpus_dir = corpus;
  o.checkpoint_dir = specd::testing::TempDir() + "/" + name;
  o.out = o.checkpoint_dir + ".gguf";
  o.export_type = DType::kF32;
  o.teacher_text_tokens = 4096;
  o.head_vocab = 256;
  o.ctx = 32;
  o.batch = 4;
  o.steps = steps;
  o.warmup_steps = 2;
  o.lr = 3e-3;
  o.eval_every = 1000;
  o.held_out_sequences = 16;
  return o;
}

// An EAGLE head trained on a tiny target: more steps fit the target's next feature and token
// better on held-out text, and the exported head drafts losslessly in specd's engine.
TEST(Train, EagleHeadLearnsTheTargetsFeaturesAndDraftsLosslessly) {
  TrainOptions target_options = TinyTrainOptions(2, 2, 2, 128, 64);
  target_options.out = specd::testing::TempDir() + "/eagle-target.gguf";
  target_options.batch = 4;
  target_options.max_steps = 40;
  target_options.eval_windows = 2;
  Train(target_options);
  auto eagle = [&](int64_t steps, const std::string& name) {
    const EagleTrainOptions o =
        TinyEagleOptions(target_options.out, target_options.corpus_dir, steps, name);
    return std::make_pair(TrainEagle(o), o.out);
  };
  const auto [early, early_path] = eagle(1, "eagle-1");
  const auto [late, late_path] = eagle(120, "eagle-120");
  EXPECT_TRUE(late.finished);
  EXPECT_LT(late.feature_loss, 0.8 * early.feature_loss);
  EXPECT_LT(late.token_loss, early.token_loss);
  EXPECT_GT(late.top1, early.top1);
  ExpectEagleHeadDraftsLosslessly(target_options.out, late_path, 256);
}

// A target of Qwen2.5-Coder's kind (qwen2: q / k / v biases; its own output matrix): the EAGLE
// head starts from its last block with the biases, and its output layer is the target's output
// rows of the head tokens (not the embedding's); it loads and drafts losslessly.
TEST(Train, EagleHeadOfAQwen2TargetTakesItsBiasesAndOutputRows) {
  TrainOptions target_options = TinyTrainOptions(2, 2, 2, 128, 64);
  target_options.shape.arch = "qwen2";
  target_options.shape.qkv_bias = target_options.shape.neox_rope = true;
  target_options.out = specd::testing::TempDir() + "/qwen2-tied.gguf";
  target_options.batch = 4;
  target_options.max_steps = 10;
  target_options.eval_windows = 2;
  Train(target_options);
  // Random biases and output rows apart from the embedding, so that missing either shows.
  Llama target = ImportGguf(target_options.out);
  target->UntieOutput();
  {
    torch::NoGradGuard no_grad;
    target->output.normal_(0.0, 0.05);
    auto* last = target->blocks[1]->as<LlamaBlockImpl>();
    for (int m : {kWq, kWk, kWv}) last->matrix(m)->bias.normal_(0.0, 0.1);
  }
  const std::string target_path = specd::testing::TempDir() + "/qwen2-untied.gguf";
  ExportGguf(target, target_options.out, DType::kF32, "qwen2-untied", target_path);

  EagleTrainOptions o = TinyEagleOptions(target_path, target_options.corpus_dir, 1, "eagle-qwen2");
  o.lr = 1e-9;  // one step that leaves the copied weights as they were (to float precision)
  ASSERT_TRUE(TrainEagle(o).finished);
  auto file = GgufFile::Open(o.out);
  EXPECT_EQ(file->Get("general.architecture").AsString("arch"), "qwen2");
  auto f32 = [&](const std::string& name, int64_t rows, int64_t cols) {
    const GgufTensorInfo& t = file->GetTensor(name);
    EXPECT_EQ(t.type, DType::kF32) << name;
    return torch::from_blob(const_cast<uint8_t*>(t.data), {rows, cols}, torch::kFloat32).clone();
  };
  const auto* last = target->blocks[1]->as<LlamaBlockImpl>();
  const int64_t kv_dim = target->shape.n_kv_heads * target->shape.head_dim();
  EXPECT_TRUE(torch::allclose(f32("blk.0.attn_q.bias", 1, 64).flatten(), last->wq->bias, 0, 1e-6));
  EXPECT_TRUE(
      torch::allclose(f32("blk.0.attn_k.bias", 1, kv_dim).flatten(), last->wk->bias, 0, 1e-6));
  EXPECT_TRUE(
      torch::allclose(f32("blk.0.attn_v.bias", 1, kv_dim).flatten(), last->wv->bias, 0, 1e-6));
  std::vector<int64_t> head_tokens;
  for (const GgufValue& v : file->Get("specd.head_tokens").AsArray("head").items) {
    head_tokens.push_back(v.AsInt("head"));
  }
  ASSERT_EQ(head_tokens.size(), 256u);
  const auto expected_rows = target->output.index_select(0, torch::tensor(head_tokens));
  EXPECT_TRUE(torch::allclose(f32("output.weight", 256, 64), expected_rows, 0, 1e-6));
  ExpectEagleHeadDraftsLosslessly(target_path, o.out, 256);
}

// The training-time test is exact: unrolled step u's row i computes what the head computes at
// drafting step u after position i, with step 1's rows 0..i read with true features before it
// and the drafts of steps 2..u-1 (each fed its predecessor's predicted feature) after them.
TEST(Train, UnrolledHeadStepsComputeWhatDraftingComputes) {
  torch::manual_seed(5);
  const LlamaShape shape = SmallShape(/*n_vocab=*/128, /*dim=*/32, /*n_layers=*/1, /*ffn=*/64);
  Llama head(shape);
  head->EnableEagle();
  head->eval();
  torch::NoGradGuard no_grad;
  constexpr int64_t kLen = 12;
  constexpr int kUnroll = 3;
  const auto tokens = torch::randint(0, shape.n_vocab, {1, kLen}, torch::kInt64);
  const auto features = torch::randn({1, kLen - 1, shape.dim});
  const auto unrolled = UnrolledHeadHidden(head, tokens, features, kUnroll);
  ASSERT_EQ(unrolled.size(), static_cast<size_t>(kUnroll));
  for (int u = 1; u <= kUnroll; ++u) {
    ASSERT_EQ(unrolled[u - 1].size(1), kLen - u);
    for (int64_t i = 0; i + u < kLen; ++i) {
      // Drafting after position i: step 1's rows 0..i, then one row per later step.
      std::vector<torch::Tensor> token_rows = {tokens.narrow(1, 1, i + 1)};
      std::vector<torch::Tensor> feature_rows = {features.narrow(1, 0, i + 1)};
      for (int v = 2; v <= u; ++v) {
        token_rows.push_back(tokens.narrow(1, i + v, 1));
        feature_rows.push_back(unrolled[v - 2].narrow(1, i, 1));
      }
      const auto x = head->eagle_fc->forward(torch::cat(
          {head->embed->forward(torch::cat(token_rows, 1)), torch::cat(feature_rows, 1)}, -1));
      const auto sequential = head->Hidden(x);  // causal, positions 0 .. i + u - 1
      const auto last = sequential.narrow(1, sequential.size(1) - 1, 1);
      EXPECT_LT((last - unrolled[u - 1].narrow(1, i, 1)).abs().max().item<double>(), 1e-4)
          << "step " << u << " row " << i;
    }
  }
}

TEST(Train, ClusteredAcceptanceTreatsPromptsAsClusters) {
  // Rate 36 / 60 = 0.6; residuals 5 - 6, 10 - 12, 21 - 18: sqrt(3 / 2 * 14) / 60.
  const auto [rate, se] = ClusteredAcceptance({10, 20, 30}, {5, 10, 21});
  EXPECT_DOUBLE_EQ(rate, 0.6);
  EXPECT_NEAR(se, std::sqrt(21.0) / 60.0, 1e-12);
  // Every prompt at the same rate: no spread.
  EXPECT_EQ(ClusteredAcceptance({4, 8, 12}, {3, 6, 9}).second, 0.0);
  EXPECT_EQ(ClusteredAcceptance({}, {}).first, 0.0);
  EXPECT_EQ(ClusteredAcceptance({5}, {2}).second, 0.0);  // one prompt: no estimate of spread
  EXPECT_THROW(ClusteredAcceptance({1, 2}, {1}), Error);
}

// --- SDSAT fine-tuning -------------------------------------------------------------------------

std::vector<int32_t> CountingTokens(int n) {
  std::vector<int32_t> real;
  for (int i = 0; i < n; ++i) real.push_back(100 + i);
  return real;
}

TEST(SdsatData, PlainRowIsCausalWithNextTokenLabels) {
  const auto real = CountingTokens(20);
  const SdsatRow row = PlainRow(real, 16);
  ASSERT_EQ(row.length(), 16);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(row.tokens[i], real[i]);
    EXPECT_EQ(row.positions[i], i);
    EXPECT_EQ(row.labels[i], real[i + 1]);
    for (int64_t j = 0; j < 16; ++j) EXPECT_EQ(row.visible[i * 16 + j], j <= i ? 1 : 0);
  }
  EXPECT_EQ(row.n_adaptive, 0);
  EXPECT_THROW(PlainRow(real, 20), Error);  // needs one token more than its length
}

TEST(SdsatData, MixedRowShowsAdaptiveTokensOnlyTheContextTheyMeetInGeneration) {
  constexpr int64_t kLength = 2000;
  const SdsatLayout layout{/*adaptive_token=*/7, /*max_window=*/5, /*window_share=*/0.1};
  const auto real = CountingTokens(kLength + 6);
  const SdsatRow row = MixedRow(real, kLength, layout, 42);
  ASSERT_EQ(row.length(), kLength);
  int64_t next_real = 0, anchor_slot = -1, n_windows = 0;
  std::vector<int64_t> real_slots;
  for (int64_t i = 0; i < kLength; ++i) {
    const uint8_t* sees = &row.visible[i * kLength];
    if (row.offsets[i] == 0) {
      // Real tokens come in order, at their own positions, without labels, and see real
      // tokens up to themselves only.
      EXPECT_EQ(row.tokens[i], real[next_real]);
      EXPECT_EQ(row.positions[i], next_real);
      EXPECT_EQ(row.labels[i], -1);
      real_slots.push_back(i);
      for (int64_t j = 0; j < kLength; ++j) {
        const bool is_earlier_real = j <= i && row.offsets[j] == 0;
        ASSERT_EQ(sees[j], is_earlier_real ? 1 : 0) << "real slot " << i << " vs slot " << j;
      }
      anchor_slot = i;
      ++next_real;
      continue;
    }
    // The j-th adaptive token after real token p: position p + j, label r[p + 1 + j]; it sees
    // r[0..p] and its own window up to itself.
    const int j = row.offsets[i];
    const int64_t p = next_real - 1;
    ASSERT_GE(anchor_slot, 0);
    EXPECT_EQ(i - anchor_slot, j);
    EXPECT_LE(j, layout.max_window);
    n_windows += j == 1;
    EXPECT_EQ(row.tokens[i], layout.adaptive_token);
    EXPECT_EQ(row.positions[i], p + j);
    EXPECT_EQ(row.labels[i], real[p + 1 + j]);
    for (int64_t s = 0; s < kLength; ++s) {
      const bool expected =
          (row.offsets[s] == 0 && s <= anchor_slot) || (s > anchor_slot && s <= i);
      ASSERT_EQ(sees[s], expected ? 1 : 0) << "adaptive slot " << i << " vs slot " << s;
    }
  }
  EXPECT_EQ(row.n_adaptive, kLength - next_real);
  // About 10% of real positions open a window (binomial: sd ~ 13 of ~170).
  EXPECT_NEAR(double(n_windows) / next_real, 0.1, 0.03);
  // Every window size 1..5 occurs; the mean is near 3.
  EXPECT_NEAR(double(row.n_adaptive) / n_windows, 3.0, 0.4);
  // Another seed puts the windows elsewhere.
  EXPECT_NE(MixedRow(real, kLength, layout, 43).offsets, row.offsets);
}

TEST(SdsatData, FimReorderIsPsmOrCodeLlamasSpm) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6};
  const FimTokens fim{90, 91, 92};  // prefix, middle, suffix
  EXPECT_EQ(FimReorder(t, FimMode::kPsm, fim, 2, 4),
            (std::vector<int32_t>{90, 1, 2, 92, 5, 6, 91, 3, 4}));
  EXPECT_EQ(FimReorder(t, FimMode::kSpm, fim, 2, 4),
            (std::vector<int32_t>{90, 92, 5, 6, 91, 1, 2, 3, 4}));
  EXPECT_EQ(FimReorder(t, FimMode::kNone, fim, 2, 4), t);
  EXPECT_THROW(FimReorder(t, FimMode::kPsm, fim, 4, 2), Error);
  EXPECT_THROW(FimReorder(t, FimMode::kPsm, FimTokens{}, 2, 4), Error);

  int counts[3] = {0, 0, 0};
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    const FimChoice c = ChooseFim(100, fim, seed);
    ++counts[static_cast<int>(c.mode)];
    EXPECT_LE(c.cut_a, c.cut_b);
    EXPECT_LE(c.cut_b, 100);
    EXPECT_EQ(ChooseFim(100, FimTokens{}, seed).mode, FimMode::kNone);
  }
  EXPECT_NEAR(counts[0] / 4000.0, 0.5, 0.04);
  EXPECT_NEAR(counts[1] / 4000.0, 0.25, 0.035);
  EXPECT_NEAR(counts[2] / 4000.0, 0.25, 0.035);
}

torch::Tensor RowTensor(const std::vector<int64_t>& values) {
  return torch::tensor(values, torch::kInt64).unsqueeze(0);
}

// The mask is exact: in one forward of a mixed row, every real token computes what it computes in
// the plain row, and every adaptive token what it computes appended after its real prefix -- the
// forward generation runs.
TEST(SdsatTrain, MixedRowComputesThePlainAndTheGenerationForwards) {
  torch::manual_seed(3);
  Llama model(SmallShape(/*n_vocab=*/256, /*dim=*/64, /*n_layers=*/2, /*ffn=*/128));
  model->eval();
  torch::NoGradGuard no_grad;
  std::vector<int32_t> real;
  for (int i = 0; i < 80; ++i) real.push_back((i * 29 + 5) % 250);
  const SdsatLayout layout{/*adaptive_token=*/255, /*max_window=*/4, /*window_share=*/0.3};
  const SdsatRow row = MixedRow(real, 64, layout, 9);
  ASSERT_GT(row.n_adaptive, 5);
  std::vector<int64_t> tokens(row.tokens.begin(), row.tokens.end());
  auto visible = torch::empty({1, 64, 64}, torch::kBool);
  for (int64_t i = 0; i < 64 * 64; ++i) visible.data_ptr<bool>()[i] = row.visible[i] != 0;
  const auto mixed = model->forward(RowTensor(tokens), RowTensor(row.positions), visible)[0];

  const std::vector<int64_t> all_real(real.begin(), real.end());
  const auto plain = model->forward(RowTensor(all_real))[0];  // [80, 256]
  int64_t p = -1;
  for (int64_t i = 0; i < 64; ++i) {
    if (row.offsets[i] == 0) {
      ++p;
      EXPECT_LT((mixed[i] - plain[p]).abs().max().item<double>(), 1e-4) << "real slot " << i;
      continue;
    }
    // Generation: r[0..p] followed by j adaptive tokens; the last row is this slot's.
    std::vector<int64_t> appended(real.begin(), real.begin() + p + 1);
    appended.insert(appended.end(), row.offsets[i], layout.adaptive_token);
    const auto generated = model->forward(RowTensor(appended))[0];
    EXPECT_LT((mixed[i] - generated[generated.size(0) - 1]).abs().max().item<double>(), 1e-4)
        << "adaptive slot " << i;
  }
}

// Code with a strong pattern, so that a tiny model learns to predict a few tokens ahead.
std::string PatternCorpus() {
  const std::string dir = specd::testing::TempDir() + "/pattern_corpus";
  if (fs::exists(dir)) return dir;
  fs::create_directories(dir);
  for (int f = 0; f < 10; ++f) {
    std::ofstream out(dir + "/gen" + std::to_string(f) + ".py");
    for (int i = 0; i < 300; ++i) {
      out << "def scale_" << i % 17 << "(values, factor=" << f << "):\n    return [v * factor for "
          << "v in values]\n\n";
    }
  }
  return dir;
}

// A fresh `dir` with a tiny base model trained on the pattern corpus (*base), and SDSAT options
// on it that both fine-tune tests share: adaptive token <unused0>, windows of 1..3.
SdsatTrainOptions TinySdsatSetup(const std::string& dir, TrainOptions* base) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  *base = TinyTrainOptions(2, 4, 2, 160, 64);
  base->corpus_dir = PatternCorpus();
  base->out = dir + "/base.gguf";
  base->batch = 8;
  base->max_steps = 60;
  base->warmup_steps = 5;
  base->eval_windows = 4;
  EXPECT_TRUE(Train(*base).finished);
  SdsatTrainOptions o;
  o.base = base->out;
  o.corpus_dir = base->corpus_dir;
  o.validation_every = base->validation_every;
  o.adaptive_token = "<unused0>";
  o.max_window = 3;
  o.window_share = 0.3;
  o.ctx = 64;
  o.batch = 8;
  o.warmup_steps = 5;
  o.eval_windows = 16;
  return o;
}

TEST(SdsatTrain, FineTuneLearnsTheAdaptiveTokenResumesAndRecordsItInTheExport) {
  const std::string dir = specd::testing::TempDir() + "/sdsat";
  TrainOptions base;
  SdsatTrainOptions o = TinySdsatSetup(dir, &base);
  o.steps = 80;
  o.lr = 3e-3;
  o.checkpoint_dir = dir + "/ckpt";
  o.out = dir + "/sdsat.gguf";
  o.stop_at_step = 40;
  const SdsatTrainResult first = TrainSdsat(o);
  EXPECT_FALSE(first.finished);
  EXPECT_EQ(first.steps, 40);
  EXPECT_FALSE(fs::exists(o.out));
  // The base model's evaluation is kept beside the checkpoint and read back on resume, not
  // redone: a resumed run reports what the file says (here a planted perplexity).
  const std::string base_eval = o.checkpoint_dir + "/base-eval.txt";
  std::string key;
  {
    std::ifstream in(base_eval);
    std::getline(in, key);
  }
  ASSERT_FALSE(key.empty());
  std::ofstream(base_eval) << key << "\n123.5 " << first.base_adaptive.loss << " 0.25 0.5 0.75\n";
  const SdsatTrainResult r = TrainSdsat(o);  // resumes at 40
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.steps, 80);
  EXPECT_EQ(r.base_perplexity, 123.5);
  EXPECT_EQ(r.base_adaptive.accuracy, (std::vector<double>{0.25, 0.5, 0.75}));
  EXPECT_EQ(r.adaptive_token, ResolveToken(base.out, "<unused0>"));
  ASSERT_EQ(r.adaptive.accuracy.size(), 3u);
  // The adaptive tokens learned: their held-out loss fell well below the untrained token's.
  EXPECT_LT(r.adaptive.loss, r.base_adaptive.loss - 0.5)
      << "base " << r.base_adaptive.loss << ", after " << r.adaptive.loss;
  EXPECT_GT(r.base_perplexity, 1.0);
  EXPECT_GT(r.validation_perplexity, 1.0);

  auto f = GgufFile::Open(o.out);
  EXPECT_EQ(f->GetInt("specd.sdsat.adaptive_token", -1), r.adaptive_token);
  EXPECT_EQ(f->GetInt("specd.sdsat.max_window", -1), 3);
  ThreadPool pool(1);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(o.out, &ctx);
  EXPECT_EQ(SdsatOptionsForModel(*model, 4, -1).adaptive_token, r.adaptive_token);

  EXPECT_THROW(ResolveToken(base.out, "<no such token>"), Error);
  EXPECT_THROW(ResolveToken(base.out, "1024"), Error);
  EXPECT_EQ(ResolveToken(base.out, "12"), 12);
}

// The trainer's rank-4 LoRA model (alpha 8) from the last checkpoint in `checkpoint_dir`, in eval
// mode.
Llama TrainedLora(const std::string& base_gguf, const std::string& checkpoint_dir,
                  int32_t adaptive_token) {
  Llama model = ImportGguf(base_gguf);
  model->EnableLora(4, 8.0, adaptive_token);
  Checkpoint(checkpoint_dir).LoadModel(model);
  model->eval();
  return model;
}

// A LoRA fine-tune exports a llama.cpp adapter that specd, merging it at load or applying it at
// run time, turns into the model the trainer ran: the same logits, the adaptive token's own row
// (input and tied output) included.
TEST(SdsatTrain, LoraFineTuneExportsAnAdapterThatSpecdAppliesAsTheTrainerDoes) {
  const std::string dir = specd::testing::TempDir() + "/sdsat_lora";
  TrainOptions base;
  SdsatTrainOptions o = TinySdsatSetup(dir, &base);
  o.steps = 60;
  o.lr = 1e-2;
  o.lora_rank = 4;
  o.checkpoint_dir = dir + "/ckpt";
  o.out = dir + "/adapter.gguf";
  o.stop_at_step = 30;
  ASSERT_FALSE(TrainSdsat(o).finished);
  // The checkpoint holds the LoRA, not the frozen base (f32, ~4 bytes a parameter).
  Llama base_model = ImportGguf(base.out);
  EXPECT_LT(fs::file_size(o.checkpoint_dir + "/trainable.pt"), 4 * base_model->NumParameters() / 3);
  EXPECT_FALSE(fs::exists(o.checkpoint_dir + "/model.pt"));
  const SdsatTrainResult r = TrainSdsat(o);  // resumes at 30
  ASSERT_TRUE(r.finished);
  EXPECT_LT(r.adaptive.loss, r.base_adaptive.loss - 0.5)
      << "base " << r.base_adaptive.loss << ", after " << r.adaptive.loss;

  auto adapter = GgufFile::Open(o.out);
  EXPECT_EQ(adapter->Get("general.type").AsString("type"), "adapter");
  EXPECT_EQ(adapter->Get("adapter.type").AsString("type"), "lora");
  EXPECT_EQ(adapter->GetFloat("adapter.lora.alpha", 0), 8.0);
  EXPECT_EQ(adapter->GetTensor("blk.1.ffn_down.weight.lora_a").shape,
            (std::vector<int64_t>{160, 4}));  // [in, rank]
  EXPECT_EQ(adapter->GetTensor("blk.1.ffn_down.weight.lora_b").shape,
            (std::vector<int64_t>{4, 64}));  // [rank, out]
  EXPECT_EQ(adapter->GetTensor("token_embd.weight.lora_a").shape,
            (std::vector<int64_t>{1, 1024}));  // llama.cpp's flipped embedding layout

  // The trainer's model, from its last checkpoint.
  Llama trained = TrainedLora(base.out, o.checkpoint_dir, r.adaptive_token);
  const std::vector<int32_t> tokens = {5, 300, r.adaptive_token, 41, r.adaptive_token, 77, 12};
  auto input = torch::empty({1, int64_t(tokens.size())}, torch::kInt64);
  for (size_t i = 0; i < tokens.size(); ++i) input[0][i] = tokens[i];
  torch::NoGradGuard no_grad;
  const auto expected = trained->forward(input).squeeze(0).contiguous();  // [7, 1024]
  std::vector<float> expected_values(expected.data_ptr<float>(),
                                     expected.data_ptr<float>() + expected.numel());

  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  for (const LoraApply apply : {LoraApply::kMerge, LoraApply::kRunTime}) {
    ModelLoadOptions options;
    options.lora = {{o.out, 1.0f}};
    options.lora_apply = apply;
    auto model = Model::Load(base.out, &ctx, options);
    EXPECT_EQ(SdsatOptionsForModel(*model, 3, -1).adaptive_token, r.adaptive_token);
    auto kv = model->NewKvCache({1, 64});
    const int seq = kv->Acquire();
    Batch batch;
    for (size_t i = 0; i < tokens.size(); ++i) batch.Add(tokens[i], int(i), seq, true);
    std::vector<float> logits;
    model->Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
    EXPECT_LT(specd::testing::RelativeError(logits, expected_values), 1e-4)
        << (apply == LoraApply::kMerge ? "merged" : "at run time");
  }
}

// KL(base || tuned) of the next token, averaged over a fixed token sequence: the tuned model is
// the checkpoint's LoRA, the base the same model with it switched off.
double PlainKlFromBase(const std::string& base_gguf, const std::string& checkpoint_dir,
                       int32_t adaptive_token) {
  Llama model = TrainedLora(base_gguf, checkpoint_dir, adaptive_token);
  torch::NoGradGuard no_grad;
  const auto input =
      torch::arange(7, 7 + 48, torch::kInt64).remainder(900).unsqueeze(0);  // [1, 48]
  const auto tuned = torch::log_softmax(model->forward(input), -1);         // [1, 48, n_vocab]
  model->SetLoraActive(false);
  const auto base = torch::log_softmax(model->forward(input), -1);
  return (base.exp() * (base - tuned)).sum(-1).mean().item<double>();
}

// With --plain-loss kl-to-base the plain rows hold the model at the base's predictions, where the
// corpus's next tokens pull it away; the adaptive tokens learn either way.
TEST(SdsatTrain, KlToBasePlainRowsKeepTheBasesPredictions) {
  const std::string dir = specd::testing::TempDir() + "/sdsat_kl";
  TrainOptions base;
  SdsatTrainOptions o = TinySdsatSetup(dir, &base);
  o.steps = 40;
  o.lr = 1e-2;
  o.lora_rank = 4;
  EXPECT_THROW(
      {
        SdsatTrainOptions full = o;
        full.lora_rank = 0;
        full.plain_loss = PlainLoss::kKlToBase;
        TrainSdsat(full);
      },
      Error);
  double kl[2];
  for (const PlainLoss plain : {PlainLoss::kNextToken, PlainLoss::kKlToBase}) {
    const int i = plain == PlainLoss::kKlToBase;
    o.plain_loss = plain;
    o.checkpoint_dir = dir + "/ckpt" + std::to_string(i);
    const SdsatTrainResult r = TrainSdsat(o);
    ASSERT_TRUE(r.finished);
    EXPECT_LT(r.adaptive.loss, r.base_adaptive.loss - 0.5)
        << "base " << r.base_adaptive.loss << ", after " << r.adaptive.loss;
    kl[i] = PlainKlFromBase(base.out, o.checkpoint_dir, r.adaptive_token);
  }
  std::fprintf(stderr, "plain next-token KL from the base: next-token %.4f, kl-to-base %.4f\n",
               kl[0], kl[1]);
  EXPECT_LT(kl[1], 0.5 * kl[0]);
}

}  // namespace
}  // namespace specd::train
