// Reading a model's tensors and metadata from its GGUF file: helpers of model_load.cc and
// model_config.cc (not part of the model's interface).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"

namespace specd::model_file {

inline std::string Key(const std::string& arch, const std::string& suffix) {
  return arch + "." + suffix;
}

inline int64_t GetInt(const GgufFile& f, const std::string& key) { return f.Get(key).AsInt(key); }

inline std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A weight matrix with ggml shape [cols, rows]; an i8 matrix with its row scales.
WeightView Matrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows);
// A vector of n values, converted to f32.
std::vector<float> Vector(const GgufFile& f, const std::string& name, int64_t n);
// BOS and EOS inside the vocabulary, and the tokens that end generation.
void CheckSpecialTokens(const GgufFile& f, ModelConfig* config);

}  // namespace specd::model_file
