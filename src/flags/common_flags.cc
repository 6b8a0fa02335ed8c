#include "flags/common_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <new>
#include <sstream>

#include "base/error.h"
#include "engine/draft_vocab.h"

namespace specd::flags {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

namespace {

const std::map<std::string, Int8Backend> kInt8Kernels = {{"auto", Int8Backend::kAuto},
                                                         {"specd", Int8Backend::kSpecd},
                                                         {"amx", Int8Backend::kAmx},
                                                         {"onednn", Int8Backend::kOneDnn}};

}  // namespace

const std::map<std::string, Int8Backend>& Int8KernelsByName() { return kInt8Kernels; }

void AddInt8KernelFlag(CLI::App* app, WeightOptions* options) {
  app->add_option("--int8-kernel", options->int8_kernel,
                  "int8 matmul kernel: auto (specd's AMX tile kernels where the CPU has AMX, from "
                  "8 rows for i8 weights, and for GGUF types from 16 rows wherever its first "
                  "calls measure them faster than VNNI; else its VNNI kernel), specd "
                  "(VNNI), amx (every row count; i8 and GGUF types) or onednn (i8 only); all give "
                  "the same bits")
      ->transform(CLI::CheckedTransformer(kInt8Kernels))
      ->default_str("auto");
}

void AddWeightFlags(CLI::App* app, WeightOptions* options) {
  app->add_option_function<std::string>(
         "--weights", [options](const std::string&) { options->int8 = true; },
         "convert the models' matrices at load: i8 (int8 per output row, activations int8 per "
         "token, as in BASS)")
      ->check(CLI::IsMember({"i8"}));
  AddInt8KernelFlag(app, options);
  app->add_option("--smooth-alpha", options->smooth_alpha,
                  "i8: SmoothQuant migration strength (0 = none; default 0.5), calibrated at "
                  "load on --calibration's text")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--calibration", options->calibration_file,
                  "i8: text whose activations calibrate SmoothQuant (default: a built-in mix of "
                  "prose, code and chat)")
      ->check(CLI::ExistingFile);
  AddLoraFlags(app, options);
}

void AddCacheTypeFlag(CLI::App* app, DType* type) {
  app->add_option_function<std::string>(
         "--cache-type", [type](const std::string& name) { *type = *DTypeFromName(name); },
         "KV cache type (of both models): f16 or f32 (also -ctk / -ctv)")
      ->check(CLI::IsMember({"f32", "f16"}));
}

void AddLlamaCppNoOpFlags(CLI::App* app, std::vector<std::string>* notes) {
  // llama.cpp's flag, how llama.cpp users spell it, what it takes (nullptr: nothing; "?": an
  // optional value), and why it does nothing here.
  struct NoOpFlag {
    const char* names;
    const char* spelled;
    const char* value;
    const char* why;
  };
  static constexpr NoOpFlag kFlags[] = {
      {"-g,--n-gpu-layers,--gpu-layers", "-ngl", "N", "no GPU offload: specd runs on the CPU"},
      {"--flash-attn", "-fa", "?", "specd's attention kernels are its own"},
      {"--mlock", "--mlock", nullptr, "weights are read in place, not locked"},
      {"--no-mmap", "--no-mmap", nullptr, "weights are always memory-mapped"},
      {"--jinja", "--jinja", nullptr, "the model's chat template is always applied"},
      {"--metrics", "--metrics", nullptr, "specd serve always serves /metrics"},
      {"--cont-batching", "-cb", nullptr, "batching is always continuous"},
      {"--log-disable", "--log-disable", nullptr, "specd logs only a few lines"},
      {"--threads-draft", "-td", "N", "the draft runs on the target's threads (-t)"},
      {"-b,--batch-size", "-b", "N",
       "prompts are read in chunks of specd's own size (--batch / --parallel count sequences "
       "here, not llama.cpp's -b)"},
      {"--ubatch-size", "-ub", "N", "prompts are read in chunks of specd's own size"},
  };
  for (const NoOpFlag& f : kFlags) {
    const auto note = [notes, f](auto&&...) {
      notes->push_back(std::string(f.spelled) + ": " + f.why);
    };
    const std::string help =
        std::string("(llama.cpp's ") + f.spelled + "; no effect: " + f.why + ")";
    if (f.value == nullptr) {
      app->add_flag_function(f.names, note, help);
      continue;
    }
    CLI::Option* option = app->add_option_function<std::string>(f.names, note, help);
    if (std::string(f.value) == "?") {
      option->expected(0, 1)->type_name("[on|off|auto]");
    } else {
      option->type_name(f.value);
    }
  }
}

