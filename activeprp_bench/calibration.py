"""Fit the ``SimulatedComparator`` knobs to the paper's Flan-T5-XL judge on TREC DL19/DL20 qrels.

Two targets, both from Active Learners as Efficient PRP Rerankers:
- order effects: 20.6% of pairs flip their preferred document when the slot order is swapped (section 5, "Order
  effects and comparisons", and the appendix table of flip rates);
- converged quality: with an unlimited budget, the mean nDCG@10 over the (ranker, oracle) rows of its Table 2
  for Flan-T5-XL on DL19 and DL20 (``PAPER_XL_CONVERGED``), i.e. the judge is as good as the paper's judge
  on average over all methods (never fitted to one method's number).

The fit is committed as ``activeprp_core.comparators.simulated.CALIBRATED_PARAMS``.
Knobs: ``strength`` = 1 (the label scale, TREC grades 0-3) and ``pair_noise`` are fixed by the caller;
``position_bias`` is fitted to the flip rate and ``doc_noise`` to the converged quality, alternately, each by
bisection (flip rate increases with the bias and decreases with doc noise; quality decreases with doc noise).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from .datasets import Collection
from .grid import PAPER_RANKERS, run_grid, simulator_factory

PAPER_FLIP_RATE = 0.206
#: Paper Table 2, Flan-T5-XL, (DL19, DL20) nDCG@10 of the converged rankers (full budget).
PAPER_XL_CONVERGED: dict[tuple[str, str], tuple[float, float]] = {
    ("bubblesort", "bidirectional"): (68.4, 67.0), ("heapsort", "bidirectional"): (70.6, 68.9),
    ("quicksort", "bidirectional"): (70.4, 67.2), ("pac_bubble", "bidirectional"): (62.6, 58.6),
    ("pac_bubble", "randomized"): (61.1, 58.5), ("mohajer_bubble", "bidirectional"): (66.6, 67.5),
    ("mohajer_bubble", "randomized"): (69.5, 66.3), ("mohajer", "bidirectional"): (66.6, 67.3),
    ("mohajer", "randomized"): (68.7, 67.6),
}
PAPER_CONVERGED_MEAN = sum(a + b for a, b in PAPER_XL_CONVERGED.values()) / (2 * len(PAPER_XL_CONVERGED)) / 100


@dataclass
class Calibration:
    """Fitted knobs and the measured check values (nDCG as fractions, flip rate as a share of pairs), and
    ``judge_seed``: the simulated judge's noise realisation they were fitted and measured at (``--judge-seed``;
    calibration files written before it was recorded lack it)."""

    params: dict[str, float]
    flip_rate: float
    converged_mean: float
    converged: dict[str, float] = field(default_factory=dict)  # "ranker/oracle/collection" -> mean nDCG@10
    judge_seed: int = 0


def flip_rate(collections: Sequence[Collection], params: dict[str, float], seed: int = 0) -> float:
    """Mean over judged queries of the share of candidate pairs whose answer flips with the slot order."""
    judges = {c.name: simulator_factory(c, params, seed)(None) for c in collections}
    rates = [judges[c.name].flip_rate([d.id for d in c.candidates[q]], c.queries[q])
             for c in collections for q in c.qids]
    return sum(rates) / len(rates)


def measured_flip_rate(comparator_for, collections: Sequence[Collection], pairs_per_query: int,
                       rng: random.Random) -> tuple[float, int]:
    """The order effect of a comparator (``comparator_for(collection)(qid)``, as in ``run_grid``): for
    ``pairs_per_query`` random candidate pairs per judged query, ask both slot orders; a pair flips when the
    same slot is preferred both times (P > 0.5 in both, or P <= 0.5 in both). Returns ``(flip share, pairs
    asked)``; costs 2 calls per pair (use a ``CachedComparator`` for a real model).
    """
    flips = total = 0
    for c in collections:
        judge_of = comparator_for(c)
        for q in c.qids:
            judge = judge_of(q)
            for a, b in (rng.sample(c.candidates[q], 2) for _ in range(pairs_per_query)):
                p1, p2 = judge.compare(c.queries[q], [(a, b), (b, a)])
                if p1 is None or p2 is None:
                    continue
                flips += (p1 > 0.5) == (p2 > 0.5)
                total += 1
    return (flips / total if total else 0.0), total


def converged_quality(collections: Sequence[Collection], params: dict[str, float], seed: int = 0
                      ) -> dict[str, float]:
    """Mean nDCG@10 per ``ranker/oracle/collection`` with no budget, for the paper's (ranker, oracle) rows
    (oracle seed 0), plus ``"mean"``: their average, comparable to ``PAPER_CONVERGED_MEAN``."""
    out: dict[str, float] = {}
    for oracle in ("bidirectional", "randomized"):
        rankers = [r for r in PAPER_RANKERS if (r, oracle) in PAPER_XL_CONVERGED]
        rows = run_grid(collections, lambda c: simulator_factory(c, params, seed), rankers, [oracle], [None],
                        {oracle: [0]}, progress=False)
        for key in sorted({(r.ranker, r.oracle, r.collection) for r in rows}):  # not set order: PYTHONHASHSEED
            vals = [r.ndcg10 for r in rows if (r.ranker, r.oracle, r.collection) == key]
            out["/".join(key)] = sum(vals) / len(vals)
    out["mean"] = sum(out.values()) / len(out)
    return out


def bisect(f, lo: float, hi: float, target: float, increasing: bool, iters: int) -> float:
    """The knob in ``[lo, hi]`` at which ``f`` (monotone: ``increasing`` or not) reaches ``target``, after ``iters``
    halvings of the interval (its midpoint; an end of it when the target is out of range)."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def calibrate(collections: Sequence[Collection], pair_noise: float = 0.5, flip_target: float = PAPER_FLIP_RATE,
              quality_target: float = PAPER_CONVERGED_MEAN, rounds: int = 2, iters: int = 7,
              seed: int = 0) -> Calibration:
    """Fit ``position_bias`` (flip rate) and ``doc_noise`` (converged quality) with ``strength=1`` and the given
    ``pair_noise``; returns the knobs and the check values measured with them.

    Each bisection searches [0, 4] (in units of one relevance grade). Raises nothing; if a target is out of
    reach the knob ends at the edge of the range and the check values show the miss.
    """
    params = {"strength": 1.0, "doc_noise": 1.0, "position_bias": 0.5, "pair_noise": pair_noise}
    for _ in range(rounds):
        params["position_bias"] = bisect(lambda b: flip_rate(collections, {**params, "position_bias": b}, seed),
                                          0.0, 4.0, flip_target, True, iters)
        params["doc_noise"] = bisect(
            lambda s: converged_quality(collections, {**params, "doc_noise": s}, seed)["mean"],
            0.0, 4.0, quality_target, False, iters)
    params = {k: round(v, 3) for k, v in params.items()}
    conv = converged_quality(collections, params, seed)
    return Calibration(params, flip_rate(collections, params, seed), conv.pop("mean"), conv, seed)

