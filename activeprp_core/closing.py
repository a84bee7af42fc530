"""How a ``Reranking`` ends: its ``RerankResult`` once the ranker has finished, or the failure of a batch (see
``Reranking.result`` and ``Reranking.fail``)."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .errors import ComparatorError, ComparatorUnavailable, RankerError
from .types import Judgment, RerankResult

if TYPE_CHECKING:
    from .reranking import Reranking

log = logging.getLogger("activeprp.engine")


def _whole_questions_from(sizes: Sequence[int], sent: int) -> int:
    """How many of a batch's questions (``sizes`` = prompts per question, in order) lie wholly after its first
    ``sent`` prompts (none of their calls went out)."""
    starts = list(itertools.accumulate(sizes, initial=0))[:-1]
    return sum(start >= sent for start in starts)


def _scores(order: list[int]) -> list[float]:
    rank = {i: r for r, i in enumerate(order)}
    return [(len(order) - rank[i]) / len(order) for i in range(len(order))]


def finish(r: Reranking, order: list[int]) -> RerankResult:
    """The ``RerankResult`` of a finished reranking (see ``Reranking.result``)."""
    n = len(r.candidates)
    if sorted(order) != list(range(n)):
        raise RankerError(f"ranker {r.ranker.name} returned a non-permutation of {n} candidates: {order[:20]}")
    counts = r.accounting
    if r.on_failure == "raise" and counts.calls and counts.failed_calls == counts.calls:
        error = ComparatorUnavailable(f"every one of the {counts.calls} calls failed: {'; '.join(r.errors)}")
        error.accounting = counts
        log.warning("rerank of %d candidates failed: %s", n, error)
        raise error
    if counts.failed_calls or r.failure:
        log.warning("rerank of %d candidates %s: %d of %d calls failed%s", n,
                    "degraded to the prior order for what was unknown" if r.failure else "finished",
                    counts.failed_calls, counts.calls, f" ({'; '.join(r.errors)})" if r.errors else "")
    return RerankResult(
        candidates=r.candidates, order=order, scores=_scores(order),
        **{**r.settings.as_dict(), "ranker": r.ranker.name, "oracle": r.oracle.name},
        exhausted=r.exhausted, exhausted_by=list(r.exhausted_by), failure=r.failure, errors=list(r.errors),
        converged=not r.exhausted and counts.failed_calls == 0 and r.failure is None, judge=r.answers.own.stats(),
        **counts.counts())


def fail_batch(r: Reranking, error: BaseException, sent: int | None) -> None:
    """``Reranking.fail``."""
    batch = r._pending
    n = 0 if batch is None else len(batch.prompts)
    sent = n if sent is None else min(sent, n)
    if batch is not None:  # the prompts never sent: their reservations back, their questions uncounted
        r.caps.refund(r._held[sent:], round_too=sent == 0)
        r.counts.comparisons -= _whole_questions_from(r._questions, sent)
    message = f"{type(error).__name__}: {error}"
    if r.on_failure != "prior" or not isinstance(error, ComparatorError) or batch is None:
        r.counts.failed_calls += sent
        with contextlib.suppress(AttributeError):  # also on foreign exceptions, where they take attributes
            error.accounting = r.accounting  # type: ignore[attr-defined]
        if isinstance(error, ComparatorError):
            log.warning("rerank of %d candidates failed after %d calls: %s", len(r.candidates),
                        r.caps["budget"].spent, message)
        raise error
    r.failure = message
    r.note_error(message)
    r._held = r._held[:sent] + [{}] * (n - sent)  # refunded above: nothing to reconcile
    r._advance([Judgment(None, error=message)] * n)
    r.counts.failed_calls -= n - sent  # the ones never sent are unknown, not failed