void PrintIgnoredFlagNotes(const std::vector<std::string>& notes) {
  for (const std::string& note : notes) std::fprintf(stderr, "note: %s; ignored\n", note.c_str());
}

void AddLoraFlags(CLI::App* app, WeightOptions* flags) {
  // llama.cpp's spellings: --lora FILE (repeatable), --lora-scaled FILE SCALE.
  app->add_option_function<std::vector<std::string>>(
         "--lora",
         [flags](const std::vector<std::string>& paths) {
           for (const auto& p : paths) flags->lora.push_back({p, 1.0f});
         },
         "LoRA adapter (llama.cpp's GGUF format), applied at run time (y = W x + s B A x) "
         "unless --lora-merge; repeatable")
      ->check(CLI::ExistingFile)
      ->allow_extra_args(false);
  app->add_option_function<std::vector<std::string>>(
         "--lora-scaled",
         [flags](const std::vector<std::string>& values) {
           for (size_t i = 0; i + 1 < values.size(); i += 2) {
             float scale = 0.0f;
             SPECD_CHECK(CLI::detail::lexical_cast(values[i + 1], scale), "--lora-scaled: '",
                         values[i + 1], "' is not a number");
             flags->lora.push_back({values[i], scale});
           }
         },
         "LoRA adapter with a scale: --lora-scaled FILE SCALE; repeatable")
      ->expected(2)
      ->allow_extra_args(false);
  app->add_flag("--lora-merge", flags->lora_merge,
                "merge the LoRA adapters into the weights at load instead (no run-time cost; "
                "4- to 6-bit matrices become q8_0, whose grid keeps the update)");
}

void AddThreadsFlag(CLI::App* app, int* threads) {
  app->add_option("-t,--threads", *threads, "threads")->check(CLI::Range(1, 256));
}

std::string FlagForField(std::string_view field) {
  static const std::map<std::string_view, const char*> kFlags = {
      {"adaptive_k", "--adaptive-k"},
      {"adaptive_token", "--adaptive-token"},
      {"draft_lp", "--draft-lp"},
      {"draft_lp_groups", "--draft-lp-groups"},
      {"draft_max", "--draft-max"},
      {"draft_min", "--draft-min"},
      {"draft_model", "-md"},
      {"draft_prompt_tokens", "--draft-prompt-tokens"},
      {"draft_tree", "--draft-tree"},
      {"draft_vocab", "--draft-vocab"},
      {"draft_vocab_file", "--draft-vocab-file"},
      {"int8_kernel", "--int8-kernel"},
      {"lora", "--lora"},
      {"min_p", "--min-p"},
      {"n_ctx", "-c"},
      {"n_predict", "-n"},
      {"n_sequences", "--batch"},
      {"ngram_max", "--ngram-max"},
      {"ngram_min", "--ngram-min"},
      {"no_calibration", "--no-calibration"},
      {"repeat_last_n", "--repeat-last-n"},
      {"repeat_penalty", "--repeat-penalty"},
      {"sdsat_loop", "--sdsat-loop"},
      {"sdsat_tree", "--sdsat-tree"},
      {"smooth_alpha", "--smooth-alpha"},
      {"spec_type", "--spec-type"},
      {"temperature", "--temp"},
      {"top_k", "--top-k"},
      {"top_p", "--top-p"},
      {"trace_steps", "--trace-steps"},
      {"weights", "--weights"},
  };
  const auto it = kFlags.find(field);
  return it != kFlags.end() ? it->second : std::string(field);
}

