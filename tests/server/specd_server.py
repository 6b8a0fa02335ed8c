"""A `specd serve --port 0` process for tests: started, its port read from its log, stopped."""
import http.client
import re
import subprocess
import threading
import time


def stop_process(proc, timeout_s=30):
    """SIGTERM, then SIGKILL if it has not exited within timeout_s; returns its exit code."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.returncode


class Server:
    """A `specd serve --port 0` process; its port is read from its log."""

    def __init__(self, specd, *args):
        self.proc = subprocess.Popen([specd, "serve", "--port", "0", *args],
                                     stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"ready on http://127\.0\.0\.1:(\d+) \(model id '([^']+)'\)", line)
            if m:
                self.port, self.model = int(m.group(1)), m.group(2)
                self.has_chat = not any("no chat template" in l for l in self.log)
                # Keep reading its log, or a full pipe would block the server.
                threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr],
                                 daemon=True).start()
                return
        self.stop()
        raise RuntimeError("server did not start: " + "".join(self.log))

    def raw(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, dict(resp.getheaders()), data

    def metrics(self):
        status, _, data = self.raw("GET", "/metrics")
        assert status == 200
        values = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def stop(self):
        """Stops it (SIGTERM) and returns its exit code: 0 unless something went wrong, such as
        a sanitizer report (its log is printed then)."""
        stop_process(self.proc)
        time.sleep(0.2)  # the log reader's last lines
        if self.proc.returncode != 0:
            print("".join(self.log[-60:]))
        return self.proc.returncode


class LlamaServer:
    """llama.cpp's `llama-server` on a free loopback port, one slot, for side-by-side runs."""

    def __init__(self, binary, model, threads, *args):
        import socket
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.proc = subprocess.Popen(
            [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "-t",
             str(threads), "-np", "1", "-c", "4096", *args], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{binary} did not start")

    def stop(self):
        return stop_process(self.proc)


def cpu_description():
    """'<model name> (<widest ISA>), <n> threads' from /proc/cpuinfo."""
    import os
    model, flags = "unknown CPU", ""
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = line
    isa = ("AMX" if "amx_int8" in flags else "AVX-512 VNNI" if "avx512_vnni" in flags else
           "AVX2" if "avx2" in flags else "portable")
    return f"{model} ({isa}), {os.cpu_count()} threads"
