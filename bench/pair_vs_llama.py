#!/usr/bin/env python3
"""Decode speed of the default pair on HumanEval prompts: specd plain and speculative against
llama.cpp plain and speculative, one process per prompt and engine, interleaved prompt by prompt.

    python3 bench/pair_vs_llama.py --llama-bin DIR [--problems 120-159] [-n 128] [--out DIR]

Each engine completes each HumanEval prompt (raw completion) greedily for -n tokens, ignoring
end-of-text, with 2 threads; decode speed is each engine's own count of generated tokens over its
decode time (prompt reading excluded): specd's `--json` summary, `llama-completion`'s "eval
time", `llama-speculative-simple`'s "decoded N tokens in T seconds". The engines take turns on
every prompt, so a slow phase of a shared VM hits all of them. Prints a Markdown table of medians
and per-prompt ratios, and writes it with the raw runs to --out. llama.cpp is the one vendored in
the llama-cpp-python 0.3.36 sdist (docs/performance.md says how it is built); on CPUs with AMX run
its programs with LLAMA_ARG_REPACK=0 (its repacking crashes multi-row q4_K matmuls there).
"""
import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from specd_server import cpu_description  # noqa: E402

TARGET = os.path.join(ROOT, "pretrained", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
DRAFT = os.path.join(ROOT, "pretrained", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")


def problems(spec):
    first, last = (int(x) for x in spec.split("-"))
    path = os.path.join(ROOT, ".cache", "humaneval", "HumanEval.jsonl.gz")
    if not os.path.exists(path):
        sys.exit(f"error: {path} is missing: run bench/humaneval.py once (it fetches the data)")
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    return [rows[i] for i in range(first, last + 1)]


def specd_tps(args, prompt, extra):
    out = subprocess.run([args.specd, "generate", "-m", TARGET, "-p", prompt, "-n", str(args.n),
                          "--temp", "0", "--ignore-eos", "-t", "2", "--json", *extra],
                         capture_output=True, text=True, check=True).stdout
    summary = [json.loads(line) for line in out.splitlines() if '"type":"summary"' in line][0]
    return summary["tokens_per_s"], summary.get("acceptance_rate")


def llama_plain_tps(args, prompt):
    run = subprocess.run([os.path.join(args.llama_bin, "llama-completion"), "-m", TARGET, "-p",
                          prompt, "-n", str(args.n), "--temp", "0", "--ignore-eos", "-t", "2",
                          "-no-cnv", "--no-display-prompt"],
                         capture_output=True, text=True, check=True, env=args.env)
    m = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", run.stderr)
    return int(m.group(2)) / (float(m.group(1)) / 1000.0), None


def llama_spec_tps(args, prompt, extra):
    run = subprocess.run([os.path.join(args.llama_bin, "llama-speculative-simple"), "-m", TARGET,
                          "-md", DRAFT, "--spec-type", "draft-simple", "-p", prompt, "-n",
                          str(args.n), "--temp", "0",
                          "--ignore-eos", "-t", "2", *extra],
                         capture_output=True, text=True, check=True, env=args.env)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", run.stderr)
    acc = re.search(r"accept\s+=\s+([\d.]+)%", run.stderr)
    return int(m.group(1)) / float(m.group(2)), float(acc.group(1)) / 100 if acc else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    ap.add_argument("--llama-bin", required=True, help="folder of llama-completion and "
                    "llama-speculative-simple")
    ap.add_argument("--problems", default="120-159", help="HumanEval problems FIRST-LAST")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "qwen-pair"))
    args = ap.parse_args()
    args.env = dict(os.environ)
    engines = {
        "specd plain": lambda p: specd_tps(args, p, ["--strategy", "ar"]),
        "specd speculative (default)": lambda p: specd_tps(args, p, []),
        "llama.cpp plain": lambda p: llama_plain_tps(args, p),
        "llama.cpp speculative-simple (defaults)": lambda p: llama_spec_tps(args, p, []),
        "llama.cpp speculative-simple (n-max 8, p-min 0.75)": lambda p: llama_spec_tps(
            args, p, ["--spec-draft-n-max", "8", "--spec-draft-p-min", "0.75"]),
    }
    runs = {name: [] for name in engines}
    accept = {name: [] for name in engines}
    chosen = problems(args.problems)
    for i, problem in enumerate(chosen):
        order = list(engines) if i % 2 == 0 else list(reversed(engines))
        for name in order:
            tps, acc = engines[name](problem["prompt"])
            runs[name].append(tps)
            if acc is not None:
                accept[name].append(acc)
        print(f"{problem['task_id']}: " + ", ".join(f"{n} {runs[n][-1]:.1f}" for n in engines),
              file=sys.stderr, flush=True)
    base = runs["specd plain"]
    lines = [f"Decode tok/s, {cpu_description()}, HumanEval problems {args.problems} (raw "
             f"completion, {args.n} greedy tokens, end of text ignored), one process per prompt "
             "and engine, interleaved; medians over prompts.", "",
             "| engine | tok/s (median) | vs specd plain (median of per-prompt ratios) | "
             "specd speculative against it | acceptance (median) |", "|---|---|---|---|---|"]
    spec = runs["specd speculative (default)"]
    for name in engines:
        ratios = [a / b for a, b in zip(runs[name], base)]
        against = [s / a for s, a in zip(spec, runs[name])]
        acc = f"{statistics.median(accept[name]):.2f}" if accept[name] else ""
        lines.append(f"| {name} | {statistics.median(runs[name]):.1f} | "
                     f"{statistics.median(ratios):.2f}x | {statistics.median(against):.2f}x | "
                     f"{acc} |")
    worst = min(s / b for s, b in zip(spec, base))
    lines += ["", f"specd speculative against specd plain, worst prompt: {worst:.2f}x"]
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "pair_vs_llama.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, "pair_vs_llama.json"), "w") as f:
        json.dump({"problems": args.problems, "n": args.n, "runs": runs, "acceptance": accept},
                  f, indent=1)


if __name__ == "__main__":
    main()
