"""The client lifetime of remote comparators: ``LoopClients``, one per ``RemoteComparator`` (see its docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .base import in_daemon_workers


class ComparatorClosed(RuntimeError):
    """A remote comparator was closed (``close()``, ``aclose()``, the end of ``with`` / ``async with``) while a call
    of a rerank was in flight on one of its clients, which the close ended. A lifetime mistake of the caller's (as
    httpx's "the client has been closed"), not a failure of the endpoint: the call is neither retried nor counted by
    the circuit breaker, and the rerank raises this (with ``accounting``; ``on_failure="prior"`` does not degrade
    it). Calls that start after the close open new clients."""


@dataclass
class _LoopClient:
    loop: weakref.ref  # the event loop the client belongs to
    client: Any
    closer: Any  # the async generator that closes the client when its loop shuts down
    dead: bool = False  # set when the loop closed without shutting down its async generators


class _CloseTask(asyncio.Task):
    """Closes one async client on its running loop, and ignores cancellation: ``asyncio.run`` cancels every task
    once its main coroutine returns, and a close cut there leaves the client's sockets to the GC (a
    ``ResourceWarning`` each). The loop's shutdown waits for the close instead, as it waits for the closers it
    finalises itself."""

    def cancel(self, msg: Any = None) -> bool:
        return False


def _finish_dead(entry: _LoopClient) -> None:
    """Close the generator of a loop that closed without finalising it, scheduling nothing on that loop."""
    entry.dead = True
    closing = entry.closer.aclose()
    with contextlib.suppress(StopIteration):
        closing.send(None)


class LoopClients:
    """The clients of one remote comparator and its ``with_prompts`` copies: one sync client made on first use,
    one async client per live event loop, closed inside that loop when it shuts down (``asyncio.run``,
    ``asyncio.Runner``) or by ``close``; made again after ``close``. A factory returning None means "no client"
    (e.g. a framework model that manages its own connections): nothing is registered or closed.

    Args:
        open_sync / open_async: make the sync client / the async client of the running loop.
        close_sync / aclose_async: close a sync client / await closing an async client (inside its loop).
    """

    def __init__(self, open_sync: Callable[[], Any], open_async: Callable[[], Any],
                 close_sync: Callable[[Any], None], aclose_async: Callable[[Any], Awaitable[None]]) -> None:
        self._open_sync, self._open_async = open_sync, open_async
        self._close_sync, self._aclose_async = close_sync, aclose_async
        self._lock = threading.RLock()  # re-entered when a dead loop's closer is finished under it
        self._sync: Any = None
        self._loops: dict[int, _LoopClient] = {}
        self._tasks: set = set()

    def sync(self) -> Any:
        """The sync client (made on first use)."""
        with self._lock:
            if self._sync is None:
                self._sync = self._open_sync()
            return self._sync

    async def for_running_loop(self) -> Any:
        """The async client of the running loop (made, and registered for closing, on first use)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._forget_dead_loops()
            entry = self._loops.get(id(loop))
            if entry is not None and entry.loop() is loop:
                return entry.client
            client = self._open_async()
            if client is None:
                return None
            entry = _LoopClient(weakref.ref(loop), client, None)
            entry.closer = self._close_at_loop_end(entry)
            self._loops[id(loop)] = entry
        await entry.closer.__anext__()  # started inside the loop, so the loop finalises it at shutdown
        return entry.client

    async def _close_at_loop_end(self, entry: _LoopClient):
        """Finalised by its loop at shutdown (``loop.shutdown_asyncgens``): closes the client inside that loop."""
        try:
            yield
        finally:
            with self._lock:
                if self._loops.get(id(entry.loop())) is entry:
                    del self._loops[id(entry.loop())]
            if not entry.dead:
                await self._aclose_async(entry.client)

    def current(self, client: Any) -> bool:
        """Whether ``client`` (as ``sync`` or ``for_running_loop`` gave it) is still one of these clients: False once
        ``close`` / ``aclose`` (or its loop's shutdown) ended it. None (no client) always is."""
        with self._lock:
            return client is None or client is self._sync or any(e.client is client for e in self._loops.values())

    def live_async_clients(self) -> int:
        """How many async clients are held for loops that are still open (for tests and diagnostics)."""
        with self._lock:
            self._forget_dead_loops()
            return len(self._loops)

    def _forget_dead_loops(self) -> None:
        for key, entry in list(self._loops.items()):
            loop = entry.loop()
            if loop is None or loop.is_closed():
                del self._loops[key]
                _finish_dead(entry)

    def close(self) -> None:
        """Close the sync client, and the async client of every loop: on its own loop when that loop is running (a
        task started there and not waited for, which the loop's shutdown waits for, ``_CloseTask``; its failure
        goes to the loop's exception handler) or idle (run here, or on a helper thread when this thread runs
        another loop, which ``run_until_complete`` refuses); clients of closed loops are dropped. Every client is
        tried: a failure to close one is raised once the others were closed (the first failure, when several
        fail)."""
        with self._lock:
            sync, self._sync = self._sync, None
            entries, self._loops = list(self._loops.values()), {}
        errors: list[Exception] = []
        if sync is not None:
            try:
                self._close_sync(sync)
            except Exception as error:
                errors.append(error)
        for entry in entries:
            try:
                self._close_on_its_loop(entry)
            except Exception as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def _close_on_its_loop(self, entry: _LoopClient) -> None:
        loop = entry.loop()
        if loop is None or loop.is_closed():
            _finish_dead(entry)
        elif loop.is_running():
            if asyncio._get_running_loop() is loop:
                self._start_closing(entry, loop)
            else:
                loop.call_soon_threadsafe(self._start_closing, entry, loop)
        elif asyncio._get_running_loop() is None:
            loop.run_until_complete(entry.closer.aclose())
        else:
            (closed,) = in_daemon_workers([lambda: loop.run_until_complete(entry.closer.aclose())], 1)
            closed.result()

    def _start_closing(self, entry: _LoopClient, loop: asyncio.AbstractEventLoop) -> None:
        """Close ``entry``'s client on its running loop, on that loop's thread, without waiting."""
        task = _CloseTask(entry.closer.aclose(), loop=loop)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """``close``, awaiting the running loop's own client (the others are closed also when that fails)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._loops.pop(id(loop), None)
        try:
            if mine is not None and mine.loop() is loop:
                await mine.closer.aclose()
        finally:
            self.close()
