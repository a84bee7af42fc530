"""A pairwise judge on any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp server ...).

``openai`` and ``tenacity`` are imported when a comparator is built; a missing one raises ``ImportError``
naming the ``activeprp[openai]`` extra.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib.util
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..types import Judgment, Pair
from .base import CallGuard, Comparator, Item, gather_or_cancel
from .prompts import PRP_PROMPT, check_prp_prompt, parse_label

OPENAI_EXTRA = 'pip install "activeprp[openai]"'


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
    except (TypeError, ValueError):
        return None


def _retryable(exc: BaseException) -> bool:
    """Timeouts, connection errors, 429 and 5xx are retried; other statuses (400/401/403/404 ...) are not."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    return isinstance(exc, openai.APIStatusError) and (exc.status_code == 429 or exc.status_code >= 500)


def _parse(response: Any) -> tuple[float, int, int]:
    """(P(A), prompt tokens, completion tokens) from a chat completion; P(A) from the top logprobs of the first
    token (normalised over the A and B mass), else from the answer text (hard 1.0 / 0.0).

    Raises:
        ValueError: a malformed response or an answer that is neither A nor B.
    """
    try:
        choice = response.choices[0]
        content = choice.message.content or ""
    except (AttributeError, IndexError, TypeError) as err:
        raise ValueError(f"malformed response: {str(response)[:80]!r}") from err
    usage = getattr(response, "usage", None)
    tokens = (getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0)
    mass = {"A": 0.0, "B": 0.0}
    entries = getattr(getattr(choice, "logprobs", None), "content", None) or [None]
    for top in getattr(entries[0], "top_logprobs", None) or []:
        label = parse_label(top.token)
        if label is not None and top.logprob is not None:
            mass[label] += math.exp(top.logprob)
    if mass["A"] + mass["B"] > 0:
        return mass["A"] / (mass["A"] + mass["B"]), *tokens
    label = parse_label(content)
    if label is None:
        raise ValueError(f"unparseable answer {content[:40]!r}")
    return float(label == "A"), *tokens


