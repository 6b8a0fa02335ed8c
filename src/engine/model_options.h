// How a run's models are loaded (the typed form of --weights / --int8-kernel / --smooth-alpha /
// --calibration / --lora): for i8, the SmoothQuant calibration tokens come from the model's own
// tokenizer reading a calibration text (a built-in mix of prose, code and chat, or a file).
#pragma once

#include <string>
#include <vector>

#include "model/model.h"

namespace specd {

// The built-in calibration text (written for specd; English prose, Python code, a chat turn).
const std::string& BuiltInCalibrationText();

struct WeightOptions {
  bool int8 = false;  // convert the matrices to i8 at load (BASS's INT8)
  Int8Backend int8_kernel = Int8Backend::kAuto;
  float smooth_alpha = 0.5f;     // i8: SmoothQuant's migration strength; 0: none
  std::string calibration_file;  // i8: its calibration text (default: a built-in one)
  std::vector<LoraSpec> lora;    // the target model only
  bool lora_merge = false;       // merged at load instead of applied at run time
};

// The i8 backend the options ask for on this CPU; an Error names a choice the CPU or the
// weights cannot run.
Int8Backend Int8BackendFor(const WeightOptions& options, const CpuFeatures& cpu);

// Which model of a run the options are for: LoRA adapters (--lora) go into the target only.
enum class ModelRole { kTarget, kDraft };

// ModelLoadOptions for the model at `path`: i8 and LoRA as asked, plus, for i8 with
// smooth_alpha > 0, calibration tokens (at most max_tokens) of calibration_file or the built-in
// text, encoded by the model's tokenizer.
ModelLoadOptions LoadOptionsForModel(const WeightOptions& flags, const std::string& path,
                                     ModelRole role = ModelRole::kTarget, int max_tokens = 512);

}  // namespace specd
