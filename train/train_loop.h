// Parts every training loop here shares: bf16 autocast, AdamW with decay on matrices only, the
// warm-up + cosine learning-rate schedule, checkpoints to resume from, held-out loss, progress.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/llama_torch.h"

namespace specd::train {

// bf16 autocast for the forward pass only (as torch.autocast does), while in scope.
class Autocast {
 public:
  explicit Autocast(bool enabled);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool enabled_;
};

// AdamW (0.9, 0.95) with weight decay on matrices only (not norms).
std::unique_ptr<torch::optim::AdamW> MakeAdamW(Llama& model, double lr, double weight_decay);

// One optimizer step on `loss` (gradients cleared, back-propagated, clipped to `grad_clip` in
// norm); returns the loss's value.
double OptimizerStep(torch::optim::AdamW& optimizer, Llama& model, const torch::Tensor& loss,
                     double grad_clip);
// The training loss smoothed over steps (exponential, 0.98); NaN `smoothed` starts it.
inline double SmoothLoss(double smoothed, double value) {
  return std::isnan(smoothed) ? value : 0.98 * smoothed + 0.02 * value;
}

// Multiplier of the peak learning rate at `step`: linear warm-up, then cosine down to
// `min_ratio` at `total_steps`.
double LearningRateScale(int64_t step, int64_t warmup_steps, int64_t total_steps, double min_ratio);
void SetLearningRate(torch::optim::AdamW& optimizer, double lr);

// Model, optimizer, step and smoothed loss in a folder; written atomically (each file renamed
// into place). An empty folder disables both. Only the model's trainable parameters and its
// buffers are written (trainable.pt): the frozen ones (a LoRA's base, an EAGLE head's embedding
// and output rows) come from the base file each run starts from, so a LoRA of Qwen2.5-Coder
// writes ~35 MB (beside its optimizer's 70 MB) instead of 2.6 GB. Folders written before hold
// the whole model (model.pt) and still load.
class Checkpoint {
 public:
  explicit Checkpoint(std::string dir);
  // Restores model and optimizer when the folder holds a checkpoint; returns whether it did.
  bool Load(Llama& model, torch::optim::AdamW& optimizer, int64_t* step, double* smoothed_loss);
  // Restores only the model's weights (the folder must hold a checkpoint).
  void LoadModel(Llama& model) const;
  void Save(Llama& model, torch::optim::AdamW& optimizer, int64_t step, double smoothed_loss);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Holds a checkpoint folder for one training run (an exclusive flock on `dir`/lock, released when
// the process ends however it ends): two runs on one folder would append to the same teacher text
// and overwrite each other's checkpoints. An empty folder takes no lock.
class FolderLock {
 public:
  explicit FolderLock(const std::string& dir);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

// Mean next-token cross-entropy over up to `windows` evenly spaced windows of `stream`.
double HeldOutLoss(Llama& model, const std::vector<int32_t>& stream, int64_t ctx, int windows,
                   bool bf16);

// One progress line ("[###...] step 10/100 loss ... tok/s, h:mm:ss left"), redrawn in place on a
// terminal, every 50 steps otherwise.
void ReportProgress(int64_t step, int64_t total_steps, double loss, double lr, double tokens_per_s,
                    int64_t tokens_per_step);

std::string FormatSeconds(double s);

}  // namespace specd::train
