#include "model/kv_shift.h"

#include <vector>

#include "base/error.h"
#include "kernels/kernels.h"
#include "tensor/quantize.h"

namespace specd {

void ShiftKeyPositions(const ModelConfig& config, KvCache& kv, int seq, int first, int n,
                       int delta) {
  SPECD_CHECK(first >= 0 && n >= 0 && first + n <= kv.Length(seq), "KV shift: positions [", first,
              ", ", first + n, ") are outside sequence ", seq);
  if (n == 0 || delta == 0) return;
  const int kv_dim = kv.kv_dim();
  const int64_t row_bytes = RowBytes(kv.type(), kv_dim);
  std::vector<float> row(kv_dim);  // [n_head_kv, head_dim]
  for (int il = 0; il < config.n_layer; ++il) {
    // A shift is a pure rotation by delta positions: without the attention factor, which the
    // keys already carry.
    RopeConfig rope = config.IsLocalLayer(il) ? config.rope_local : config.GlobalRope(kv.n_ctx());
    rope.attn_factor = 1.0f;
    std::vector<float> cos(rope.rotary_dim / 2), sin(rope.rotary_dim / 2);  // [rotary_dim / 2]
    RopeAngles(rope, delta, cos.data(), sin.data());
    auto* keys = static_cast<uint8_t*>(kv.K(il, seq));
    for (int pos = first; pos < first + n; ++pos) {
      void* at = keys + pos * row_bytes;
      DequantizeRow(kv.type(), at, row.data(), kv_dim);
      Rope(rope, cos.data(), sin.data(), row.data(), config.n_head_kv);
      QuantizeRow(kv.type(), row.data(), at, kv_dim);
    }
  }
}

}  // namespace specd
