// LoRA adapters in llama.cpp's GGUF format (general.type = adapter, adapter.type = lora,
// adapter.lora.alpha; tensors "<base tensor>.lora_a" / ".lora_b"), merged into a model's
// weights at load: W' = W + s B A with s = scale * alpha / rank (scale alone when alpha is 0),
// as llama.cpp applies them at run time. token_embd.weight follows llama.cpp's flipped layout
// (lora_a [rank, n_vocab] rows looked up by token, lora_b [rank, n_embd]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace specd {

// --lora FILE (scale 1) or --lora-scaled FILE SCALE.
struct LoraSpec {
  std::string path;
  float scale = 1.0f;
};

// One low-rank update of a base tensor, as delta = s * left right in specd's orientation of the
// tensor (rows = output features, or tokens for token_embd; cols = input features).
struct LoraUpdate {
  std::string target;  // base tensor name, e.g. "blk.0.attn_q.weight"
  int64_t rows = 0, cols = 0, rank = 0;
  float s = 1.0f;            // scale * alpha / rank
  std::vector<float> left;   // [rows, rank]
  std::vector<float> right;  // [rank, cols]

  // delta row r: [cols] written to out (overwritten).
  void DeltaRow(int64_t r, float* out) const;
  // Whether row r changes at all (a token_embd update often touches a few tokens only).
  bool TouchesRow(int64_t r) const;
};

struct LoraAdapter {
  std::unique_ptr<GgufFile> file;  // its metadata stays readable (e.g. specd.sdsat.*)
  std::vector<LoraUpdate> updates;
};

// Reads and checks an adapter for a model of architecture `arch`; every problem is an Error that
// names the file.
LoraAdapter ReadLoraAdapter(const LoraSpec& spec, const std::string& arch);

// The type a matrix of `type` is merged into: its own for f32, f16, bf16 and q8_0; q8_0 for the
// coarser ones, whose grid would round a small low-rank update away.
DType LoraMergedType(DType type);

// W + delta of one matrix stored as `type` ([rows] rows of `cols`), in LoraMergedType(type);
// rows the update does not touch are copied unchanged when the type stays.
std::vector<uint8_t> MergeLoraUpdate(DType type, const uint8_t* base, const LoraUpdate& update);

}  // namespace specd
