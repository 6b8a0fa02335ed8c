#!/usr/bin/env python3
"""Two specd binaries side by side on the same commands, alternated, medians: does a change that
should not move speed (a refactor) move it?

    python3 bench/ab_binaries.py --a /tmp/base/build/release/specd --b build/release/specd \
        --reps 5 --out bench/results/refactor/ab.md

Each round runs every case on three code prompts with A, then with B (B first in the next round),
and reads the decode rate from generate's --json summary and the one-row / 8-row forward times
from `bench forward`'s JSON. The table gives the medians and the median of the paired B / A
ratios (the same prompt in the same round), which the machine's drift disturbs least.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def generate_tps(binary, args):
    """Decode tokens per second of one generate run (prefill excluded)."""
    out = subprocess.run([binary, "generate", "--json", *args], capture_output=True, text=True,
                         check=True, timeout=600).stdout
    summary = [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]
    decoded = summary["n_tokens"] - summary["batch"]
    return decoded / (summary["t_decode_ms"] / 1000.0)


def forward_ms(binary, model, rows):
    """Median ms of a forward of each row count (bench forward on a real file)."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([binary, "bench", "forward", "-m", model, "--rows",
                        ",".join(map(str, rows)), "--context", "128", "--threads", "2",
                        "--out", out], capture_output=True, text=True, check=True, timeout=900)
        report = json.load(open(os.path.join(out, "forward.json")))
    return {int(m): entry["ms"] for m, entry in report["models"][0]["rows"].items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the binary before")
    ap.add_argument("--b", required=True, help="the binary after")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--model", default=os.path.join(
        ROOT, "pretrained", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--draft", default=os.path.join(
        ROOT, "pretrained", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "refactor", "ab.md"))
    args = ap.parse_args()
    prompts = ["def quicksort(arr):\n    \"\"\"Sort a list of integers.\"\"\"\n",
               "import json\n\ndef load_config(path):\n    \"\"\"Read a JSON config file and return a "
               "dict with defaults filled in.\"\"\"\n",
               "class Stack:\n    \"\"\"A stack with push, pop and peek.\"\"\"\n\n    def __init__(self):\n"]
    common = ["-m", args.model, "-n", "128", "--temp", "0", "--ignore-eos"]
    cases = {
        "generate, plain (--strategy ar)": ["--strategy", "ar"],
        "generate, the pair (-md 0.5B)": ["-md", args.draft],
        "generate, the pair, batch 4": ["-md", args.draft, "--batch", "4"],
    }
    results = {name: {"a": [], "b": [], "ratio": []} for name in cases}
    forward = {"a": [], "b": []}
    for rep in range(args.reps):
        order = [("a", args.a), ("b", args.b)] if rep % 2 == 0 else [("b", args.b), ("a", args.a)]
        for name, flags in cases.items():
            for prompt in prompts:
                tps = {key: generate_tps(binary, common + ["-p", prompt] + flags)
                       for key, binary in order}
                for key in ("a", "b"):
                    results[name][key].append(tps[key])
                results[name]["ratio"].append(tps["b"] / tps["a"])
        for key, binary in order:
            forward[key].append(forward_ms(binary, args.model, [1, 8]))
        print(f"round {rep + 1} of {args.reps} done", flush=True)
    lines = [f"A/B of two specd binaries, {cpu_name()}, 2 threads, {args.reps} alternated rounds, "
             f"medians. A: `{args.a}`, B: `{args.b}`; model {os.path.basename(args.model)}.", "",
             "| case | A | B | B / A (median of pairs; their range) |", "|---|---|---|---|"]
    for name, r in results.items():
        a, b = statistics.median(r["a"]), statistics.median(r["b"])
        lines.append(f"| {name}, decode tok/s | {a:.1f} | {b:.1f} | "
                     f"{statistics.median(r['ratio']):.3f} ({min(r['ratio']):.2f}-"
                     f"{max(r['ratio']):.2f}) |")
    for m in (1, 8):
        a = statistics.median(f[m] for f in forward["a"])
        b = statistics.median(f[m] for f in forward["b"])
        lines.append(f"| bench forward, {m} row(s), ms (1.5B, context 128) | {a:.2f} | {b:.2f} | "
                     f"{b / a:.3f} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump({"generate_tps": results, "forward_ms": forward}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
