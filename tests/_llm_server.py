"""Test helpers on loopback only: a real OpenAI-compatible server (``LlamaServer``, ``python -m llama_cpp.server``
of the ``llama-cpp-python[server]`` package on the bundled GGUF; benchmarks/server_throughput.py and
scripts/measure_comparators.py use it too), a fault-injecting HTTP proxy to put in front of it, and
``FaultServer``: a tiny OpenAI-compatible endpoint that answers canned bodies and status codes per a plan (no
model; starts in milliseconds)."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


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


class _Handler(BaseHTTPRequestHandler):
    """Hands each request to the ``LoopbackServer`` that owns the HTTP server."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: with Nagle, each reply waits ~40 ms

    def log_message(self, *args) -> None:  # quiet
        pass

    def send(self, status: int, body: bytes, ctype: str = "application/json", drip_s: float = 0.0,
             **headers: str) -> None:
        """Answer ``body`` at once, or with ``drip_s`` one byte every ``drip_s`` seconds after the headers."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        if not drip_s:
            self.wfile.write(body)
            return
        for i in range(len(body)):
            try:
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
            except OSError:  # the client gave up
                return
            time.sleep(drip_s)

    def send_chunks(self, status: int, chunks: Iterable[bytes], ctype: str = "application/json") -> int:
        """Answer ``chunks`` with chunked transfer encoding until they end or the client hangs up; returns the body
        bytes written (handed to the socket: some may still sit in its buffers when the client hangs up)."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        try:
            for chunk in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client gave up
            self.close_connection = True
        return sent

    def do_GET(self) -> None:
        self.server.owner.get(self)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        owner = self.server.owner
        tag = owner.tag_of(body)
        with owner.lock:
            owner.inflight[tag] = owner.inflight.get(tag, 0) + 1
            owner.peak[tag] = max(owner.peak.get(tag, 0), owner.inflight[tag])
            owner.max_inflight = max(owner.max_inflight, sum(owner.inflight.values()))
        try:
            owner.post(self, body)
        finally:
            with owner.lock:
                owner.inflight[tag] -= 1


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen backlog (default 5): past it, connects wait for a SYN retry (1 s), like faults

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up (a cancelled call) is fine
            super().handle_error(request, client_address)


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1:<free port> that counts requests in flight (overall and per ``tag``)
    and stops by itself after ``max_seconds``. ``url`` ends in /v1. Subclasses answer ``get``/``post``.

    Attributes:
        max_inflight: the most POST requests in flight at once; ``peak[tag]``: the same per tag, where
            ``tag_of(body)`` is the constructor's ``tag(body_bytes)`` (default: one tag, None).
    """

    def __init__(self, max_seconds: float | None = None, tag: Callable[[bytes], Any] | None = None) -> None:
        self.lock = threading.Lock()
        self.inflight: dict[Any, int] = {}
        self.peak: dict[Any, int] = {}
        self.max_inflight = 0
        self._tag = tag
        self.server = _QuietServer(("127.0.0.1", 0), _Handler)
        self.server.owner = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._closed = threading.Event()
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        if max_seconds is not None:
            timer = threading.Timer(max_seconds, self.close)
            timer.daemon = True
            timer.start()

    def tag_of(self, body: bytes) -> Any:
        return self._tag(body) if self._tag else None

    def get(self, handler: _Handler) -> None:
        handler.send(404, b'{"error": {"message": "not found"}}')

    def post(self, handler: _Handler, body: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop serving (idempotent; also called by the ``max_seconds`` timer)."""
        if not self._closed.is_set():
            self._closed.set()
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FaultProxy(LoopbackServer):
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
        super().__init__()

    def injected(self) -> int:
        """Faults injected so far."""
        return sum(k != "ok" for seq in self.log.values() for k in seq)

    def _forward(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=300)
        try:
            conn.request(method, path, body or None, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def get(self, handler: _Handler) -> None:
        handler.send(*self._forward("GET", handler.path, b""))

    def post(self, handler: _Handler, body: bytes) -> None:
        key = hashlib.sha1(body).hexdigest()[:16]
        with self.lock:
            seq = self.log.setdefault(key, [])
            kind = self.plan(key, len(seq))
            seq.append(kind)
            self.times.setdefault(key, []).append(time.monotonic())
        error = json.dumps({"error": {"message": f"injected {kind}", "type": "injected"}}).encode()
        if kind == "ok":
            handler.send(*self._forward("POST", handler.path, body))
        elif kind == "429":
            handler.send(429, error, Retry_After=self.retry_after)
        elif kind in ("500", "503", "400", "401", "404"):
            handler.send(int(kind), error)
        elif kind in ("timeout", "drop"):
            if kind == "timeout":
                time.sleep(self.hang_s)
            handler.close_connection = True
        elif kind == "malformed":
            handler.send(200, b'{"id": "x", "choices": [{"message": {"content": "A"')
        elif kind == "nonjson":
            handler.send(200, b"<html>gateway error</html>", "text/html")
        elif kind == "garbage":
            handler.send(200, json.dumps(completion("Maybe", None)).encode())
        else:
            raise ValueError(f"unknown fault {kind!r}")


def completion(content: Any = "A", top_logprobs: list[tuple[str, float]] | None = (("A", -0.1), ("B", -2.4)),
               prompt_tokens: int = 50) -> dict[str, Any]:
    """A chat-completion body answering ``content``, with ``top_logprobs`` [(token, logprob)] for the first
    token (None = no logprobs)."""
    logprobs = None
    if top_logprobs is not None:
        tops = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top_logprobs]
        logprobs = {"content": [{"token": str(content), "logprob": -0.1, "bytes": None, "top_logprobs": tops}]}
    return {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": "fault",
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
            "choices": [{"index": 0, "finish_reason": "length", "logprobs": logprobs,
                         "message": {"role": "assistant", "content": content}}]}


