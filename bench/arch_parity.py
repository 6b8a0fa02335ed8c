#!/usr/bin/env python3
"""specd against llama.cpp on architectures no pretrained file here has: qwen3 and phi3.

    python3 bench/arch_parity.py --llama-bin DIR [--specd build/release/specd] [--out FILE.md]

For each architecture it writes, with the `gguf` Python package (llama.cpp's own), a GGUF of a
real model's layer shapes and random weights (a few layers, q8_0 matrices) with a real
tokenizer's metadata (llama.cpp's vocabulary files, from scripts/get-test-data.sh), then runs
both engines on it: perplexity on the same text and chunks (llama-perplexity against `specd
perplexity`), and greedy continuations of a few prompts (llama-simple against `specd generate
--temp 0`), compared token by token. llama.cpp is the one vendored in the llama-cpp-python
0.3.36 sdist (MACHINE.md's recipe builds llama-perplexity and llama-simple).

  qwen3  Qwen3-0.6B's layers (1024 wide, 16 query heads of 128 over 8 KV heads: q is wider than
         the model, per-head q/k RMSNorm, no biases), 2 layers, GPT-2's vocabulary
  phi3   Phi-4-mini's layers (3072 wide, 24 query heads of 128 over 8 KV heads, partial rotary
         over 96 of 128 dimensions, fused attn_qkv and gate-up matrices, LongRoPE short and long
         factors with the attention factor), 1 layer, Phi-3's vocabulary
"""
import argparse
import math
import os
import subprocess
import sys

import numpy as np
import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, ".cache", "vocab")
TEXT = "/usr/share/common-licenses/GPL-3"
PROMPTS = ["The licenses for most software", "def main():", "Hello, world"]


def copy_tokenizer(writer, vocab_file):
    """The tokenizer.* metadata of a llama.cpp vocabulary file."""
    reader = gguf.GGUFReader(vocab_file)
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        value = field.contents()
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(field.name, value)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(field.name, value)
        elif kind == gguf.GGUFValueType.BOOL:
            writer.add_bool(field.name, value)
        else:
            writer.add_uint32(field.name, int(value))
    return len(reader.fields["tokenizer.ggml.tokens"].contents())


def matrix(rng, rows, cols, std, qtype):
    """A [rows, cols] matrix of N(0, std) weights (ggml shape [cols, rows]) in qtype."""
    w = (rng.standard_normal((rows, cols)) * std).astype(np.float32)
    if qtype == gguf.GGMLQuantizationType.F32:
        return w
    if qtype == gguf.GGMLQuantizationType.F16:
        return w.astype(np.float16)
    return gguf.quants.quantize(w, qtype)


def norm(rng, n):
    return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)


