// i8 matmuls on oneDNN (BASS's INT8 as one integer matrix product): s8 activations x s8 weights
// -> s32, on AMX tiles where the CPU has them and AVX-512 VNNI otherwise (oneDNN's choice;
// ONEDNN_VERBOSE=1 prints it). The float steps after the exact integer sums are the same as
// reference::MatmulI8's, so the bits equal specd's own kernel's for every row count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace specd {

// oneDNN's copy of an i8 matrix (re-laid once in its preferred layout) and its primitives.
struct OneDnnInt8Weights;

// Builds oneDNN's layout of i8 weights (each part kI8 with row scales, same cols; the parts'
// rows stacked in order, as StackPackedInt8 does). Needs AVX-512 VNNI: without it oneDNN's
// s8 x s8 path saturates 16-bit sums and is not exact.
std::shared_ptr<OneDnnInt8Weights> MakeOneDnnInt8Weights(
    const std::vector<const WeightView*>& parts);

// y[m, rows] = reference::MatmulI8's result for x [m, cols], through oneDNN. w.onednn must be set.
void OneDnnMatmulI8(const KernelContext& ctx, const float* x, int64_t m,
                    const PackedInt8Weights& w, float* y, MatmulScratch* scratch);

}  // namespace specd
