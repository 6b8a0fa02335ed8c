// LoRA adapters on a loaded model: kept as run-time low-rank terms or merged into owned copies.
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "base/error.h"
#include "model/model.h"

namespace specd {

void Model::LoadLora(const std::vector<LoraSpec>& adapters, LoraApply apply) {
  if (adapters.empty()) return;
  SPECD_CHECK(!config_.eagle, "LoRA adapters do not apply to an EAGLE head");
  // A restricted head (a draft's) has no row per token to add a delta to: merge there.
  if (!config_.head_tokens.empty()) apply = LoraApply::kMerge;
  struct Target {
    WeightView* matrix;
    std::vector<LowRankTerm>* terms;  // where its run-time terms go (token_embd: none)
  };
  std::map<std::string, Target> targets = {{"token_embd.weight", {&weights_.token_embd, nullptr}}};
  if (!config_.tied_embeddings)
    targets["output.weight"] = {&weights_.output, &weights_.output_lora};
  for (int i = 0; i < config_.n_layer; ++i) {
    LayerWeights& l = weights_.layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    for (const auto& [name, view, slot] : {std::tuple{"attn_q", &l.wq, kLoraQ},
                                           {"attn_k", &l.wk, kLoraK},
                                           {"attn_v", &l.wv, kLoraV},
                                           {"attn_output", &l.wo, kLoraO},
                                           {"ffn_gate", &l.w_gate, kLoraGate},
                                           {"ffn_up", &l.w_up, kLoraUp},
                                           {"ffn_down", &l.w_down, kLoraDown}}) {
      targets[p + name + ".weight"] = {view, &l.lora[slot]};
    }
  }
  bool merged_embedding = false;
  for (const LoraSpec& spec : adapters) {
    LoraAdapter adapter = ReadLoraAdapter(spec, config_.arch);
    for (const LoraUpdate& u : adapter.updates) {
      const auto it = targets.find(u.target);
      SPECD_CHECK(it != targets.end(), spec.path, ": a LoRA for '", u.target,
                  "', which this model has no matrix of (or cannot take one for)");
      WeightView& w = *it->second.matrix;
      SPECD_CHECK(u.rows == w.rows && u.cols == w.cols, spec.path, ": the LoRA for '", u.target,
                  "' is [", u.rows, " x ", u.cols, "], the matrix [", w.rows, " x ", w.cols, "]");
      const bool embedding = it->second.terms == nullptr;
      if (apply != LoraApply::kMerge && embedding &&
          u.CountTouchedRows() <= kMaxRuntimeEmbeddingRows) {
        weights_.embedding_lora.Add(u);
        continue;
      }
      const bool run_time = apply == LoraApply::kRunTime ||
                            (apply == LoraApply::kAuto && LoraMergedType(w.type) != w.type);
      if (run_time && !embedding) {
        it->second.terms->push_back(MakeLowRankTerm(u));
        continue;
      }
      SPECD_CHECK(w.type != DType::kI8, spec.path, ": cannot merge a LoRA into the i8 matrix '",
                  u.target, "': load the original model with {lora} (and {weights} i8)");
      weights_.lora_merged.push_back(std::make_unique<std::vector<uint8_t>>(
          MergeLoraUpdate(w.type, static_cast<const uint8_t*>(w.data), u)));
      w.data = weights_.lora_merged.back()->data();
      w.type = LoraMergedType(w.type);
      merged_embedding = merged_embedding || embedding;
    }
    weights_.adapters.push_back(std::move(adapter.file));
  }
  // The merged embedding is the head too; run-time rows are added to the head's logits instead.
  if (config_.tied_embeddings && merged_embedding) weights_.output = weights_.token_embd;
}

}  // namespace specd
