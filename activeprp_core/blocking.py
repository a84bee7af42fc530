"""One body for sync and async: an async function whose awaits never suspend (``blocking`` calls) runs without an
event loop (``run_blocking``, ``iterate_blocking``), and an I/O-free exchange (a generator of requests) runs
against any async ``ask`` (``drive``). The engine's drivers and the comparators' chunk loop are written once this
way and run both ways."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Iterator
from typing import Any


async def drive(steps: Generator, ask: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run an I/O-free exchange: every request it yields goes to ``ask`` (awaited); the answer (or the exception
    ``ask`` raised) goes back in. Returns the exchange's value. With an ``ask`` that never suspends (see
    ``blocking``) it runs without an event loop through ``run_blocking``: one body for sync and async."""
    try:
        request = next(steps)
        while True:
            try:
                answer = await ask(request)
            except Exception as error:
                request = steps.throw(error)
            else:
                request = steps.send(answer)
    except StopIteration as stop:
        return stop.value


def blocking(call: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``call`` as an async function that never suspends (it runs ``call`` in place)."""
    async def run(*args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    return run


def run_blocking(coro: Coroutine) -> Any:
    """The value of a coroutine that never suspends (its awaits are all on ``blocking`` functions), run here
    without an event loop.

    Raises:
        RuntimeError: the coroutine suspended (it awaited real I/O).
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a blocking driver suspended: it awaited something other than a blocking call")


def iterate_blocking(agen: AsyncIterator) -> Iterator[Any]:
    """The items of an async generator that never suspends, iterated here without an event loop."""
    try:
        while True:
            yield run_blocking(agen.__anext__())
    except StopAsyncIteration:
        return
    finally:
        run_blocking(agen.aclose())
