// The packed GGUF-type AMX kernel over the software tile unit: the same code as the hardware
// path, runnable on any AVX-512 CPU, for the kernel tests.
#include "kernels/amx_packed_matmul.h"
#include "kernels/amx_tiles.h"

namespace specd::amx {

void MatmulPackedEmulated(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w,
                          float* y, MatmulScratch* scratch) {
  packed::MatmulPacked<EmulatedTiles>(pool, x, m, w, y, scratch);
}

}  // namespace specd::amx
