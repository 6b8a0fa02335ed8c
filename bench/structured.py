#!/usr/bin/env python3
"""Structured output: validity, speed and acceptance of JSON-schema answers, with and without the
constraint and with and without speculation, side by side with llama-server's json_schema on the
same file.

    python3 bench/structured.py [--specd build/release/specd] [-m TARGET] [-md DRAFT]
        [--peer-llama-server PATH] [--temps 0,0.7] [--schemas N] [-n 768] [--out DIR]

Every request is a chat completion of one of bench/schemas.py's 55 schemas (the schema is in the
prompt too, so the free answers know what is asked), streamed, one at a time, the engines
interleaved per request. Engines: specd speculative (the default pair), specd plain
(--spec-type none), llama-server (repacking off on CPUs with AMX, see docs/performance.md);
modes: constrained (response_format json_schema, strict) and free. Measured per answer: valid
(parses, inside a Markdown code fence for a free answer, and validates against its schema, formats
checked), decode speed (completion tokens after
the first over the time from the first streamed token to the last), acceptance (specd's
/metrics counters around the request). Writes DIR/structured.json and DIR/structured.md."""
import argparse
import datetime
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

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from schemas import SCHEMAS  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SYSTEM = "You answer with one JSON object and nothing else."


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def has_amx():
    return "amx_tile" in open("/proc/cpuinfo").read()


class Process:
    """A server process whose log is read until `ready` matches (its port in group 1)."""

    def __init__(self, argv, ready, env=None):
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=env)
        deadline = time.time() + 300
        for line in self.proc.stderr:
            m = re.search(ready, line)
            if m:
                self.port = int(m.group(1))
                threading.Thread(target=lambda: [None for _ in self.proc.stderr],
                                 daemon=True).start()
                return
            if time.time() > deadline:
                break
        raise RuntimeError(f"{argv[0]} did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_llama_server(path, model, threads):
    port = free_port()
    argv = [path, "-m", model, "--port", str(port), "-t", str(threads), "-c", "4096",
            "--parallel", "1", "--jinja"]
    env = dict(os.environ)
    if has_amx():
        env["LLAMA_ARG_REPACK"] = "0"  # its AMX repacking crashes multi-row q4_K matmuls
    return Process(argv, r"listening on http://127\.0\.0\.1:(\d+)", env)


def metrics(port):
    """specd's drafted / accepted token counters."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    def counter(name):
        m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0
    return (counter("specd:spec_decode_num_draft_tokens_total"),
            counter("specd:spec_decode_num_accepted_tokens_total"))


def stream_chat(port, body):
    """Streams one chat completion; (text, completion tokens, decode tok/s, seconds in all)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = dict(body, stream=True, stream_options={"include_usage": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]}")
    text, tokens, t_first, t_last = "", 0, None, None
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        for choice in chunk.get("choices", []):
            piece = (choice.get("delta") or {}).get("content") or ""
            if piece:
                now = time.perf_counter()
                t_first = t_first or now
                t_last = now
                text += piece
    total = time.perf_counter() - t0
    decode_s = (t_last - t_first) if t_first and t_last and t_last > t_first else None
    tps = (tokens - 1) / decode_s if decode_s and tokens > 1 else None
    return text, tokens, tps, total


def validity(text, schema):
    """Whether the answer is JSON that follows the schema; a free answer may wrap it in a
    Markdown code fence (as a user would read it)."""
    fenced = re.fullmatch(r"\s*```(?:json)?\s*\n(.*?)\n?```\s*", text, re.S)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return False, "not JSON"
    try:
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    except jsonschema.ValidationError as e:
        return False, e.message[:120]
    return True, ""


def request_body(name, prompt, schema, constrained, temperature, n_predict, seed):
    body = {"temperature": temperature, "top_p": 0.95 if temperature else 1.0,
            "max_tokens": n_predict, "seed": seed,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user",
                          "content": f"{prompt}\nFollow this JSON schema: {json.dumps(schema)}"}]}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": name, "schema": schema,
                                                   "strict": True}}
    return body


def run(args, engines):
    records = []
    temps = [float(t) for t in args.temps.split(",")]
    for temperature in temps:
        for index, (name, prompt, schema) in enumerate(SCHEMAS[:args.schemas]):
            order = engines[index % len(engines):] + engines[:index % len(engines)]
            for engine, port, speculative in order:
                for constrained in (True, False):
                    body = request_body(name, prompt, schema, constrained, temperature,
                                        args.n_predict, 1000 + index)
                    before = metrics(port) if speculative else None
                    text, tokens, tps, total = stream_chat(port, body)
                    after = metrics(port) if speculative else None
                    ok, why = validity(text, schema)
                    record = {"engine": engine, "schema": name, "constrained": constrained,
                              "temperature": temperature, "valid": ok, "invalid_because": why,
                              "tokens": tokens, "decode_tps": tps, "seconds": total}
                    if before:
                        record["drafted"] = after[0] - before[0]
                        record["accepted"] = after[1] - before[1]
                    records.append(record)
                    print(f"{engine:18} t={temperature} {name:18} "
                          f"{'json_schema' if constrained else 'free':11} valid={ok!s:5} "
                          f"{tokens:4} tok {tps or 0:6.1f} tok/s {why}", flush=True)
    return records