def responses_body(text: str = "A", input_tokens: int = 50) -> dict[str, Any]:
    """A body of OpenAI's Responses API (``/v1/responses``) answering ``text``, without logprobs."""
    content = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"id": "resp_1", "object": "response", "created_at": 0, "status": "completed", "model": "fault",
            "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                        "content": [content]}],
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": input_tokens, "output_tokens": 1, "total_tokens": input_tokens + 1,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}}


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def said_body(content: Any, finish_reason: str = "stop", **message: Any) -> dict[str, Any]:
    """A chat-completion body answering ``content`` with no logprobs, its choice's ``finish_reason`` and more
    fields of its message (``refusal=...``)."""
    body = completion(content, None)
    body["choices"][0]["finish_reason"] = finish_reason
    body["choices"][0]["message"].update(message)
    return body


SAID_BODIES = {  # a 200 body that is no answer, and what its failed call's reason must keep of what the server said
    "cut": (said_body("Passage", "length"),
            "unparseable answer 'Passage' (finish_reason 'length': max_tokens cut the answer)"),
    "filtered": (said_body(None, "content_filter"), "no A/B logprobs (finish_reason 'content_filter': the "
                                                    "endpoint's content filter stopped it)"),
    "refused": (said_body(None, refusal="I can't help with that."),
                "(the model refused: \"I can't help with that.\")"),
    "error": ({"error": {"message": "model overloaded", "type": "server_error"}},
              "no choices in the response (the endpoint said 'model overloaded')"),
    "empty": ({**completion(), "choices": []}, "no choices in the response ('ChatCompletion')"),
}
"""The ``OpenAIChatComparator``'s reasons; the framework judges (``llm=``) keep the same last parenthesis."""


@dataclass
class Reply:
    """What ``FaultServer`` answers to one request: ``status`` with ``body`` (a dict/list is sent as JSON, str or
    bytes as is) after ``delay_s`` seconds, one byte every ``drip_s`` seconds when set; ``drop`` closes the
    connection without answering; ``chunks``, when set, is sent instead of ``body``, chunked, until it ends or the
    client hangs up (an endless body: ``itertools.repeat(...)`` with a count, to bound it)."""

    status: int = 200
    body: Any = field(default_factory=completion)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drip_s: float = 0.0
    drop: bool = False
    content_type: str = "application/json"
    chunks: Iterable[bytes] | None = None


