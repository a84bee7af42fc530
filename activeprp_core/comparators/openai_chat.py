"""A pairwise judge on any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp server ...).

``openai`` and ``tenacity`` are imported when a comparator is built; a missing one raises ``ImportError``
naming the ``activeprp[openai]`` extra.

What each failure becomes (see ``activeprp_core.errors``)::

    answer                                   retried?  outcome
    401 / 403                                no        ComparatorAuthError raised; the guard is tripped, so no
                                                       further call of the rerank (or rerank_many) is sent
    404 (unknown model or route)             no        ComparatorRequestError raised; the guard is tripped
    other 4xx (400, 413, 422 ...)            no        ComparatorRequestError raised for this call only: the
                                                       guard is not tripped and the circuit breaker counts the
                                                       endpoint as up (in rerank_many a 400 is usually one
                                                       query's prompt, e.g. too long, and fails that query alone)
    timeout, refused/dropped connection,     yes       after ``max_attempts`` attempts: a failed call
    408, 409, 429 (Retry-After honoured), 5xx          (``Judgment(prob=None, error=...)``), counted by the
                                                       circuit breaker
    200 whose body is not a usable answer    no        a failed call with the reason (never an exception)

Every error message carries the endpoint's own words with the API key replaced by ``***``, cut to
``MAX_MESSAGE`` characters (so it never holds a whole passage).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import importlib.util
import math
import numbers
import os
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..budget import check_count
from ..errors import ComparatorAuthError, ComparatorError, ComparatorRequestError, scrub
from ..types import Judgment, Pair
from .base import CallGuard, Comparator, Item, gather_or_cancel
from .prompts import PRP_PROMPT, SwappablePrompts, check_prompt, parse_label, render

OPENAI_EXTRA = 'pip install "activeprp[openai]"'
MAX_MESSAGE = 300
"""Error messages (raised or in ``Judgment.error``) are cut to this many characters."""
RETRIED_STATUS = (408, 409, 429)
"""4xx statuses that are retried (as the openai SDK does); every 5xx is retried too."""
TRIPPING_STATUS = {401: ComparatorAuthError, 403: ComparatorAuthError, 404: ComparatorRequestError}
"""Statuses that mean the endpoint refuses every call (key, permission, model or route): raised and tripped."""


def _retry_after_s(exc: BaseException) -> float | None:
    """Seconds asked for by a ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date) response header."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms") is not None:
            return float(headers["retry-after-ms"]) / 1000.0
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None


def _retryable(exc: BaseException) -> bool:
    """Timeouts, connection errors, 408, 409, 429 and 5xx are retried; other statuses are not."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    return isinstance(exc, openai.APIStatusError) and (exc.status_code in RETRIED_STATUS or exc.status_code >= 500)


def _endpoint_message(exc: BaseException) -> str:
    """The endpoint's own message for an API error (``{"error": {"message": ...}}`` and the usual variants),
    else the exception's text."""
    body = getattr(exc, "body", None)
    for _ in range(2):  # the client hands over the body's "error" member, or the whole body
        if isinstance(body, dict):
            body = next((body[k] for k in ("error", "message", "detail") if body.get(k)), None)
    return body if isinstance(body, str) and body else str(exc)


# ---- parsing: a 200 body -> P(A), never an exception other than ValueError --------------------------------------
def _get(obj: Any, name: str) -> Any:
    """``obj.name`` for the client's models, ``obj[name]`` for a dict (a body the client could not type), else
    None: the client builds responses without validation, so any field may hold any JSON value."""
    if isinstance(obj, dict):
        return obj.get(name)
    if obj is None or isinstance(obj, (str, bytes, int, float, list)):
        return None
    return getattr(obj, name, None)


def _tokens(value: Any) -> int:
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0 else 0


