#!/usr/bin/env python3
"""Soak test of `specd serve`: many clients for a while, good requests checked against their
answers on the idle server, bad requests checked for their 4xx, faults injected; then the server
must be back to idle (KV slots, threads, file descriptors) with bounded memory growth.

    python3 bench/soak.py [--specd build/release/specd] [--clients 64] [--seconds 600]
        [--out bench/results/soak/NAME] [serve flags after --, e.g. -- -m MODEL.gguf]

Loopback only; it stops by itself. Exit code 0 only when every good request got exactly its
expected output, every bad request its expected status, the server never died, and it went back
to idle. The report (JSON and Markdown) counts requests by kind and outcome, latency p50 / p99 by
kind, resident memory over time and the idle figures before and after.
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from specd_server import Server  # noqa: E402

PROMPTS = ["def fibonacci(n):", "import os\n\ndef list_files(path):", "class Stack:",
           "def is_prime(n):", "# Sort a list of numbers\n", "for i in range(10):"]


def good_requests(has_chat):
    """(kind, path, body) of the requests whose outputs are checked."""
    reqs = []
    for i, p in enumerate(PROMPTS):
        reqs.append(("greedy", "/v1/completions", {"prompt": p, "max_tokens": 24,
                                                   "temperature": 0}))
        reqs.append(("seeded-n2", "/v1/completions", {"prompt": p, "max_tokens": 16, "n": 2,
                                                      "temperature": 0.8, "seed": 100 + i}))
        reqs.append(("stream", "/v1/completions", {"prompt": p, "max_tokens": 20,
                                                   "temperature": 0, "stream": True}))
        reqs.append(("stop+logprobs", "/v1/completions", {
            "prompt": p, "max_tokens": 24, "temperature": 0, "stop": ["\n\n", "return"],
            "logprobs": 2}))
        reqs.append(("llama", "/completion", {"prompt": p, "n_predict": 16, "temperature": 0}))
        if has_chat:
            reqs.append(("chat", "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "Explain: " + p}], "max_tokens": 24,
                "temperature": 0}))
    return reqs


BAD_REQUESTS = [  # (kind, method, path, body bytes, headers, expected status)
    ("malformed", "POST", "/v1/completions", b"{not json", {}, 400),
    ("nested", "POST", "/v1/completions", b'{"prompt": ' + b"[" * 200000, {}, 400),
    ("wrong-type", "POST", "/v1/completions", b'{"prompt": "a", "max_tokens": "x"}', {}, 400),
    ("bad-utf8", "POST", "/v1/completions", b'{"prompt": "\xff\xfe"}', {}, 400),
    ("oversized", "POST", "/v1/completions", b"x" * (2 << 20), {}, 413),
    ("huge-prompt", "POST", "/v1/completions",
     json.dumps({"prompt": "word " * 20000, "max_tokens": 1}).encode(), {}, 400),
    ("unknown-route", "GET", "/v1/nothing", None, {}, 404),
    ("wrong-method", "GET", "/v1/completions", None, {}, 405),
    ("unknown-model", "POST", "/v1/completions", b'{"prompt": "a", "model": "gpt-9"}', {}, 404),
]


def request(port, method, path, body, headers=None, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, body=body, headers=dict({"Content-Type": "application/json"},
                                                       **(headers or {})))
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def answer_of(kind, status, data):
    """The comparable answer of a good request: its texts (and logprob counts)."""
    if status != 200:
        return None
    if kind == "stream":
        text = ""
        for line in data.decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for c in json.loads(line[6:])["choices"]:
                    text += c.get("text") or ""
        return text
    body = json.loads(data)
    if kind == "llama":
        return body["content"]
    texts = []
    for c in sorted(body["choices"], key=lambda c: c["index"]):
        t = c["message"]["content"] if "message" in c else c["text"]
        if kind == "stop+logprobs":
            t = (t, len(c["logprobs"]["tokens"]) == body["usage"]["completion_tokens"])
        texts.append(t)
    return texts


def fault(port, rng):
    """One injected fault; returns its name. None of them may hurt anyone else."""
    name = rng.choice(["disconnect-mid-stream", "slow-reader", "half-body", "idle-keepalive"])
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        if name == "disconnect-mid-stream":
            body = json.dumps({"prompt": rng.choice(PROMPTS), "max_tokens": 64, "stream": True,
                               "temperature": 0})
            s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                      f"\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
            s.recv(256)  # the first bytes of the stream, then gone
        elif name == "slow-reader":
            body = json.dumps({"prompt": rng.choice(PROMPTS), "max_tokens": 32, "stream": True,
                               "temperature": 0})
            s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                      f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode())
            while s.recv(64):
                time.sleep(0.05)
        elif name == "half-body":
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
                      b'{"prompt": "a"')
            time.sleep(0.5)
        else:  # an idle keep-alive connection, held for a while
            time.sleep(2.0)
    except OSError:
        pass
    finally:
        s.close()
    return name


def proc_figures(pid):
    """(resident MiB, threads, open file descriptors) of a process."""
    rss = 0.0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    return rss, len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


def fd_targets_of(pid):
    """What each open descriptor of a process points at (sockets, files)."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return sorted(targets)