def write_model(path, arch, shape, vocab_name, qtype, seed=1):
    rng = np.random.default_rng(seed)
    raw = {} if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16) else {
        "raw_dtype": qtype}
    w = gguf.GGUFWriter(path, arch)
    n_vocab = copy_tokenizer(w, os.path.join(VOCAB, f"ggml-vocab-{vocab_name}.gguf"))
    d, n_head, n_kv, head_dim, n_ff = (shape[k] for k in ("d", "heads", "kv", "head_dim", "ff"))
    w.add_name(f"specd-arch-test-{arch}")
    w.add_context_length(shape["ctx"])
    w.add_embedding_length(d)
    w.add_block_count(shape["layers"])
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6 if arch == "qwen3" else 1e-5)
    w.add_rope_freq_base(shape["rope_base"])
    w.add_rope_dimension_count(shape["rotary"])
    w.add_file_type({gguf.GGMLQuantizationType.F32: gguf.LlamaFileType.ALL_F32,
                     gguf.GGMLQuantizationType.F16: gguf.LlamaFileType.MOSTLY_F16}.get(
                         qtype, gguf.LlamaFileType.MOSTLY_Q8_0))
    q, kv = n_head * head_dim, n_kv * head_dim
    # Logits of std ~3: clear top-1 tokens, finite perplexity.
    w.add_tensor("token_embd.weight", matrix(rng, n_vocab, d, 3.0 / math.sqrt(d), qtype),
                 **raw)
    w.add_tensor("output_norm.weight", norm(rng, d))
    if arch == "phi3":
        half = shape["rotary"] // 2
        w.add_rope_scaling_orig_ctx_len(shape["orig_ctx"])
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(shape["ctx"] / shape["orig_ctx"])
                                                  / math.log(shape["orig_ctx"])))
        w.add_tensor("rope_factors_short.weight", (1.0 + rng.random(half)).astype(np.float32))
        w.add_tensor("rope_factors_long.weight", (1.0 + 8 * rng.random(half)).astype(np.float32))
    for i in range(shape["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(rng, d))
        w.add_tensor(p + "ffn_norm.weight", norm(rng, d))
        if arch == "phi3":
            w.add_tensor(p + "attn_qkv.weight", matrix(rng, q + 2 * kv, d, 1 / math.sqrt(d), qtype),
                         **raw)
            w.add_tensor(p + "ffn_up.weight", matrix(rng, 2 * n_ff, d, 1 / math.sqrt(d), qtype),
                         **raw)
        else:
            for name, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
                w.add_tensor(p + name + ".weight", matrix(rng, rows, d, 1 / math.sqrt(d), qtype),
                             **raw)
            w.add_tensor(p + "attn_q_norm.weight", norm(rng, head_dim))
            w.add_tensor(p + "attn_k_norm.weight", norm(rng, head_dim))
            for name in ("ffn_gate", "ffn_up"):
                w.add_tensor(p + name + ".weight", matrix(rng, n_ff, d, 1 / math.sqrt(d), qtype),
                             **raw)
        w.add_tensor(p + "attn_output.weight", matrix(rng, d, q, 1 / math.sqrt(q), qtype),
                     **raw)
        w.add_tensor(p + "ffn_down.weight", matrix(rng, d, n_ff, 1 / math.sqrt(n_ff), qtype),
                     **raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


MODELS = {
    "qwen3": ({"d": 1024, "heads": 16, "kv": 8, "head_dim": 128, "ff": 3072, "layers": 2,
               "ctx": 40960, "rope_base": 1e6, "rotary": 128}, "gpt-2"),
    "phi3": ({"d": 3072, "heads": 24, "kv": 8, "head_dim": 128, "ff": 8192, "layers": 1,
              "ctx": 131072, "orig_ctx": 4096, "rope_base": 1e4, "rotary": 96}, "phi-3"),
}


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, env=env, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(" ".join(cmd) + "\n" + out.stderr.decode(errors="replace")[-2000:])
    return out.stdout.decode("utf-8", errors="replace"), out.stderr.decode(errors="replace")


def llama_ppl(bin_dir, model, ctx, chunks):
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    _, err = run([os.path.join(bin_dir, "llama-perplexity"), "-m", model, "-f", TEXT, "-c",
                  str(ctx), "--chunks", str(chunks), "-t", "2", "-b", str(ctx)], env)
    line = [l for l in err.splitlines() if "Final estimate: PPL" in l][-1]
    return float(line.split("PPL =")[1].split()[0])


def specd_ppl(specd, model, ctx, chunks):
    out, _ = run([specd, "perplexity", "-m", model, "-f", TEXT, "-c", str(ctx), "--chunks",
                  str(chunks), "--json"])
    import json
    return json.loads(out[out.index("{"):])["ppl"]


def llama_text(bin_dir, model, prompt, n):
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    out, _ = run([os.path.join(bin_dir, "llama-simple"), "-m", model, "-n", str(n), prompt], env)
    out = out[4:] if out.startswith("<s> ") else out  # an SPM vocabulary's BOS, printed
    return out[len(prompt):].rstrip("\n")


def specd_text(specd, model, prompt, n):
    out, _ = run([specd, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                  "--no-display-prompt", "--strategy", "ar", "--ignore-eos"])
    return out.rstrip("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-bin", required=True, help="folder of llama-perplexity, llama-simple")
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    ap.add_argument("--dir", default=os.path.join(ROOT, ".cache", "arch-test"))
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--type", default="f16", choices=["f32", "f16", "q8_0"],
                    help="matrix type (q8_0: llama.cpp quantizes activations to q8_0 blocks, "
                    "specd per row, so their rounding differs)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    rows = []
    for arch, (shape, vocab) in MODELS.items():
        path = os.path.join(args.dir, f"{arch}-test-{args.type}.gguf")
        if not os.path.exists(path):
            write_model(path, arch, shape, vocab, gguf.GGMLQuantizationType[args.type.upper()])
        ppl_llama = llama_ppl(args.llama_bin, path, args.ctx, args.chunks)
        ppl_specd = specd_ppl(args.specd, path, args.ctx, args.chunks)
        same = 0
        for prompt in PROMPTS:
            a, b = llama_text(args.llama_bin, path, prompt, args.n), specd_text(args.specd, path, prompt, args.n)
            same += a == b
            if a != b:
                print(f"{arch} {prompt!r}: llama.cpp {a!r}\n{' ' * len(arch)} specd     {b!r}",
                      file=sys.stderr)
        rows.append(f"| {arch} | {ppl_llama:.6g} | {ppl_specd:.6g} | "
                    f"{abs(ppl_specd / ppl_llama - 1) * 100:.4f}% | {same} of {len(PROMPTS)} |")
        print(rows[-1], file=sys.stderr, flush=True)
    table = ("| architecture | llama.cpp PPL | specd PPL | difference | greedy "
             f"{args.n}-token continuations equal |\n|---|---|---|---|---|\n" + "\n".join(rows))
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
