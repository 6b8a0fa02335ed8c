#!/usr/bin/env python3
"""Writes dequant_vectors.bin: random blocks of every ggml type specd reads, with the values the
`gguf` Python package's reference implementation (pip install gguf) dequantizes them to. The test
tensor_test.cc checks specd's DequantizeRow against them. Run again only to regenerate.

Format, per type: u32 ggml type id, u32 block count, u32 bytes per block, the blocks' bytes,
then block count * elements per block f32 values (little-endian)."""
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# Byte offsets of the fp16 scales in each block (set to sane values: random bytes could be NaN).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
}

def main(out_path):
    rng = np.random.default_rng(20261123)
    with open(out_path, "wb") as out:
        for qtype, fields in FP16_FIELDS.items():
            block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
            n_blocks = 3
            raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
            for b in range(n_blocks):
                for off in fields:
                    h = np.float16(rng.uniform(-0.05, 0.05) if off == 0 or qtype == T.Q6_K
                                   else rng.uniform(0.0, 0.05))
                    raw[b, off:off + 2] = np.frombuffer(h.tobytes(), dtype=np.uint8)
            values = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
            assert values.size == n_blocks * block_elems
            out.write(struct.pack("<III", int(qtype), n_blocks, block_bytes))
            out.write(raw.tobytes())
            out.write(values.astype("<f4").tobytes())

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "dequant_vectors.bin")
