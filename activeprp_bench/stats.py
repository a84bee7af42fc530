"""Bootstrap statistics of the paper's appendix (numpy, seeded ``Generator``s passed in)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def bootstrap_ci(values: Sequence[float], rng: np.random.Generator, resamples: int = 10_000,
                 level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``values`` (e.g. one mean nDCG@10 per oracle seed) and its percentile bootstrap CI.

    Returns:
        ``(mean, low, high)``; a single value gives a zero-width interval.
    Raises:
        ValueError: empty ``values`` or ``level`` outside (0, 1).
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0 or not 0 < level < 1:
        raise ValueError("need at least one value and 0 < level < 1")
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(x.mean()), float(low), float(high)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], rng: np.random.Generator,
                     resamples: int = 10_000) -> tuple[float, float]:
    """Paired bootstrap over queries: ``a[i]`` and ``b[i]`` are two methods' scores on query i.

    Returns:
        ``(mean difference a - b, two-sided p-value)``: p = 2 * min(P*(d <= 0), P*(d >= 0)) over resampled
        mean differences d, capped at 1 (significant at 0.05 when p < 0.05).
    Raises:
        ValueError: different lengths or no queries.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.size == 0:
        raise ValueError("a and b must be non-empty and of equal length")
    d = x - y
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    p = 2 * min(float((means <= 0).mean()), float((means >= 0).mean()))
    return float(d.mean()), min(1.0, p)


def macro_diff_ci(diffs: Sequence[Sequence[float]], rng: np.random.Generator, resamples: int = 10_000,
                  level: float = 0.95) -> tuple[float, float, float]:
    """Paired bootstrap CI of a macro-averaged difference: ``diffs[c][i]`` is method a minus method b on query i
    of collection c. Queries are resampled within each collection; each resample's statistic is the mean over
    collections of the per-collection mean difference (the grid's macro mean).

    Returns:
        ``(mean, low, high)``, the percentile interval at ``level``.
    Raises:
        ValueError: no collection, an empty collection, or ``level`` outside (0, 1).
    """
    return macro_diff_test(diffs, rng, resamples, level)[:3]


def macro_diff_test(diffs: Sequence[Sequence[float]], rng: np.random.Generator, resamples: int = 10_000,
                    level: float = 0.95) -> tuple[float, float, float, float]:
    """``macro_diff_ci`` and, from the same resamples, the two-sided p-value of the macro difference as
    ``paired_bootstrap`` computes it (2 * min(P*(d <= 0), P*(d >= 0)), capped at 1).

    Returns:
        ``(mean, low, high, p)``.
    Raises:
        ValueError: as ``macro_diff_ci``.
    """
    if not diffs or any(len(d) == 0 for d in diffs) or not 0 < level < 1:
        raise ValueError("need at least one non-empty collection and 0 < level < 1")
    stats = np.zeros(resamples)
    for d in diffs:
        x = np.asarray(d, dtype=float)
        stats += x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    stats /= len(diffs)
    alpha = (1 - level) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    p = 2 * min(float((stats <= 0).mean()), float((stats >= 0).mean()))
    return float(np.mean([np.mean(d) for d in diffs])), float(low), float(high), min(1.0, p)
