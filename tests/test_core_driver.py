"""The public sans-I/O driver (Reranking) and failure handling: a comparator's errors with the partial accounting,
``on_failure``."""

import asyncio
import logging
import subprocess
import sys

import numpy as np
import pytest

from activeprp_core import (
    DONE,
    Candidate,
    Comparator,
    ComparatorAuthError,
    ComparatorError,
    ComparatorUnavailable,
    InvalidAnswer,
    Reranking,
    SimulatedComparator,
    arerank,
    rerank,
)
from activeprp_core.types import Judgment
from tests.conftest import make_case


def cands(n):
    return [Candidate(f"d{i}", f"text {i}") for i in range(n)]


def test_driving_reranking_by_hand_equals_rerank():
    cs, labels = make_case(40, seed=2)
    judge = SimulatedComparator(labels, doc_noise=0.5, pair_noise=0.5, seed=3)
    reranking = Reranking("q", cs, ranker="mohajer", oracle="bidirectional", budget=150, top_k=5, seed=9)
    batches = 0
    while (batch := reranking.next_batch()) is not DONE:
        assert reranking.next_batch() is batch  # asking again gives the same pending batch
        assert batch.pairs == [(cs[a], cs[b]) for a, b in batch.prompts]
        reranking.send(judge.compare(batch.query, batch.pairs))
        batches += 1
    hand = reranking.result()
    core = rerank("q", cs, ranker="mohajer", oracle="bidirectional", comparator=SimulatedComparator(
        labels, doc_noise=0.5, pair_noise=0.5, seed=3), budget=150, top_k=5, seed=9)
    assert (hand.order, hand.calls, hand.rounds) == (core.order, core.calls, core.rounds) and batches == hand.rounds


def test_protocol_misuse_is_reported():
    reranking = Reranking("q", cands(4), budget=None, top_k=2)
    with pytest.raises(RuntimeError, match="before the reranking is done"):
        reranking.result()
    with pytest.raises(InvalidAnswer, match="1 answers for"):
        reranking.send([1.0])
    while not reranking.done:
        reranking.send([1.0] * len(reranking.next_batch().prompts))
    with pytest.raises(RuntimeError, match="no batch pending"):
        reranking.send([])
    assert sorted(reranking.result().order) == [0, 1, 2, 3]


@pytest.mark.parametrize(("sent", "error"), [(-3, ValueError), (1.5, TypeError), (True, TypeError)])
def test_fail_refuses_a_sent_count_that_is_not_a_count_and_changes_nothing(sent, error):
    """``sent=-3`` raised a bare IndexError half-way, and the reranking went on sending calls as if unfailed."""
    reranking = Reranking("q", cands(6), budget=20, top_k=2, on_failure="prior")
    batch, before = reranking.next_batch(), reranking.accounting
    with pytest.raises(error, match="sent"):
        reranking.fail(ComparatorUnavailable("down"), sent=sent)
    after = reranking.accounting
    assert reranking.next_batch() is batch and (after.calls, after.failed_calls) == (before.calls, 0)
    reranking.fail(ComparatorUnavailable("down"), sent=1)
    assert reranking.done and reranking.result().failure == "ComparatorUnavailable: down"


class Answers(Comparator):
    """Answers every pair of a batch with ``answers`` (repeated to the batch's length)."""

    def __init__(self, *answers):
        self.answers = answers

    def compare(self, query, pairs):
        return [self.answers[i % len(self.answers)] for i in range(len(pairs))]


@pytest.mark.parametrize("answer", ["0.9", True, b"1", np.True_])  # numpy's bool: a mask passed for answers
def test_an_answer_that_is_not_a_number_is_invalid_not_parsed(answer):
    with pytest.raises(InvalidAnswer, match=f"comparator returned {type(answer).__name__} "):
        rerank("q", cands(5), comparator=Answers(answer), budget=10)


class Returns(Comparator):
    """Returns ``make(pairs)`` for each batch, counting the pairs it was sent."""

    def __init__(self, make):
        self.make, self.sent = make, 0

    def compare(self, query, pairs):
        self.sent += len(pairs)
        return self.make(pairs)


