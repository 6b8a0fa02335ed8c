#include "train/train_loop.h"

#include <ATen/autocast_mode.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/error.h"

namespace specd::train {
namespace fs = std::filesystem;

Autocast::Autocast(bool enabled) : enabled_(enabled) {
  if (enabled_) {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  }
}

Autocast::~Autocast() {
  if (enabled_) {
    at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(false);
  }
}

std::unique_ptr<torch::optim::AdamW> MakeAdamW(Llama& model, double lr, double weight_decay) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    (p.value().dim() >= 2 ? decay : no_decay).push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      decay, std::make_unique<torch::optim::AdamWOptions>(
                 torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(weight_decay)));
  groups.emplace_back(no_decay,
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(groups);
}

double OptimizerStep(torch::optim::AdamW& optimizer, Llama& model, const torch::Tensor& loss,
                     double grad_clip) {
  optimizer.zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(model->parameters(), grad_clip);
  optimizer.step();
  return loss.item<double>();
}

double LearningRateScale(int64_t step, int64_t warmup_steps, int64_t total_steps,
                         double min_ratio) {
  if (step < warmup_steps) return double(step + 1) / warmup_steps;
  const double progress =
      double(step - warmup_steps) / std::max<int64_t>(1, total_steps - warmup_steps);
  return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

void SetLearningRate(torch::optim::AdamW& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

FolderLock::FolderLock(const std::string& dir) {
  if (dir.empty()) return;
  fs::create_directories(dir);
  const std::string path = dir + "/lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SPECD_CHECK(fd_ >= 0, "cannot open ", path);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    Fail("another training run is using the checkpoint folder ", dir,
         " (two would write the same files); wait for it or give another --checkpoint");
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

namespace {

void SaveTrainable(Llama& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  for (const auto& p : model->named_parameters()) {
    if (p.value().requires_grad()) archive.write(p.key(), p.value());
  }
  for (const auto& b : model->named_buffers())
    archive.write(b.key(), b.value(), /*is_buffer=*/true);
  archive.save_to(path);
}

void LoadTrainable(Llama& model, const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::NoGradGuard no_grad;
  auto restore = [&](const std::string& name, torch::Tensor& into, bool is_buffer) {
    torch::Tensor saved;
    SPECD_CHECK(archive.try_read(name, saved, is_buffer), path, " has no ", name,
                ": the checkpoint is of another model or recipe");
    SPECD_CHECK(saved.sizes() == into.sizes(), path, ": ", name, " is shaped ", saved.sizes(),
                ", the model's ", into.sizes());
    into.copy_(saved);
  };
  for (auto& p : model->named_parameters()) {
    if (p.value().requires_grad()) restore(p.key(), p.value(), false);
  }
  for (auto& b : model->named_buffers()) restore(b.key(), b.value(), true);
}

}  // namespace

Checkpoint::Checkpoint(std::string dir) : dir_(std::move(dir)) {
  if (!dir_.empty()) fs::create_directories(dir_);
}

void Checkpoint::LoadModel(Llama& model) const {
  if (fs::exists(dir_ + "/trainable.pt")) {
    LoadTrainable(model, dir_ + "/trainable.pt");
  } else {
    torch::load(model, dir_ + "/model.pt");
  }
}

bool Checkpoint::Load(Llama& model, torch::optim::AdamW& optimizer, int64_t* step,
                      double* smoothed_loss) {
  const std::string step_path = dir_ + "/step.txt";
  if (dir_.empty() || !fs::exists(step_path)) return false;
  LoadModel(model);
  torch::load(optimizer, dir_ + "/optimizer.pt");
  std::FILE* f = std::fopen(step_path.c_str(), "r");
  long long s = 0;
  const bool ok = f != nullptr && std::fscanf(f, "%lld", &s) == 1;
  double saved_loss = 0.0;
  // Files from before the loss was saved hold only the step.
  if (ok && std::fscanf(f, "%lf", &saved_loss) == 1) *smoothed_loss = saved_loss;
  if (f != nullptr) std::fclose(f);
  SPECD_CHECK(ok, "corrupt checkpoint step in ", step_path);
  *step = s;
  std::fprintf(stderr, "resumed from %s at step %lld\n", dir_.c_str(), s);
  return true;
}

void Checkpoint::Save(Llama& model, torch::optim::AdamW& optimizer, int64_t step,
                      double smoothed_loss) {
  if (dir_.empty()) return;
  const std::string trainable_path = dir_ + "/trainable.pt", optim_path = dir_ + "/optimizer.pt",
                    step_path = dir_ + "/step.txt";
  SaveTrainable(model, trainable_path + ".tmp");
  torch::save(optimizer, optim_path + ".tmp");
  fs::rename(trainable_path + ".tmp", trainable_path);
  fs::rename(optim_path + ".tmp", optim_path);
  std::FILE* f = std::fopen((step_path + ".tmp").c_str(), "w");
  SPECD_CHECK(f != nullptr, "cannot write ", step_path, ".tmp");
  std::fprintf(f, "%lld %.6f\n", static_cast<long long>(step), smoothed_loss);
  std::fclose(f);
  fs::rename(step_path + ".tmp", step_path);
  fs::remove(dir_ + "/model.pt");  // an older run's whole model, superseded
}

double HeldOutLoss(Llama& model, const std::vector<int32_t>& stream, int64_t ctx, int windows,
                   bool bf16) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t available = static_cast<int64_t>(stream.size() - 1) / ctx;
  const int64_t n = std::min<int64_t>(windows, available);
  SPECD_CHECK(n > 0, "the held-out text is shorter than one context window");
  double total = 0.0;
  const int64_t stride = available / n;
  for (int64_t w = 0; w < n; w += 8) {
    const int64_t rows = std::min<int64_t>(8, n - w);
    auto x = torch::empty({rows, ctx}, torch::kInt64), y = torch::empty({rows, ctx}, torch::kInt64);
    auto* xp = x.data_ptr<int64_t>();
    auto* yp = y.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t start = (w + r) * stride * ctx;
      for (int64_t t = 0; t < ctx; ++t) {
        xp[r * ctx + t] = stream[start + t];
        yp[r * ctx + t] = stream[start + t + 1];
      }
    }
    torch::Tensor logits;  // [rows, ctx, n_head]
    {
      Autocast autocast(bf16);
      logits = model->forward(x);
    }
    total +=
        torch::nn::functional::cross_entropy(logits.to(torch::kFloat32).view({-1, logits.size(-1)}),
                                             model->HeadTargets(y).view({-1}))
            .item<double>() *
        rows;
  }
  model->train();
  return total / n;
}

void ReportProgress(int64_t step, int64_t total_steps, double loss, double lr, double tokens_per_s,
                    int64_t tokens_per_step) {
  const bool tty = ::isatty(2);
  if (!tty && step % 50 != 0 && step != total_steps) return;
  const double eta = double(total_steps - step) * tokens_per_step / std::max(tokens_per_s, 1.0);
  const int width = 30;
  const int filled = static_cast<int>(width * double(step) / total_steps);
  std::fprintf(stderr, "%s[%s%s] step %lld/%lld loss %.3f lr %.2e %.0f tok/s, %s left%s",
               tty ? "\r" : "", std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), static_cast<long long>(step),
               static_cast<long long>(total_steps), loss, lr, tokens_per_s,
               FormatSeconds(eta).c_str(), tty ? "  " : "\n");
}

std::string FormatSeconds(double s) {
  char buf[32];
  const int total = static_cast<int>(s);
  std::snprintf(buf, sizeof(buf), "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60);
  return buf;
}

}  // namespace specd::train
