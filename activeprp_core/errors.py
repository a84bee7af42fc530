"""The exceptions ActivePRP raises, in one tree.

A caller's mistake (a bad argument, an unknown name) is a plain ``ValueError`` or ``TypeError`` whose message says
what to change; a bad input file is an ``InputError`` (a ``ValueError`` whose message starts with ``FILE:LINE:``).
Everything else that goes wrong is an ``ActivePRPError``, except the ``RuntimeError`` cases drawn below it::

    ActivePRPError
    ├── ComparatorError                a comparator (an LLM backend) failed; nothing was reranked
    │   ├── ComparatorAuthError        401 / 403: the endpoint refused the key or the model (never retried)
    │   ├── ComparatorRequestError     400 / 404 / 422 ...: the endpoint rejected the request, e.g. an unknown
    │   │                              model (never retried)
    │   ├── ComparatorUnavailable      the endpoint keeps failing (timeouts, refused connections, 429 / 5xx after
    │   │                              their retries): the circuit breaker opened, or every call of a rerank failed
    │   └── InvalidAnswer              also a ValueError: a comparator answered the wrong number of items, or an
    │                                  answer that is not a number in [0, 1] (a comparator bug)
    └── RankerError                    also a RuntimeError: a ranker returned something that is not a permutation

    RuntimeError (outside the tree: no comparator failed)
    ├── slots.LoopBlocked              the sync API (``rerank``, ``rerank_many``, a comparator's ``judge``) was
    │                                  called on a thread whose running event loop's tasks hold the call slots
    │                                  (of the same comparator or guard) it waits for: waiting would hang
    │                                  forever; await the async API there instead (no ``accounting``)
    ├── ComparatorClosed               a remote comparator was closed while a rerank's call was in flight on its
    │                                  client (with ``accounting``; not retried, not counted by the breaker;
    │                                  exported from ``activeprp_core``, defined in ``comparators``)
    └── (plain RuntimeError)           ``Reranking`` stepped out of order: ``send()`` with no batch pending,
                                       ``result()`` before it is done or after it stopped on an error (named)

Every ``ComparatorError`` carries ``status_code`` (the HTTP status, None without one), ``message`` (the
endpoint's own message, with the API key scrubbed) and ``accounting``: what the rerank had spent when it
stopped (an ``activeprp_core.Accounting``; the calls of the batch in flight count as spent). Any other exception
that escapes a rerank while calls were in flight (e.g. a bug in a user's comparator) gets the same
``accounting`` attribute attached.

Degrading instead of raising is an explicit opt-in: ``rerank(..., on_failure="prior")`` returns the best-effort
order and reports the failure in the result (see ``activeprp_core.engine``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .types import Accounting

__all__ = ["ActivePRPError", "ComparatorAuthError", "ComparatorError", "ComparatorRequestError",
           "ComparatorUnavailable", "InputError", "InvalidAnswer", "RankerError", "scrub"]


SHORT_SECRET = 8
"""Secrets shorter than this (a placeholder key such as ``k`` or ``unused`` for a local server) are replaced only
as whole words, so that scrubbing one does not garble the words it occurs in ("to***ens" for the key ``k``)."""


def describe(error: BaseException) -> str:
    """One line saying why: ``"<ErrorType>: <message>"`` (a result's ``failure`` and ``errors``, a failed call's
    ``error``, ``RerankFailure.reason``)."""
    return f"{type(error).__name__}: {error}"


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every non-empty secret (e.g. an API key) replaced by ``***`` (for messages and logs):
    anywhere, or as a whole word for a secret shorter than ``SHORT_SECRET`` characters. A secret's first
    ``SHORT_SECRET`` characters and as many of the next as follow are replaced too: a message quoting a judge's
    answer cuts it, and a cut key must not show its first part. A secret that is not a str is ignored: scrubbing
    runs on the way to reporting another error, and must not replace it with its own."""
    for secret in (s for s in secrets if isinstance(s, str) and s):
        if len(secret) >= SHORT_SECRET:
            text = _scrub_prefixes(text, secret)
        else:
            text = re.sub(rf"(?<![\w-]){re.escape(secret)}(?![\w-])", "***", text)
    return text


