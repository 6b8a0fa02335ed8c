#!/usr/bin/env python3
"""One-row decode of every quantized type against llama.cpp, on the same files, one CPU.

    python3 bench/types_vs_llama.py -m pretrained/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
        --llama-bin /tmp/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin \
        [--types q8_0,q4_0,q4_1,q5_0,q6_K,iq4_nl,iq4_xs] [--rounds 3] [--out FILE.md]

Each type's file is made from -m by `specd quantize` into a temporary folder (not kept). Per round
and type, specd's `bench forward --rows 1 --decode 64` and llama.cpp's `llama-bench -p 0 -n 64`
run one after the other (the order alternates), 2 threads; the table gives each round's tok/s and
the ratio of the medians. On a CPU with AMX, llama.cpp's repacking crashes multi-row q4_K matmuls:
pass --no-repack there (llama-bench `--repack 0`) and say so beside the figures.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from specd_server import cpu_description  # noqa: E402


def specd_tps(args, model, out_dir):
    subprocess.run([args.specd, "bench", "forward", "-m", model, "--threads", "2", "--rows", "1",
                    "--decode", "64", "--out", out_dir], check=True, capture_output=True)
    with open(os.path.join(out_dir, "forward.json")) as f:
        result = json.load(f)
    return result["models"][0]["decode"]["2"]["tokens_per_s"]


def llama_tps(args, model):
    env = dict(os.environ, LD_LIBRARY_PATH=args.llama_bin)
    cmd = [os.path.join(args.llama_bin, "llama-bench"), "-m", model, "-p", "0", "-n", "64",
           "-r", "3", "-t", "2", "-o", "json"]
    if args.no_repack:
        cmd += ["--repack", "0"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out[out.index("["):])[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    ap.add_argument("--types", default="q8_0,q4_0,q4_1,q5_0,q6_K,iq4_nl,iq4_xs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-repack", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for type_name in args.types.split(","):
            model = os.path.join(tmp, f"model-{type_name}.gguf")
            made = subprocess.run([args.specd, "quantize", args.model, model, type_name],
                                  capture_output=True, text=True)
            if made.returncode != 0:  # a type specd does not write: say so, keep the other rows
                why = (made.stderr.strip() or made.stdout.strip()).splitlines()[-1:] or ["?"]
                rows.append((type_name, None, None, why[0]))
                print(f"{type_name}: not measured: {why[0]}", file=sys.stderr, flush=True)
                continue
            ours, theirs = [], []
            for r in range(args.rounds):
                for engine in (("specd", "llama") if r % 2 == 0 else ("llama", "specd")):
                    if engine == "specd":
                        ours.append(specd_tps(args, model, tmp))
                    else:
                        theirs.append(llama_tps(args, model))
            os.remove(model)
            ratio = statistics.median(ours) / statistics.median(theirs)
            rows.append((type_name, ours, theirs, ratio))
            print(f"{type_name}: specd {ours} llama.cpp {theirs} ratio {ratio:.2f}", file=sys.stderr,
                  flush=True)
    lines = [f"One-row decode against llama.cpp, {datetime.date.today()}, {cpu_description()}; "
             f"every type made from `{os.path.basename(args.model)}` by `specd quantize`"
             + ("; llama.cpp with repacking off" if args.no_repack else "") + ".", "",
             "| type | specd tok/s (rounds) | llama.cpp tok/s (rounds) | ratio of medians |",
             "|---|---|---|---|"]
    for type_name, ours, theirs, ratio in rows:
        if ours is None:
            lines.append(f"| {type_name} | not measured: {ratio} | | |")
            continue
        fmt = lambda xs: " / ".join(f"{x:.1f}" for x in xs)  # noqa: E731
        lines.append(f"| {type_name} | {fmt(ours)} | {fmt(theirs)} | **{ratio:.2f}x** |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
