#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/escapes.h"
#include "base/file_util.h"
#include "cli/commands.h"
#include "draft/combined_proposer.h"
#include "draft/draft_model_proposer.h"
#include "draft/eagle_proposer.h"
#include "draft/ngram_proposer.h"
#include "draft/sdsat_proposer.h"
#include "engine/generate.h"
#include "engine/model_catalog.h"
#include "engine/model_options.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/prompt_file.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {
namespace {

std::vector<int32_t> ParseTokenList(const std::string& text) {
  std::vector<int32_t> tokens;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = std::string::npos;
    }
    SPECD_CHECK(used == item.size() && value >= 0 && value <= INT32_MAX, "--tokens: '", item,
                "' is not a token id");
    tokens.push_back(static_cast<int32_t>(value));
  }
  SPECD_CHECK(!tokens.empty(), "--tokens: no token ids given");
  return tokens;
}

}  // namespace

int RunGenerate(const GenerateOptions& options) {
  GenerateOptions o = options;
  // A model with a shipped draft decodes speculatively unless asked otherwise.
  ChooseModels(&o.model, &o.draft_model,
               o.strategy != "ar" && o.strategy != "sdsat" && o.spec_type != "ngram");
  const bool sdsat = o.strategy == "sdsat";
  SPECD_CHECK(sdsat || (o.adaptive_k == 0 && o.adaptive_token < 0 && o.sdsat_loop.empty() &&
                        o.sdsat_tree.empty()),
              "--adaptive-k, --adaptive-token, --sdsat-loop and --sdsat-tree go with --strategy "
              "sdsat");
  const SdsatOptions sdsat_shape =
      SdsatOptionsWithTree({.merge = o.sdsat_loop == "merged"}, o.sdsat_tree);
  SPECD_CHECK(!sdsat || (o.draft_model.empty() && o.spec_type == "draft"),
              "--strategy sdsat drafts with the target itself: drop -md / --spec-type");
  SPECD_CHECK(!sdsat || (o.draft_max == 0 && !o.draft_auto && !o.draft_adaptive),
              "--strategy sdsat drafts --adaptive-k tokens per step: drop --draft-max / "
              "--draft-auto / --draft-adaptive");
  const bool ngram = o.spec_type == "ngram";
  SPECD_CHECK(!ngram || o.draft_model.empty() || options.draft_model.empty(),
              "--spec-type ngram drafts from the text itself: drop -md");
  if (ngram) o.draft_model.clear();
  SPECD_CHECK(o.strategy != "spec" && o.strategy != "bass" ? true : ngram || !o.draft_model.empty(),
              "--strategy ", o.strategy,
              " needs a draft model (-md DRAFT.gguf) or --spec-type ngram");
  const bool speculative = ((ngram || !o.draft_model.empty()) && o.strategy != "ar") || sdsat;
  SPECD_CHECK(o.trace_steps.empty() || speculative,
              "--trace-steps traces speculative steps: this run decodes without a draft (give "
              "-md DRAFT.gguf, --spec-type ngram or --strategy sdsat)");
  const int n_prompt_sources =
      !o.prompt.empty() + !o.prompt_file.empty() + !o.tokens.empty() + !o.prompts_file.empty();
  SPECD_CHECK(o.system.empty() || o.chat, "--system needs --chat");
  if (o.chat && n_prompt_sources == 0) return RunInteractiveChat(o);
  SPECD_CHECK(!o.chat || (o.tokens.empty() && o.prompts_file.empty()),
              "--chat takes its turn from -p or -f (or stdin), not --tokens or --prompts");
  SPECD_CHECK(n_prompt_sources == 1,
              "give exactly one of -p TEXT, -f FILE, --tokens 1,2,3 or --prompts FILE.jsonl");

  if (const unsigned cores = std::thread::hardware_concurrency();
      cores > 0 && static_cast<unsigned>(o.threads) > cores) {
    std::fprintf(stderr,
                 "warning: -t %d is more than the %u hardware threads here: threads that share a "
                 "core wait for each other at every step (many times slower)\n",
                 o.threads, cores);
  }
  ThreadPool pool(o.threads);
  const CpuFeatures cpu = CpuFeatures::Detect();
  const KernelContext ctx{&pool, cpu, Int8BackendFromFlags(o.weight_flags, cpu)};
  auto model = Model::Load(o.model, &ctx, LoadOptionsForModel(o.weight_flags, o.model));
  const ModelConfig& config = model->config();
  std::unique_ptr<Model> draft;
  if (speculative && !ngram && !sdsat) {
    draft = Model::Load(o.draft_model, &ctx,
                        LoadOptionsForModel(o.weight_flags, o.draft_model, ModelRole::kDraft));
    CheckDraftCompatible(*model, *draft);
  }
  // Cold first forwards would be timed by the cost-aware draft length (and by the user).
  model->WarmUp(ctx);
  if (draft != nullptr) draft->WarmUp(ctx);
  // Models without tokenizer metadata still generate from token ids.
  std::unique_ptr<Tokenizer> tokenizer;
  if (model->gguf().Find("tokenizer.ggml.model") != nullptr) {
    tokenizer = Tokenizer::FromGguf(model->gguf());
    SPECD_CHECK(tokenizer->n_vocab() == config.n_vocab, o.model, ": the tokenizer has ",
                tokenizer->n_vocab(), " tokens but the model ", config.n_vocab);
  }

  GenerateRequest request;
  std::string prompt_text;        // -p or -f (read once: -f - is standard input)
  std::vector<int> prompt_lines;  // --prompts: the line of each prompt
  if (!o.tokens.empty()) {
    request.prompt = ParseTokenList(o.tokens);
  } else if (!o.prompts_file.empty()) {
    // One sequence per line: {"prompt": "..."} (or {"tokens": [..]}).
    SPECD_CHECK(tokenizer != nullptr, o.model, " has no tokenizer metadata for --prompts");
    for (const PromptLine& line :
         ParsePromptLines(ReadFileBytes(o.prompts_file), o.prompts_file, /*allow_tokens=*/true)) {
      request.prompts.push_back(
          line.has_tokens ? line.tokens
                          : tokenizer->Encode(line.text, /*add_special=*/true, o.special));
      prompt_lines.push_back(line.line_no);
    }
    SPECD_CHECK(!request.prompts.empty(), o.prompts_file, " has no prompts");
    request.prompt = request.prompts[0];
  } else {
    SPECD_CHECK(tokenizer != nullptr, o.model, " has no tokenizer metadata: pass --tokens");
    prompt_text = o.prompt_file.empty() ? o.prompt : ReadTextSource(o.prompt_file);
    if (o.escape) prompt_text = ProcessEscapes(prompt_text);
    SPECD_CHECK(!prompt_text.empty(), o.prompt_file.empty()
                                          ? "the prompt (-p) is empty"
                                          : "the prompt file '" + o.prompt_file + "' is empty");
    const std::string& text = prompt_text;
    if (o.chat) {
      const ChatTemplate chat = ChatTemplate::FromGguf(model->gguf(), *tokenizer);
      std::vector<ChatMessage> messages;
      if (!o.system.empty()) messages.push_back({"system", o.system});
      messages.push_back({"user", text});
      // The template's special tokens are parsed; the user's text is not special-parsed unless
      // --special, so a user cannot forge a turn by typing <|im_start|>.
      request.prompt = EncodeChat(*tokenizer, chat, messages, o.special);
      request.stop_tokens = chat.stop_tokens();
    } else {
      request.prompt = tokenizer->Encode(text, /*add_special=*/true, o.special);
    }
    SPECD_CHECK(!request.prompt.empty(), "the prompt is empty (and the model adds no BOS token)");
  }
  request.n_predict = o.n_predict;
  request.n_sequences =
      request.prompts.empty() ? o.batch : static_cast<int>(request.prompts.size());
  request.time_budget_ms = o.time_budget_ms;
  // Read only by the budget's ranking and the JSON lines.
  request.sum_logprob = o.time_budget_ms > 0 || o.json;
  SPECD_CHECK(request.prompts.empty() || o.batch == 1 ||
                  o.batch == static_cast<int>(request.prompts.size()),
              "--batch ", o.batch, " with --prompts: the batch is one sequence per prompt (",
              request.prompts.size(), " in ", o.prompts_file, "); drop --batch");
  const int n_seq = request.n_sequences;
  size_t longest_prompt = request.prompt.size();
  size_t prompt_tokens = request.prompt.size();  // of all prompts
  if (!request.prompts.empty()) prompt_tokens = 0;
  for (const auto& p : request.prompts) {
    longest_prompt = std::max(longest_prompt, p.size());
    prompt_tokens += p.size();
  }
  request.sampling.temperature = o.temperature;
  request.sampling.top_k = o.top_k;
  request.sampling.top_p = o.top_p;
  request.sampling.min_p = o.min_p;
  request.sampling.repeat_penalty = o.repeat_penalty;
  request.sampling.repeat_last_n = o.repeat_last_n;
  request.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  request.attention = o.attention == "pad"   ? AttentionMode::kPad
                      : o.attention == "row" ? AttentionMode::kRow
                                             : AttentionMode::kSplit;
  request.stop_at_eos = !o.ignore_eos;
  const bool coupled = o.spec_sampling == "coupled";
  if (coupled) request.sampling.method = SamplingMethod::kGumbel;
  ValidateSamplingParams(request.sampling);

  const int64_t wanted = static_cast<int64_t>(longest_prompt) + o.n_predict;
  const int n_ctx = o.ctx > 0 ? o.ctx
                              : static_cast<int>(std::min<int64_t>(
                                    config.n_ctx_train, std::max<int64_t>(4096, wanted)));
  // -n -1: until EOS or the context is full (llama.cpp's meaning), for the longest prompt.
  if (o.n_predict < 0) {
    request.n_predict = n_ctx - static_cast<int>(longest_prompt);
    SPECD_CHECK(request.n_predict >= 1, "the prompt (", longest_prompt,
                " tokens) fills the context of ", n_ctx, " positions (raise -c)");
  }
  // Every prompt must leave room for -n new tokens: said before anything is printed, naming
  // the --prompts line.
  for (size_t i = 0; i < std::max<size_t>(1, request.prompts.size()); ++i) {
    const size_t size = request.prompts.empty() ? request.prompt.size() : request.prompts[i].size();
    SPECD_CHECK(
        static_cast<int64_t>(size) + o.n_predict <= n_ctx,
        request.prompts.empty() ? std::string("the prompt")
                                : StrCat(o.prompts_file, ":", prompt_lines[i], ": the prompt"),
        " (", size, " tokens) plus ", o.n_predict, " new tokens exceed the context of ", n_ctx,
        " positions (raise -c, up to the model's ", config.n_ctx_train, ", or lower -n)");
  }
  if (n_ctx > config.n_ctx_train) {
    std::fprintf(stderr,
                 "warning: -c %d is beyond the %d positions %s was trained on: past them its "
                 "output degrades\n",
                 n_ctx, config.n_ctx_train, o.model.c_str());
  }
  SpeculativeOptions spec_options;
  SPECD_CHECK(!(o.draft_auto && o.draft_adaptive),
              "--draft-auto and --draft-adaptive are two policies: choose one");
  spec_options.adaptive = o.draft_adaptive;
  // An n-gram lookup costs nothing to draft: a fixed length unless a policy is asked for.
  spec_options.cost_aware =
      !sdsat && (o.draft_auto || (!ngram && !o.draft_adaptive && o.draft_max <= 0));
  const int adaptive_k = o.adaptive_k > 0 ? o.adaptive_k : 5;
  spec_options.draft_max = o.draft_max > 0 ? o.draft_max
                           : sdsat
                               ? (sdsat_shape.tree_nodes > 0 ? sdsat_shape.tree_nodes : adaptive_k)
                               : (spec_options.adaptive ? 7
                                  : ngram               ? 4
                                                        : 8);
  spec_options.spec_sampling = coupled ? SpecSampling::kCoupled : SpecSampling::kRejection;
  spec_options.trace_steps_path = o.trace_steps;
  spec_options.draft =
      DraftOptionsFromFlags(o.draft_flags, draft.get(), o.spec_type == "draft+ngram");
  // SDSAT's adaptive tokens follow the drafts in the verification forward.
  const int draft_room = spec_options.adaptive ? spec_options.l_limit
                         : sdsat               ? std::max(2 * adaptive_k, sdsat_shape.tree_nodes)
                                               : spec_options.draft_max;
  const char* draft_policy =
      spec_options.cost_aware ? "cost" : (spec_options.adaptive ? "adaptive" : "fixed");
  const std::string draft_length_label =
      spec_options.cost_aware
          ? StrCat("cost-aware 0..", spec_options.draft_max)
          : (spec_options.adaptive ? StrCat("BASS Algorithm 1 from ", spec_options.draft_max)
                                   : StrCat("fixed ", spec_options.draft_max));
  const DType kv_type = *DTypeFromName(o.cache_type);
  auto kv = model->NewKvCache({n_seq, n_ctx + (speculative ? draft_room + 1 : 0), kv_type});
  std::unique_ptr<KvCache> draft_kv;
  if (draft) draft_kv = draft->NewKvCache({n_seq, n_ctx + draft_room + 1, kv_type});
  if (!o.json) {
    std::fprintf(stderr, "model: %s (%s, %d layers, d=%d, vocab %lld), %d threads, %s kernels\n",
                 o.model.c_str(), config.arch.c_str(), config.n_layer, config.n_embd,
                 static_cast<long long>(config.n_vocab), o.threads, ctx.cpu.Name().c_str());
    std::fprintf(stderr,
                 "prompt%s: %zu tokens; KV cache: %d sequences x %d positions, %s, %.1f MiB "
                 "reserved (committed as positions are written)\n",
                 request.prompts.empty() ? "" : "s", prompt_tokens, n_seq, n_ctx,
                 o.cache_type.c_str(), kv->BytesReserved() / 1048576.0);
  }
  // A single sequence on a terminal-style run streams its text as it is generated.
  std::unique_ptr<StreamingDecoder> stream;
  if (!o.json && n_seq == 1 && tokenizer) {
    stream = std::make_unique<StreamingDecoder>(*tokenizer);
    // llama.cpp's --color: the prompt in yellow, on a terminal only.
    const bool color = o.color && ::isatty(STDOUT_FILENO);
    if (color) std::cout << "\033[33m";
    if (o.no_display_prompt || o.chat) {
      // A chat prints only the assistant's answer.
    } else if (!o.tokens.empty()) {
      std::cout << tokenizer->Decode(request.prompt, /*strip_space_prefix=*/true);
    } else {
      std::cout << prompt_text;
    }
    if (color) std::cout << "\033[0m";
    std::cout << std::flush;
    request.on_token = [&](int, int32_t token) { std::cout << stream->Push(token) << std::flush; };
  }
  SpeculativeStats stats;
  GenerateResult result;
  if (draft && o.spec_type == "draft+ngram") {
    NgramProposer lookup(o.ngram_min, o.ngram_max, config.n_vocab);
    const auto draft_proposer =
        MakeModelProposer(*model, *draft, *draft_kv, ctx, request.attention, spec_options.draft);
    CombinedProposer both(lookup, *draft_proposer);
    result = GenerateWithProposer(*model, ctx, *kv, both, request, spec_options, &stats);
  } else if (draft) {
    result =
        GenerateSpeculative(*model, *draft, ctx, *kv, *draft_kv, request, spec_options, &stats);
  } else if (sdsat) {
    SdsatOptions sdsat_options = SdsatOptionsForModel(*model, adaptive_k, o.adaptive_token);
    sdsat_options.merge = sdsat_shape.merge;
    sdsat_options.tree_nodes = sdsat_shape.tree_nodes;
    sdsat_options.tree_width = sdsat_shape.tree_width;
    SdsatProposer proposer(sdsat_options);
    result = GenerateWithProposer(*model, ctx, *kv, proposer, request, spec_options, &stats);
  } else if (speculative) {
    NgramProposer proposer(o.ngram_min, o.ngram_max, config.n_vocab);
    result = GenerateWithProposer(*model, ctx, *kv, proposer, request, spec_options, &stats);
  } else {
    result = GenerateAutoregressive(*model, ctx, *kv, request);
  }
  // As asked: `--strategy bass` at batch 1 is reported as bass (it runs the same step).
  const std::string strategy = !speculative           ? "ar"
                               : sdsat                ? "sdsat"
                               : o.strategy == "bass" ? "bass"
                               : n_seq > 1            ? "bass"
                                                      : "spec";
  const std::string sdsat_trees =
      sdsat_shape.tree_nodes > 0
          ? StrCat(", trees of ", sdsat_shape.tree_nodes, " nodes, width ", sdsat_shape.tree_width)
          : std::string();
  const std::string proposer_label =
      sdsat                          ? StrCat("the target's adaptive tokens (",
                     o.sdsat_loop == "merged" ? "merged" : "two-step", " loop", sdsat_trees, ")")
      : ngram                        ? "n-gram lookup"
      : o.spec_type == "draft+ngram" ? "n-gram lookup, then " + o.draft_model
                                     : o.draft_model;
  // Per-token latency (BASS): a sequence's wall time from the request's start to its last token,
  // over the tokens it generated; of the first and last finished sequences and their mean.
  double ptl_first = 0, ptl_last = 0, ptl_all = 0, first_ms = 1e300, last_ms = -1;
  int n_ptl = 0;
  for (const SequenceResult& seq : result.sequences) {
    if (seq.tokens.empty() || seq.finish_reason == "budget") continue;
    const double ptl = seq.elapsed_ms / seq.tokens.size();
    ptl_all += ptl;
    ++n_ptl;
    if (seq.elapsed_ms < first_ms) first_ms = seq.elapsed_ms, ptl_first = ptl;
    if (seq.elapsed_ms > last_ms) last_ms = seq.elapsed_ms, ptl_last = ptl;
  }
  if (n_ptl > 0) ptl_all /= n_ptl;
  int n_over_budget = 0;
  if (o.time_budget_ms > 0) {
    // BASS 4.5: only sequences finished within the budget, best mean log-probability first.
    n_over_budget = KeepFinishedRankedByLogProb(&result);
    if (n_over_budget > 0) {
      std::fprintf(stderr, "%s: %d of %d sequences did not finish within --time-budget-ms %g%s\n",
                   result.sequences.empty() ? "warning" : "note", n_over_budget, n_seq,
                   o.time_budget_ms,
                   result.sequences.empty() ? ": none to print (raise the budget)" : "");
    }
  }
  if (stream) std::cout << stream->Finish() << "\n";

  const double total_ms = result.t_prefill_ms + result.t_decode_ms;
  const double tokens_per_s = total_ms > 0 ? result.n_tokens / (total_ms / 1000.0) : 0.0;
  for (const SequenceResult& seq : result.sequences) {
    const std::string text = tokenizer ? tokenizer->Decode(seq.tokens) : "";
    if (o.json) {
      nlohmann::json line = {{"index", seq.index},
                             {"tokens", seq.tokens},
                             {"text", text},
                             {"n_tokens", seq.tokens.size()},
                             {"finish_reason", seq.finish_reason},
                             {"mean_logprob", seq.mean_logprob()},
                             {"elapsed_ms", seq.elapsed_ms}};
      if (speculative) {
        line["n_drafted"] = seq.n_drafted;
        line["n_accepted"] = seq.n_accepted;
      }
      std::cout << line.dump() << "\n";
    } else if (!stream) {
      std::cout << "[" << seq.index << "]";
      if (tokenizer) {
        std::cout << " " << text << "\n";
      } else {
        for (int32_t t : seq.tokens) std::cout << " " << t;
        std::cout << "\n";
      }
    }
  }
  if (o.json) {
    nlohmann::json summary = {{"type", "summary"},
                              {"strategy", strategy},
                              {"batch", n_seq},
                              {"ptl_first_ms", ptl_first},
                              {"ptl_last_ms", ptl_last},
                              {"ptl_all_ms", ptl_all},
                              {"n_prompt_tokens", prompt_tokens},
                              {"n_sequences_returned", result.sequences.size()},
                              {"n_over_budget", n_over_budget},
                              {"n_tokens", result.n_tokens},
                              {"tokens_per_s", tokens_per_s},
                              {"t_prefill_ms", result.t_prefill_ms},
                              {"t_decode_ms", result.t_decode_ms},
                              {"seed", request.sampling.seed},
                              {"spec_sampling", o.spec_sampling}};
    if (speculative) {
      // Acceptance at each draft position; null where nothing was ever drafted.
      nlohmann::json per_position = nlohmann::json::array();
      for (size_t i = 0; i < stats.drafted_at_position.size(); ++i) {
        if (stats.drafted_at_position[i] == 0) {
          per_position.push_back(nullptr);
        } else {
          per_position.push_back(double(stats.accepted_at_position[i]) /
                                 stats.drafted_at_position[i]);
        }
      }
      summary["draft_max"] = spec_options.draft_max;
      summary["draft_adaptive"] = spec_options.adaptive;
      summary["draft_policy"] = draft_policy;
      summary["n_plain_steps"] = stats.n_plain_steps;
      summary["n_drafted"] = stats.n_drafted;
      summary["n_accepted"] = stats.n_accepted;
      summary["acceptance_rate"] = stats.acceptance_rate();
      summary["mean_accepted_length"] = stats.mean_accepted_length();
      summary["acceptance_by_position"] = per_position;
      summary["t_draft_ms"] = stats.t_draft_ms;
      summary["t_verify_ms"] = stats.t_verify_ms;
    }
    std::cout << summary.dump() << std::endl;
  } else {
    std::cout << std::flush;  // the text before the statistics, also under 2>&1
    std::fprintf(stderr,
                 "strategy %s, batch %d: %lld tokens in %.1f ms (%.1f tok/s); prefill %.1f ms, "
                 "decode %.1f ms, seed %llu\n",
                 strategy.c_str(), n_seq, static_cast<long long>(result.n_tokens), total_ms,
                 tokens_per_s, result.t_prefill_ms, result.t_decode_ms,
                 static_cast<unsigned long long>(request.sampling.seed));
    std::fprintf(stderr, "per-token latency: first %.2f ms, last %.2f ms, all %.2f ms\n", ptl_first,
                 ptl_last, ptl_all);
    if (speculative) {
      std::fprintf(
          stderr,
          "draft %s, draft length %s: acceptance %.3f (%lld of %lld), mean accepted length "
          "%.2f, draft %.1f ms, verify %.1f ms, %lld of %lld steps without drafts\n",
          proposer_label.c_str(), draft_length_label.c_str(), stats.acceptance_rate(),
          static_cast<long long>(stats.n_accepted), static_cast<long long>(stats.n_drafted),
          stats.mean_accepted_length(), stats.t_draft_ms, stats.t_verify_ms,
          static_cast<long long>(stats.n_plain_steps), static_cast<long long>(stats.n_steps));
    }
  }
  std::cout.flush();
  SPECD_CHECK(std::cout.good(), "cannot write the output (disk full, or the reader went away?)");
  return 0;
}

