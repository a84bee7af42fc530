"""``Gate``: the ASGI middleware in front of the rerank routes of ``activeprp serve`` (the key, the body cap, the
client's disconnect, the metrics)."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable
from functools import partial
from typing import Any

from .routes import REQUEST_ID, error_body, internal_error, log_bug, request_id, response_id
from .service import ShuttingDown

CLIENT_GONE = 499
"""The status the metrics count for a request whose client went away before its answer (nginx's code)."""

SCAN_IN_THREAD_BYTES = 1 << 20
"""Bodies over this many bytes are scanned by ``json_values`` in a worker thread, off the event loop."""


def json_values(body: bytes, cap: int) -> int:
    """About how many values parsing ``body`` as JSON would make: its strings (keys included), plus, when there are
    at most ``cap`` of those, its commas, brackets and braces outside strings (an upper bound of the numbers,
    literals, arrays and objects). Memory and time of a parse grow with the values more than with the bytes
    (docs/serve.md, "Size caps"). Linear in the bytes, with bytes methods only (64 MB of escaped quotes: 0.6 s; a
    string pattern of ``re`` took 6 s there, and one that needed each string's closing quote was quadratic)."""
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped backslashes, then escaped quotes
    strings = (plain.count(b'"') + 1) // 2  # a string left open counts
    if strings > cap:
        return strings
    outside = b"".join(plain.split(b'"')[0::2])
    return strings + outside.count(b",") + 2 * (outside.count(b"[") + outside.count(b"{")) + 1


async def send_error(send: Any, status: int, message: str, kind: str, rid: str,
                     headers: Iterable[tuple[str, str]] = (), close: bool = False) -> None:
    """Send a whole JSON error response (``routes.error_body``, ``rid`` the request's id) through ASGI ``send``, as
    ``routes.error_response``; ``close``: with ``Connection: close``, for a refusal before the body was read whole
    (the server would otherwise go on reading and dropping whatever the client still sends on the connection)."""
    body = json.dumps(error_body(message, kind, rid)).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers),
            *([(b"connection", b"close")] if close else [])]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def route_path(scope: dict) -> str:
    """The path the app's routes match: ``path`` less the ``root_path`` it starts with (where the app is mounted,
    e.g. ``parent.mount("/rerank-service", app)``, or served under a proxy's prefix), as starlette's router reads
    it."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


class Gate:
    """ASGI middleware in front of every HTTP route. Each request gets its id when it arrives (``routes.request_id``:
    a ``response_id`` in its scope's ``state``; a client's own ``X-Request-ID`` is not taken), which its answer
    carries in ``X-Request-ID``, whatever answers it. A bug (any ``Exception`` out of a route, or of the steps below)
    is answered here with ``routes.internal_error``'s 500 (its traceback logged once, ``secrets`` scrubbed) and ends
    here (``answered``; after its response started, it is logged as the response the client got, cut or whole).
    For the routes in ``routes`` only (others pass through):

    1. the key: with ``keys``, a request without ``Authorization: Bearer <one of them>`` gets 401 (compared
       with ``hmac.compare_digest``, every key tried);
    2. the queue: when ``overloaded()`` returns an ``Overloaded`` (the service's queue is full), 429 with
       ``Retry-After`` before the body is read;
    3. the body: at most ``max_uploads`` bodies are read at once, and at most ``max_uploads_per_client`` (None:
       no such cap) from one peer address (one more gets 429 with ``Retry-After: 1``), each within ``body_timeout``
       seconds of its head (else 408); a body whose ``Content-Length`` or whose bytes read
       so far (chunked or not) pass ``max_body_bytes`` gets 413 at once; at most the cap is held in memory; a body
       read whole that holds more than ``max_body_values`` JSON values (``json_values``) gets 413 before it is
       parsed. Every refusal before the body was read whole closes the connection; so does the 503 ``unavailable``
       (``Retry-After: 1``) of a body still arriving when ``arrival_refused`` (the service's) returns the
       ``ShuttingDown`` of a shutdown whose deadline is about to pass: the read is cut then;
    4. the disconnect: once the body is read, a client that goes away cancels the handler (so its rerank sends
       no further call) and is counted with status 499;
    5. the server's cancel: a request the server cancels before its response started (uvicorn, when its graceful
       shutdown passes ``timeout_graceful_shutdown``) gets a 503 ``unavailable`` with ``Retry-After`` (the server
       sends it if the connection is still open) and ends there, counted as 503 (no traceback in the log);
    6. ``metrics``: requests by route and status, their latency and how many are in progress.
    """

    def __init__(self, app: Any, *, routes: Iterable[str], keys: Iterable[str], max_body_bytes: int,
                 max_body_values: int, metrics: Any, overloaded: Callable[[], Any], max_uploads: int,
                 body_timeout: float | None, max_uploads_per_client: int | None = None,
                 secrets: Collection[str] = (),
                 arrival_refused: Callable[[], Awaitable[ShuttingDown]] | None = None) -> None:
        self.app, self.routes, self.max_body_bytes, self.metrics = app, frozenset(routes), max_body_bytes, metrics
        self.arrival_refused = arrival_refused
        self.secrets = secrets
        self.max_body_values, self.max_uploads, self.body_timeout = max_body_values, max_uploads, body_timeout
        self.max_uploads_per_client = max_uploads_per_client
        self.keys, self.overloaded = [k.encode() for k in keys], overloaded
        self.uploads = 0
        self.client_uploads: Counter[str | None] = Counter()  # peer host -> its bodies being received

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = scope.setdefault("state", {})[REQUEST_ID] = response_id()
        said_id = (b"x-request-id", rid.encode())

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), said_id]}
            await send(message)

        route = route_path(scope)
        if route not in self.routes:
            return await self.answered(self.app, scope, receive, send_with_id)
        await self._counted(route, scope, receive, send_with_id)

    async def _counted(self, route: str, scope: dict, receive: Any, send: Any) -> None:
        """A rerank route's request, answered (``_serve``) and counted in the metrics."""
        started, status = time.perf_counter(), [CLIENT_GONE]

        async def send_counting(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        self.metrics.in_progress.inc()
        try:
            await self.answered(self._serve, scope, receive, send_counting)
        except asyncio.CancelledError:  # by the server (the client's leaving is handled in _run)
            if status[0] != CLIENT_GONE:  # its response has started: the server closes the connection
                raise
            await send_error(send_counting, 503, "the server stopped this request before its answer (its shutdown "
                             "passed --shutdown-timeout): retry, on another replica if there is one", "unavailable",
                             request_id(scope), [("retry-after", "1")], close=True)
        finally:
            self.metrics.in_progress.dec()
            self.metrics.requests.labels(route, str(status[0])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)

    async def answered(self, app: Any, scope: dict, receive: Any, send: Any) -> None:
        """Run ``app``; a bug it raises is answered with ``internal_error``'s 500 when no response has started, and
        not raised on: starlette's ServerErrorMiddleware re-raises a bug after its handler's answer, and the server
        would log its traceback a second time, unscrubbed. After a response started, the client has its status
        (a 200, say) and the server cuts the body: the bug is logged as that (``request <id> got status 200 and a
        cut body: ...``), not as a 500; after its body was sent whole (a background task's bug), as ``request <id>
        got status 200 and its whole body, then the app raised: ...``."""
        sent: list[int | None] = [None]  # the status of the response started, if one has
        whole = [False]  # whether its last body message (no more_body) was sent

        async def send_noting(message: dict) -> None:
            if message["type"] == "http.response.start" and sent[0] is None:
                sent[0] = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                whole[0] = True
            await send(message)

        try:
            await app(scope, receive, send_noting)
        except Exception as err:
            if sent[0] is None:
                await internal_error(err, request_id(scope), self.secrets)(scope, receive, send)  # logs it
            elif whole[0]:
                log_bug(err, request_id(scope), self.secrets,
                        f"got status {sent[0]} and its whole body, then the app raised")
            else:  # the server ends the unfinished response
                log_bug(err, request_id(scope), self.secrets, f"got status {sent[0]} and a cut body")

    def authorized(self, headers: list[tuple[bytes, bytes]]) -> bool:
        if not self.keys:
            return True
        given = next((v for k, v in headers if k.lower() == b"authorization"), b"")
        scheme, _, token = given.partition(b" ")
        ok = False
        for key in self.keys:  # every key compared: the time does not say which one nearly matched
            ok |= hmac.compare_digest(token.strip(), key)
        return ok and scheme.lower() == b"bearer"

    async def _serve(self, scope: dict, receive: Any, send: Any) -> None:
        headers, rid = scope["headers"], request_id(scope)
        if not self.authorized(headers):
            return await send_error(send, 401, "missing or wrong API key: send the header 'Authorization: Bearer "
                                    "<key>' with a key this server was started with", "unauthorized", rid,
                                    [("www-authenticate", "Bearer")], close=True)
        refusal = self.overloaded()
        if refusal is not None:
            return await send_error(send, 429, str(refusal), "overloaded", rid,
                                    [("retry-after", str(refusal.retry_after))], close=True)
        client = (scope.get("client") or (None,))[0]  # the peer: a proxy's own address behind one
        mine = self.client_uploads[client]
        if self.max_uploads_per_client is not None and mine >= self.max_uploads_per_client:
            return await send_error(send, 429, f"{mine} request bodies from your address are being received, this "
                                    "server's cap per client (--max-uploads-per-client): retry later", "overloaded",
                                    rid, [("retry-after", "1")], close=True)
        if self.uploads >= self.max_uploads:
            return await send_error(send, 429, f"{self.uploads} request bodies are being received, this server's cap "
                                    "(--max-active plus --max-queue): retry later", "overloaded", rid,
                                    [("retry-after", "1")], close=True)
        length = next((v for k, v in headers if k.lower() == b"content-length"), None)
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return await self._too_large(send, rid)
        self.uploads += 1
        self.client_uploads[client] += 1
        try:
            body = await self._read_in_time(receive)
        except asyncio.TimeoutError:
            return await send_error(send, 408, f"the request body did not arrive whole within {self.body_timeout:g} "
                                    "s (this server's --client-timeout): send it faster or make it smaller",
                                    "timeout", rid, close=True)
        except ShuttingDown as refusal:
            return await send_error(send, 503, str(refusal), "unavailable", rid, [("retry-after", "1")], close=True)
        finally:
            self.uploads -= 1
            self.client_uploads[client] -= 1
            if not self.client_uploads[client]:
                del self.client_uploads[client]
        if body is None:  # the client went away
            return
        if len(body) > self.max_body_bytes:
            return await self._too_large(send, rid)
        scan = partial(json_values, body, self.max_body_values)
        values = await asyncio.to_thread(scan) if len(body) > SCAN_IN_THREAD_BYTES else scan()
        if values > self.max_body_values:
            return await send_error(send, 413, f"request body holds more JSON values than this server's cap of "
                                    f"{self.max_body_values}: send fewer documents or fewer fields per document",
                                    "too_large", rid)
        await self._run(scope, body, receive, send)

    async def _read_in_time(self, receive: Any) -> bytes | None:
        """``_read`` within ``body_timeout`` (else ``asyncio.TimeoutError``), unless ``arrival_refused`` returns
        first: its ``ShuttingDown`` is raised (the read is cut)."""
        read = asyncio.ensure_future(self._read(receive))
        waits = {read} if self.arrival_refused is None else {read, asyncio.ensure_future(self.arrival_refused())}
        try:
            done, _ = await asyncio.wait(waits, timeout=self.body_timeout, return_when=asyncio.FIRST_COMPLETED)
            if read in done:
                return read.result()
            if done:
                raise done.pop().result()
            raise asyncio.TimeoutError
        finally:
            for task in waits:
                task.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _read(self, receive: Any) -> bytes | None:
        """The body (None: the client went away), or its first bytes as soon as they pass ``max_body_bytes``."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes or not message.get("more_body", False):
                return bytes(body)

    async def _too_large(self, send: Any, rid: str) -> None:
        await send_error(send, 413, f"request body over this server's cap of {self.max_body_bytes} bytes: send "
                                    "fewer or shorter documents", "too_large", rid, close=True)

    async def _run(self, scope: dict, body: bytes, receive: Any, send: Any) -> None:
        """Run the app on ``body``; cancel it when the client goes away before the response starts."""
        gone = asyncio.get_running_loop().create_future()
        replayed, responding = [False], [False]

        async def replay() -> dict:
            if not replayed[0]:
                replayed[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await asyncio.shield(gone)

        async def send_tracking(message: dict) -> None:
            responding[0] = True
            await send(message)

        async def watch() -> None:
            while True:  # after the body, the server's receive() returns only when the client has gone
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set_result(message)
                    return

        app = asyncio.ensure_future(self.app(scope, replay, send_tracking))
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({app, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not app.done() and not responding[0]:
                app.cancel()  # the client has gone: its rerank stops here
            await asyncio.wait({app})
            if not app.cancelled():
                app.result()  # the app's own error, if any, goes on to the server
        finally:
            for task in (app, watcher):
                task.cancel()
            await asyncio.gather(app, watcher, return_exceptions=True)
