#include "model/model_file.h"

#include <cmath>

#include "base/error.h"
#include "tensor/quantize.h"

namespace specd::model_file {

WeightView Matrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows) {
  const GgufTensorInfo& t = f.GetTensor(name);
  SPECD_CHECK(t.shape.size() == 2 && t.shape[0] == cols && t.shape[1] == rows, f.path(),
              ": tensor '", name, "' has shape ", ShapeString(t.shape), ", expected [", cols, ", ",
              rows, "]");
  WeightView w{t.type, t.data, rows, cols};
  if (t.type == DType::kI8) {
    const std::string scale_name = I8ScaleTensorName(name);
    const GgufTensorInfo* scale = f.FindTensor(scale_name);
    SPECD_CHECK(scale != nullptr, f.path(), ": i8 tensor '", name, "' has no row scales ('",
                scale_name, "')");
    SPECD_CHECK(scale->type == DType::kF32 && scale->shape.size() == 1 && scale->shape[0] == rows,
                f.path(), ": '", scale_name, "' must be f32 of shape [", rows, "]");
    w.row_scales = reinterpret_cast<const float*>(scale->data);
    if (const GgufTensorInfo* smooth = f.FindTensor(I8SmoothTensorName(name))) {
      SPECD_CHECK(
          smooth->type == DType::kF32 && smooth->shape.size() == 1 && smooth->shape[0] == cols,
          f.path(), ": '", smooth->name, "' must be f32 of shape [", cols, "]");
      w.col_scales = reinterpret_cast<const float*>(smooth->data);
      for (int64_t j = 0; j < cols; ++j) {
        SPECD_CHECK(std::isfinite(w.col_scales[j]) && w.col_scales[j] > 0, f.path(), ": '",
                    smooth->name, "' column ", j, " is not a finite positive multiplier");
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      SPECD_CHECK(std::isfinite(w.row_scales[r]) && w.row_scales[r] >= 0, f.path(), ": '",
                  scale_name, "' row ", r, " is not a finite non-negative scale");
    }
  }
  return w;
}

std::vector<float> Vector(const GgufFile& f, const std::string& name, int64_t n) {
  const GgufTensorInfo& t = f.GetTensor(name);
  SPECD_CHECK(t.NumElements() == n && t.shape[0] == n, f.path(), ": tensor '", name, "' has shape ",
              ShapeString(t.shape), ", expected [", n, "]");
  std::vector<float> out(n);
  DequantizeRow(t.type, t.data, out.data(), n);
  return out;
}

}  // namespace specd::model_file