def _logprob(value: Any) -> float:
    """A logprob as a float <= 0 (-inf allowed).

    Raises:
        ValueError: not a real number, NaN, or above 0 by more than rounding (exp would not be a probability).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or value > 1e-6:
        raise ValueError(f"invalid logprob {str(value)[:20]!r}")
    return min(float(value), 0.0)


def _snippet(value: Any) -> str:
    return repr(value if isinstance(value, str) else type(value).__name__)[:60]


def _parse(response: Any) -> tuple[float, int, int]:
    """(P(A), prompt tokens, completion tokens) from a chat completion. P(A) comes from the top logprobs of the
    first answer token (normalised over the A and B mass; "A", " a", "Passage A" ... count as A) when one of
    them is A or B, else from the answer text (hard 1.0 / 0.0). Token counts that are not ints >= 0 count 0.

    Raises:
        ValueError (only): the body is not a usable answer: no choices, an A/B alternative whose logprob is not
        a number <= 0, no A/B logprob and an answer text that is missing or neither A nor B.
    """
    choices = _get(response, "choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"no choices in the response ({_snippet(response)})")
    choice = choices[0]
    usage = _get(response, "usage")
    tokens = (_tokens(_get(usage, "prompt_tokens")), _tokens(_get(usage, "completion_tokens")))
    entries = _get(_get(choice, "logprobs"), "content")
    tops = _get(entries[0], "top_logprobs") if isinstance(entries, list) and entries else None
    mass = {"A": 0.0, "B": 0.0}
    for top in tops if isinstance(tops, list) else ():
        token = _get(top, "token")
        label = parse_label(token) if isinstance(token, str) else None
        if label is not None:
            mass[label] += math.exp(_logprob(_get(top, "logprob")))
    if mass["A"] + mass["B"] > 0:
        return mass["A"] / (mass["A"] + mass["B"]), *tokens
    content = _get(_get(choice, "message"), "content")
    if not isinstance(content, str):
        raise ValueError(f"no answer: content is {_snippet(content)} and no A/B logprobs")
    label = parse_label(content)
    if label is None:
        raise ValueError(f"unparseable answer {content[:40]!r}")
    return float(label == "A"), *tokens


# ---- clients: one sync client, one AsyncOpenAI per live event loop -----------------------------------------------
@dataclass
class _LoopClient:
    loop: weakref.ref  # the event loop the client belongs to
    client: Any  # openai.AsyncOpenAI
    closer: Any  # the async generator that closes the client when its loop shuts down
    dead: bool = False  # set when the loop closed without shutting down its async generators


def _finish_dead(entry: _LoopClient) -> None:
    """Close the generator of a loop that closed without finalising it, without touching that loop (its
    sockets are released by the garbage collector; nothing is scheduled on a closed loop)."""
    entry.dead = True
    closing = entry.closer.aclose()
    with contextlib.suppress(StopIteration):
        closing.send(None)


class _Clients:
    """The HTTP clients of one ``OpenAIChatComparator`` and its ``with_prompts`` copies (shared): a sync
    ``OpenAI`` client made on first use, and one ``AsyncOpenAI`` per live event loop, closed inside its loop
    when the loop shuts down (``asyncio.run``, ``asyncio.Runner``) or when the comparator is closed. Clients are
    made again after ``close``, so a closed comparator can still be used."""

    def __init__(self, kw: dict[str, Any]) -> None:
        self.kw = kw
        self._lock = threading.RLock()  # re-entered when a dead loop's closer is finished under it
        self._sync: Any = None
        self._loops: dict[int, _LoopClient] = {}
        self._tasks: set = set()

    def sync(self) -> Any:
        with self._lock:
            if self._sync is None:
                import openai

                self._sync = openai.OpenAI(**self.kw)
            return self._sync

    async def for_running_loop(self) -> Any:
        """The AsyncOpenAI client of the running loop (made, and registered for closing, on first use)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._forget_dead_loops()
            entry = self._loops.get(id(loop))
            if entry is not None and entry.loop() is loop:
                return entry.client
            import openai

            entry = _LoopClient(weakref.ref(loop), openai.AsyncOpenAI(**self.kw), None)
            entry.closer = self._close_at_loop_end(entry)
            self._loops[id(loop)] = entry
        await entry.closer.__anext__()  # started inside the loop, so the loop finalises it at shutdown
        return entry.client

    async def _close_at_loop_end(self, entry: _LoopClient):
        """An async generator the loop finalises at shutdown (``asyncio.run`` calls ``loop.shutdown_asyncgens``):
        its ``finally`` closes the client inside its own loop, before the loop closes."""
        try:
            yield
        finally:
            with self._lock:
                if self._loops.get(id(entry.loop())) is entry:
                    del self._loops[id(entry.loop())]
            if not entry.dead:
                await entry.client.close()

    def live_async_clients(self) -> int:
        """How many async clients are held for loops that are still open (for tests and diagnostics)."""
        with self._lock:
            self._forget_dead_loops()
            return len(self._loops)

    def _forget_dead_loops(self) -> None:
        for key, entry in list(self._loops.items()):
            loop = entry.loop()
            if loop is None or loop.is_closed() or entry.client.is_closed():
                del self._loops[key]
                if loop is None or loop.is_closed():
                    _finish_dead(entry)

    def close(self) -> None:
        """Close the sync client, and the async client of every loop: on its own loop when that loop is running
        (scheduled thread-safely) or idle; clients of closed loops are dropped."""
        with self._lock:
            sync, self._sync = self._sync, None
            entries, self._loops = list(self._loops.values()), {}
        if sync is not None:
            sync.close()
        for entry in entries:
            loop = entry.loop()
            if loop is None or loop.is_closed():
                _finish_dead(entry)
            elif loop.is_running():
                future = asyncio.run_coroutine_threadsafe(entry.closer.aclose(), loop)
                self._tasks.add(future)
                future.add_done_callback(self._tasks.discard)
            else:
                loop.run_until_complete(entry.closer.aclose())

    async def aclose(self) -> None:
        """``close``, awaiting the running loop's own client."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._loops.pop(id(loop), None)
        if mine is not None and mine.loop() is loop:
            await mine.closer.aclose()
        self.close()


def _public_url(base_url: str | None) -> str:
    """The endpoint for messages: ``base_url`` without user:password, or OpenAI's."""
    if not base_url:
        return "api.openai.com"
    parts = urlsplit(base_url)
    if not (parts.username or parts.password):
        return base_url
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=host))


