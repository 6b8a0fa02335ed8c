#!/usr/bin/env python3
"""Does the target's own confidence tell when drafting pays? (a lead for the cost-aware policy)

The policy learns acceptance only from drafting steps; in a stretch of plain steps its estimate
goes stale, and a request whose opening was hard to draft can keep to plain steps to its end
(README, SmolLM2 greedy batch 2 on Zen 4). Plain steps do have the target's distribution. This
measures how well the target's probability of the token it chose predicts the draft's acceptance:
  - at the drafted position itself (acceptance by confidence bucket), and
  - ahead: the mean confidence of the last W tokens against the acceptance of the next W/2 drafts,
    next to the last W/2 drafts' own acceptance as the predictor the policy uses now.
It runs one `specd serve` with K = 1 drafts (each step verifies one draft: accepted or not at one
known position) and --trace-steps, sends greedy completions one at a time with logprobs, and
lines the trace's steps up with the tokens. Writes a markdown report.

  bench/acceptance_vs_confidence.py --specd build/release/specd --out FILE.md [--n 16]
      [--max-tokens 256] [-- -m TARGET -md DRAFT]
"""
import argparse
import http.client
import json
import math
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_load import Server, code_prompts, cpu_name  # noqa: E402

BUCKETS = [(0.0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 0.99), (0.99, 1.01)]


def complete(port, prompt, max_tokens):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", body=json.dumps({
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1}))
    reply = json.loads(conn.getresponse().read())
    conn.close()
    return [math.exp(v) for v in reply["choices"][0]["logprobs"]["token_logprobs"]]


def acceptance_per_request(trace_path):
    """Each request's K = 1 verifications in order (1 accepted, 0 rejected). A request starts with
    a step that reads its prompt and verifies nothing (one client: requests come one by one)."""
    requests = []
    for line in open(trace_path):
        step = json.loads(line)
        if step["prefill_target_rows"] > 0 and not step["verified"]:
            requests.append([])
        elif step["verified"]:
            requests[-1].append(step["verified"][0][1])
    return requests


def drafted_positions(confidences, accepted):
    """(token index, target confidence there, accepted) of each draft: the first token comes from
    the prompt's forward; a step then drafts the next token and commits accepted + 1 tokens."""
    index, out = 1, []
    for a in accepted:
        if index >= len(confidences):
            break
        out.append((index, confidences[index], a))
        index += a + 1
    return out


def lookahead_pairs(confidences, drafts, window):
    """(mean confidence of the `window` tokens before, acceptance of the last window/2 drafts
    before, acceptance of the next window/2 drafts), one per window/2 drafts."""
    half, out = window // 2, []
    for j in range(half, len(drafts) - half + 1, half):
        index = drafts[j][0]
        if index < window:
            continue
        past_confidence = statistics.mean(confidences[index - window:index])
        past_acceptance = statistics.mean(d[2] for d in drafts[j - half:j])
        next_acceptance = statistics.mean(d[2] for d in drafts[j:j + half])
        out.append((past_confidence, past_acceptance, next_acceptance))
    return out


def report(runs, window_sizes):
    drafts = [d for conf, ds in runs for d in ds]
    lines = [f"{len(runs)} requests, {len(drafts)} drafts, acceptance "
             f"{statistics.mean(d[2] for d in drafts):.3f}", "",
             "| target's probability of its token | drafts | acceptance |", "|---|---|---|"]
    for lo, hi in BUCKETS:
        b = [d[2] for d in drafts if lo <= d[1] < hi]
        if b:
            lines.append(f"| [{lo:g}, {min(hi, 1):g}{']' if hi > 1 else ')'} | {len(b)} | "
                         f"{statistics.mean(b):.2f} |")
    lines += ["", "| window W | pairs | corr(mean confidence of last W tokens, acceptance of next "
              "W/2 drafts) | corr(acceptance of last W/2 drafts, of next W/2) |", "|---|---|---|---|"]
    pairs_by_window = {w: [p for conf, ds in runs for p in lookahead_pairs(conf, ds, w)]
                       for w in window_sizes}
    for w, pairs in pairs_by_window.items():
        if len(pairs) < 3:
            continue
        by_confidence = statistics.correlation([p[0] for p in pairs], [p[2] for p in pairs])
        by_acceptance = statistics.correlation([p[1] for p in pairs], [p[2] for p in pairs])
        lines.append(f"| {w} | {len(pairs)} | {by_confidence:.2f} | {by_acceptance:.2f} |")
    lines += ["", "Where a policy stops drafting (the last W/2 drafts accepted below 0.5), does the "
              "confidence tell which stretches recover?", "",
              "| window W | such windows | corr(confidence, next acceptance) | next acceptance when "
              "confidence >= its median | when below |", "|---|---|---|---|---|"]
    for w, pairs in pairs_by_window.items():
        low = [p for p in pairs if p[1] < 0.5]
        if len(low) < 4:
            continue
        median = statistics.median(p[0] for p in low)
        above = statistics.mean(p[2] for p in low if p[0] >= median)
        below = statistics.mean([p[2] for p in low if p[0] < median] or [float("nan")])
        corr = statistics.correlation([p[0] for p in low], [p[2] for p in low])
        lines.append(f"| {w} | {len(low)} | {corr:.2f} | {above:.2f} | {below:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specd", default="build/release/specd")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=16, help="prompts (Python function openings)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--windows", default="8,16,32")
    ap.add_argument("server_args", nargs="*", help="after --: more `specd serve` flags")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "steps.jsonl")
        server = Server(args.specd, ["--parallel", "1", "--draft-max", "1", "--trace-steps", trace,
                                     *args.server_args])
        try:
            confidences = [complete(server.port, p, args.max_tokens)
                           for p in code_prompts(args.n)]
        finally:
            server.stop()
        accepted = acceptance_per_request(trace)
    if len(accepted) != len(confidences):
        sys.exit(f"the trace has {len(accepted)} requests, {len(confidences)} were sent")
    for i, (c, a) in enumerate(zip(confidences, accepted)):
        # The steps must account for the tokens returned (plus an end-of-text token not returned),
        # or the drafts are not lined up with their positions.
        committed = 1 + sum(x + 1 for x in a)
        if not 0 <= committed - len(c) <= 1:
            sys.exit(f"request {i}: the trace's steps commit {committed} tokens, "
                     f"the reply has {len(c)}")
    runs = [(c, drafted_positions(c, a)) for c, a in zip(confidences, accepted)]
    text = (f"# Draft acceptance against the target's confidence ({time.strftime('%Y-%m-%d')})\n\n"
            f"{cpu_name()}; `{' '.join(['specd serve --draft-max 1', *args.server_args])}`, {args.n} "
            f"greedy code completions of up to {args.max_tokens} tokens, one at a time.\n\n"
            + report(runs, [int(w) for w in args.windows.split(",")]))
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
