#include "engine/model_options.h"

#include "base/error.h"
#include "base/file_util.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace specd {

const std::string& BuiltInCalibrationText() {
  static const std::string kText = R"(A lighthouse keeper on a small northern island kept a
notebook of every ship that passed. Most days there were two or three: fishing boats leaving
before dawn, a ferry at noon, and now and then a cargo vessel riding low in the water. In winter
the storms came from the west, and the keeper wrote down the height of the waves, the colour of
the sky, and the hour at which the lamp was lit. Years later, scientists used those notebooks to
study how the climate of the region had changed.

import collections
import json


def count_words(path, min_length=3):
    """Return the ten most common words of a text file, ignoring short ones."""
    counts = collections.Counter()
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            for word in line.lower().split():
                word = word.strip(".,;:!?\"'()[]")
                if len(word) >= min_length:
                    counts[word] += 1
    return counts.most_common(10)


class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, quantity=1):
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        self.items[name] = self.items.get(name, 0) + quantity

    def to_json(self):
        return json.dumps(self.items, sort_keys=True, indent=2)

<|im_start|>user
How do I read a CSV file in Python and compute the average of one column?<|im_end|>
<|im_start|>assistant
Use the csv module: open the file, create a csv.DictReader, and add up the values of the column
you need, converting each one with float(). Divide the sum by the number of rows at the end, and
check that the file was not empty before dividing.<|im_end|>

The committee met on Tuesday, 14 March, to discuss the budget for the next year. Three proposals
were presented: to repair the old bridge, to extend the library's opening hours, and to plant
two hundred trees along the river. After a long debate the members voted 7 to 4 in favour of the
bridge, with the library to be reconsidered in September.
)";
  return kText;
}

Int8Backend Int8BackendFor(const WeightOptions& o, const CpuFeatures& cpu) {
  switch (o.int8_kernel) {
    case Int8Backend::kAuto:
    case Int8Backend::kSpecd:
      break;
    case Int8Backend::kAmx:
      SPECD_CHECK(cpu.amx_int8 && cpu.avx512,
                  "{int8_kernel} amx needs AMX-INT8 (and AVX-512), which this CPU or OS does not "
                  "offer");
      break;
    case Int8Backend::kOneDnn:
      SPECD_CHECK(o.int8, "{int8_kernel} onednn applies to i8 weights: add {weights} i8");
      // Without VNNI oneDNN's s8 x s8 path sums pairs in saturating 16-bit arithmetic: not exact.
      SPECD_CHECK(cpu.avx512, "{int8_kernel} onednn needs AVX-512 VNNI, which this CPU lacks");
      break;
  }
  return o.int8_kernel;
}

ModelLoadOptions LoadOptionsForModel(const WeightOptions& flags, const std::string& path,
                                     ModelRole role, int max_tokens) {
  ModelLoadOptions options;
  options.int8_weights = flags.int8;
  if (role == ModelRole::kTarget) options.lora = flags.lora;
  if (flags.lora_merge) options.lora_apply = LoraApply::kMerge;
  if (!options.int8_weights || flags.smooth_alpha <= 0.0f) return options;
  SPECD_CHECK(flags.smooth_alpha <= 1.0f, "{smooth_alpha} must be in [0, 1], got ",
              flags.smooth_alpha);
  options.smooth_alpha = flags.smooth_alpha;
  const std::string text = flags.calibration_file.empty() ? BuiltInCalibrationText()
                                                          : ReadFileBytes(flags.calibration_file);
  auto file = GgufFile::Open(path);
  SPECD_CHECK(file->Find("tokenizer.ggml.model") != nullptr, path,
              " has no tokenizer to read the SmoothQuant calibration text with: add "
              "{smooth_alpha} 0 (i8 without SmoothQuant)");
  const auto tokenizer = Tokenizer::FromGguf(*file);
  std::vector<int32_t> tokens = tokenizer->Encode(text, /*add_special=*/true,
                                                  /*parse_special=*/true);
  if (static_cast<int>(tokens.size()) > max_tokens) tokens.resize(max_tokens);
  SPECD_CHECK(tokens.size() >= 2, "the calibration text is too short (", tokens.size(), " tokens)");
  options.calibration_tokens = std::move(tokens);
  return options;
}

}  // namespace specd
