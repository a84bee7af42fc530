"""The transport half of remote comparators: ``RemoteComparator`` owns retries (tenacity), the ``CallGuard``
bookkeeping, the sync thread pool, the async fan-out and the client lifetime (``clients``); a provider subclass
says what a pair's request, a reply and a failure (``failures``) mean. See docs/comparators-extending.md."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from ..budget import check_count, check_seconds  # noqa: F401 (check_seconds: importable here too)
from ..errors import ComparatorError, scrub
from ..types import Judgment, Pair
from .answers import Answer
from .base import CallGuard, Comparator, Item, gather_or_cancel
from .clients import LoopClients
from .failures import MAX_MESSAGE, Failure, Fault


def require(owner: str, extra: str, *modules: str) -> None:
    """Raise an ImportError naming ``extra`` when one of ``modules`` is not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"{owner} needs {', '.join(missing)}: install it with {extra}")


class _Abandoned(Exception):
    """Raised inside a sync worker whose batch already raised: no further attempt is made."""


class RemoteComparator(Comparator):
    """Base class of comparators that send one request per ordered pair to a remote model (an HTTP endpoint,
    or any Python callable such as a framework's chat model). A provider sets ``model`` and ``endpoint`` and
    implements ``request``, ``asend`` (``send`` for a sync path), ``parse`` and ``classify``, and the four
    client methods when it holds clients.

    Args (keyword, passed on by the provider's ``__init__``):
        max_concurrency: the default cap on requests in flight when the rerank sets none.
        max_attempts, backoff_initial, backoff_max, max_retry_after: up to ``max_attempts`` attempts on a
            ``Fault.RETRY``, exponential backoff with jitter (``backoff_initial`` x 2^k s plus up to
            ``backoff_initial``, at most ``backoff_max``), at least an asked Retry-After (capped at
            ``max_retry_after`` s). Retries are reported in ``Judgment.retries``, never billed.
        secrets: strings never shown in a message (replaced by ``***``).

    Raises:
        TypeError / ValueError: a count that is not an int >= 1, a time that is not a finite number >= 0.
    """

    model: str = ""
    """The model name (in messages; ``comparator_name``)."""
    endpoint: str = ""
    """Where requests go, for messages (never with credentials)."""

    def __init__(self, *, max_concurrency: int = 8, max_attempts: int = 3, backoff_initial: float = 0.5,
                 backoff_max: float = 8.0, max_retry_after: float = 60.0, secrets: Sequence[str] = ()) -> None:
        self.max_concurrency = check_count(max_concurrency, "max_concurrency", minimum=1)
        self.max_attempts = check_count(max_attempts, "max_attempts", minimum=1)
        self.backoff_initial = check_seconds(backoff_initial, "backoff_initial")
        self.backoff_max = check_seconds(backoff_max, "backoff_max")
        self.max_retry_after = check_seconds(max_retry_after, "max_retry_after")
        self._secrets = tuple(s for s in secrets if s)
        self._clients = LoopClients(self.open_client, self.open_async_client, self.close_client, self.aclose_client)

    @property
    def model_name(self) -> str:
        """The model name, for events and logs."""
        return self.model

    # ---- extension points ---------------------------------------------------------------------------
    def request(self, query: str, first: str, second: str) -> Any:
        """The request for one ordered pair (passage texts), handed to ``send``/``asend`` as is."""
        raise NotImplementedError

    async def asend(self, client: Any, request: Any) -> Any:
        """Send ``request`` once with the running loop's client; return the raw reply or raise."""
        raise NotImplementedError

    def send(self, client: Any, request: Any) -> Any:
        """Sync ``asend`` with the sync client. Default: ``asend`` in a fresh event loop (no client)."""
        return asyncio.run(self.asend(None, request))

    def parse(self, response: Any) -> Answer:
        """The ``Answer`` in a reply (see ``answers.answer_from``). Raises ``ValueError`` only: not usable."""
        raise NotImplementedError

    def classify(self, error: Exception) -> Failure | None:
        """What a failed attempt means; None = not a transport failure (a bug): it propagates as is."""
        return None

    def open_client(self) -> Any:
        """The sync client (made on first use, shared with ``with_prompts`` copies). Default: None."""

    def open_async_client(self) -> Any:
        """An async client for the running loop. Default: None (nothing to register or close)."""

    def close_client(self, client: Any) -> None:
        """Close a sync client."""

    async def aclose_client(self, client: Any) -> None:
        """Close an async client, inside its own loop."""

    # ---- one call -----------------------------------------------------------------------------------
    def _message(self, text: str) -> str:
        return scrub(text, self._secrets)[:MAX_MESSAGE]

    def _fault(self, error: BaseException) -> Failure | None:
        return None if isinstance(error, ComparatorError) or not isinstance(error, Exception) else self.classify(error)

    def _handled(self, error: Exception) -> bool:
        return isinstance(error, ComparatorError) or self._fault(error) is not None

    def _call(self, guard: CallGuard, item: Item, stop: threading.Event, abandoned: threading.Event) -> Judgment:
        """One call in a worker thread: no attempt once ``stop`` is set, no record once ``abandoned`` (raised)."""
        from tenacity import Retrying

        if stop.is_set():
            return Judgment(None, error="not sent: the batch already failed")
        guard.check()
        request, client, attempts = self.request(item[0], item[1].text, item[2].text), self._clients.sync(), 0

        def attempt() -> Any:
            nonlocal attempts
            if attempts:  # a retry: not once the batch or the rerank has stopped
                if stop.is_set():
                    raise _Abandoned
                guard.check()
            attempts += 1
            return self.send(client, request)

        retrying = _retrying(self, Retrying, sleep=stop.wait)  # a backoff wait ends when the batch stops
        try:
            outcome = _settle(self, guard, retrying, retrying(attempt), record=not abandoned.is_set())
        except _Abandoned:
            return Judgment(None, error="not retried: the batch already failed")
        except Exception as err:
            if not self._handled(err):
                raise
            outcome = _settle(self, guard, retrying, error=err, record=not abandoned.is_set())
        if isinstance(outcome, ComparatorError):
            raise outcome  # outside the except block: the client's error (and its body) is not chained
        return outcome

    async def _acall(self, client: Any, guard: CallGuard, item: Item) -> Judgment:
        from tenacity import AsyncRetrying

        request, attempts = self.request(item[0], item[1].text, item[2].text), 0

        async def attempt() -> Any:  # a plain coroutine function, so tenacity awaits it
            nonlocal attempts
            if attempts:  # a retry: not once the rerank has stopped
                guard.check()
            attempts += 1
            return await self.asend(client, request)

        retrying = _retrying(self, AsyncRetrying)
        async with guard.slots(1):
            guard.check()
            try:
                outcome = _settle(self, guard, retrying, await retrying(attempt))
            except asyncio.CancelledError:
                if attempts:  # it went out: it counts as spent, its outcome is unknown
                    guard.record(None)
                raise
            except Exception as err:
                if not self._handled(err):
                    raise
                outcome = _settle(self, guard, retrying, error=err)
        if isinstance(outcome, ComparatorError):
            raise outcome
        return outcome

    # ---- what the engine calls ----------------------------------------------------------------------
    def judge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ``(query, first, second)``, sent by up to ``guard.max_concurrency`` threads. When
        a call raises, queued calls are dropped and no retry starts; the batch raises at once when the guard is
        stopped (a 401, an open breaker), else once the calls in flight have answered.

        Raises:
            ComparatorError: a call raised (see ``failures``).
        """
        guard = guard or CallGuard(self.max_concurrency, None)
        return _in_threads(self._call, guard, items)

    async def ajudge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge_batch``: concurrent requests, at most ``guard.max_concurrency`` at a time; when one
        raises, the others are cancelled."""
        guard = guard or CallGuard(self.max_concurrency, None)
        client = await self._clients.for_running_loop()
        return await gather_or_cancel([self._acall(client, guard, item) for item in items])

    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ordered pair of ``query`` (see ``judge_batch``)."""
        return self.judge_batch([(query, a, b) for a, b in pairs], guard=guard)

    async def ajudge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge`` (see ``ajudge_batch``)."""
        return await self.ajudge_batch([(query, a, b) for a, b in pairs], guard=guard)

    def close(self) -> None:
        """Close the clients (shared with ``with_prompts`` copies), each async one on its own loop. A later
        call opens new ones."""
        self._clients.close()

    async def aclose(self) -> None:
        """Async ``close``: awaits the running loop's client."""
        await self._clients.aclose()


