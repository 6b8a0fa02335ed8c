#!/usr/bin/env python3
"""Load generator for `specd serve`: plain vs speculative at 1..64 concurrent clients.

For each model pair it starts two servers side by side (--spec-type none and with speculation)
and at each concurrency level C runs max(16, 2C) streaming completion requests from C client
threads against one, then the other, --reps times in turn, so a machine that drifts moves both
alike; --restarts N does it all with N fresh pairs of servers (a server's policy learns as it
runs, so one server's runs are not independent). The median run by throughput is kept.
Reported per level: throughput (generated tokens / wall time), time to first token and time per
output token after the first (TPOT, what a reader of the stream waits per token) at p50 / p99
over requests. Writes a markdown table, a JSON file and an SVG plot.

  bench/serve_load.py --specd build/release/specd --out bench/results/serve [--reps 3 --restarts 3]
      [--temperature 1] [-- --weights i8]
"""
import argparse
import concurrent.futures
import glob
import http.client
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def code_prompts(n):
    """Openings of functions from Python's standard library: 'def name(args):' + docstring."""
    prompts = []
    for path in sorted(glob.glob("/usr/lib/python3*/*.py")):
        for m in re.finditer(r"^def [a-z]\w*\([^)]*\):\n", open(path, errors="replace").read(),
                             re.M):
            prompts.append(m.group(0))
            if len(prompts) >= 4 * n:
                break
    return prompts[::4][:n] if len(prompts) >= n else (prompts * n)[:n]


class Server:
    def __init__(self, specd, args):
        self.proc = subprocess.Popen([specd, "serve", "--port", "0", *args],
                                     stderr=subprocess.PIPE, text=True)
        for line in self.proc.stderr:
            m = re.search(r"ready on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                # Keep reading its log, or a full pipe would block the server.
                threading.Thread(target=lambda: [None for _ in self.proc.stderr],
                                 daemon=True).start()
                return
        raise RuntimeError("server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def one_request(port, prompt, max_tokens, temperature=0.0):
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", body=json.dumps({
        "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
        "stream_options": {"include_usage": True}}))
    resp = conn.getresponse()
    t_first, n_tokens = None, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            n_tokens = chunk["usage"]["completion_tokens"]
        elif t_first is None and any(c.get("text") for c in chunk["choices"]):
            t_first = time.perf_counter()
    t_end = time.perf_counter()
    conn.close()
    t_first = t_first or t_end
    tpot = (t_end - t_first) / (n_tokens - 1) if n_tokens > 1 else 0.0
    return {"ttft_s": t_first - t0, "tpot_s": tpot, "tokens": n_tokens, "e2e_s": t_end - t0}


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def run_level(port, prompts, concurrency, max_tokens, temperature):
    n = max(16, 2 * concurrency)
    one_request(port, prompts[0], 8, temperature)  # warm
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda p: one_request(port, p, max_tokens, temperature),
                                [prompts[i % len(prompts)] for i in range(n)]))
    wall = time.perf_counter() - t0
    return {"concurrency": concurrency, "requests": n,
            "throughput_tok_s": sum(r["tokens"] for r in results) / wall,
            "ttft_p50_ms": 1000 * percentile([r["ttft_s"] for r in results], 50),
            "ttft_p99_ms": 1000 * percentile([r["ttft_s"] for r in results], 99),
            "tpot_p50_ms": 1000 * percentile([r["tpot_s"] for r in results], 50),
            "tpot_p99_ms": 1000 * percentile([r["tpot_s"] for r in results], 99)}