int RunReportingErrors(const std::function<int()>& command) {
  try {
    return command();
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", RenderFieldNames(e.what(), FlagForField).c_str());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}

namespace {

// llama.cpp's multi-letter short options and their long names here.
const std::map<std::string, std::string>& LlamaCppSpellings() {
  static const std::map<std::string, std::string> kSpellings = {
      {"-md", "--model-draft"},     {"-cnv", "--chat"},         {"-sys", "--system"},
      {"-ngl", "--n-gpu-layers"},   {"-fa", "--flash-attn"},    {"-ub", "--ubatch-size"},
      {"-ctk", "--cache-type"},     {"-ctv", "--cache-type"},   {"-mu", "--model-url"},
      {"-np", "--parallel"},        {"-td", "--threads-draft"}, {"-cb", "--cont-batching"},
      {"-st", "--single-turn"},     {"-dev", "--device"},       {"-no-cnv", "--no-conversation"},
      {"-jf", "--json-schema-file"}};
  return kSpellings;
}

// -xyz or -xy-z (a letter, then letters and dashes; -1.5 and -- stay as they are).
bool IsMultiLetterShort(const std::string& arg) {
  return arg.size() > 2 && arg[0] == '-' && std::isalpha(static_cast<unsigned char>(arg[1])) &&
         std::all_of(arg.begin() + 1, arg.end(), [](char c) {
           return std::isalpha(static_cast<unsigned char>(c)) || c == '-';
         });
}

// CLI11's message with the long names put back as the user typed them.
std::string AsTyped(std::string message, const std::map<std::string, std::string>& typed_as) {
  for (const auto& [long_name, typed] : typed_as) {
    size_t at = message.find(long_name);
    while (at != std::string::npos) {
      const size_t end = at + long_name.size();
      const bool longer_name =
          end < message.size() &&
          (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '-');
      if (!longer_name) message.replace(at, long_name.size(), typed);
      at = message.find(long_name, at + (longer_name ? long_name.size() : typed.size()));
    }
  }
  return message;
}

// The first of CLI11's extras ("...not expected: 3 --foo", last first) in the order typed.
std::string FirstExtra(const std::vector<std::string>& typed, const std::string& message) {
  std::vector<std::string> extras;
  std::istringstream words(message.substr(message.find(':') + 1));
  for (std::string word; words >> word;) extras.push_back(word);
  for (const std::string& arg : typed) {
    if (std::find(extras.begin(), extras.end(), arg) != extras.end()) return arg;
  }
  return extras.empty() ? "?" : extras.back();
}

// " (did you mean --top-k?)" for an option within two edits of one the command takes.
std::string NearestOption(const CLI::App& app, const std::string& typed) {
  std::string nearest;
  size_t nearest_distance = 3;
  std::vector<const CLI::App*> commands = {&app};
  for (const CLI::App* command : app.get_subcommands()) commands.push_back(command);
  for (const CLI::App* command : commands) {
    for (const CLI::Option* option : command->get_options()) {
      for (const std::string& name : option->get_lnames()) {
        const size_t d = EditDistance(typed, "--" + name);
        if (d < nearest_distance) nearest_distance = d, nearest = "--" + name;
      }
    }
  }
  return nearest.empty() ? "" : " (did you mean " + nearest + "?)";
}

}  // namespace

int ParseCommandLine(CLI::App& app, int argc, char** argv, const char* help) {
  const std::vector<std::string> typed(argv + 1, argv + argc);
  std::vector<std::string> reversed;            // CLI11 takes the arguments last first
  std::map<std::string, std::string> typed_as;  // long name -> as typed
  for (auto it = typed.rbegin(); it != typed.rend(); ++it) {
    const auto spelled = LlamaCppSpellings().find(*it);
    if (spelled != LlamaCppSpellings().end()) {
      typed_as[spelled->second] = *it;
      reversed.push_back(spelled->second);
      continue;
    }
    if (IsMultiLetterShort(*it)) {
      std::fprintf(stderr,
                   "error: unknown option %s (specd's short options are one letter: -m, -n, -p, "
                   "-f, -c, -s, -t, -e, -r; of llama.cpp's longer ones it takes -md, -cnv, -sys, "
                   "-no-cnv, -st, -jf, -ngl, -fa, -ub, -np, -td, -cb, -ctk, -ctv; see %s)\n",
                   it->c_str(), help);
      return 1;
    }
    reversed.push_back(*it);
  }
  try {
    app.parse(reversed);
  } catch (const CLI::ExtrasError& e) {
    const std::string first = FirstExtra(typed, e.what());
    const bool option = first.size() > 1 && first[0] == '-';
    std::fprintf(stderr, "error: %s '%s'%s (see %s)\n",
                 option ? "unknown option" : "unexpected argument", first.c_str(),
                 option ? NearestOption(app, first).c_str() : "", help);
    return 1;
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0 as CLI11 prints them; every other parse error is an
    // "error: ..." line and exit code 1, as the rest of specd's errors.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "error: %s (see %s)\n", AsTyped(e.what(), typed_as).c_str(), help);
    return 1;
  }
  return -1;
}

int ExecSibling(const char* name, std::vector<char*> args, const char* why_missing) {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::filesystem::path path =
      (error ? std::filesystem::path(args[0]).parent_path() : self.parent_path()) / name;
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "error: this command needs %s, %s\n", path.c_str(), why_missing);
    return 1;
  }
  args.push_back(nullptr);
  ::execv(path.c_str(), args.data());
  std::fprintf(stderr, "error: cannot run %s\n", path.c_str());
  return 1;
}

