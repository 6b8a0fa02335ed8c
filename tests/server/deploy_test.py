"""docs/deploy.md, tested: two `specd serve` replicas behind nginx on loopback.

Usage: deploy_test.py SPECD_BINARY NGINX_CONF_TEMPLATE. Exits 77 (skipped) without nginx.
"""
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from specd_server import Server


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, stream=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def main():
    specd, template = sys.argv[1], sys.argv[2]
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if nginx is None:
        print("SKIPPED: nginx is not installed")
        return 77
    replicas = [Server(specd, "--parallel", "2"), Server(specd, "--parallel", "2")]
    prefix = tempfile.mkdtemp(prefix="specd-nginx-")
    port = free_port()
    upstreams = "\n".join(f"    server 127.0.0.1:{r.port} max_fails=1 fail_timeout=10s;"
                          for r in replicas)
    conf = open(template).read().replace("{{PREFIX}}", prefix).replace(
        "{{PORT}}", str(port)).replace("{{UPSTREAMS}}", upstreams)
    open(f"{prefix}/nginx.conf", "w").write(conf)
    proc = subprocess.Popen([nginx, "-p", prefix, "-c", f"{prefix}/nginx.conf", "-g",
                             "daemon off;"], stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200, "health through nginx"
        conn.close()
        # Greedy completions through the balancer equal those of a replica asked directly.
        body = {"prompt": "def fibonacci(n):", "max_tokens": 12, "temperature": 0}
        direct = json.loads(replicas[0].raw("POST", "/v1/completions", json.dumps(body))[2])
        for _ in range(8):
            status, data = post(port, body)
            assert status == 200, data
            assert json.loads(data)["choices"][0]["text"] == direct["choices"][0]["text"]
        served = [r.metrics().get('specd:request_success_total{status="200"}', 0) for r in replicas]
        print("requests served by each replica:", served)
        assert all(n >= 2 for n in served), f"both replicas should take requests: {served}"
        # Streaming passes through unbuffered.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}))
        resp = conn.getresponse()
        lines = [l for l in resp.read().decode().splitlines() if l.startswith("data: ")]
        assert lines[-1] == "data: [DONE]", lines[-3:]
        conn.close()
        # One replica down: requests still succeed on the other.
        replicas[1].stop()
        for _ in range(4):
            status, data = post(port, body)
            assert status == 200, data
        print("deploy test: ok")
        return 0
    finally:
        proc.terminate()
        proc.wait()
        for r in replicas:
            if r.proc.poll() is None:
                r.stop()
        shutil.rmtree(prefix, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