def svg_plot(results, path):
    """Throughput and TPOT p50 against concurrency (log2 axis), one line per model and mode."""
    width, height, pad = 980, 380, 60
    panels = [("throughput_tok_s", "throughput (tokens/s)"), ("tpot_p50_ms", "TPOT p50 (ms)")]
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="12">', '<rect width="100%" height="100%" fill="white"/>']
    levels = sorted({r["concurrency"] for rs in results.values() for r in rs})
    pw = (width - 3 * pad) / 2
    for k, (key, title) in enumerate(panels):
        x0 = pad + k * (pw + pad)
        ymax = max(r[key] for rs in results.values() for r in rs) * 1.1
        sx = lambda c: x0 + pw * levels.index(c) / max(1, len(levels) - 1)
        sy = lambda v: height - pad - (height - 2 * pad) * v / ymax
        out.append(f'<text x="{x0 + pw / 2}" y="20" text-anchor="middle">{title}</text>')
        out.append(f'<line x1="{x0}" y1="{height - pad}" x2="{x0 + pw}" y2="{height - pad}" stroke="black"/>')
        out.append(f'<line x1="{x0}" y1="{pad}" x2="{x0}" y2="{height - pad}" stroke="black"/>')
        for c in levels:
            out.append(f'<text x="{sx(c)}" y="{height - pad + 16}" text-anchor="middle">{c}</text>')
        out.append(f'<text x="{x0 + pw / 2}" y="{height - 20}" text-anchor="middle">concurrent clients</text>')
        for i in range(5):
            v = ymax * i / 4
            out.append(f'<text x="{x0 - 6}" y="{sy(v) + 4}" text-anchor="end">{v:.0f}</text>')
        for j, (name, rs) in enumerate(results.items()):
            pts = " ".join(f"{sx(r['concurrency']):.1f},{sy(r[key]):.1f}" for r in rs)
            dash = "" if "plain" in name else ' stroke-dasharray="6,3"'
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colors[j // 2 % 4]}" '
                       f'stroke-width="2"{dash}/>')
            if k == 0:
                out.append(f'<text x="{x0 + 10}" y="{pad + 14 * j}" fill="{colors[j // 2 % 4]}">'
                           f'{name}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specd", default="build/release/specd")
    ap.add_argument("--out", default="bench/results/serve")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="of every request (0: greedy; otherwise OpenAI's defaults: top-p 1, no top-k)")
    ap.add_argument("--pairs", default="smollm2,16m",
                    help="smollm2 (SmolLM2 + its draft), 16m (the shipped 16.5M pair), qwen "
                         "(specd's default pair, Qwen2.5-Coder-1.5B + 0.5B)")
    ap.add_argument("--reps", type=int, default=1, help="runs per level and mode (median kept)")
    ap.add_argument("--restarts", type=int, default=1,
                    help="fresh server pairs, each running every level --reps times (median over all)")
    ap.add_argument("--trace-steps", default="",
                    help="the speculative server's --trace-steps FILE (its steps as JSON lines)")
    ap.add_argument("server_args", nargs="*", help="more `specd serve` arguments, after --")
    a = ap.parse_args()
    levels = [int(c) for c in a.concurrency.split(",")]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pairs = {"smollm2": ["-m", f"{root}/pretrained/SmolLM2-135M-Instruct.Q4_1.gguf",
                         "-md", f"{root}/models/specd-smollm2-draft.gguf"],
             "16m": ["-m", f"{root}/models/specd-target-q8_0.gguf",
                     "-md", f"{root}/models/specd-draft-q8_0.gguf"],
             # specd's default pair: Qwen2.5-Coder-1.5B-Instruct drafted by the 0.5B (FR-Spec).
             "qwen": []}
    prompts = code_prompts(128)
    os.makedirs(a.out, exist_ok=True)
    results = {}
    for pair in a.pairs.split(","):
        names = [f"{pair} plain", f"{pair} speculative"]
        runs = {name: {c: [] for c in levels} for name in names}
        # A server's draft-length policy learns as it runs, so runs of one server are not
        # independent: each restart is a fresh pair of servers.
        for _ in range(a.restarts):
            servers = {}
            try:
                for name, mode in zip(names, ["none", "draft"]):
                    trace = ["--trace-steps", a.trace_steps] if a.trace_steps and mode == "draft" else []
                    servers[name] = Server(a.specd, [*pairs[pair], "--spec-type", mode,
                                                     "--parallel", str(max(levels)), "-c", "1024",
                                                     "--max-queue", "256", *trace, *a.server_args])
                for c in levels:
                    for _ in range(a.reps):
                        for name, server in servers.items():
                            runs[name][c].append(
                                run_level(server.port, prompts, c, a.max_tokens, a.temperature))
            finally:
                for server in servers.values():
                    server.stop()
        for name in names:
            results[name] = []
            for c in levels:
                by_rate = sorted(runs[name][c], key=lambda r: r["throughput_tok_s"])
                results[name].append(by_rate[len(by_rate) // 2])
                print(name, json.dumps(results[name][-1]), flush=True)
    extra = f" (`{' '.join(a.server_args)}`)" if a.server_args else ""
    header = (f"`bench/serve_load.py`, {time.strftime('%Y-%m-%d')}, {cpu_name()}, 2 threads; "
              f"{'greedy' if a.temperature == 0 else f'temperature {a.temperature:g}'} code "
              f"completions of {a.max_tokens} tokens, streamed; speculative = the "
              f"pair's draft with the cost-aware length{extra}; plain and speculative servers "
              f"side by side, median of {a.reps} alternating run(s) per level x {a.restarts} "
              "fresh server pair(s)\n\n"
              "| pair | clients | plain tok/s | spec tok/s | ratio | TPOT p50 plain / spec ms | "
              "TPOT p99 plain / spec ms | TTFT p50 plain / spec ms |\n|---|---|---|---|---|---|---|---|")
    lines = [header]
    for pair in a.pairs.split(","):
        for p, s in zip(results[f"{pair} plain"], results[f"{pair} speculative"]):
            lines.append(
                f"| {pair} | {p['concurrency']} | {p['throughput_tok_s']:.0f} | "
                f"{s['throughput_tok_s']:.0f} | {s['throughput_tok_s'] / p['throughput_tok_s']:.2f}x | "
                f"{p['tpot_p50_ms']:.2f} / {s['tpot_p50_ms']:.2f} | "
                f"{p['tpot_p99_ms']:.2f} / {s['tpot_p99_ms']:.2f} | "
                f"{p['ttft_p50_ms']:.1f} / {s['ttft_p50_ms']:.1f} |")
    table = "\n".join(lines) + "\n"
    open(f"{a.out}/serve_load.md", "w").write(table)
    json.dump(results, open(f"{a.out}/serve_load.json", "w"), indent=1)
    svg_plot(results, f"{a.out}/serve_load.svg")
    print(table)


if __name__ == "__main__":
    main()