def summarize(records):
    rows = []
    keys = sorted({(r["engine"], r["constrained"], r["temperature"]) for r in records},
                  key=lambda k: (k[2], k[0], not k[1]))
    for engine, constrained, temperature in keys:
        rs = [r for r in records if (r["engine"], r["constrained"], r["temperature"]) ==
              (engine, constrained, temperature)]
        tps = [r["decode_tps"] for r in rs if r["decode_tps"]]
        drafted = sum(r.get("drafted", 0) for r in rs)
        accepted = sum(r.get("accepted", 0) for r in rs)
        rows.append({"engine": engine, "constrained": constrained, "temperature": temperature,
                     "n": len(rs), "valid": sum(r["valid"] for r in rs),
                     "median_decode_tps": statistics.median(tps) if tps else None,
                     "acceptance": accepted / drafted if drafted else None,
                     "mean_tokens": statistics.mean(r["tokens"] for r in rs)})
    return rows


def ratio_of_medians(records, a, b, temperature, constrained_a=True, constrained_b=True):
    """Median over schemas of engine a's decode speed over engine b's (the same schema)."""
    by = {}
    for r in records:
        if r["temperature"] == temperature and r["decode_tps"]:
            by[(r["engine"], r["constrained"], r["schema"])] = r["decode_tps"]
    ratios = [by[(a, constrained_a, s)] / by[(b, constrained_b, s)]
              for (e, c, s) in by if e == a and c == constrained_a and (b, constrained_b, s) in by]
    return statistics.median(ratios) if ratios else None


def write_markdown(path, meta, rows, records):
    lines = [f"# Structured output benchmark ({meta['date']})", "",
             f"CPU: {meta['cpu']}, 2 threads. Target {os.path.basename(meta['model'])}, draft "
             f"{os.path.basename(meta['draft'])}; {meta['n_schemas']} schemas of bench/schemas.py, "
             f"{meta['n_predict']} tokens at most, streamed one request at a time, engines "
             f"interleaved. `python3 bench/structured.py {meta['argv']}`.", "",
             "| engine | output | t | answers | valid | decode tok/s (median) | acceptance | "
             "mean tokens |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        acceptance = "" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        lines.append(
            f"| {r['engine']} | {'json_schema' if r['constrained'] else 'free'} | "
            f"{r['temperature']:g} | {r['n']} | {r['valid']}/{r['n']} | "
            f"{r['median_decode_tps'] or 0:.1f} | {acceptance} | {r['mean_tokens']:.0f} |")
    lines += ["", "Ratios (median over schemas of per-schema decode speeds):", ""]
    for t in sorted({r["temperature"] for r in records}):
        pairs = [("specd speculative", "specd plain", True, True,
                  "speculative over plain, under the schema"),
                 ("specd speculative", "specd plain", False, False,
                  "speculative over plain, free"),
                 ("specd plain", "specd plain", True, False,
                  "plain under the schema over plain free (the mask's cost)"),
                 ("specd speculative", "llama-server", True, True,
                  "specd speculative over llama-server, both under the schema"),
                 ("specd plain", "llama-server", True, True,
                  "specd plain over llama-server, both under the schema")]
        for a, b, ca, cb, what in pairs:
            value = ratio_of_medians(records, a, b, t, ca, cb)
            if value is not None:
                lines.append(f"- t = {t:g}: {what}: **{value:.2f}x**")
    open(path, "w").write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specd", default=os.path.join(ROOT, "build/release/specd"))
    ap.add_argument("-m", default=os.path.join(ROOT, "pretrained",
                                               "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("-md", default=os.path.join(ROOT, "pretrained",
                                                "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--peer-llama-server", default="")
    ap.add_argument("--temps", default="0")
    ap.add_argument("--schemas", type=int, default=len(SCHEMAS))
    ap.add_argument("-n", "--n-predict", type=int, default=768)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/structured"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ready = r"ready on http://127\.0\.0\.1:(\d+)"
    common = ["serve", "--port", "0", "--parallel", "1", "-t", str(args.threads), "-m", args.m]
    servers = [("specd speculative", Process([args.specd, *common, "-md", args.md], ready), True),
               ("specd plain", Process([args.specd, *common, "--spec-type", "none"], ready), False)]
    if args.peer_llama_server:
        servers.append(("llama-server", start_llama_server(args.peer_llama_server, args.m,
                                                           args.threads), False))
    try:
        records = run(args, [(name, p.port, spec) for name, p, spec in servers])
    finally:
        for _, p, _ in servers:
            p.stop()
    meta = {"date": datetime.date.today().isoformat(), "cpu": cpu_name(), "model": args.m,
            "draft": args.md, "n_schemas": args.schemas, "n_predict": args.n_predict,
            "argv": " ".join(sys.argv[1:])}
    rows = summarize(records)
    json.dump({"meta": meta, "summary": rows, "records": records},
              open(os.path.join(args.out, "structured.json"), "w"), indent=1)
    write_markdown(os.path.join(args.out, "structured.md"), meta, rows, records)
    print(open(os.path.join(args.out, "structured.md")).read())


if __name__ == "__main__":
    main()
