#!/usr/bin/env python3
"""The editor benchmark: an editing session replayed as llama.vscode / llama.vim send it.

A user types function bodies back into real Python files from a Debian package that no specd
draft saw in training (python3-pyflakes; the Qwen draft learnt from /usr/lib/python3.11), and at
each pause (a new line's indentation, and half-way through a line) the editor asks /infill for a
suggestion: the 256 lines above the cursor, the line and 64 lines below it, a ring of 64-line
chunks from the package's other files as `input_extra`, `n_predict` 128, `t_max_prompt_ms` 500,
`t_max_predict_ms` 1000, `cache_prompt`, the plugin's samplers (top-p 0.99, the infill sampler)
but top-k 1 and temperature 0, so that both engines decode greedily and their suggestions can be
compared (llama-server applies only the samplers a request lists: the plugin's own requests, with
no temperature among them, are sampled at temperature 1). Each suggestion goes to
`specd serve` and to llama.cpp's `llama-server` on the same GGUF, interleaved (the order
alternates), one slot each, the same context size.

    python3 bench/editor.py --peer-llama-server PATH [--model GGUF] [--spec-type draft+ngram]
        [--files checker.py,api.py] [--regions 2] [--lines 10] [--out bench/results/editor]

Reports per-suggestion latency p50 / p95 (and their ratio), tokens per suggestion, prompt tokens
actually computed (the rest came from the prompt cache), specd's acceptance, and how often the two
engines' suggestions are identical; where they differ, specd's top-2 log-probability gap at the
first differing token (below ~0.1 nats: a near tie of two engines' rounding).
"""
import argparse
import datetime
import http.client
import json
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from specd_server import LlamaServer, Server, cpu_description  # noqa: E402

