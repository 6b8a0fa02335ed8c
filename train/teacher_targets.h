// Soft targets for distilling a draft: the teacher's most likely next tokens, with their
// probabilities, at every position of the text it wrote. Computed in specd's engine (fast int8
// kernels, one forward per sequence), not in LibTorch, where running a 135M teacher beside the
// draft costs several times the draft's own training step.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "train/llama_torch.h"
#include "train/trainer.h"

namespace specd::train {

struct TeacherTopK {
  int k = 0;
  int64_t positions = 0;     // per sequence: the ctx positions a training window predicts
  std::vector<int32_t> ids;  // [n_sequences, positions, k], most likely first
  std::vector<float> probs;  // [n_sequences, positions, k], the teacher's (not renormalized)
};

// Row t of sequence s predicts token t + 1 from tokens 0..t; sequences are ctx + 1 tokens long.
// Cached in `cache_path` (with a recipe: k, the sequence count and a checksum of the text) and
// written a sequence at a time, so an interrupted run continues where it stopped.
TeacherTopK ComputeTeacherTopK(const std::string& teacher_gguf,
                               const std::vector<std::vector<int32_t>>& sequences, int64_t ctx,
                               int k, int threads, const TeacherRun& run,
                               const std::string& cache_path);

// How ComputeTeacherTopK stores a sequence's records: ids [positions, k] then probabilities
// [positions, k]; its cache's recipe names k, the sequence count, ctx and a checksum of the text.
int64_t TopKSequenceBytes(int64_t positions, int k);
std::string TopKRecipe(int k, const std::vector<std::vector<int32_t>>& sequences, int64_t ctx,
                       const TeacherRun& run);

// The teacher's top-k after each prefix of `tokens` (row t predicts token t + 1), from one
// forward over them in a free slot of `kv`: ids [tokens.size(), k], probabilities
// [tokens.size(), k], most likely first.
void TeacherTopKOfTokens(Model& teacher, const KernelContext& kernels, KvCache& kv,
                         std::span<const int32_t> tokens, int k, int32_t* ids, float* probs);

// Cross-entropy of the draft's log-probabilities `log_q` [picked.size() * positions, n_out] (its
// output layer: the whole vocabulary, or its FR-Spec head) against the teacher's top-k of the
// picked sequences: -sum_j p_j log q(id_j), averaged over rows. The teacher's probabilities are
// not renormalized (the loss is the full cross-entropy's top-k terms); tokens outside the
// draft's head, which it can never propose, are left out.
torch::Tensor SoftTargetLoss(const torch::Tensor& log_q, const TeacherTopK& top,
                             const std::vector<int64_t>& picked, const Llama& model);

}  // namespace specd::train
