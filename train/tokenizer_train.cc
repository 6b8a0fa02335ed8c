#include "train/tokenizer_train.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "gguf/gguf.h"
#include "train/corpus.h"

namespace specd::train {

void TrainTokenizer(const std::vector<std::string>& files, const TokenizerTrainOptions& o,
                    const std::string& out_gguf) {
  SPECD_CHECK(o.vocab_size >= 512 && o.vocab_size <= 256000, "--vocab-size must be in 512..256000");
  // SentencePiece trains on lines; code keeps its spaces (identity normalization, no extra
  // whitespace removal, no dummy prefix), and newlines become the <0x0A> byte token.
  const std::string lines_path = out_gguf + ".lines.tmp";
  {
    std::ofstream lines(lines_path, std::ios::binary);
    for (const std::string& f : files) {
      std::istringstream in(ReadFileBytes(f));
      std::string line;
      while (std::getline(in, line)) {
        if (!line.empty() && line.size() < 4000) lines << line << "\n";
      }
    }
  }
  std::string control = "<fim_prefix>,<fim_middle>,<fim_suffix>";
  for (int i = 0; i < o.n_unused; ++i) control += ",<unused" + std::to_string(i) + ">";
  // SentencePiece runs as its command-line tools (Debian's `sentencepiece` package): its library
  // links protobuf-lite, which cannot share a process with LibTorch's full protobuf.
  const std::string prefix = out_gguf + ".spm";
  std::ostringstream args;
  args << "spm_train --input=" << lines_path << " --model_prefix=" << prefix
       << " --vocab_size=" << o.vocab_size
       << " --model_type=bpe --character_coverage=1.0 --byte_fallback=true"
       << " --normalization_rule_name=identity --remove_extra_whitespaces=false"
       << " --add_dummy_prefix=false --allow_whitespace_only_pieces=true --split_digits=true"
       << " --max_sentence_length=4096 --input_sentence_size=0 --shuffle_input_sentence=false"
       << " --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --unk_piece='<unk>' --bos_piece='<s>'"
       << " --eos_piece='</s>' --pad_piece='<pad>' --control_symbols='" << control << "'"
       << " --num_threads=" << o.threads << " --minloglevel=1 > " << prefix << ".log 2>&1";
  const int rc = std::system(args.str().c_str());
  std::filesystem::remove(lines_path);
  SPECD_CHECK(rc == 0, "spm_train failed (is Debian's `sentencepiece` installed?); see ", prefix,
              ".log");
  const std::string vocab_path = prefix + ".vocab.tsv";
  const std::string export_cmd = "spm_export_vocab --model=" + prefix +
                                 ".model --output=" + vocab_path + " --output_format=vocab";
  SPECD_CHECK(std::system(export_cmd.c_str()) == 0, "spm_export_vocab failed");

  // Piece types follow from the names: ids 0..3 and the control symbols we asked for, the
  // <0xXX> byte pieces, and normal pieces.
  std::vector<GgufValue> tokens, scores, types;
  std::unordered_map<std::string, uint32_t> ids;
  std::istringstream vocab(ReadFileBytes(vocab_path));
  std::string line;
  std::unordered_set<std::string> controls = {"<s>", "</s>", "<pad>"};
  {
    std::istringstream names(control);
    std::string name;
    while (std::getline(names, name, ',')) controls.insert(name);
  }
  while (std::getline(vocab, line)) {
    const size_t tab = line.rfind('\t');
    SPECD_CHECK(tab != std::string::npos, "unexpected line in ", vocab_path, ": ", line);
    const std::string piece = line.substr(0, tab);
    const float score = std::stof(line.substr(tab + 1));
    int32_t type = 1;
    if (piece == "<unk>")
      type = 2;
    else if (controls.count(piece))
      type = 3;
    else if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>')
      type = 6;
    ids[piece] = static_cast<uint32_t>(tokens.size());
    tokens.push_back(GgufValue::Str(piece));
    scores.push_back(GgufValue::F32(score));
    types.push_back(GgufValue::I32(type));
  }
  SPECD_CHECK(static_cast<int>(tokens.size()) == o.vocab_size, "the trained vocabulary has ",
              tokens.size(), " pieces, expected ", o.vocab_size);
  // Keep SentencePiece's own model (reference for tests); drop the by-products.
  std::filesystem::remove(vocab_path);
  std::filesystem::remove(prefix + ".vocab");
  std::filesystem::remove(prefix + ".log");
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("llama"));
  w.Set("general.name", GgufValue::Str("specd tokenizer"));
  w.Set("tokenizer.ggml.model", GgufValue::Str("llama"));
  w.Set("tokenizer.ggml.tokens", GgufValue::Array(GgufType::kString, std::move(tokens)));
  w.Set("tokenizer.ggml.scores", GgufValue::Array(GgufType::kFloat32, std::move(scores)));
  w.Set("tokenizer.ggml.token_type", GgufValue::Array(GgufType::kInt32, std::move(types)));
  w.Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(0));
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
  w.Set("tokenizer.ggml.padding_token_id", GgufValue::U32(3));
  w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
  w.Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(false));
  w.Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
  // Infilling tokens under both the current and the older llama.cpp key names.
  const uint32_t fim_pre = ids.at("<fim_prefix>"), fim_mid = ids.at("<fim_middle>"),
                 fim_suf = ids.at("<fim_suffix>");
  w.Set("tokenizer.ggml.fim_pre_token_id", GgufValue::U32(fim_pre));
  w.Set("tokenizer.ggml.fim_mid_token_id", GgufValue::U32(fim_mid));
  w.Set("tokenizer.ggml.fim_suf_token_id", GgufValue::U32(fim_suf));
  w.Set("tokenizer.ggml.prefix_token_id", GgufValue::U32(fim_pre));
  w.Set("tokenizer.ggml.middle_token_id", GgufValue::U32(fim_mid));
  w.Set("tokenizer.ggml.suffix_token_id", GgufValue::U32(fim_suf));
  w.Write(out_gguf);
}

}  // namespace specd::train
