import asyncio
import contextlib
import io
import os
import random
import shlex
from pathlib import Path

import pytest
from hypothesis import settings

from activeprp_core import Candidate, SimulatedComparator
from activeprp_core.comparators.answers import Answer
from activeprp_core.comparators.remote import RemoteComparator

# CI's property tests draw their examples from a fixed seed, so that a red run reproduces (.ci/run sets
# HYPOTHESIS_PROFILE=ci); elsewhere each run explores new examples.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

BENCH_EXTRA = 'pip install "activeprp[bench]"'
#: The real collections, ``../shared/data`` beside the checkout (CI has it; tests that read it skip without it).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_data = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data not present")


def skip_without_bench():
    """Skip the calling test module unless the ``bench`` extra's modules import (at module level, before the
    ``activeprp_bench`` imports); returns numpy."""
    np = pytest.importorskip("numpy", reason=BENCH_EXTRA)
    for module in ("ir_measures", "bm25s", "matplotlib", "pyarrow"):
        pytest.importorskip(module, reason=BENCH_EXTRA)
    return np


def documented_command(doc: str, program: str) -> list[str]:
    """The arguments of the command ``python <program> ...`` that ends a benchmark script's docstring, as the shell
    reads them: line continuations joined, ``a/{x,y}/b`` brace-expanded to ``a/x/b a/y/b``."""
    words = shlex.split(doc.split(f"    python {program}", 1)[1].replace("\\\n", " "))
    return [w for word in words for w in _braces(word)]


def printed_from_root(main, args: list[str]) -> str:
    """What ``main(args)`` (a benchmark script's entry point) prints, run from the repository root, where the
    documented commands' relative paths point."""
    out, cwd = io.StringIO(), os.getcwd()
    os.chdir(Path(__file__).resolve().parents[1])
    try:
        with contextlib.redirect_stdout(out):
            main(args)
    finally:
        os.chdir(cwd)
    return out.getvalue()


def _braces(word: str) -> list[str]:
    if "{" not in word:
        return [word]
    head, rest = word.split("{", 1)
    inner, tail = rest.split("}", 1)
    return [head + part + tail for part in inner.split(",")]


def make_case(n: int, seed: int = 0, dup_every: int = 0):
    """n candidates with distinct graded labels (a strict total order) in a shuffled prior order.

    With ``dup_every`` > 0, every dup_every-th candidate repeats the previous one's text and id.
    """
    rng = random.Random(seed)
    values = rng.sample(range(10 * n + 10), n)
    cands, labels = [], {}
    for i, v in enumerate(values):
        if dup_every and i and i % dup_every == 0:
            prev = cands[-1]
            cands.append(Candidate(prev.id, prev.text, {"pos": i}))
            continue
        cands.append(Candidate(f"d{i}", f"passage {i}", {"pos": i}))
        labels[f"d{i}"] = v
    return cands, labels


def true_top(cands, labels, k):
    return sorted(range(len(cands)), key=lambda i: -labels[cands[i].id])[:k]


class Recorder(SimulatedComparator):
    """The shared recording judge: a ``SimulatedComparator`` (same arguments) that records every batch it is
    asked, in order, as the list of its ``(first, second)`` pairs: ``batches`` through ``compare``,
    ``abatches`` through ``acompare`` (which yields to the event loop once, as an endpoint would)."""

    def __init__(self, labels, **knobs):
        super().__init__(labels, **knobs)
        self.batches, self.abatches = [], []

    def compare(self, query, pairs):
        self.batches.append(list(pairs))
        return super().compare(query, pairs)

    async def acompare(self, query, pairs):
        self.abatches.append(list(pairs))
        await asyncio.sleep(0)
        return super().compare(query, pairs)

    @property
    def sizes(self) -> list[int]:
        """The length of each batch asked through ``compare``."""
        return [len(b) for b in self.batches]


class FakeRemote(RemoteComparator):
    """The shared fake remote provider: a ``RemoteComparator`` whose request is the query and whose reply is P(A)
    itself. ``send`` (what a subclass overrides: one attempt, sync) counts ``sent`` and answers 0.75; ``asend``
    runs ``send`` on the loop; ``classify`` knows no error. Building one needs tenacity (importorskip it)."""

    model, endpoint = "m", "127.0.0.1"

    def __init__(self, **transport):
        super().__init__(**transport)
        self.sent = 0

    def request(self, query, first, second):
        return query

    def send(self, client, request):
        self.sent += 1
        return 0.75

    async def asend(self, client, request):
        return self.send(client, request)

    def parse(self, response):
        return Answer(response)


@pytest.fixture
def case100():
    cands, labels = make_case(100, seed=1)
    return cands, labels, SimulatedComparator(labels)


class UsageJudge:
    """A judge that reports token usage like an endpoint: by ``labels`` (higher wins), ``estimate`` tokens
    reserved per prompt (None = the Comparator default) and ``share`` of it reported (``share=0``: reports
    nothing). Records the usage it reported."""

    def __init__(self, labels, estimate=None, share=0.25):
        from activeprp_core import Comparator
        from activeprp_core.types import Judgment

        judge = self

        class _Judge(Comparator):
            def estimate_tokens(self, query, pairs):
                return super().estimate_tokens(query, pairs) if estimate is None else [estimate] * len(pairs)

            def judge(self, query, pairs, *, guard=None):
                out = []
                for (a, b), bound in zip(pairs, self.estimate_tokens(query, pairs)):
                    used = int(bound * share)
                    judge.reported += used
                    judge.calls += 1
                    prob = 1.0 if labels.get(a.id, 0) >= labels.get(b.id, 0) else 0.0
                    out.append(Judgment(prob, prompt_tokens=max(used - 1, 0), completion_tokens=min(used, 1)))
                return out

        self.reported = self.calls = 0
        self.comparator = _Judge()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """A real OpenAI-compatible server (llama-cpp-python on the bundled GGUF, 127.0.0.1), shared by the modules
    that test against it and stopped at the end of the session."""
    from _llm_server import bundled_server

    with bundled_server(tmp_path_factory.mktemp("llama")) as srv:
        yield srv
