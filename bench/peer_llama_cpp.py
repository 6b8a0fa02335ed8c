#!/usr/bin/env python3
"""Decode speed of specd and llama.cpp on the same GGUF files, measured side by side in one run.

llama.cpp comes from PyPI as llama-cpp-python (built from source with -DGGML_NATIVE=ON, so it uses
this CPU's ISA): make a venv, `CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python`, and run
this script with that venv's python. Both engines decode the same prompt greedily for -n tokens
with 2 threads, alternating, --reps times each; the medians and their ratio are printed as a
Markdown table (and as JSON with --json). Prompt evaluation is excluded from both timings; specd's
decode time includes its (greedy) sampling, llama.cpp's is the time inside llama_decode only."""
import argparse
import json
import platform
import statistics
import subprocess
import time

import llama_cpp
from llama_cpp import Llama


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def llama_cpp_decode_tps(llm, prompt, n):
    """Decode speed by llama.cpp's own counters (llama_perf_context: time inside llama_decode),
    so that Python's per-token overhead and sampling are not charged to it."""
    tokens = llm.tokenize(prompt.encode(), add_bos=True, special=False)
    llm.reset()
    llm.eval(tokens)
    llama_cpp.llama_perf_context_reset(llm.ctx)
    for _ in range(n):
        token = llm.sample(temp=0.0)
        llm.eval([token])
    perf = llama_cpp.llama_perf_context(llm.ctx)
    return perf.n_eval / (perf.t_eval_ms / 1000.0)


def specd_decode_tps(specd, model, prompt, n, threads):
    out = subprocess.run([specd, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                          "--ignore-eos", "--strategy", "ar", "-t", str(threads), "--json"],
                         capture_output=True, text=True, check=True).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    return summary["n_tokens"] / (summary["t_decode_ms"] / 1000.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--specd", default="build/release/specd")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    prompt = "The history of the printing press begins"
    rows = []
    for model in args.models:
        llm = Llama(model_path=model, n_ctx=512, n_threads=args.threads, verbose=False)
        specd, peer = [], []
        for _ in range(args.reps):  # interleaved: the VM's speed drifts
            specd.append(specd_decode_tps(args.specd, model, prompt, args.n, args.threads))
            peer.append(llama_cpp_decode_tps(llm, prompt, args.n))
        rows.append({"model": model.split("/")[-1], "specd_tps": statistics.median(specd),
                     "llama_cpp_tps": statistics.median(peer)})
        del llm
    if args.json:
        print(json.dumps({"cpu": cpu_model(), "threads": args.threads, "rows": rows}))
        return
    print(f"Decode, batch 1, {args.threads} threads, {args.n} tokens, median of {args.reps} "
          f"interleaved runs, {time.strftime('%Y-%m-%d')}, {cpu_model()}\n")
    print("| model | specd tok/s | llama.cpp tok/s | specd / llama.cpp |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['specd_tps']:.1f} | {r['llama_cpp_tps']:.1f} | "
              f"{r['specd_tps'] / r['llama_cpp_tps']:.2f} |")


if __name__ == "__main__":
    main()