def _scrub_prefixes(text: str, secret: str) -> str:
    head, out, start = secret[:SHORT_SECRET], [], 0
    while (at := text.find(head, start)) >= 0:
        end = at + SHORT_SECRET
        while end - at < len(secret) and end < len(text) and text[end] == secret[end - at]:
            end += 1
        out.append(text[start:at] + "***")
        start = end
    return "".join(out) + text[start:]


class InputError(ValueError):
    """Bad input read from a file or the command line; the message names the place, e.g.
    ``cands.jsonl:3: not a JSON object``. The CLI prints it as one line and exits with 2."""


class ActivePRPError(Exception):
    """The root of every error this package raises that is not a caller's ValueError/TypeError."""


class ComparatorError(ActivePRPError):
    """A comparator failed, so the rerank stopped (or, with ``on_failure="prior"``, degraded).

    Attributes:
        message: what went wrong, in the endpoint's words where there is an endpoint (never an API key).
        status_code: the HTTP status of the failing response, None when there was none (a refused connection,
            a timeout, a local model).
        accounting: what the rerank had spent when it stopped (set by the engine; None outside a rerank).
    """

    def __init__(self, message: str, *, status_code: int | None = None,
                 accounting: Accounting | None = None) -> None:
        super().__init__(message)
        self.message, self.status_code, self.accounting = message, status_code, accounting

    def __str__(self) -> str:
        said = f" (HTTP {self.status_code})"
        # a message that says its status already says it once: a failed call's ends with it (``RemoteComparator``),
        # and an open breaker's or a time budget's quotes that call's text
        return self.message if self.status_code is None or said in self.message else self.message + said

    def __reduce__(self):  # keep the keyword fields across pickling (Ray moves errors between processes)
        return type(self), (self.message,), {"status_code": self.status_code, "accounting": self.accounting}


class ComparatorAuthError(ComparatorError):
    """The endpoint refused the credentials or the permissions (401 / 403). Raised on the first such answer,
    before any further call is sent; never retried."""


class ComparatorRequestError(ComparatorError):
    """The endpoint rejected the request itself (400, 404 such as an unknown model, 422 ...). Raised on the
    first such answer, before any further call is sent; never retried."""


MAX_CONSECUTIVE_FAILURES = 5
"""The circuit breaker's default: calls in a row that may fail (after their retries) before a rerank stops with
``ComparatorUnavailable``. Its one home, below every module that uses it: ``settings`` (the setting's default,
re-exported there), ``comparators.base.CallGuard`` and ``types.RerankResult``."""


class ComparatorUnavailable(ComparatorError):
    """The endpoint keeps failing: ``max_consecutive_failures`` calls in a row failed after their retries (the
    circuit breaker opened and no further call was sent), or every call of a rerank failed. Its ``status_code`` is
    that of the last of those failed calls that got an HTTP response (429: rate limited; 5xx: an outage), None when
    none did (refused connections, timeouts).

    Attributes:
        breaker: which circuit breaker opened, as data: ``"own"``, one query's (``rerank``'s, or a query's own in
            ``rerank_many`` / ``arerank_many`` / ``arerank_stream`` / ``RerankPool`` / ``activeprp serve``: that
            query alone stops); ``"shared"``, the one the queries of those share, which stops them all (its
            message says "N calls in a row failed across queries"); None when no breaker opened (every call of a
            rerank failed) or the raiser did not say.
        in_a_row: the failed calls in a row that breaker counted (N in "circuit breaker open: N calls in a row
            failed"): a query's own for ``"own"``, every query's for ``"shared"``; None with no breaker.
    """

    def __init__(self, message: str, *, status_code: int | None = None, accounting: Accounting | None = None,
                 breaker: str | None = None, in_a_row: int | None = None) -> None:
        super().__init__(message, status_code=status_code, accounting=accounting)
        self.breaker, self.in_a_row = breaker, in_a_row

    def __reduce__(self):
        cls, args, state = super().__reduce__()
        return cls, args, {**state, "breaker": self.breaker, "in_a_row": self.in_a_row}


class InvalidAnswer(ComparatorError, ValueError):
    """A comparator answered the wrong number of items for a batch, or an answer that is not a number in [0, 1]
    (a str or a bool included), or reported counts (retries, tokens) or token estimates that are not ints >= 0.
    A bug in the comparator, never parsed, clipped or imputed."""


class RankerError(ActivePRPError, RuntimeError):
    """A ranker's schedule returned an order that is not a permutation of the candidates, or asked for a pair
    that is not two distinct candidate indices (a ranker bug)."""
