// How the CLI and the benches turn --weights / --int8-kernel / --smooth-alpha / --calibration
// into a model load: for i8, the SmoothQuant calibration tokens come from the model's own
// tokenizer reading a calibration text (a built-in mix of prose, code and chat, or a file).
#pragma once

#include <string>
#include <vector>

#include "model/model.h"

namespace specd {

// The built-in calibration text (written for specd; English prose, Python code, a chat turn).
const std::string& BuiltInCalibrationText();

// Which model of a run the options are for: LoRA adapters (--lora) go into the target only.
enum class ModelRole { kTarget, kDraft };

// ModelLoadOptions for the model at `path`: LoadOptionsFromFlags, plus, for i8 with
// flags.smooth_alpha > 0, calibration tokens (at most max_tokens) of flags.calibration_file or
// the built-in text, encoded by the model's tokenizer.
ModelLoadOptions LoadOptionsForModel(const WeightFlags& flags, const std::string& path,
                                     ModelRole role = ModelRole::kTarget, int max_tokens = 512);

}  // namespace specd