@dataclass
class Request:
    """One request as ``FaultServer``'s plan sees it: ``n`` (0-based arrival index), the parsed JSON ``body``
    (None when not JSON), the ``api_key`` from the Authorization header, the last message's ``text`` (of
    ``messages``, or of the Responses API's ``input``) and its ``headers`` (names in lower case)."""

    n: int
    body: Any
    api_key: str
    text: str
    headers: dict[str, str] = field(default_factory=dict)


class FaultServer(LoopbackServer):
    """A tiny OpenAI-compatible chat endpoint on 127.0.0.1 that answers ``plan(request) -> Reply``.

    It counts ``requests`` (POSTs seen), ``sent_bytes`` (the body bytes of ``Reply.chunks`` replies written) and
    the peak in flight (``max_inflight``, and ``peak[tag]`` per ``tag(request)``), and bounds itself: after
    ``max_requests`` requests it answers 503 without asking the plan, and it shuts down after ``max_seconds``. Use
    it as a context manager.
    """

    def __init__(self, plan: Callable[[Request], Reply], *, max_requests: int = 200, max_seconds: float = 60.0,
                 tag: Callable[[Request], Any] | None = None) -> None:
        self.plan, self.max_requests = plan, max_requests
        self.requests = self.sent_bytes = 0
        self.seen: list[Request] = []
        self._request_tag = tag
        super().__init__(max_seconds, tag=self._tag_body if tag else None)

    @staticmethod
    def _request(n: int, raw: bytes, auth: str) -> Request:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        messages = body.get("messages", body.get("input")) if isinstance(body, dict) else None  # chat, responses
        text = messages[-1].get("content", "") if isinstance(messages, list) and messages else messages or ""
        if isinstance(text, list):  # content parts ({"type": "input_text", "text": ...})
            text = "".join(part.get("text", "") for part in text if isinstance(part, dict))
        return Request(n, body, auth.removeprefix("Bearer "), text if isinstance(text, str) else "")

    def _tag_body(self, raw: bytes) -> Any:
        return self._request_tag(self._request(-1, raw, ""))

    def post(self, handler: _Handler, body: bytes) -> None:
        with self.lock:
            n = self.requests
            self.requests += 1
        request = self._request(n, body, handler.headers.get("Authorization", ""))
        request.headers = {k.lower(): v for k, v in handler.headers.items()}
        with self.lock:
            self.seen.append(request)
        reply = self.plan(request) if n < self.max_requests else Reply(503, error_body("fault server: request limit"))
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.drop:
            handler.close_connection = True
            return
        if reply.chunks is not None:
            sent = handler.send_chunks(reply.status, reply.chunks, reply.content_type)
            with self.lock:
                self.sent_bytes += sent
            return
        payload = reply.body
        if not isinstance(payload, (bytes, str)):
            payload = json.dumps(payload)
        handler.send(reply.status, payload.encode() if isinstance(payload, str) else payload, reply.content_type,
                     reply.drip_s, **reply.headers)


def closed_port_url() -> str:
    """A loopback URL on which nothing listens (connection refused)."""
    return f"http://127.0.0.1:{free_port()}/v1"


@contextlib.contextmanager
def bundled_server(log_dir):
    """A ``LlamaServer`` on the bundled GGUF for the ``with`` block, its log in ``log_dir``; stopped after."""
    from activeprp_core.comparators.hf import bundled_gguf_path

    srv = LlamaServer(bundled_gguf_path(), log_dir / "server.log")
    try:
        yield srv
    finally:
        srv.stop()


def demo_query(words: int, n: int, cut: bool = False):
    """The first demo query and its ``n`` best hits whose first ``words`` words differ (one request per pair), as
    ``Candidate`` objects (their text cut to ``words`` words when ``cut``)."""
    from activeprp_cli.demo import load_demo_queries
    from activeprp_core import Candidate

    row = load_demo_queries()[0]
    distinct = {" ".join(h["content"].split()[:words]): h for h in reversed(row["hits"])}
    hits = sorted(distinct.values(), key=lambda h: h["rank"])[:n]
    return row["query"], [Candidate(h["docid"], " ".join(h["content"].split()[:words]) if cut else h["content"])
                          for h in hits]