def wait_for_idle(pid, idle_before, settle_s=15.0):
    """The process's figures once threads and descriptors are back to idle, or after settle_s.

    A connection the client just closed (the /metrics read itself, a keep-alive one) is closed
    by the server a moment later, and an abandoned one at its 10 s read timeout; a leak stays.
    """
    deadline = time.time() + settle_s
    while True:
        figures = proc_figures(pid)
        idle = figures[1] <= idle_before[1] and figures[2] <= idle_before[2]
        if idle or time.time() >= deadline:
            return figures, fd_targets_of(pid)
        time.sleep(0.5)


def metric(port, name):
    _, _, data = request(port, "GET", "/metrics", None)
    for line in data.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


class Soak:
    def __init__(self, server, args, expected, good):
        self.server, self.args, self.expected, self.good = server, args, expected, good
        self.lock = threading.Lock()
        self.outcomes = {}     # (kind, outcome) -> count
        self.latencies = {}    # kind -> [ms]
        self.mismatches = []
        self.deadline = time.time() + args.seconds

    def count(self, kind, outcome, ms=None):
        with self.lock:
            self.outcomes[(kind, outcome)] = self.outcomes.get((kind, outcome), 0) + 1
            if ms is not None:
                self.latencies.setdefault(kind, []).append(ms)

    def one(self, rng):
        port = self.server.port
        roll = rng.random()
        if roll < 0.70:
            i = rng.randrange(len(self.good))
            kind, path, body = self.good[i]
            t = time.time()
            status, headers, data = request(port, "POST", path, json.dumps(body))
            ms = (time.time() - t) * 1000
            if status == 503:
                ok = headers.get("Retry-After") is not None
                self.count(kind, "503 busy" if ok else "503 without Retry-After")
                if not ok:
                    self.mismatches.append(f"{kind}: 503 without Retry-After")
                return
            got = answer_of(kind, status, data)
            if got != self.expected[i]:
                self.mismatches.append(f"{kind} {json.dumps(body)[:80]}: got {str(got)[:120]!r}, "
                                       f"expected {str(self.expected[i])[:120]!r}")
                self.count(kind, "MISMATCH")
            else:
                self.count(kind, "ok", ms)
        elif roll < 0.90:
            kind, method, path, body, headers, want = rng.choice(BAD_REQUESTS)
            status, _, _ = request(port, method, path, body, headers)
            if status == want:
                self.count("bad:" + kind, f"{status} as expected")
            else:
                self.count("bad:" + kind, f"{status} (expected {want})")
                self.mismatches.append(f"bad {kind}: status {status}, expected {want}")
        else:
            self.count("fault:" + fault(port, rng), "done")

    def worker(self, index):
        rng = random.Random(index)
        while time.time() < self.deadline:
            try:
                self.one(rng)
            except (OSError, http.client.HTTPException) as e:
                self.count("transport", type(e).__name__)
                self.mismatches.append(f"transport error: {e!r}")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--max-queue", type=int, default=16)
    ap.add_argument("--out", default="")
    ap.add_argument("serve_args", nargs="*", help="more `specd serve` flags (after --)")
    return ap.parse_args()


