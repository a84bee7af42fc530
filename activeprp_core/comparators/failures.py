"""How remote comparators read failures: a provider's ``classify`` turns one failed attempt into a ``Failure``
whose ``Fault`` says what ``RemoteComparator`` does with it (``status_failure`` maps HTTP statuses)::

    Fault    typical cause                          outcome
    REFUSE   401 / 403 (key), 404 (model or route)  not retried; the typed error is raised and the guard tripped,
                                                    so no later call of the rerank is sent
    REJECT   another 4xx (400, 413, 422 ...)        not retried; ComparatorRequestError for this call only, the
                                                    breaker counts the endpoint as up (rerank_many: one query fails)
    RETRY    timeout, connection, 408/409/429, 5xx  retried; after ``max_attempts`` a failed call
                                                    (``Judgment(prob=None, error=...)``), counted by the breaker
    FAIL     e.g. an undecodable body               not retried; a failed call, counted by the breaker
    (parse)  a reply that is not a usable answer    a failed call with the reason

Every message carries the endpoint's own words with the secrets (API keys) replaced by ``***``, cut to
``MAX_MESSAGE`` characters (so it never holds a whole passage).
"""

from __future__ import annotations

import email.utils
import enum
import time
from dataclasses import dataclass

from ..errors import ComparatorAuthError, ComparatorError, ComparatorRequestError
from ..types import HTTP_STATUSES
from .answers import field

MAX_MESSAGE = 300
"""Error messages (raised or in ``Judgment.error``) are cut to this many characters."""
RETRIED_STATUS = (408, 409, 429)
"""4xx statuses that are retried (as the openai SDK does); every 5xx is retried too."""


class Fault(enum.Enum):
    """What a failed attempt means (see the module docstring's table)."""

    RETRY = "retry"
    FAIL = "fail"
    REJECT = "reject"
    REFUSE = "refuse"


@dataclass(frozen=True)
class Failure:
    """A provider's reading of one failed attempt (``RemoteComparator.classify``).

    Attributes:
        fault: what it means. message: the endpoint's own words (the base scrubs secrets and cuts it).
        status_code: the HTTP status, when there is one. retry_after: seconds the endpoint asked to wait.
        error: the exception class raised for ``REJECT`` / ``REFUSE``.
    """

    fault: Fault
    message: str
    status_code: int | None = None
    retry_after: float | None = None
    error: type[ComparatorError] = ComparatorRequestError


def status_failure(status: int, message: str, retry_after: float | None = None) -> Failure:
    """The ``Failure`` of an HTTP status: 401/403 refuse (``ComparatorAuthError``), 404 refuses
    (``ComparatorRequestError``), 408/409/429/5xx retry, any other status rejects this call (one outside
    ``HTTP_STATUSES``, a client's own code, is kept as no status)."""
    if status not in HTTP_STATUSES:
        return Failure(Fault.REJECT if status < 500 else Fault.RETRY, message)
    if status in (401, 403, 404):
        kind = ComparatorAuthError if status != 404 else ComparatorRequestError
        return Failure(Fault.REFUSE, message, status, error=kind)
    if status in RETRIED_STATUS or status >= 500:
        return Failure(Fault.RETRY, message, status, retry_after)
    return Failure(Fault.REJECT, message, status)


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds an HTTP client's error asks to wait: its response's ``retry-after-ms`` / ``retry-after``
    (seconds or HTTP date) header; None when absent or unreadable."""
    headers = field(field(exc, "response"), "headers")
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms") is not None:
            return float(headers["retry-after-ms"]) / 1000.0
        value = headers.get("retry-after")
        try:
            return None if value is None else float(value)
        except ValueError:
            return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None


def error_message(exc: BaseException) -> str:
    """The endpoint's own message for an HTTP client's error: its ``body`` (``{"error": {"message": ...}}`` and the
    usual variants, as the openai and anthropic SDKs keep it), else the exception's text with its cause's
    (``with_cause``)."""
    body = field(exc, "body")
    for _ in range(2):  # the client hands over the body's "error" member, or the whole body
        if isinstance(body, dict):
            body = next((body[k] for k in ("error", "message", "detail") if body.get(k)), None)
    return body if isinstance(body, str) and body else with_cause(exc)


def with_cause(exc: BaseException) -> str:
    """``str(exc)`` followed by ``(CauseType: its text)`` for the first exception of its ``__cause__`` chain whose
    text is new, on one line: the openai SDK raises "Connection error." for a refused connection, a DNS failure, a
    URL without http:// and a bad header alike, and keeps why in the httpx error it was raised from."""
    text, cause, seen = str(exc), exc.__cause__, 0
    while cause is not None and seen < 4:
        said = " ".join(str(cause).split())
        if said and said not in text:
            return f"{text} ({type(cause).__name__}: {said})"
        cause, seen = cause.__cause__, seen + 1
    return text