class OpenAIChatComparator(Comparator):
    """P(first preferred) from an OpenAI-compatible chat model answering the PRP prompt with one token.

    Each ordered pair is one request: ``max_tokens=1``, ``temperature=0`` and, with ``logprobs=True``,
    ``top_logprobs=top_logprobs``: P(first) = P(A) / (P(A) + P(B)) over the top alternatives of the answer token
    ("A", " A", "a" ... all count as A). Without usable logprobs the one-token answer is parsed (1.0 / 0.0).
    An answer that is neither A nor B, a malformed body, or a request that still fails after its retries is a
    failed call: ``Judgment(prob=None, error=...)`` (the engine counts it; rankers treat it as unknown).

    Transport: the official ``openai`` client (``max_retries=0``) wrapped in ``tenacity``: up to
    ``max_attempts`` attempts with exponential backoff and jitter (``backoff_initial`` .. ``backoff_max``
    seconds) on timeouts, connection errors, 429 (waiting at least its Retry-After, capped at
    ``max_retry_after`` s) and 5xx; 400/401/403/404 and other 4xx are not retried. Retries are reported in
    ``Judgment.retries`` and never count against the call budget.

    Concurrency: ``ajudge`` sends a round's requests concurrently and ``judge`` (sync) through a thread pool,
    at most ``guard.max_concurrency`` in flight (the rerank's cap; ``max_concurrency`` when it sets none).
    ``judge_batch``/``ajudge_batch`` do the same for the prompts of many queries at once.

    Args:
        model: the model name sent to the endpoint.
        base_url: the endpoint (e.g. ``http://127.0.0.1:8000/v1``); None = api.openai.com.
        api_key: the key; None = ``$OPENAI_API_KEY``.
        prompt: the PRP prompt with ``{query}``, ``{first}``, ``{second}``; ``system_prompt`` optional.
        max_passage_words: passages are cut to this many whitespace-separated words.
        timeout: seconds per request attempt.

    Raises:
        ImportError: ``openai`` or ``tenacity`` missing (names the ``activeprp[openai]`` extra).
        ValueError: no API key, or a prompt without its placeholders.
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
        max_attempts: int = 5,
        backoff_initial: float = 0.5,
        backoff_max: float = 20.0,
        max_retry_after: float = 60.0,
    ) -> None:
        missing = [m for m in ("openai", "tenacity") if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(f"OpenAIChatComparator needs {', '.join(missing)}: install it with {OPENAI_EXTRA}")
        if max_concurrency < 1 or max_attempts < 1 or max_passage_words < 1:
            raise ValueError("max_concurrency, max_attempts and max_passage_words must be >= 1")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            raise ValueError("no API key: pass api_key= or set OPENAI_API_KEY (any string for a local server)")
        import openai

        self.model, self.prompt, self.system_prompt = model, check_prp_prompt(prompt), system_prompt
        self.logprobs, self.top_logprobs, self.max_passage_words = logprobs, top_logprobs, max_passage_words
        self.max_concurrency, self.max_attempts = max_concurrency, max_attempts
        self.backoff_initial, self.backoff_max, self.max_retry_after = backoff_initial, backoff_max, max_retry_after
        self._client_kw = {"base_url": base_url, "api_key": api_key, "timeout": timeout, "max_retries": 0}
        self.client = openai.OpenAI(**self._client_kw)
        self._async: tuple | None = None  # (event loop, AsyncOpenAI)

    # ---- request building and retry policy ------------------------------------------------------------
    def _cut(self, text: str) -> str:
        words = text.split()
        return text if len(words) <= self.max_passage_words else " ".join(words[: self.max_passage_words])

    def request(self, query: str, first: str, second: str) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one ordered pair."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        text = self.prompt.format(query=query, first=self._cut(first), second=self._cut(second))
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

    @staticmethod
    def _judgment(call: Any, retrying: Any) -> Judgment:
        retries = retrying.statistics.get("attempt_number", 1) - 1
        try:
            prob, prompt_tokens, completion_tokens = _parse(call)
        except ValueError as err:
            return Judgment(prob=None, retries=retries, error=str(err))
        return Judgment(prob, retries, prompt_tokens, completion_tokens)

    @staticmethod
    def _failure(err: Exception, retrying: Any) -> Judgment:
        retries = retrying.statistics.get("attempt_number", 1) - 1
        return Judgment(prob=None, retries=retries, error=f"{type(err).__name__}: {err}"[:300])

    # ---- sync ----------------------------------------------------------------------------------------
    def _judge_one(self, guard: CallGuard, item: Item) -> Judgment:
        import openai
        from tenacity import Retrying

        query, first, second = item
        guard.check()
        kw = self.request(query, first.text, second.text)
        retrying = Retrying(**self._retry_kw())
        try:
            response = retrying(self.client.chat.completions.create, **kw)
        except (openai.OpenAIError, ValueError) as err:  # a finally failed call (ValueError: undecodable JSON)
            judgment = self._failure(err, retrying)
        else:
            judgment = self._judgment(response, retrying)
        guard.record(judgment.prob is not None, judgment.error)
        return judgment

    def judge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ``(query, first, second)``, requests sent by up to ``guard.max_concurrency``
        threads."""
        guard = guard or CallGuard(self.max_concurrency, None)
        if len(items) <= 1:
            return [self._judge_one(guard, item) for item in items]
        with ThreadPoolExecutor(min(guard.max_concurrency or len(items), len(items))) as pool:
            return list(pool.map(lambda item: self._judge_one(guard, item), items))

    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ordered pair of ``query`` (see ``judge_batch``)."""
        return self.judge_batch([(query, a, b) for a, b in pairs], guard=guard)

    # ---- async ----------------------------------------------------------------------------------------
    def _async_client(self) -> Any:
        """The AsyncOpenAI client of the running event loop (made again for a new loop)."""
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            import openai

            self._async = (loop, openai.AsyncOpenAI(**self._client_kw))
        return self._async[1]

    async def _ajudge_one(self, client: Any, guard: CallGuard, item: Item) -> Judgment:
        import openai
        from tenacity import AsyncRetrying

        query, first, second = item
        kw = self.request(query, first.text, second.text)

        async def call() -> Any:  # a plain coroutine function, so tenacity awaits it
            return await client.chat.completions.create(**kw)

        retrying = AsyncRetrying(**self._retry_kw())
        async with guard.slots(1):
            guard.check()
            try:
                response = await retrying(call)
            except (openai.OpenAIError, ValueError) as err:
                judgment = self._failure(err, retrying)
            else:
                judgment = self._judgment(response, retrying)
        guard.record(judgment.prob is not None, judgment.error)
        return judgment

    async def ajudge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge_batch``: the requests run concurrently, at most ``guard.max_concurrency`` at a time."""
        guard = guard or CallGuard(self.max_concurrency, None)
        client = self._async_client()
        return await gather_or_cancel([self._ajudge_one(client, guard, item) for item in items])

    async def ajudge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge`` (see ``ajudge_batch``)."""
        return await self.ajudge_batch([(query, a, b) for a, b in pairs], guard=guard)

    def __repr__(self) -> str:
        return f"OpenAIChatComparator(model={self.model!r}, base_url={self._client_kw['base_url']!r})"