def run_clients(soak, pid, args):
    """Runs the clients to the end; returns [(seconds, resident MiB)] sampled meanwhile."""
    threads = [threading.Thread(target=soak.worker, args=(i,)) for i in range(args.clients)]
    rss = []
    for t in threads:
        t.start()
    start = time.time()
    while any(t.is_alive() for t in threads):
        rss.append((round(time.time() - start, 1), round(proc_figures(pid)[0], 1)))
        time.sleep(min(5.0, max(0.5, args.seconds / 60)))
    for t in threads:
        t.join()
    return rss


def judge(report, soak, args, fd_targets):
    """The reasons the soak failed (none: it passed)."""
    failures = list(soak.mismatches[:5])
    before = (report["idle_before"]["threads"], report["idle_before"]["fds"])
    after = (report["idle_after"]["threads"], report["idle_after"]["fds"])
    if report["kv_slots_in_use_after"] != 0:
        failures.append(f"{report['kv_slots_in_use_after']} KV slots still in use")
    if after[0] > before[0] or after[1] > before[1]:
        failures.append(f"threads / fds {before} -> {after} (descriptors: {', '.join(fd_targets)})")
    if args.seconds >= 120 and report["rss_growth_after_minute_1"] > 0.10:
        failures.append(f"resident memory grew {report['rss_growth_after_minute_1']:.1%} after "
                        "minute 1")
    if report["server_exit_code"] != 0:
        failures.append(f"the server exited with {report['server_exit_code']}")
    return failures


def markdown(report, soak, args):
    lines = [f"# Soak: {args.clients} clients x {args.seconds:g} s", "",
             "| kind | outcome | count |", "|---|---|---|"]
    lines += [f"| {k} | {o} | {n} |" for (k, o), n in sorted(soak.outcomes.items())]
    lines += ["", "| kind | n | p50 ms | p99 ms |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['n']} | {v['p50']:.0f} | {v['p99']:.0f} |"
              for k, v in report["latency_ms"].items()]
    lines += ["", f"Idle before: {report['idle_before']}; after: {report['idle_after']}; KV slots "
              f"in use after: {report['kv_slots_in_use_after']}; resident memory growth after "
              f"minute 1: {report['rss_growth_after_minute_1']:.1%}.", "",
              "Failures: " + ("; ".join(report["failures"]) if report["failures"] else "none")]
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    server = Server(args.specd, "--parallel", str(args.parallel), "--max-queue",
                    str(args.max_queue), *args.serve_args)
    pid = server.proc.pid
    try:
        good = good_requests(server.has_chat)
        expected = [answer_of(k, *request(server.port, "POST", p, json.dumps(b))[::2])
                    for k, p, b in good]
        idle_before = proc_figures(pid)
        soak = Soak(server, args, expected, good)
        rss = run_clients(soak, pid, args)
        slots = metric(server.port, "specd:kv_slots_in_use")
        idle_after, fd_targets = wait_for_idle(pid, idle_before)
    finally:
        exit_code = server.stop()
    rss_minute = [m for t, m in rss if t >= 60] or [m for _, m in rss]
    growth = (rss[-1][1] / rss_minute[0] - 1) if rss and rss_minute else 0.0
    report = {
        "clients": args.clients, "seconds": args.seconds, "serve_args": args.serve_args,
        "outcomes": {f"{k} | {o}": n for (k, o), n in sorted(soak.outcomes.items())},
        "latency_ms": {k: {"n": len(v), "p50": statistics.median(v),
                           "p99": sorted(v)[int(0.99 * (len(v) - 1))]}
                       for k, v in sorted(soak.latencies.items())},
        "mismatches": soak.mismatches[:50], "n_mismatches": len(soak.mismatches),
        "rss_mib": rss, "rss_growth_after_minute_1": growth,
        "idle_before": dict(zip(("rss_mib", "threads", "fds"), idle_before)),
        "idle_after": dict(zip(("rss_mib", "threads", "fds"), idle_after)),
        "kv_slots_in_use_after": slots, "server_exit_code": exit_code}
    report["failures"] = judge(report, soak, args, fd_targets)
    text = markdown(report, soak, args)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "soak.json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(args.out, "soak.md"), "w") as f:
            f.write(text)
    return 1 if report["failures"] else 0

if __name__ == "__main__":
    sys.exit(main())