def _in_threads(call: Any, guard: CallGuard, items: Sequence[Item]) -> list[Judgment]:
    """``call(guard, item, stop, abandoned)`` per item in ``guard.max_concurrency`` threads (see ``judge_batch``)."""
    stop, abandoned = threading.Event(), threading.Event()
    workers = min(guard.max_concurrency or len(items), len(items))
    if workers <= 1:
        return [call(guard, item, stop, abandoned) for item in items]
    pool = ThreadPoolExecutor(workers, thread_name_prefix="activeprp-remote")
    futures = [pool.submit(call, guard, item, stop, abandoned) for item in items]
    try:
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f.done() and not f.cancelled() and f.exception()), None)
        if failed is not None:
            stop.set()
            for f in futures:
                f.cancel()  # the queued ones
            if guard.error is None:
                wait(futures)
            raise failed.exception()
        return [f.result() for f in futures]
    finally:
        abandoned.set()
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)


def _retrying(comp: RemoteComparator, kind: Any, **kw: Any) -> Any:
    """A tenacity ``Retrying``/``AsyncRetrying`` (``kind``) with ``comp``'s retry policy."""
    from tenacity import retry_if_exception, stop_after_attempt, wait_exponential_jitter

    backoff = wait_exponential_jitter(multiplier=comp.backoff_initial, max=comp.backoff_max,
                                      jitter=comp.backoff_initial)

    def wait_s(state: Any) -> float:
        failure = comp._fault(state.outcome.exception()) if state.outcome else None
        asked = failure.retry_after if failure is not None else None
        return backoff(state) if asked is None else max(backoff(state), min(asked, comp.max_retry_after))

    def transient(error: BaseException) -> bool:
        failure = comp._fault(error)
        return failure is not None and failure.fault is Fault.RETRY

    return kind(retry=retry_if_exception(transient), stop=stop_after_attempt(comp.max_attempts), wait=wait_s,
                reraise=True, **kw)


