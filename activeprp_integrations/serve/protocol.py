"""``head_timeout_protocol``: uvicorn's h11 protocol with a deadline for each request's head; ``DrainingServer``:
uvicorn's server telling the rerank service when its graceful shutdown begins; ``bind_sockets`` and ``listen``: the
command's listening address, bound (the port reserved) before the judge is built, listening once it is.

uvicorn closes an idle keep-alive connection only after a response: a connection that never sends a request, or
sends its head a byte at a time, holds a file descriptor for as long as the client likes (1030 of them made a server
under ``ulimit -n 1024`` unreachable). Each connection here must send a request's head (its request line and
headers) within ``seconds`` of connecting or of its previous response, or it is closed (a pipelined request, its
head already here when the previous response is written, is not timed until its own response); the body's deadline
is the ``Gate``'s (``body_timeout``). A client that does not read its answer held it in memory for as long as it liked
(uvicorn's close waits for the answer to be sent): ``seconds`` after the answer was written, what is still unsent is
dropped and the connection aborted.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import struct
import sys
from typing import Any

import h11
from uvicorn import Config, Server
from uvicorn.protocols.http.h11_impl import H11Protocol

from .service import RerankService


class _HeadTimeoutH11(H11Protocol):
    head_timeout: float  # set by head_timeout_protocol (the command's --client-timeout)
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._expect_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)

    def _expect_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # a pipelined request: uvicorn's on_response_complete already started it, its head is here; the timer
            # starts again when its answer is written
            return
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_overdue, cycle)

    def _head_overdue(self, cycle: Any) -> None:
        """No new request's head arrived since the timer started (the cycle is the one it started with). An answer
        still unsent (the client does not read it) is dropped: ``close`` would wait for it to flush, for ever."""
        if self.cycle is not cycle:
            return
        if self.transport.get_write_buffer_size():
            # a reset, not a FIN after the kernel's share of the answer: that socket would outlive the connection
            # (FIN-WAIT-1, its send buffer full) for as long as the client keeps its window shut
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()  # also after uvicorn's keep-alive close, which is waiting for that flush
        elif not self.transport.is_closing():
            try:
                self.timeout_keep_alive_handler()  # uvicorn's own way of closing an idle connection
            except h11.LocalProtocolError:
                self.transport.close()


def head_timeout_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's ``H11Protocol`` closing a connection that has not sent a whole request head within ``seconds`` of
    connecting or of its previous response, and aborting it when that response is not sent whole by then (the
    client does not read it); pass it as ``uvicorn.Config(http=...)``."""
    return type("HeadTimeoutH11", (_HeadTimeoutH11,), {"head_timeout": seconds})


CANCELLED_GRACE = 1.0
"""Seconds ``DrainingServer.shutdown`` waits, at most, for the requests uvicorn cancelled to send their answers."""


def _not_none_cancelled(record: logging.LogRecord) -> bool:
    """False for uvicorn's ERROR that its graceful shutdown's timeout passed and it cancelled 0 tasks: with a timeout
    of 0 it logs that at every stop, nothing running (its wait times out before it looks)."""
    return not (str(record.msg).startswith("Cancel %s running task(s)") and record.args == (0,))


class DrainingServer(Server):
    """``uvicorn.Server`` that calls ``service.drain`` when its shutdown begins (Ctrl-C, SIGTERM, ``should_exit``),
    with the shutdown's deadline: now plus ``config.timeout_graceful_shutdown`` (uvicorn cancels the requests still
    running a little after it: it first waits 0.1 s, then that long for the connections to close). uvicorn tells an
    app only once the requests have finished (the lifespan's shutdown), too late to refuse those that would
    otherwise wait in the queue until they are cancelled."""

    def __init__(self, config: Config, service: RerankService) -> None:
        super().__init__(config)
        self.service = service

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if sockets and self.started:  # uvicorn says where it listens only when it bound the sockets itself
            host = self.config.host
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", f"[{host}]" if ":" in host else host,
                sockets[0].getsockname()[1])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        timeout = self.config.timeout_graceful_shutdown
        self.service.drain(None if timeout is None else asyncio.get_running_loop().time() + timeout)
        uvicorn_log = logging.getLogger("uvicorn.error")
        if timeout == 0:
            uvicorn_log.addFilter(_not_none_cancelled)
        try:
            await super().shutdown(sockets)
        finally:
            uvicorn_log.removeFilter(_not_none_cancelled)
        # the requests uvicorn cancelled at the deadline still have their 503 to send (``gate.Gate``), a few loop
        # turns; uvicorn then re-raises the signal, and where nothing handles SIGTERM (``activeprp serve`` does) its
        # default action ends the process at once
        cancelled = [task for task in self.server_state.tasks if not task.done()]
        if cancelled:
            await asyncio.wait(cancelled, timeout=CANCELLED_GRACE)


REUSE_ADDRESS = os.name == "posix" and sys.platform != "cygwin"
"""Whether uvicorn's sockets get ``SO_REUSEADDR`` (asyncio's ``create_server`` sets it there; on Windows it would let
another socket bind a port that one listens on)."""


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``host``:``port`` as uvicorn's ``loop.create_server(host=..., port=...)`` binds them (every
    address the host resolves to, an IPv6 socket IPv6 only, an address that is not available skipped while another
    binds), not yet listening: until ``listen`` a client is refused, as by no server. ``activeprp serve`` binds them
    before it builds the judge, so that a port another process listens on or a host that is not this machine's is
    found before a model loads.

    The port is reserved until then: each socket is bound without ``SO_REUSEADDR``, so no other socket can bind it
    (with the option on, another server that sets it too, uvicorn, nginx or a second ``activeprp serve``, could on
    Linux bind and listen there while the judge loads). Where that bind fails as the port is in use, the connections
    of a server stopped less than a minute ago may still linger there (TIME_WAIT): the socket is then bound with
    ``SO_REUSEADDR`` (``REUSE_ADDRESS``), as uvicorn binds, and that port is not reserved (``listen`` fails when
    another server took it meanwhile).

    Raises:
        OSError: the host does not resolve (``socket.gaierror``), or no address could be bound (the port taken,
            privileged, the address not this machine's); no socket is left open.
    """
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    unavailable: OSError | None = None
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                _bind(sock, address)
            except OSError as err:
                if err.errno != errno.EADDRNOTAVAIL:  # asyncio skips these too: IPv6 may be off (bpo-30945)
                    raise
                sockets.pop().close()
                unavailable = err
        if not sockets:
            raise unavailable or OSError(errno.EADDRNOTAVAIL, f"{host!r} resolves to no address")
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind(sock: socket.socket, address: Any) -> None:
    try:
        sock.bind(address)
    except OSError as err:
        if not (err.errno == errno.EADDRINUSE and REUSE_ADDRESS):
            raise
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a socket may bind again after a failed bind
        sock.bind(address)


def listen(sock: socket.socket, backlog: int) -> None:
    """Start listening on one of ``bind_sockets``' sockets (``DrainingServer.run(sockets)`` serves it), then turn
    ``SO_REUSEADDR`` on, as uvicorn's own sockets have it (``REUSE_ADDRESS``): the connections it accepts take the
    option from it, and without it those that linger after the server stops (TIME_WAIT, a minute on Linux) keep the
    next server from binding the port. Listening first, no other socket can bind the port in between.

    Raises:
        OSError: another server listens on the port (it took it while ``bind_sockets``' bind with ``SO_REUSEADDR``
            did not reserve it).
    """
    sock.listen(backlog)
    if REUSE_ADDRESS:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