@pytest.mark.parametrize("make, got", [(lambda p: None, "NoneType None"), (lambda p: 0.5, "float 0.5"),
                                       (lambda p: {i: 1.0 for i in range(len(p))}, "dict"),
                                       (lambda p: "AB", "str 'AB'")])
@pytest.mark.parametrize("on_failure", ["raise", "prior"])
def test_answers_that_are_not_one_per_pair_are_invalid_and_their_calls_counted(make, got, on_failure):
    """Not a sequence of answers, or one short: a typed comparator error (``on_failure="prior"`` degrades on it),
    and the calls that came back with it are counted as failed calls."""
    for judge in (Returns(make), Returns(lambda p: [1.0] * (len(p) - 1))):
        kw = dict(comparator=judge, budget=20, ranker="allpairs", oracle="single", on_failure=on_failure)
        if on_failure == "raise":
            with pytest.raises(InvalidAnswer) as info:
                rerank("q", cands(6), **kw)
            spent = info.value.accounting
        else:
            spent = rerank("q", cands(6), **kw)
            assert spent.failure.startswith("InvalidAnswer") and sorted(spent.order) == list(range(6))
        assert spent.calls == spent.failed_calls == judge.sent > 0
    assert got in rerank("q", cands(6), comparator=Returns(make), budget=20, on_failure="prior").failure


def test_answers_in_any_iterable_are_read():
    one = rerank("q", cands(6), comparator=Returns(lambda p: [0.25] * len(p)), budget=20)
    for make in (lambda p: tuple([0.25] * len(p)), lambda p: (0.25 for _ in p)):
        assert rerank("q", cands(6), comparator=Returns(make), budget=20).order == one.order


class Counts(Comparator):
    """Answers 1.0, reporting ``tokens`` prompt tokens per call and pricing each prompt by ``estimate``."""

    def __init__(self, tokens=7, estimate=lambda pairs: [100] * len(pairs)):
        self.tokens, self.estimate = tokens, estimate

    def estimate_tokens(self, query, pairs):
        return self.estimate(pairs)

    def compare(self, query, pairs):
        return [Judgment(1.0, prompt_tokens=self.tokens) for _ in pairs]


@pytest.mark.parametrize("judge, message", [
    (Counts(tokens=-50), "reported prompt_tokens=-50: prompt_tokens must be >= 0, got -50"),
    (Counts(tokens="7"), "reported prompt_tokens='7'"),
    (Returns(lambda p: [Judgment(None, status_code="429")] * len(p)), "reported status_code='429'"),
    (Returns(lambda p: [Judgment(None, status_code=-1)] * len(p)), r"reported status_code=-1: .*\(100-599\)"),
    (Returns(lambda p: [Judgment(None, status_code=99999)] * len(p)), r"status_code=99999: not an HTTP status"),
    (Counts(estimate=lambda pairs: [-100] * len(pairs)), r"priced 1 prompts for token_budget as \[-100\]"),
    (Counts(estimate=lambda pairs: [10] * (len(pairs) - 1)), "priced 1 prompts for token_budget as \\[\\]"),
])
def test_counts_and_token_estimates_that_are_not_ints_from_0_are_invalid(judge, message):
    """A negative count or estimate would let calls past ``token_budget``: a comparator bug, raised typed."""
    with pytest.raises(InvalidAnswer, match=message):
        rerank("q", cands(30), comparator=judge, budget=None, token_budget=500, ranker="bubblesort")


def test_counts_of_any_integer_type_are_read_as_ints():
    import numpy as np

    res = rerank("q", cands(6), comparator=Counts(tokens=np.int64(7)), budget=10, token_budget=5000)
    assert res.prompt_tokens == 7 * res.calls > 0 and type(res.prompt_tokens) is int


def test_numeric_answers_of_any_numeric_type_are_read_as_floats():
    import numpy as np

    typed = rerank("q", cands(6), comparator=Answers(np.float32(0.25), 1, np.float64(0.0)), budget=20)
    assert typed.order == rerank("q", cands(6), comparator=Answers(0.25, 1.0, 0.0), budget=20).order