class _Abandoned(Exception):
    """Raised inside a sync worker whose batch already raised: no further attempt is made."""


class OpenAIChatComparator(SwappablePrompts, Comparator):
    """P(first preferred) from an OpenAI-compatible chat model answering the PRP prompt with one token.

    Each ordered pair is one request: ``max_tokens=1``, ``temperature=0`` and, with ``logprobs=True``,
    ``top_logprobs=top_logprobs``: P(first) = P(A) / (P(A) + P(B)) over the top alternatives of the answer token
    ("A", " A", "a" ... all count as A). Without usable logprobs the one-token answer is parsed (1.0 / 0.0).
    An answer that is neither A nor B, a 200 body that is not a usable answer (any shape or type), or a request
    that still fails after its retries is a failed call: ``Judgment(prob=None, error=...)`` (the engine counts
    it; the rerank's circuit breaker stops after ``max_consecutive_failures`` in a row).

    Errors that retrying cannot fix raise at once (see the module docstring): 401/403 ``ComparatorAuthError``
    and 404 ``ComparatorRequestError`` stop every later call of the rerank; another 4xx raises
    ``ComparatorRequestError`` for its call. Each carries ``status_code`` and the endpoint's message without the
    API key.

    Transport: the official ``openai`` client (``max_retries=0``) wrapped in ``tenacity``: up to
    ``max_attempts`` attempts with exponential backoff and jitter (``backoff_initial`` x 2^k seconds plus up to
    ``backoff_initial`` of jitter, at most ``backoff_max``) on timeouts, connection errors, 408/409, 429
    (waiting at least its Retry-After, capped at ``max_retry_after`` s) and 5xx. Retries are reported in
    ``Judgment.retries`` and never count against the call budget. The defaults (3 attempts, 0.5 s initial
    backoff, i.e. at most 2.5 s of waiting per call) make a dead endpoint raise ``ComparatorUnavailable``
    within seconds even for rankers that ask one pair per round.

    Concurrency: ``ajudge`` sends a round's requests concurrently and ``judge`` (sync) through a thread pool,
    at most ``guard.max_concurrency`` in flight (the rerank's cap; ``max_concurrency`` when it sets none). When a
    call raises, the others stop: async ones are cancelled; in the sync pool, queued calls are dropped and no
    retry starts (see ``judge_batch``).

    Clients: one sync client, and one ``AsyncOpenAI`` per live event loop, closed inside that loop when it shuts
    down (``asyncio.run`` does this) and by ``close()``/``aclose()`` (or ``with``/``async with``). With a loop
    you close yourself, ``await comparator.aclose()`` before closing it.

    Args:
        model: the model name sent to the endpoint.
        base_url: the endpoint (e.g. ``http://127.0.0.1:8000/v1``); None = api.openai.com.
        api_key: the key; None = ``$OPENAI_API_KEY``.
        prompt: the PRP template with ``{query}``, ``{first}``, ``{second}`` (only these are substituted; other
            braces stay literal); ``system_prompt`` optional. ``with_prompts(...)`` gives a copy with others.
        logprobs, top_logprobs: ask for the top ``top_logprobs`` (0..20) alternatives of the answer token.
        max_passage_words: passages are cut to this many whitespace-separated words.
        max_concurrency: the default cap on requests in flight when the rerank sets none.
        timeout: seconds per request attempt (> 0).
        max_attempts, backoff_initial, backoff_max, max_retry_after: the retry policy above (seconds).

    Raises:
        ImportError: ``openai`` or ``tenacity`` missing (names the ``activeprp[openai]`` extra).
        ValueError: no API key, an empty model name, a prompt without its placeholders, a count below its
            minimum, or a time that is not a finite number in range (``timeout <= 0``, a negative backoff ...).
        TypeError: a model or prompt that is not a str, a count that is not an int, a time that is not a number.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        prompt: str = PRP_PROMPT,
        system_prompt: str | None = None,
        logprobs: bool = True,
        top_logprobs: int = 5,
        max_passage_words: int = 200,
        max_concurrency: int = 8,
        timeout: float = 60.0,
        max_attempts: int = 3,
        backoff_initial: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 60.0,
    ) -> None:
        missing = [m for m in ("openai", "tenacity") if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(f"OpenAIChatComparator needs {', '.join(missing)}: install it with {OPENAI_EXTRA}")
        if not isinstance(model, str):
            raise TypeError(f"model must be a str, got {type(model).__name__}")
        if not model:
            raise ValueError("model must not be empty")
        self.max_concurrency = check_count(max_concurrency, "max_concurrency", minimum=1)
        self.max_attempts = check_count(max_attempts, "max_attempts", minimum=1)
        self.max_passage_words = check_count(max_passage_words, "max_passage_words", minimum=1)
        self.top_logprobs = check_count(top_logprobs, "top_logprobs", minimum=0)
        if self.top_logprobs > 20:
            raise ValueError(f"top_logprobs must be <= 20 (the API's limit), got {top_logprobs}")
        timeout = _seconds(timeout, "timeout", positive=True)
        self.backoff_initial = _seconds(backoff_initial, "backoff_initial")
        self.backoff_max = _seconds(backoff_max, "backoff_max")
        self.max_retry_after = _seconds(max_retry_after, "max_retry_after")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            raise ValueError("no API key: pass api_key= or set OPENAI_API_KEY (any string for a local server)")
        self.model, self.logprobs = model, bool(logprobs)
        self.prompt, self.system_prompt = check_prompt("prompt", prompt), check_prompt("system_prompt", system_prompt)
        self.endpoint = _public_url(base_url)
        self._secrets = (api_key,)
        self._clients = _Clients({"base_url": base_url, "api_key": api_key, "timeout": timeout, "max_retries": 0})

    prompt_names = ("prompt", "system_prompt")

    @property
    def client(self) -> Any:
        """The sync ``openai.OpenAI`` client (shared with ``with_prompts`` copies)."""
        return self._clients.sync()

    # ---- request building and retry policy ------------------------------------------------------------
    def _cut(self, text: str) -> str:
        words = text.split()
        return text if len(words) <= self.max_passage_words else " ".join(words[: self.max_passage_words])

    def request(self, query: str, first: str, second: str) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one ordered pair."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        text = render(self.prompt, query=query, first=self._cut(first), second=self._cut(second))
        messages.append({"role": "user", "content": text})
        kw: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": 1, "temperature": 0}
        if self.logprobs:
            kw.update(logprobs=True, top_logprobs=self.top_logprobs)
        return kw

    def _wait(self, state: Any) -> float:
        from tenacity import wait_exponential_jitter

        backoff = wait_exponential_jitter(multiplier=self.backoff_initial, max=self.backoff_max,
                                          jitter=self.backoff_initial)(state)
        asked = _retry_after_s(state.outcome.exception()) if state.outcome else None
        return backoff if asked is None else max(backoff, min(asked, self.max_retry_after))

    def _retry_kw(self) -> dict[str, Any]:
        from tenacity import retry_if_exception, stop_after_attempt

        return {"retry": retry_if_exception(_retryable), "stop": stop_after_attempt(self.max_attempts),
                "wait": self._wait, "reraise": True}

    def _message(self, text: str) -> str:
        return scrub(text, self._secrets)[:MAX_MESSAGE]

    def _settle(self, guard: CallGuard, retries: int, response: Any = None,
                error: BaseException | None = None, record: bool = True) -> Judgment | ComparatorError:
        """The outcome of one call that reached the endpoint: a ``Judgment`` (answered or failed), or the
        ``ComparatorError`` to raise (recorded, and tripped when the endpoint refuses every call)."""
        if error is None:
            try:
                prob, prompt_tokens, completion_tokens = _parse(response)
            except ValueError as err:
                judgment = Judgment(prob=None, retries=retries, error=self._message(f"unusable answer: {err}"))
            else:
                judgment = Judgment(prob, retries, prompt_tokens, completion_tokens)
            if record:
                guard.record(judgment.prob is not None, judgment.error)
            return judgment
        import openai

        answered = False  # whether the endpoint itself answered (up, for the circuit breaker)
        if isinstance(error, ComparatorError):  # the guard stopped this call's retries
            fatal: ComparatorError | None = error
        elif isinstance(error, openai.APIStatusError) and not _retryable(error):
            status = error.status_code
            kind = TRIPPING_STATUS.get(status, ComparatorRequestError)
            fatal = kind(self._message(f"{type(error).__name__} from {self.endpoint} (model {self.model!r}): "
                                       f"{_endpoint_message(error)}"), status_code=status)
            if status in TRIPPING_STATUS:
                guard.trip(fatal)
            else:  # a 400/422 ... is about this request (e.g. a prompt too long): the endpoint is up, so it does
                answered = True  # not count toward the breaker, which would stop the other queries of rerank_many
        else:
            fatal = None
        reason = self._message(f"{type(error).__name__}: {_endpoint_message(error)}")
        if record:
            guard.record(answered, fatal.message if fatal is not None else reason)
        return fatal if fatal is not None else Judgment(prob=None, retries=retries, error=reason)

    @staticmethod
    def _retries(retrying: Any) -> int:
        return retrying.statistics.get("attempt_number", 1) - 1

    # ---- sync ----------------------------------------------------------------------------------------
    def _judge_one(self, guard: CallGuard, item: Item, stop: threading.Event, abandoned: threading.Event) -> Judgment:
        """One call in a worker thread: no attempt starts once ``stop`` is set; nothing is recorded once the batch
        has ``abandoned`` this call (it raised without waiting for it)."""
        import openai
        from tenacity import Retrying

        if stop.is_set():
            return Judgment(None, error="not sent: the batch already failed")
        guard.check()
        kw = self.request(item[0], item[1].text, item[2].text)
        client = self._clients.sync()
        attempts = 0

        def call() -> Any:
            nonlocal attempts
            if attempts:  # a retry: not once the batch or the rerank has stopped
                if stop.is_set():
                    raise _Abandoned
                guard.check()
            attempts += 1
            return client.chat.completions.create(**kw)

        retrying = Retrying(**self._retry_kw(), sleep=stop.wait)  # a backoff wait ends when the batch stops
        outcome: Judgment | ComparatorError
        try:
            response = retrying(call)
        except _Abandoned:
            return Judgment(None, error="not retried: the batch already failed")
        except (openai.OpenAIError, ComparatorError, ValueError) as err:  # ValueError: undecodable JSON
            outcome = self._settle(guard, self._retries(retrying), error=err, record=not abandoned.is_set())
        else:
            outcome = self._settle(guard, self._retries(retrying), response, record=not abandoned.is_set())
        if isinstance(outcome, ComparatorError):
            raise outcome  # outside the except block: the client's error (and its body) is not chained
        return outcome

    def judge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ``(query, first, second)``, requests sent by up to ``guard.max_concurrency``
        threads. When a call raises, queued calls are dropped and no retry starts; the batch then raises at once
        if the guard is stopped (a 401, an open breaker: the requests still on the wire finish in their threads,
        unrecorded), else (e.g. a 400) once the calls in flight have answered, so the cap holds for what follows.

        Raises:
            ComparatorError: a call raised (see the class docstring).
        """
        guard = guard or CallGuard(self.max_concurrency, None)
        stop, abandoned = threading.Event(), threading.Event()
        workers = min(guard.max_concurrency or len(items), len(items))
        if workers <= 1:
            return [self._judge_one(guard, item, stop, abandoned) for item in items]
        pool = ThreadPoolExecutor(workers, thread_name_prefix="activeprp-openai")
        futures = [pool.submit(self._judge_one, guard, item, stop, abandoned) for item in items]
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

    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ordered pair of ``query`` (see ``judge_batch``)."""
        return self.judge_batch([(query, a, b) for a, b in pairs], guard=guard)

    # ---- async ----------------------------------------------------------------------------------------
    async def _ajudge_one(self, client: Any, guard: CallGuard, item: Item) -> Judgment:
        import openai
        from tenacity import AsyncRetrying

        kw = self.request(item[0], item[1].text, item[2].text)
        attempts = 0

        async def call() -> Any:  # a plain coroutine function, so tenacity awaits it
            nonlocal attempts
            if attempts:  # a retry: not once the rerank has stopped
                guard.check()
            attempts += 1
            return await client.chat.completions.create(**kw)

        retrying = AsyncRetrying(**self._retry_kw())
        outcome: Judgment | ComparatorError
        async with guard.slots(1):
            guard.check()
            try:
                response = await retrying(call)
            except asyncio.CancelledError:
                if attempts:  # it went out: it counts as spent, its outcome is unknown
                    guard.record(None)
                raise
            except (openai.OpenAIError, ComparatorError, ValueError) as err:
                outcome = self._settle(guard, self._retries(retrying), error=err)
            else:
                outcome = self._settle(guard, self._retries(retrying), response)
        if isinstance(outcome, ComparatorError):
            raise outcome
        return outcome

    async def ajudge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge_batch``: the requests run concurrently, at most ``guard.max_concurrency`` at a time;
        when one raises, the others are cancelled."""
        guard = guard or CallGuard(self.max_concurrency, None)
        client = await self._clients.for_running_loop()
        return await gather_or_cancel([self._ajudge_one(client, guard, item) for item in items])

    async def ajudge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge`` (see ``ajudge_batch``)."""
        return await self.ajudge_batch([(query, a, b) for a, b in pairs], guard=guard)

    # ---- lifetime -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the HTTP clients (shared with ``with_prompts`` copies): the sync one, and each loop's async
        one on its own loop. A later call opens new ones."""
        self._clients.close()

    async def aclose(self) -> None:
        """Async ``close``: awaits the running loop's client."""
        await self._clients.aclose()

    def __repr__(self) -> str:
        return f"OpenAIChatComparator(model={self.model!r}, base_url={self.endpoint!r})"


def _seconds(value: Any, name: str, positive: bool = False) -> float:
    """``value`` as seconds: a finite real number >= 0 (> 0 when ``positive``).

    Raises:
        TypeError: not a real number (bools included). ValueError: NaN, infinite or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number of seconds {'> 0' if positive else '>= 0'}, got {value}")
    return float(value)