PACKAGE = "/usr/lib/python3/dist-packages/pyflakes"
N_PREFIX_LINES, N_SUFFIX_LINES, RING_CHUNK_LINES, RING_CHUNKS = 256, 64, 64, 4
# The plugin's fields but top_k 1: llama-server applies only the samplers a request lists, and
# the plugin's list has no temperature, so its suggestions are sampled (at temperature 1); top-k
# 1 makes both engines decode greedily, whose suggestions can be compared.
PLUGIN_FIELDS = {"n_predict": 128, "top_k": 1, "top_p": 0.99, "stream": False,
                 "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True,
                 "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "temperature": 0.0}


def post(port, path, body, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {data[:300]!r}")
    return json.loads(data)


def ring_chunks(files, edited, rng):
    """llama.vim's ring buffer: 64-line chunks of the other files the user has open."""
    chunks = []
    for name in files:
        if name == edited:
            continue
        lines = open(os.path.join(PACKAGE, name)).read().split("\n")
        start = rng.randrange(max(1, len(lines) - RING_CHUNK_LINES))
        chunks.append({"text": "\n".join(lines[start:start + RING_CHUNK_LINES]) + "\n",
                       "time": len(chunks), "filename": name})
    return chunks[-RING_CHUNKS:]


def regions_of(lines, n_regions, n_lines):
    """n_regions function bodies spread through the file: (first body line, end line)."""
    defs = [i for i, l in enumerate(lines) if l.lstrip().startswith("def ")
            and i + 1 + n_lines <= len(lines)]
    picks = [defs[int(len(defs) * (k + 0.5) / n_regions)] for k in range(n_regions)] if defs else []
    return [(d + 1, d + 1 + n_lines) for d in picks]


def request_at(doc, row, col, chunks):
    """The /infill body the plugin sends with the cursor at (row, col) of doc (a list of lines)."""
    line = doc[row]
    line_prefix, line_suffix = line[:col], line[col:]
    prompt = "" if line_prefix.strip() == "" else line_prefix
    body = dict(PLUGIN_FIELDS)
    body.update({
        "input_prefix": "\n".join(doc[max(0, row - N_PREFIX_LINES):row]) + "\n",
        "input_suffix": line_suffix + "\n" + "\n".join(doc[row + 1:row + 1 + N_SUFFIX_LINES])
                        + "\n",
        "input_extra": chunks, "prompt": prompt})
    indent = len(line) - len(line.lstrip())
    if indent:
        body["n_indent"] = indent
    return body


def typing_session(files, n_regions, n_lines, seed):
    """The requests of the session, in order: [(file, line, body)]. The user deletes each region
    and types it back; pauses come after a line's indentation and half-way through the line."""
    rng = random.Random(seed)
    events = []
    for name in files:
        lines = open(os.path.join(PACKAGE, name)).read().split("\n")
        chunks = ring_chunks(files, name, rng)
        events.append((name, -1, dict(input_prefix="", input_suffix="", input_extra=chunks,
                                      prompt="", n_predict=0, samplers=[], cache_prompt=True,
                                      t_max_prompt_ms=500, t_max_predict_ms=1)))
        for first, end in regions_of(lines, n_regions, n_lines):
            for row in range(first, end):
                target = lines[row]
                if not target.strip():
                    continue
                indent = len(target) - len(target.lstrip())
                half = target.find(" ", indent + (len(target) - indent) // 2)
                for col in (indent, half if half > indent else None):
                    if col is None:
                        continue
                    doc = lines[:row] + [target[:col]] + lines[end:]
                    events.append((name, row, request_at(doc, row, col, chunks)))
    return events


def metric_values(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def top2_gap_at_difference(port, body, ours, theirs):
    """specd's top-2 log-probability gap (nats) where its suggestion first differs from the
    peer's; None when one is a prefix of the other."""
    at = 0
    while at < min(len(ours), len(theirs)) and ours[at] == theirs[at]:
        at += 1
    if at >= min(len(ours), len(theirs)):
        return None
    probs = post(port, "/infill", dict(body, n_probs=2))["completion_probabilities"]
    pos, k = 0, 0
    while k < len(probs) and pos + len(bytes(probs[k]["bytes"])) <= len(ours[:at].encode()):
        pos += len(bytes(probs[k]["bytes"]))
        k += 1

    def gap(i):
        if i < 0 or i >= len(probs):
            return float("inf")
        top = sorted((t["logprob"] for t in probs[i]["top_logprobs"]), reverse=True)
        return top[0] - top[1] if len(top) >= 2 else float("inf")
    return min(gap(k), gap(k - 1)) if at == pos else gap(k)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def replay(events, ports):
    """Each suggestion to every engine, the order alternating; returns one record per event."""
    records = []
    for i, (name, row, body) in enumerate(events):
        order = list(ports) if i % 2 == 0 else list(reversed(ports))
        record = {"file": name, "line": row, "warm_up": body["n_predict"] == 0}
        for engine in order:
            t = time.perf_counter()
            got = post(ports[engine], "/infill", body)
            timings = got.get("timings", {})
            record[engine] = {"ms": (time.perf_counter() - t) * 1000, "content": got["content"],
                              "prompt_n": timings.get("prompt_n"),
                              "predicted_n": timings.get("predicted_n"),
                              "prompt_ms": timings.get("prompt_ms"),
                              "predicted_ms": timings.get("predicted_ms"),
                              "tokens_cached": got.get("tokens_cached")}
        records.append(record)
        if i % 20 == 0:
            print(f"  {i + 1}/{len(events)} {name}:{row + 1} "
                  + " ".join(f"{e} {record[e]['ms']:.0f} ms" for e in ports), flush=True)
    return records


def summarize(records, engines):
    timed = [r for r in records if not r["warm_up"]]
    out = {}
    for e in engines:
        ms = [r[e]["ms"] for r in timed]
        out[e] = {"n": len(ms), "p50_ms": statistics.median(ms), "p95_ms": percentile(ms, 0.95),
                  "mean_ms": statistics.fmean(ms),
                  "tokens_per_suggestion": statistics.fmean(r[e]["predicted_n"] or 0
                                                            for r in timed),
                  "prompt_tokens_computed": statistics.fmean(r[e]["prompt_n"] or 0
                                                             for r in timed),
                  "prompt_ms": statistics.median(r[e]["prompt_ms"] or 0 for r in timed),
                  "ms_per_token": statistics.median(
                      r[e]["predicted_ms"] / r[e]["predicted_n"] for r in timed
                      if r[e]["predicted_n"])}
    return out


def compare(records, port, events):
    """Identical, prefix-consistent (one stopped earlier at its time limit), or differing (with
    specd's top-2 gap at the first difference)."""
    same = consistent = 0
    differing = []
    for r, (_, _, body) in zip(records, events):
        if r["warm_up"]:
            continue
        a, b = r["specd"]["content"], r["llama.cpp"]["content"]
        if a == b:
            same += 1
        elif a.startswith(b) or b.startswith(a):
            consistent += 1
        else:
            differing.append({"file": r["file"], "line": r["line"] + 1, "specd": a[:120],
                              "llama.cpp": b[:120],
                              "gap_nats": top2_gap_at_difference(port, body, a, b)})
    return same, consistent, differing


def consistent_with(a, b):
    return a.startswith(b) or b.startswith(a)


def cold_check(events, records, ports, n_requests):
    """n_requests suggestions sent again cold (cache_prompt off, no time limit, 64 tokens) to
    both engines: whether each engine's cold text agrees with what it suggested in the session
    (a prompt cache that changes nothing), and whether the two engines' cold texts agree."""
    timed = [i for i, r in enumerate(records) if not r["warm_up"]]
    picks = timed[::max(1, len(timed) // max(1, n_requests))][:n_requests]
    out = {"n": len(picks), "self_consistent": {e: 0 for e in ports}, "cold_identical": 0,
           "cold_consistent": 0, "cold_differing": []}
    for i in picks:
        body = dict(events[i][2], cache_prompt=False, t_max_predict_ms=0, n_predict=64)
        cold = {e: post(ports[e], "/infill", body)["content"] for e in ports}
        for e in ports:
            out["self_consistent"][e] += consistent_with(cold[e], records[i][e]["content"])
        a, b = cold["specd"], cold["llama.cpp"]
        out["cold_identical"] += a == b
        out["cold_consistent"] += a != b and consistent_with(a, b)
        if not consistent_with(a, b):
            out["cold_differing"].append({"request": i, "specd": a[:120], "llama.cpp": b[:120],
                                          "gap_nats": top2_gap_at_difference(ports["specd"], body,
                                                                             a, b)})
        print(f"  cold {i}: identical {a == b}", flush=True)
    return out


def cold_lines(cold):
    n = cold["n"]
    near = sum(1 for d in cold["cold_differing"]
               if d["gap_nats"] is not None and d["gap_nats"] < 0.1)
    return ["", f"Cold check ({n} of the suggestions sent again to both engines with the prompt "
            "cache off, no time limit, 64 tokens): " + ", ".join(
                f"{e}'s cold text agrees with its suggestion in the session in "
                f"{v} of {n}" for e, v in cold["self_consistent"].items())
            + f"; the two engines' cold texts are identical in {cold['cold_identical']} of {n} "
            f"(one a prefix of the other in {cold['cold_consistent']} more) and differ in "
            f"{len(cold['cold_differing'])}, {near} of them at a near tie (specd's top-2 gap < "
            "0.1 nats)."]


def write_report(path, meta, summary, same, consistent, differing, cold=None):
    s, p = summary["specd"], summary["llama.cpp"]
    n = s["n"]
    near = sum(1 for d in differing if d["gap_nats"] is not None and d["gap_nats"] < 0.1)
    lines = [f"# The editor benchmark ({meta['date']})", "",
             f"CPU: {meta['cpu']}. Model `{meta['model']}`; specd `serve --spec-type "
             f"{meta['spec_type']} {' '.join(meta['specd_args'])}`, llama.cpp `llama-server "
             f"{' '.join(meta['peer_args'])}` (from the llama-cpp-python 0.3.36 sdist), one slot "
             f"each, -c 4096, {meta['threads']} threads. {n} suggestions typing "
             f"{meta['regions']} x {meta['lines']} lines into each of {', '.join(meta['files'])} "
             f"(Debian's python3-pyflakes), requests interleaved.", "",
             "| engine | p50 ms | p95 ms | mean ms | tokens / suggestion | ms / generated token "
             "| prompt tokens computed (mean) | prompt ms (p50) |", "|---|---|---|---|---|---|---|---|"]
    for e, v in summary.items():
        lines.append(f"| {e} | {v['p50_ms']:.0f} | {v['p95_ms']:.0f} | {v['mean_ms']:.0f} | "
                     f"{v['tokens_per_suggestion']:.1f} | {v['ms_per_token']:.1f} | "
                     f"{v['prompt_tokens_computed']:.0f} | {v['prompt_ms']:.0f} |")
    lines += ["", f"specd / llama.cpp: p50 {s['p50_ms'] / p['p50_ms']:.2f}x, p95 "
              f"{s['p95_ms'] / p['p95_ms']:.2f}x (goals 0.6x and 0.7x). specd's acceptance: "
              f"{meta['accepted']:.0f} of {meta['drafted']:.0f} drafted tokens "
              f"({meta['accepted'] / max(1, meta['drafted']):.3f}).", "",
              f"Suggestions: {same} identical ({same / n:.1%}), {consistent} where one engine "
              f"stopped earlier at its time limit ({consistent / n:.1%}), {len(differing)} "
              f"differing, {near} of them at a near tie (specd's top-2 gap < 0.1 nats at the "
              "first differing token)."]
    if cold is not None:
        lines += cold_lines(cold)
    if "--cache-reuse" in meta["specd_args"] + meta["peer_args"]:
        lines += ["", "With --cache-reuse, moved cache entries were computed after text that has "
                  "since gone, in each engine after its own earlier suggestions: the engines then "
                  "decode from different states, so suggestions may differ beyond near ties, and "
                  "the gap above (the request sent again after the session) is not the state the "
                  "suggestion came from. The exact-cache run compares the engines."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def self_test():
    """The session's requests have the plugin's shape (no server needed)."""
    doc = [f"line {i}" for i in range(400)] + ["    x = compute(a, b)"]
    body = request_at(doc, 400, 4, [{"text": "t\n", "time": 0, "filename": "f.py"}])
    assert body["input_prefix"] == "\n".join(doc[144:400]) + "\n", "256 lines above the cursor"
    assert body["input_suffix"] == "x = compute(a, b)\n\n", "the rest of the line, then below"
    assert body["prompt"] == "" and body["n_indent"] == 4, "indentation alone is no prompt"
    body = request_at(doc, 400, 8, [])
    assert body["prompt"] == "    x = " and body["input_suffix"].startswith("compute(")
    assert body["top_k"] == 1 and body["samplers"] == ["top_k", "top_p", "infill"]
    events = typing_session(["api.py", "reporter.py"], 1, 4, 1)
    warm = [e for e in events if e[2]["n_predict"] == 0]
    assert len(warm) == 2 and events[0][2]["n_predict"] == 0, "a warm-up opens each file"
    assert all(e[2]["input_extra"] and e[2]["input_extra"][0]["filename"] != e[0] for e in events)
    assert len(events) > 2 * 4, "two pauses on most typed lines"
    print("editor.py self-test: ok")


def start_engines(args):
    specd = Server(args.specd, "-m", args.model, "--spec-type", args.spec_type, "--parallel", "1",
                   "-c", "4096", "-t", str(args.threads), *args.specd_args.split())
    peer = LlamaServer(args.peer_llama_server, args.model, args.threads, *args.peer_args.split())
    return specd, peer


def report_from_saved(args):
    """Rewrites editor.md from editor.json; with --cold-check, runs the cold check first."""
    path = os.path.join(args.out, "editor.json")
    with open(path) as f:
        saved = json.load(f)
    meta = saved["meta"]
    if args.cold_check:
        events = typing_session(meta["files"], meta["regions"], meta["lines"], args.seed)
        specd, peer = start_engines(args)
        try:
            saved["cold"] = cold_check(events, saved["records"],
                                       {"specd": specd.port, "llama.cpp": peer.port},
                                       args.cold_check)
        finally:
            specd.stop()
            peer.stop()
        with open(path, "w") as f:
            json.dump(saved, f, indent=1)
    write_report(os.path.join(args.out, "editor.md"), meta, saved["summary"], saved["identical"],
                 saved["prefix_consistent"], saved["differing"], saved.get("cold"))
    print(open(os.path.join(args.out, "editor.md")).read())


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    # The default pair's target where it is fetched (specd serve pairs the 0.5B as its draft), else
    # the 0.5B (with its shipped draft).
    pair = os.path.join(ROOT, "pretrained", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--model", default=pair if os.path.exists(pair) else os.path.join(
        ROOT, "pretrained", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--peer-llama-server", help="llama.cpp's llama-server binary (required "
                    "but with --self-test)")
    ap.add_argument("--self-test", action="store_true",
                    help="check the session's requests against the plugin's shape and exit")
    ap.add_argument("--peer-args", default="", help="more llama-server flags, e.g. "
                    "'--cache-reuse 256'")
    ap.add_argument("--specd-args", default="", help="more specd serve flags")
    ap.add_argument("--spec-type", default="draft+ngram")
    ap.add_argument("--files", default="checker.py,api.py,reporter.py,messages.py")
    ap.add_argument("--regions", type=int, default=2, help="function bodies typed per file")
    ap.add_argument("--lines", type=int, default=10, help="lines typed per function body")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "editor"))
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite editor.md from the editor.json in --out")
    ap.add_argument("--cold-check", type=int, default=0, metavar="N",
                    help="after the session (or, with --report-only, on the saved one), send N "
                    "suggestions again cold to both engines")
    return ap.parse_args()


def main():
    args = parse_args()
    if args.self_test:
        if not os.path.isdir(PACKAGE):
            print(f"SKIPPED: {PACKAGE} is missing (apt-get install python3-pyflakes)")
            sys.exit(77)
        return self_test()
    if not args.peer_llama_server:
        sys.exit("--peer-llama-server PATH is required (llama.cpp's llama-server binary)")
    if args.report_only:
        return report_from_saved(args)
    if not os.path.isdir(PACKAGE):
        sys.exit(f"{PACKAGE} is missing: apt-get install python3-pyflakes "
                 "(scripts/install-deps.sh installs it)")
    files = args.files.split(",")
    events = typing_session(files, args.regions, args.lines, args.seed)
    specd_args, peer_args = args.specd_args.split(), args.peer_args.split()
    specd, peer = start_engines(args)
    ports = {"specd": specd.port, "llama.cpp": peer.port}
    cold = None
    try:
        print(f"{len(events)} requests", flush=True)
        records = replay(events, ports)
        after = metric_values(specd.port)
        same, consistent, differing = compare(records, specd.port, events)
        if args.cold_check:
            cold = cold_check(events, records, ports, args.cold_check)
    finally:
        specd.stop()
        peer.stop()
    summary = summarize(records, ports)
    meta = {"date": datetime.date.today().isoformat(), "cpu": cpu_description(),
            "model": os.path.basename(args.model), "spec_type": args.spec_type,
            "specd_args": specd_args, "peer_args": peer_args, "threads": args.threads,
            "files": files, "regions": args.regions, "lines": args.lines,
            "drafted": after.get("specd:spec_decode_num_draft_tokens_total", 0),
            "accepted": after.get("specd:spec_decode_num_accepted_tokens_total", 0)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "editor.json"), "w") as f:
        json.dump({"meta": meta, "summary": summary, "identical": same,
                   "prefix_consistent": consistent, "differing": differing, "cold": cold,
                   "records": records}, f, indent=1)
    write_report(os.path.join(args.out, "editor.md"), meta, summary, same, consistent, differing,
                 cold)
    print(open(os.path.join(args.out, "editor.md")).read())


if __name__ == "__main__":
    main()