class Failing(Comparator):
    """Raises ``error`` from the ``fail_at``-th call on (counting calls, i.e. batches), else answers from ``inner``;
    ``given`` lists the number of pairs of each call."""

    def __init__(self, inner, error, fail_at=0):
        self.inner, self.error, self.fail_at, self.calls, self.given = inner, error, fail_at, 0, []

    def compare(self, query, pairs):
        self.calls += 1
        self.given.append(len(pairs))
        if self.calls > self.fail_at:
            raise self.error
        return self.inner.compare(query, pairs)


@pytest.mark.parametrize("error", [ComparatorAuthError("bad key", status_code=401), KeyError("bug")])
@pytest.mark.parametrize("use_async", [False, True])
def test_a_comparator_error_propagates_with_the_partial_accounting(error, use_async, caplog):
    """The failing third batch was handed to the comparator, which raised: its calls and round count as spent (an
    unknown outcome: failed calls); the error said 2 rounds and left the batch's calls out."""
    cs, labels = make_case(30, seed=1)
    comp = Failing(SimulatedComparator(labels), error, fail_at=2)
    with caplog.at_level(logging.WARNING, logger="activeprp"), pytest.raises(type(error)) as info:
        if use_async:
            asyncio.run(arerank("q", cs, comparator=comp, budget=None))
        else:
            rerank("q", cs, comparator=comp, budget=None)
    spent = info.value.accounting
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("activeprp")]
    assert warnings == ([f"rerank of 30 candidates failed after {spent.calls} calls: ComparatorAuthError: bad key "
                         "(HTTP 401)"] if isinstance(error, ComparatorError) else [])  # a bug is raised, not logged
    assert comp.calls == 3 and spent.rounds == 3 and spent.calls == sum(comp.given)
    assert spent.failed_calls == comp.given[2] > 0


