"""The cap on the bytes of one HTTP reply, for the httpx clients a remote comparator builds itself: ``hooks(cap)`` /
``async_hooks(cap)`` are the ``event_hooks=`` of an ``httpx.Client`` / ``httpx.AsyncClient``.

A response hook (httpx's extension point: it runs once the headers are in, before the body is read, and may change
the response) refuses a reply whose ``Content-Length`` is over the cap, and wraps the body stream of any other
in one that counts the bytes read and raises ``ReplyTooLarge`` as soon as they pass the cap. httpx closes a
response whose hook or read raised, so the body is not read further, its connection is closed instead of going
back to the pool, and no more than ``cap`` bytes and one network read of it were held. The hooks leave the
client's own settings alone (pool, proxies from the environment, the openai SDK's defaults), where a custom
transport would replace them.

The bytes counted are those on the wire, and a compressed body (``Content-Encoding: gzip``) is decoded by httpx
afterwards, into up to ~1000 times more: so the clients ask for uncompressed replies (``client_options``), and a
reply that comes compressed all the same is refused like one over the cap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

UNCOMPRESSED = {"Accept-Encoding": "identity"}
"""The header the capped clients send: a compressed body is decoded after the bytes on the wire are counted, into
up to ~1000 times more (a 1 MiB gzip body of blanks is 1 GiB), so replies must come uncompressed."""


class ReplyTooLarge(Exception):
    """A reply's body passed the cap, or came compressed and so could: it was not read further (a failed call,
    not retried)."""

    def __init__(self, cap: int, announced: int | None = None, encoding: str | None = None) -> None:
        if encoding is not None:
            size = f"its body came {encoding}-compressed (asked for none), so it could expand past"
        else:
            size = "its body passed" if announced is None else f"its body of {announced} bytes is over"
        super().__init__(f"reply too large: {size} the cap of {cap} bytes (max_reply_bytes); not read further")


class _CappedStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """``stream``, raising ``ReplyTooLarge`` once more than ``cap`` bytes came through (sync or async, as
    ``stream`` is: httpx's own ``ByteStream`` is both too)."""

    def __init__(self, stream: Any, cap: int) -> None:
        self._stream, self._cap, self._seen = stream, cap, 0

    def _counted(self, chunk: bytes) -> bytes:
        self._seen += len(chunk)
        if self._seen > self._cap:
            raise ReplyTooLarge(self._cap)
        return chunk

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            yield self._counted(chunk)

    def close(self) -> None:
        self._stream.close()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield self._counted(chunk)

    async def aclose(self) -> None:
        await self._stream.aclose()


def _cap(response: httpx.Response, cap: int) -> None:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise ReplyTooLarge(cap, encoding=encoding)
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        raise ReplyTooLarge(cap, int(length))
    response.stream = _CappedStream(response.stream, cap)


def client_options(cap: int, async_: bool = False) -> dict[str, Any]:
    """The options of an ``httpx.Client`` (``async_``: ``httpx.AsyncClient``) whose replies are read up to ``cap``
    bytes: its ``event_hooks`` and the ``headers`` asking for uncompressed replies."""
    return {"event_hooks": async_hooks(cap) if async_ else hooks(cap), "headers": UNCOMPRESSED}


def hooks(cap: int) -> dict[str, list]:
    """``event_hooks=`` for an ``httpx.Client`` whose replies are read up to ``cap`` bytes."""
    return {"response": [lambda response: _cap(response, cap)]}


def async_hooks(cap: int) -> dict[str, list]:
    """``event_hooks=`` for an ``httpx.AsyncClient`` (its hooks are coroutine functions)."""
    async def hook(response: httpx.Response) -> None:
        _cap(response, cap)

    return {"response": [hook]}
