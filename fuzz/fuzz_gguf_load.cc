// libFuzzer target: arbitrary bytes as a GGUF file. Parsing, model load (with the fast-layout
// repacking), the tokenizer and one decode step must either succeed or throw specd::Error; any
// other exception, crash or sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "base/error.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "threading/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace {

void DecodeOneToken(specd::Model& model, const specd::KernelContext& ctx) {
  specd::KvCacheConfig kv_config;
  kv_config.n_slots = 1;
  kv_config.n_ctx = 4;
  auto kv = model.NewKvCache(kv_config);
  const int seq = kv->Acquire();
  specd::Batch batch;
  batch.Add(/*token=*/0, /*position=*/0, seq, /*want_logits=*/true);
  std::vector<float> logits;  // [1, n_vocab]
  model.Forward(ctx, batch, *kv, specd::AttentionMode::kSplit, &logits);
  // A hostile file can make the logits NaN or infinite: sampling must still pick a valid id.
  const int32_t n_vocab = static_cast<int32_t>(logits.size());
  specd::SamplingParams params;
  for (specd::SamplingMethod method :
       {specd::SamplingMethod::kInverseCdf, specd::SamplingMethod::kGumbel}) {
    params.method = method;
    const int32_t token = specd::SampleToken(logits, params, specd::RngKey{});
    if (token < 0 || token >= n_vocab) std::abort();
  }
  const int32_t best = specd::Argmax(logits);
  if (best < 0 || best >= n_vocab) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static specd::ThreadPool pool(1);
  static const specd::KernelContext ctx{&pool, specd::CpuFeatures::Detect()};
  try {
    auto tokenizer_file = specd::GgufFile::FromMemory(data, size);
    try {
      specd::Tokenizer::FromGguf(*tokenizer_file)->Encode("fuzz <s> text", true, true);
    } catch (const specd::Error&) {
    }
    auto model = specd::Model::FromGguf(specd::GgufFile::FromMemory(data, size), &ctx);
    DecodeOneToken(*model, ctx);
  } catch (const specd::Error&) {
  }
  return 0;
}