def test_the_library_prints_nothing_until_the_application_configures_logging():
    """Python's last-resort handler printed the WARNING of a failed rerank on stderr, beside the error itself (the
    CLI said it twice)."""
    code = ("from activeprp_core import Candidate, ComparatorUnavailable, rerank\n"
            "class Dead:\n    def compare(self, query, pairs):\n        return [None] * len(pairs)\n"
            "try:\n    rerank('q', [Candidate(str(i), 't') for i in range(5)], comparator=Dead(), budget=10)\n"
            "except ComparatorUnavailable:\n    print('raised')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.stdout, done.stderr) == ("raised\n", "")
    configured = subprocess.run([sys.executable, "-c", "import logging; logging.basicConfig()\n" + code],
                                capture_output=True, text=True, timeout=60)
    assert "WARNING:activeprp.engine:rerank of 5 candidates failed" in configured.stderr


@pytest.mark.parametrize("max_consecutive_failures", [None, 3])
def test_a_comparator_s_own_failed_calls_give_their_status_with_or_without_the_breaker(max_consecutive_failures):
    """The breaker's ``ComparatorUnavailable`` (``record_all``) carries the calls' ``status_code`` as the
    rerank's own does."""
    limited = Returns(lambda p: [Judgment(None, error="rate limited", status_code=429)] * len(p))
    with pytest.raises(ComparatorUnavailable) as raised:
        rerank("q", cands(6), comparator=limited, budget=10, max_consecutive_failures=max_consecutive_failures)
    assert raised.value.status_code == 429
    assert ("circuit breaker" in raised.value.message) == (max_consecutive_failures is not None)


def test_on_failure_prior_degrades_reports_and_warns(caplog):
    cs, labels = make_case(30, seed=1)
    comp = Failing(SimulatedComparator(labels), ComparatorUnavailable("endpoint down", status_code=503), fail_at=2)
    full = rerank("q", cs, comparator=SimulatedComparator(labels), budget=None)
    with caplog.at_level(logging.WARNING, logger="activeprp"):
        res = rerank("q", cs, comparator=comp, budget=None, on_failure="prior")
    assert comp.calls == 3  # nothing is sent after the failure
    assert sorted(res.order) == list(range(30)) and not res.converged and not res.exhausted
    assert res.failure == "ComparatorUnavailable: endpoint down (HTTP 503)" and res.errors == [res.failure]
    # the third batch was handed to the comparator, which raised: spent, its calls failed
    assert res.failed_calls == comp.given[2] > 0 and res.calls == sum(comp.given) < full.calls and res.rounds == 3
    assert res.stats()["failure"] == res.failure
    (record,) = [r for r in caplog.records if r.name.startswith("activeprp")]
    assert record.levelno == logging.WARNING and "degraded" in record.getMessage()


def test_on_failure_prior_does_not_swallow_bugs():
    cs, labels = make_case(10, seed=1)
    with pytest.raises(KeyError):
        rerank("q", cs, comparator=Failing(SimulatedComparator(labels), KeyError("bug")), budget=None,
               on_failure="prior")


def test_bad_on_failure():
    with pytest.raises(ValueError, match="on_failure"):
        rerank("q", cands(3), comparator=SimulatedComparator({}), budget=None, on_failure="ignore")


class PricesWrongLater(Comparator):
    """Answers every call (the longer text wins) and prices prompts right the first ``right`` times, then
    ``wrong(pairs)`` (one estimate too many, or an exception); ``calls`` counts the calls answered."""

    def __init__(self, wrong, right=3):
        self.wrong, self.right, self.priced, self.calls = wrong, right, 0, 0

    def compare(self, query, pairs):
        self.calls += len(pairs)
        return [0.6 if len(a.text) > len(b.text) else 0.4 for a, b in pairs]

    def estimate_tokens(self, query, pairs):
        self.priced += 1
        return [10] * len(pairs) if self.priced <= self.right else self.wrong(pairs)


def too_many(pairs):
    return [10] * (len(pairs) + 1)


def crashes(pairs):
    raise KeyError("tokenizer crashed")


def run(use_async, *args, **kwargs):
    return asyncio.run(arerank(*args, **kwargs)) if use_async else rerank(*args, **kwargs)


@pytest.mark.parametrize("use_async", [False, True])
def test_an_estimate_that_fails_in_a_later_round_is_no_failure_of_the_answered_calls(use_async):
    """``estimate_tokens`` answering the wrong length while the next round is planned: an ``InvalidAnswer`` (a
    ComparatorError) raised as itself with no failed call (it said 2 of the 3 answered calls failed); with
    ``on_failure="prior"`` the rerank degrades (it raised RuntimeError "result() before the reranking is done")."""
    cs = [Candidate(f"d{i}", "x" * i) for i in range(8)]
    kw = dict(budget=30, token_budget=10**6)
    judge = PricesWrongLater(too_many)
    with pytest.raises(InvalidAnswer, match="priced 1 prompts for token_budget") as info:
        run(use_async, "q", cs, comparator=judge, **kw)
    spent = info.value.accounting
    assert spent.calls == judge.calls > 0 and spent.failed_calls == 0
    judge = PricesWrongLater(too_many)
    res = run(use_async, "q", cs, comparator=judge, on_failure="prior", **kw)
    assert res.failure.startswith("InvalidAnswer: the comparator priced") and res.errors == [res.failure]
    assert sorted(res.order) == list(range(8)) and not res.converged
    assert res.calls == judge.calls > 0 and res.failed_calls == 0
    # not a ComparatorError: raised as itself even with "prior", no call counted as failed
    judge = PricesWrongLater(crashes)
    with pytest.raises(KeyError, match="tokenizer crashed") as info:
        run(use_async, "q", cs, comparator=judge, on_failure="prior", **kw)
    assert info.value.accounting.calls == judge.calls > 0 and info.value.accounting.failed_calls == 0


def test_an_estimate_that_fails_planning_a_batch_sends_none_of_it_with_on_failure_prior():
    """Two questions of a round priced, the third one's estimate fails: no call of the batch goes out (the calls
    stop at the failure), and what the first two reserved is given back."""
    judge = PricesWrongLater(too_many, right=2)  # allpairs: one round of every pair, priced one by one
    res = rerank("q", cands(6), comparator=judge, ranker="allpairs", oracle="single", budget=None,
                 token_budget=10**6, on_failure="prior")
    assert res.failure.startswith("InvalidAnswer") and judge.calls == 0 and sorted(res.order) == list(range(6))
    assert (res.calls, res.comparisons, res.rounds, res.failed_calls, res.prompt_tokens) == (0, 0, 0, 0, 0)