def _settle(comp: RemoteComparator, guard: CallGuard, retrying: Any, response: Any = None,
            error: Exception | None = None, record: bool = True) -> Judgment | ComparatorError:
    """The outcome of one call that reached the endpoint: a ``Judgment`` (answered or failed), or the
    ``ComparatorError`` to raise (recorded, and tripped when the endpoint refuses every call)."""
    retries = retrying.statistics.get("attempt_number", 1) - 1
    failure = None if error is None else comp._fault(error)
    if error is None:
        try:
            prob, prompt_tokens, completion_tokens = comp.parse(response)
            outcome = Judgment(prob, retries, prompt_tokens, completion_tokens)
        except ValueError as err:
            outcome = Judgment(prob=None, retries=retries, error=comp._message(f"unusable answer: {err}"))
        ok, reason = outcome.prob is not None, outcome.error
    elif isinstance(error, ComparatorError):  # the guard stopped the retries
        outcome, ok, reason = error, False, error.message
    elif failure is None or failure.fault in (Fault.RETRY, Fault.FAIL):
        ok, reason = False, comp._message(f"{type(error).__name__}: {failure.message if failure else error}")
        outcome = Judgment(prob=None, retries=retries, error=reason)
    else:
        outcome = failure.error(comp._message(f"{type(error).__name__} from {comp.endpoint} (model {comp.model!r}): "
                                              f"{failure.message}"), status_code=failure.status_code)
        if failure.fault is Fault.REFUSE:
            guard.trip(outcome)
        ok, reason = failure.fault is Fault.REJECT, outcome.message  # a REJECT (e.g. too long): the endpoint is up
    if record:
        guard.record(ok, reason)
    return outcome