int RunInfo(const std::string& path) {
  auto file = GgufFile::Open(path);
  std::cout << "GGUF version " << file->version() << ", " << file->metadata().size()
            << " metadata keys, " << file->tensors().size() << " tensors\n";
  for (const auto& [key, value] : file->metadata()) {
    std::cout << "  " << key << " (" << GgufTypeName(value.type) << ")";
    if (const auto* s = std::get_if<std::string>(&value.value)) {
      std::cout << " = " << (s->size() > 200 ? s->substr(0, 200) + "..." : *s);
    }
    if (const auto* u = std::get_if<uint64_t>(&value.value)) std::cout << " = " << *u;
    if (const auto* i = std::get_if<int64_t>(&value.value)) std::cout << " = " << *i;
    if (const auto* f = std::get_if<double>(&value.value)) std::cout << " = " << *f;
    if (const auto* b = std::get_if<bool>(&value.value))
      std::cout << " = " << (*b ? "true" : "false");
    if (const auto* a = std::get_if<GgufArray>(&value.value)) {
      std::cout << " = [" << a->items.size() << " x " << GgufTypeName(a->element_type) << "]";
    }
    std::cout << "\n";
  }
  if (file->Find("tokenizer.ggml.model") != nullptr) {
    const auto tokenizer = Tokenizer::FromGguf(*file);
    std::cout << "tokenizer: " << (tokenizer->kind() == TokenizerKind::kSpm ? "SPM" : "BPE") << ", "
              << tokenizer->n_vocab() << " tokens"
              << (tokenizer->pre_tokenizer().empty() ? "" : ", pre " + tokenizer->pre_tokenizer())
              << "\n";
  }
  if (file->FindTensor("token_embd.weight") == nullptr) {
    std::cout << "no weights (a vocabulary-only file)\n";
    return 0;
  }
  auto model = Model::FromGguf(std::move(file));
  const ModelConfig& c = model->config();
  std::cout << "model: " << c.arch << ", " << model->NumParameters() << " parameters, vocab "
            << c.n_vocab << ", d=" << c.n_embd << ", " << c.n_layer << " layers, " << c.n_head
            << " heads / " << c.n_head_kv << " KV heads, FFN " << c.n_ff << ", "
            << model->WeightBytesPerToken() / 1048576.0 << " MiB read per token\n";
  return 0;
}

}  // namespace specd::cli
