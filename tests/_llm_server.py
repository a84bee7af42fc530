"""Test helpers: a real OpenAI-compatible server (llama-cpp-python on the bundled GGUF) on loopback, and a
fault-injecting HTTP proxy to put in front of it."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

FAULTS = ("429", "500", "503", "timeout", "drop", "malformed", "nonjson", "garbage", "400", "401", "404")
Plan = Callable[[str, int], str]  # (request key, attempt index for that key) -> "ok" or a fault in FAULTS


MIXED = (("ok",), ("429", "ok"), ("500", "drop", "ok"), ("malformed",), ("500", "500", "500"), ("ok",),
         ("garbage",), ("503", "ok"))


def mixed_plan(key: str, attempt: int) -> str:
    """A ``Plan``: each call gets one of the ``MIXED`` fault sequences, chosen by its request hash (so the faults
    do not depend on the arrival order of concurrent calls); after the sequence ends its last answer repeats.
    With 3 attempts per call, sequences 3, 4 and 6 end in a failed call."""
    seq = MIXED[int(key, 16) % len(MIXED)]
    return seq[min(attempt, len(seq) - 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` on the bundled GGUF at 127.0.0.1:<free port>; ``url`` ends in /v1."""

    def __init__(self, gguf: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
               "--port", str(self.port), "--n_ctx", "2048"]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}: {log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + "/models", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("llama_cpp.server did not answer within 120 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class FaultProxy:
    """A loopback HTTP proxy that answers each request with ``plan(key, attempt)``: "ok" forwards it to the
    real upstream server; a fault kind is injected instead (see ``FAULTS``):
    429 (with Retry-After), 500/503, 400/401/404 (JSON error bodies), timeout (hangs ``hang_s`` then closes),
    drop (closes without answering), malformed (truncated JSON, JSON content type), nonjson (HTML page, 200),
    garbage (a well-formed completion whose answer is neither A nor B, without logprobs).

    ``key`` is a hash of the request body, so the faults a call meets do not depend on the order in which
    concurrent calls arrive. ``log[key]`` lists what each attempt got; ``times[key]`` when it arrived.
    """

    def __init__(self, upstream: str, plan: Plan, hang_s: float = 3.0, retry_after: str = "1") -> None:
        self.upstream, self.plan, self.hang_s, self.retry_after = urlsplit(upstream), plan, hang_s, retry_after
        self.log: dict[str, list[str]] = {}
        self.times: dict[str, list[float]] = {}
        self.inflight = self.max_inflight = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def injected(self) -> int:
        """Faults injected so far."""
        return sum(k != "ok" for seq in self.log.values() for k in seq)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _forward(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=300)
        try:
            conn.request(method, path, body or None, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json", **headers: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k.replace("_", "-"), v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(*proxy._forward("GET", self.path, b""))

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                key = hashlib.sha1(body).hexdigest()[:16]
                with proxy.lock:
                    seq = proxy.log.setdefault(key, [])
                    kind = proxy.plan(key, len(seq))
                    seq.append(kind)
                    proxy.times.setdefault(key, []).append(time.monotonic())
                    proxy.inflight += 1
                    proxy.max_inflight = max(proxy.max_inflight, proxy.inflight)
                try:
                    self._answer(kind, body)
                finally:
                    with proxy.lock:
                        proxy.inflight -= 1

            def _answer(self, kind: str, body: bytes) -> None:
                error = json.dumps({"error": {"message": f"injected {kind}", "type": "injected"}}).encode()
                if kind == "ok":
                    self._send(*proxy._forward("POST", self.path, body))
                elif kind == "429":
                    self._send(429, error, Retry_After=proxy.retry_after)
                elif kind in ("500", "503", "400", "401", "404"):
                    self._send(int(kind), error)
                elif kind in ("timeout", "drop"):
                    if kind == "timeout":
                        time.sleep(proxy.hang_s)
                    self.close_connection = True
                elif kind == "malformed":
                    self._send(200, b'{"id": "x", "choices": [{"message": {"content": "A"')
                elif kind == "nonjson":
                    self._send(200, b"<html>gateway error</html>", "text/html")
                elif kind == "garbage":
                    answer = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                              "choices": [{"index": 0, "finish_reason": "length", "logprobs": None,
                                           "message": {"role": "assistant", "content": "Maybe"}}]}
                    self._send(200, json.dumps(answer).encode())
                else:
                    raise ValueError(f"unknown fault {kind!r}")

        return Handler
