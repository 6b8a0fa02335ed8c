#!/usr/bin/env python3
"""Greedy continuations of specd and llama.cpp on the same GGUF file, compared prompt by prompt.

    python3 bench/peer_parity.py --llama-simple PATH/llama-simple -m MODEL.gguf
        [--specd build/release/specd] [-n 48] [--problems 40] [--tie 0.1] [--out FILE.md]

llama.cpp is the one vendored in the llama-cpp-python 0.3.36 sdist (MACHINE.md's recipe builds
llama-simple). The prompts are HumanEval's (function signatures with docstrings that no specd
draft trained on; fetched as bench/humaneval.py does). Each engine continues each prompt greedily
for -n tokens; where the texts differ, specd's top two log-probabilities at the first token that
differs tell whether the two engines stood at a near tie there (gap below --tie nats), where
rounding differences between two correct implementations may pick either token.
"""
import argparse
import json
import os
import subprocess
import sys
import http.client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from specd_server import Server  # noqa: E402
from humaneval import fetch_problems, cpu_description, first_difference  # noqa: E402


def llama_cpp_text(binary, model, prompt, n):
    out = subprocess.run([binary, "-m", model, "-n", str(n), prompt], capture_output=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.decode(errors="replace")[-500:])
    text = out.stdout.decode("utf-8", errors="replace")
    # llama-simple prints the prompt's pieces, the continuation, then a newline.
    if not text.startswith(prompt):
        raise RuntimeError("llama-simple's output does not start with the prompt")
    return text[len(prompt):-1] if text.endswith("\n") else text[len(prompt):]


def specd_continuation(server, prompt, n):
    """specd's greedy text, its tokens' texts and the top-2 log-probabilities of each."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(
        {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 2}),
        {"Content-Type": "application/json"})
    body = json.loads(conn.getresponse().read())
    conn.close()
    choice = body["choices"][0]
    lp = choice["logprobs"]
    return choice["text"], lp["tokens"], lp["top_logprobs"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-simple", required=True)
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-n", type=int, default=48)
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--tie", type=float, default=0.1, help="near tie: top-2 gap below this (nats)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    problems = fetch_problems(os.path.join(ROOT, ".cache", "humaneval"))[:args.problems]
    server = Server(args.specd, "-m", args.model, "--spec-type", "none", "--parallel", "1")
    rows, equal, ties, real = [], 0, 0, 0
    try:
        for p in problems:
            ours, pieces, tops = specd_continuation(server, p["prompt"], args.n)
            theirs = llama_cpp_text(args.llama_simple, args.model, p["prompt"], args.n)
            shorter = min(len(ours), len(theirs))
            at = first_difference(ours, theirs)
            if at >= shorter:  # one is a prefix of the other: stopped at EOS or cut mid-token
                equal += 1
                continue
            # The specd token whose text covers the first differing character.
            pos, k = 0, 0
            while k < len(pieces) and pos + len(pieces[k]) <= at:
                pos += len(pieces[k])
                k += 1
            values = sorted(tops[k].values(), reverse=True) if k < len(tops) else []
            gap = values[0] - values[1] if len(values) >= 2 else float("inf")
            tie = gap < args.tie
            ties += tie
            real += not tie
            rows.append(f"| {p['task_id']} | {k} | {gap:.3f} | {'near tie' if tie else 'DIFFERS'} "
                        f"| {json.dumps(ours[at:at + 20])} | {json.dumps(theirs[at:at + 20])} |")
    finally:
        server.stop()
    lines = [f"# Greedy continuations, specd vs llama.cpp ({cpu_description()})", "",
             f"`{os.path.basename(args.model)}`, {len(problems)} HumanEval prompts, {args.n} "
             f"tokens: {equal} equal, {ties} differ at a near tie (top-2 gap < {args.tie} nats), "
             f"{real} differ elsewhere.", ""]
    if rows:
        lines += ["| prompt | token | top-2 gap | verdict | specd | llama.cpp |",
                  "|---|---|---|---|---|---|"] + rows
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    return 1 if real else 0


if __name__ == "__main__":
    sys.exit(main())