ModelDirs DefaultModelDirs() {
  const char* pretrained = std::getenv("SPECD_PRETRAINED_DIR");
  const char* models = std::getenv("SPECD_MODELS_DIR");
  return {pretrained != nullptr ? pretrained : SPECD_DEFAULT_PRETRAINED_DIR,
          models != nullptr ? models : SPECD_DEFAULT_MODELS_DIR};
}

std::string DefaultTargetModel() { return DefaultModelPair(DefaultModelDirs()).target; }

namespace {

// The FR-Spec ranking of a known draft, unless the user named one.
void ChooseDraftVocab(const std::string& draft_model, const ModelDirs& dirs,
                      DraftModelConfig* flags) {
  if (flags == nullptr || draft_model.empty() || !flags->vocab_ranking.empty()) return;
  flags->vocab_ranking = TokenRankingFor(draft_model, dirs);
}

// Fills the model paths as ChooseModels says (without the draft's ranking).
void ChooseModelFiles(std::string* model, std::string* draft_model, bool wants_draft,
                      const ModelDirs& dirs) {
  if (model->empty()) {
    const ModelPair pair = DefaultModelPair(dirs);
    SPECD_CHECK(!pair.target.empty(),
                "no model given (-m MODEL.gguf) and no default model is there: "
                "pretrained/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf, "
                "pretrained/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf or "
                "pretrained/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/get-models.sh fetches them) "
                "with their drafts in models/, or models/specd-target-q8_0.gguf (set "
                "SPECD_PRETRAINED_DIR / SPECD_MODELS_DIR)");
    *model = pair.target;
    if (wants_draft && draft_model->empty()) *draft_model = pair.draft;
    return;
  }
  std::error_code ec;
  SPECD_CHECK(std::filesystem::exists(*model, ec), "cannot open model file '", *model,
              "': no such file");
  SPECD_CHECK(std::filesystem::is_regular_file(*model, ec), "'", *model, "' is not a regular file");
  if (!wants_draft || !draft_model->empty()) return;
  *draft_model = ShippedDraftFor(*model, dirs);
  if (!draft_model->empty()) {
    std::fprintf(stderr,
                 "specd: %s has a known draft: speculating with %s (-md to choose another, "
                 "--strategy ar for none)\n",
                 std::filesystem::path(*model).filename().c_str(), draft_model->c_str());
  }
}

}  // namespace

void ChooseModels(std::string* model, std::string* draft_model, bool wants_draft,
                  DraftModelConfig* draft_flags) {
  const ModelDirs dirs = DefaultModelDirs();
  ChooseModelFiles(model, draft_model, wants_draft, dirs);
  if (wants_draft) ChooseDraftVocab(*draft_model, dirs, draft_flags);
}

std::string DescribeLoading(const EngineConfig& config) {
  const auto gigabytes = [](const std::string& path) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f GB", ec ? 0.0 : static_cast<double>(bytes) / 1e9);
    return std::string(text);
  };
  std::string line = "loading " + config.model_path + " (" + gigabytes(config.model_path) + ")";
  const DraftModelConfig& draft = config.speculation.draft;
  if (!UsesDraftModel(config.speculation.proposer)) return line;
  line += ", draft " + draft.path + " (" + gigabytes(draft.path) + ")";
  if (const int vocab = DraftVocabSize(draft); vocab > 0) {
    line += " with its draft vocabulary " + std::to_string(vocab) + " (FR-Spec, " +
            draft.vocab_ranking + ")";
  }
  return line;
}

}  // namespace specd::flags
