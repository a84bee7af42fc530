"""Calibrate and measure the bench's judge family (``activeprp_bench.judges``) on TREC DL19 + DL20.

For each judge: its answer statistics on random candidate pairs asked in both slot orders (flip rate, first-slot
rate, soft rate, mean confidence |p - 0.5|, and against the qrels: log loss and expected calibration error of
P(first has the higher grade) over pairs of distinct grades), and nDCG@10 (ir-measures, through
``activeprp_cli.metrics``) of the calibration settings: the paper's nine converged ranker x oracle rows at
N=100, K=10 (Table 2 for Flan-T5-XL, the appendix for Qwen3-4B; bidirectional heapsort is also Setwise's
pairwise heapsort), and converged Mohajer at N=20 (the depth of the bundled model's cache).

    python benchmarks/judge_calibration.py --data ../shared/data --out benchmarks/results/judges
    python benchmarks/judge_calibration.py --data ../shared/data --fit   # re-fit the knobs of judges.py

``--fit`` prints the knobs fitted by bisection (position biases to flip-rate targets, document noise to the
published nDCG@10 targets, temperatures by log loss or to the bundled model's confidence); they are copied into
``judges.py`` as constants (the fit is not re-run at import time).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages

from activeprp_bench import calibration  # noqa: E402
from activeprp_bench import judges as J  # noqa: E402
from activeprp_bench.calibration import PAPER_FLIP_RATE, PAPER_XL_CONVERGED  # noqa: E402
from activeprp_cli.metrics import ndcg_at_k, ranking_to_run  # noqa: E402
from activeprp_core import Candidate, Comparator, rerank  # noqa: E402

#: Paper Table 2, Flan-T5-XL converged nDCG@10 (DL19, DL20) of its nine ranker x oracle rows.
XL_ROWS: dict[tuple[str, str], tuple[float, float]] = PAPER_XL_CONVERGED
#: Paper appendix, Qwen3-4B-Instruct end-to-end table (DL19, DL20), the same nine rows.
QWEN_ROWS: dict[tuple[str, str], tuple[float, float]] = {
    ("bubblesort", "bidirectional"): (67.44, 70.45), ("heapsort", "bidirectional"): (70.26, 69.46),
    ("quicksort", "bidirectional"): (70.70, 68.83), ("pac_bubble", "bidirectional"): (64.25, 67.09),
    ("pac_bubble", "randomized"): (63.02, 66.05), ("mohajer_bubble", "bidirectional"): (70.49, 66.92),
    ("mohajer_bubble", "randomized"): (70.26, 67.58), ("mohajer", "bidirectional"): (70.43, 66.92),
    ("mohajer", "randomized"): (70.98, 65.43),
}
#: Setwise (Zhuang et al., SIGIR 2024), Flan-T5-XL pairwise heapsort nDCG@10 on DL19 / DL20 (BM25 top-100).
SETWISE_HEAPSORT = (70.5, 69.2)
PAPER_FLIP = PAPER_FLIP_RATE


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _pair_mean(rows: dict[tuple[str, str], tuple[float, float]]) -> float:
    return _mean([v for pair in rows.values() for v in pair])


def _rand_minus_bi(rows: dict[tuple[str, str], tuple[float, float]]) -> float:
    """Mean over rankers with both oracles of (randomized - bidirectional), DL19 and DL20 averaged."""
    rankers = sorted({r for r, o in rows if o == "randomized"})
    return _mean([_mean(rows[r, "randomized"]) - _mean(rows[r, "bidirectional"]) for r in rankers])


XL_MEAN, QWEN_MEAN, QWEN_GAP = _pair_mean(XL_ROWS), _pair_mean(QWEN_ROWS), _rand_minus_bi(QWEN_ROWS)


@dataclass
class Coll:
    """One collection: judged queries, their BM25 top-100 (best first) and graded qrels."""

    name: str
    queries: dict[str, str]
    candidates: dict[str, list[Candidate]]
    qrels: dict[str, dict[str, int]]


def load(data: Path) -> list[Coll]:
    """TREC DL19 and DL20 (RankGPT-layout BM25 top-100 and qrels; negative grades read as 0), judged queries."""
    import ir_measures

    out = []
    for year, tag in ((2019, "dl19"), (2020, "dl20")):
        d = data / f"trec-dl-{year}"
        qrels: dict[str, dict[str, int]] = {}
        for q in ir_measures.read_trec_qrels(str(d / f"qrels.{tag}-passage.txt")):
            qrels.setdefault(q.query_id, {})[q.doc_id] = max(0, q.relevance)
        queries, cands = {}, {}
        for line in (d / f"bm25_{tag}_top100.jsonl").read_text().splitlines():
            rec = json.loads(line)
            hits = sorted(rec["hits"], key=lambda h: int(h["rank"]))
            qid = str(hits[0]["qid"])
            if qrels.get(qid):
                queries[qid] = rec["query"]
                cands[qid] = [Candidate(str(h["docid"]), h["content"]) for h in hits]
        out.append(Coll(tag, queries, cands, qrels))
    return out


JudgeOf = Callable[[Coll, str], Comparator]


def named(name: str, seed: int = 0) -> JudgeOf:
    """``(collection, qid) -> judge`` for a registry name."""
    return lambda c, qid: J.build_judge(name, c.qrels[qid], seed)


def with_knobs(knobs: J.Knobs, seed: int = 0) -> JudgeOf:
    return lambda c, qid: J.GradedJudge(c.qrels[qid], knobs, seed=seed)


def answer_stats(judge_of: JudgeOf, colls: Sequence[Coll], depth: int = 100, pairs_per_query: int = 200,
                 seed: int = 0) -> dict[str, float]:
    """Both slot orders of ``pairs_per_query`` random pairs of each query's top ``depth``: flip rate (the same
    slot preferred in both orders: p > 0.5 twice, or p < 0.5 twice; p = 0.5 prefers neither), first-slot rate
    (p > 0.5), soft rate (0 < p < 1), mean |p - 0.5|, and over the
    prompts whose two passages have distinct grades, the log loss and 10-bin expected calibration error of
    p as P(first has the higher grade)."""
    rng = random.Random(seed)
    flips = pairs = firsts = soft = 0
    conf: list[float] = []
    graded: list[tuple[float, int]] = []
    for c in colls:
        for qid in c.queries:
            judge, cands, grades = judge_of(c, qid), c.candidates[qid][:depth], c.qrels[qid]
            for a, b in (rng.sample(cands, 2) for _ in range(pairs_per_query)):
                p1, p2 = judge.compare(c.queries[qid], [(a, b), (b, a)])
                flips += (p1 > 0.5 and p2 > 0.5) or (p1 < 0.5 and p2 < 0.5)
                pairs += 1
                for p, (x, y) in ((p1, (a, b)), (p2, (b, a))):
                    firsts += p > 0.5
                    soft += 0.0 < p < 1.0
                    conf.append(abs(p - 0.5))
                    gx, gy = grades.get(x.id, 0), grades.get(y.id, 0)
                    if gx != gy:
                        graded.append((p, int(gx > gy)))
    eps = 1e-6
    loss = _mean([-math.log(max(eps, p if y else 1 - p)) for p, y in graded])
    bins: dict[int, list[tuple[float, int]]] = {}
    for p, y in graded:
        bins.setdefault(min(int(p * 10), 9), []).append((p, y))
    ece = sum(len(v) * abs(_mean([p for p, _ in v]) - _mean([y for _, y in v])) for v in bins.values()) / len(graded)
    return {"flip_rate": flips / pairs, "first_slot_rate": firsts / (2 * pairs), "soft_rate": soft / (2 * pairs),
            "mean_confidence": _mean(conf), "log_loss": loss, "ece": ece, "pairs": pairs}


def quality(judge_of: JudgeOf, colls: Sequence[Coll], rows: Sequence[tuple[str, str]], depth: int = 100,
            seeds: int = 2, top_k: int = 10, budget: int | None = None, max_rounds: int | None = None
            ) -> dict[tuple[str, str, str], float]:
    """Mean nDCG@``top_k`` (x100) per (ranker, oracle, collection) over the judged queries, reranking each
    query's top ``depth`` with ``budget`` and ``max_rounds`` (None = no cap); rows whose oracle is not
    bidirectional average ``seeds`` oracle seeds. One judge per query, shared by the rows (its answers do not
    depend on who asks)."""
    out = {}
    judges = {(c.name, q): judge_of(c, q) for c in colls for q in c.queries}
    for ranker, oracle in rows:
        for c in colls:
            per_seed = []
            for s in range(1 if oracle == "bidirectional" else seeds):
                run = {}
                for qid, query in c.queries.items():
                    cands = c.candidates[qid][:depth]
                    res = rerank(query, cands, ranker=ranker, oracle=oracle, comparator=judges[c.name, qid],
                                 budget=budget, top_k=top_k, seed=s, max_rounds=max_rounds)
                    run[qid] = ranking_to_run([cands[i].id for i in res.order])
                per_seed.append(_mean(list(ndcg_at_k(c.qrels, run, top_k).values())))
            out[ranker, oracle, c.name] = 100 * _mean(per_seed)
    return out


def _rows_of(q: dict[tuple[str, str, str], float]) -> dict[tuple[str, str], tuple[float, float]]:
    return {(r, o): (q[r, o, "dl19"], q[r, o, "dl20"]) for r, o, c in q if c == "dl19"}


def bundled_sort_ndcg(colls: Sequence[Coll], judge_of: JudgeOf, depth: int = 20) -> float:
    """Mean over DL19 and DL20 of nDCG@10 when each query's top ``depth`` is sorted by the judge's own score."""
    vals = []
    for c in colls:
        run = {}
        for qid, query in c.queries.items():
            judge = judge_of(c, qid)
            run[qid] = {d.id: judge.score(query, d.id) for d in c.candidates[qid][:depth]}  # type: ignore[attr-defined]
        vals.append(_mean(list(ndcg_at_k(c.qrels, run, 10).values())))
    return 100 * _mean(vals)


# ---- fitting --------------------------------------------------------------------------------------------------
def bisect(f: Callable[[float], float], lo: float, hi: float, target: float, increasing: bool, iters: int) -> float:
    """``activeprp_bench.calibration.bisect`` rounded to 3 decimals, as the knobs are copied into ``judges.py``."""
    return round(calibration.bisect(f, lo, hi, target, increasing, iters), 3)


FIT_PARTS = ("bias", "soft", "setwise", "qwen", "ql")


def fit(colls: Sequence[Coll], parts: Sequence[str] = FIT_PARTS, iters: int = 7) -> dict[str, object]:
    """Fit the knobs of ``judges.py`` (see the module docstring) for ``parts`` of ``FIT_PARTS``; returns them
    with the check values."""
    def flip(knobs: J.Knobs, depth: int = 100) -> float:
        return answer_stats(with_knobs(knobs), colls, depth, 100)["flip_rate"]

    out: dict[str, object] = {}
    base = J.CALIBRATED
    targets = (("mild_bias", 0.10, replace(base, pair_noise=J.MILD_NOISE)), ("strong_bias", 0.40, base),
               ("low_noise_bias", PAPER_FLIP, replace(base, pair_noise=0.15)),
               ("doc_error_bias", PAPER_FLIP, replace(base, doc_noise=0.6, doc_error_rate=0.03)))
    for key, target, knobs in targets if "bias" in parts else ():
        out[key] = bisect(lambda b, k=knobs: flip(replace(k, position_bias=b)), 0.0, 3.0, target, True, iters)
        print(key, out[key], flush=True)
    # soft temperature: log loss of sigmoid(z / T) against "first has the higher grade" (golden search on log T)
    if "soft" in parts:
        out["soft_temperature"] = _fit_temperature(lambda t: answer_stats(
            with_knobs(replace(base, hard=False, temperature=t)), colls, 100, 100)["log_loss"])
        print("soft_temperature", out["soft_temperature"], flush=True)
    # Setwise: doc_noise to heapsort-bi converged mean, then bias to the flip rate
    sw = J.SETWISE_KNOBS
    for _ in range(2 if "setwise" in parts else 0):
        sw = replace(sw, doc_noise=bisect(lambda s, k=sw: _mean(list(quality(
            with_knobs(replace(k, doc_noise=s)), colls, [("heapsort", "bidirectional")]).values())),
            0.0, 3.0, _mean(SETWISE_HEAPSORT), False, iters))
        sw = replace(sw, position_bias=bisect(lambda b, k=sw: flip(replace(k, position_bias=b)), 0.0, 3.0,
                                              PAPER_FLIP, True, iters))
        print("setwise", sw, flush=True)
    out["setwise"] = sw
    if "qwen" in parts:
        out.update(_fit_qwen(colls, iters))
    if "ql" in parts and J.BUNDLED_QL_CACHE.exists():
        out.update(_fit_ql_like(colls, iters))
    return out


def _fit_qwen(colls: Sequence[Coll], iters: int) -> dict[str, object]:
    """Qwen3-4B: position bias to the randomized - bidirectional gap of converged Mohajer, then doc_noise to the
    mean of the nine converged rows (DL19 + DL20) over judge seeds 0 and 1 (2 bisection steps fewer)."""
    out: dict[str, object] = {}
    qw = J.QWEN_KNOBS
    mohajer = [("mohajer", "randomized"), ("mohajer", "bidirectional")]
    qw = replace(qw, position_bias=bisect(lambda b: _rand_minus_bi(_rows_of(quality(
        with_knobs(replace(qw, position_bias=b)), colls, mohajer))), 0.0, 1.5, QWEN_GAP, False, iters - 2))
    qw = replace(qw, doc_noise=bisect(lambda s: _mean([_pair_mean(_rows_of(quality(
        with_knobs(replace(qw, doc_noise=s), judge_seed), colls, list(QWEN_ROWS)))) for judge_seed in (0, 1)]),
        0.0, 3.0, QWEN_MEAN, False, iters - 2))
    out["qwen"], out["qwen_flip"] = qw, answer_stats(with_knobs(qw), colls, 100, 100)["flip_rate"]
    print("qwen", qw, out["qwen_flip"], flush=True)
    return out


def _fit_ql_like(colls: Sequence[Coll], iters: int) -> dict[str, object]:
    """``ql-like``: doc_noise to the bundled model's sort-by-score nDCG@10 on the top 20 (mean of 3 judge seeds),
    then the temperature to its mean confidence |p - 0.5|."""
    real = bundled_sort_ndcg(colls, named("bundled-ql"))
    real_conf = answer_stats(named("bundled-ql"), colls, 20, 100)["mean_confidence"]
    ql = J.QL_LIKE_KNOBS

    def sort_ndcg(s: float) -> float:
        return _mean([bundled_sort_ndcg(colls, with_knobs(replace(ql, doc_noise=s), seed)) for seed in range(3)])

    def confidence(t: float) -> float:
        return answer_stats(with_knobs(replace(ql, temperature=t)), colls, 20, 100)["mean_confidence"]

    ql = replace(ql, doc_noise=bisect(sort_ndcg, 0.0, 6.0, real, False, iters))
    ql = replace(ql, temperature=bisect(confidence, 0.05, 20.0, real_conf, False, iters + 3))
    print("ql_like", ql, real, real_conf, flush=True)
    return {"ql_like": ql, "bundled_sort_ndcg": real, "bundled_mean_confidence": real_conf}


def _fit_temperature(loss: Callable[[float], float], lo: float = 0.1, hi: float = 10.0, iters: int = 14) -> float:
    """Golden-section search of the temperature minimising ``loss``, on a log scale."""
    g = (math.sqrt(5) - 1) / 2
    a, b = math.log(lo), math.log(hi)
    for _ in range(iters):
        c, d = b - g * (b - a), a + g * (b - a)
        if loss(math.exp(c)) < loss(math.exp(d)):
            b = d
        else:
            a = c
    return round(math.exp((a + b) / 2), 3)


# ---- report ---------------------------------------------------------------------------------------------------
def _over_judge_seeds(fn: Callable[[JudgeOf], dict], name: str, judge_seeds: int) -> dict:
    """``fn`` averaged key by key over the judge's noise realisations 0..judge_seeds-1 (one for bundled-ql)."""
    n = 1 if name == "bundled-ql" else judge_seeds
    parts = [fn(named(name, s)) for s in range(n)]
    return {k: _mean([p[k] for p in parts]) for k in parts[0]}


def measure(name: str, colls: Sequence[Coll], seeds: int, judge_seeds: int = 2) -> dict[str, object]:
    """Answer statistics and nDCG@10 of the calibration settings for one registered judge, each averaged over
    ``judge_seeds`` noise realisations."""
    info = J.INFO[name]
    deep = info.max_depth is None or info.max_depth >= 100
    depth = 100 if deep else info.max_depth
    rec: dict[str, object] = {"judge": name, "kind": info.kind, "flip_target": info.flip_target,
                              "calibrated_against": info.calibrated_against, "judge_seeds": judge_seeds,
                              "stats": _over_judge_seeds(lambda j: answer_stats(j, colls, depth, 200), name,
                                                         judge_seeds)}
    n20 = _over_judge_seeds(lambda j: quality(j, colls, [("mohajer", "randomized"), ("mohajer", "bidirectional")],
                                              depth=20, seeds=seeds), name, judge_seeds)
    rec["n20"] = {"/".join(k): round(v, 2) for k, v in n20.items()}
    if deep:
        q = _rows_of(_over_judge_seeds(lambda j: quality(j, colls, list(XL_ROWS), seeds=seeds), name, judge_seeds))
        rec["rows"] = {f"{r}/{o}": [round(x, 2) for x in v] for (r, o), v in q.items()}
        rec["converged_mean"] = round(_pair_mean(q), 2)
        rec["rand_minus_bi"] = round(_rand_minus_bi(q), 2)
        rec["heapsort_bi"] = [round(x, 2) for x in q["heapsort", "bidirectional"]]
    return rec


def _fmt(x: object, pct: bool = False) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{100 * x:.1f}%" if pct else f"{x:.2f}"
    return str(x)


def report(recs: Sequence[dict], command: str, seconds: float) -> str:
    """The README table: one row per judge (see the text it starts with)."""
    lines = [
        "# The bench's judge family: calibration figures", "",
        f"Command: `{command}` ({seconds:.0f} s on the shared 2-core machine). Definitions: "
        "`activeprp_bench/judges.py`; per-judge JSON: `judges.json`.", "",
        "Answer statistics: both slot orders of 200 random pairs of each judged query's BM25 top-100 (top-20 for "
        "`bundled-ql`), DL19 + DL20 (97 queries). flip = share of pairs whose two answers prefer the same slot; "
        "first = share of answers with p > 0.5; soft = share with 0 < p < 1; conf = mean |p - 0.5|; log loss "
        "(soft answers only) and ECE (10 bins) of p as P(first has the higher grade), over prompts of distinct "
        "grades.", "",
        f"nDCG@10 (x100) and answer statistics are averaged over {recs[0]['judge_seeds']} noise realisations of "
        "each simulated judge (judge seeds 0, 1, ...; `bundled-ql` has one set of real answers), randomized rows "
        "also over 2 oracle seeds. `conv` = mean over the paper's nine converged ranker x oracle rows at N=100, "
        f"K=10 on DL19 and DL20 (targets: Flan-T5-XL Table 2 {XL_MEAN:.1f}, Qwen3-4B appendix {QWEN_MEAN:.1f}); "
        "`rand-bi` = randomized minus bidirectional (mohajer, mohajer_bubble, pac_bubble; Qwen3-4B "
        f"{QWEN_GAP:+.2f}); `heap-bi` = bidirectional heapsort run to completion, DL19 / DL20 (Setwise Flan-T5-XL "
        f"pairwise heapsort {SETWISE_HEAPSORT[0]} / {SETWISE_HEAPSORT[1]}); `N=20` = converged Mohajer "
        "randomized / bidirectional at N=20, K=10 (mean of DL19 and DL20).", "",
        "| judge | kind | flip (target) | first | soft | conf | log loss | ECE | conv | rand-bi | heap-bi | N=20 r / b "
        "| calibrated against |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        s, n20 = r["stats"], r["n20"]
        r20 = _mean([n20["mohajer/randomized/dl19"], n20["mohajer/randomized/dl20"]])
        b20 = _mean([n20["mohajer/bidirectional/dl19"], n20["mohajer/bidirectional/dl20"]])
        heap = "-" if "heapsort_bi" not in r else " / ".join(f"{x:.1f}" for x in r["heapsort_bi"])
        loss = "-" if r["kind"] == "hard" else f"{s['log_loss']:.2f}"
        lines.append(
            f"| `{r['judge']}` | {r['kind']} | {_fmt(s['flip_rate'], True)} ({_fmt(r['flip_target'], True)}) | "
            f"{_fmt(s['first_slot_rate'], True)} | {_fmt(s['soft_rate'], True)} | {s['mean_confidence']:.3f} | "
            f"{loss} | {s['ece']:.3f} | {_fmt(r.get('converged_mean'))} | {_fmt(r.get('rand_minus_bi'))} | {heap} | "
            f"{r20:.1f} / {b20:.1f} | {r['calibrated_against'] or 'not calibrated'} |")
    lines += ["", _ab_line()]
    return "\n".join(lines) + "\n"


def _ab_line() -> str:
    """The bundled model's A/B-prompt sample stored with its QL cache (the evidence that it answers "A")."""
    if not J.BUNDLED_QL_CACHE.exists():
        return ""
    with gzip.open(J.BUNDLED_QL_CACHE, "rt") as f:
        sample = json.load(f).get("ab_sample", [])
    if not sample:
        return ""
    answers = [p for s in sample for p in (s["p_first"], s["p_first_swapped"])]
    flips = sum((s["p_first"] > 0.5) == (s["p_first_swapped"] > 0.5) for s in sample)
    return (f"The bundled model under the A/B prompt (sample cached with the QL scores, {len(sample)} DL19 pairs x "
            f"2 slot orders): first-slot rate {sum(p > 0.5 for p in answers) / len(answers):.0%}, flip rate "
            f"{flips / len(sample):.0%}, P(first) {min(answers):.3f}-{max(answers):.3f}: no signal, so only its "
            "query-likelihood answers make a judge (`bundled-ql`).")


NOTES_MARK = "<!-- notes: kept when the table is re-made -->"


def write_readme(path: Path, text: str) -> None:
    """Write the generated ``text``, keeping whatever follows ``NOTES_MARK`` in an existing file."""
    notes = ""
    if path.exists() and NOTES_MARK in path.read_text():
        notes = path.read_text().split(NOTES_MARK, 1)[1]
    path.write_text(text + "\n" + NOTES_MARK + notes)


SPREAD_RANKERS = ("mohajer", "mohajer_bubble", "parallel_mohajer", "heapsort", "bubblesort", "quicksort", "allpairs")


def spread(colls: Sequence[Coll], budget: int, seeds: int = 2, depth: int = 100, top_k: int = 10,
           max_rounds: int | None = None) -> tuple[list[dict], str]:
    """Every ``SPREAD_RANKERS`` x (randomized, bidirectional) row, and the current default auto/auto, at
    ``budget`` calls and ``max_rounds`` (N = ``depth``, K = ``top_k``) for each family judge that covers N
    (judge seed 0): mean nDCG@K of DL19 and DL20, the best row per judge, and each row's worst gap to the
    per-judge best over the family. Returns (records, Markdown)."""
    rows = [(r, o) for r in SPREAD_RANKERS for o in ("randomized", "bidirectional")] + [("auto", "auto")]
    recs = []
    for name in J.family_for_depth(depth, "dl19"):
        q = quality(named(name), colls, rows, depth, seeds, top_k, budget, max_rounds)
        recs.append({"judge": name, "ndcg": {f"{r}/{o}": round(_mean([q[r, o, "dl19"], q[r, o, "dl20"]]), 2)
                                             for r, o in rows}})
        print(name, max(recs[-1]["ndcg"].items(), key=lambda kv: kv[1]), flush=True)
    return recs, spread_text(recs, budget, seeds, depth, top_k, max_rounds)


def spread_text(recs: list[dict], budget: int, seeds: int = 2, depth: int = 100, top_k: int = 10,
                max_rounds: int | None = None) -> str:
    """``spread``'s Markdown from its records (the ``spread_*.json`` beside each ``spread_*.md``)."""
    keys = list(recs[0]["ndcg"])
    best = {r["judge"]: max(r["ndcg"].values()) for r in recs}
    worst_gap = {k: max(best[r["judge"]] - r["ndcg"][k] for r in recs) for k in keys}
    flags = f" --depth {depth} --top-k {top_k}" * (depth != 100 or top_k != 10)
    flags += f" --max-rounds {max_rounds}" * (max_rounds is not None)
    lines = [f"# Which row wins depends on the judge: N={depth}, K={top_k}, B={budget}, max_rounds {max_rounds}", "",
             f"Command: `python benchmarks/judge_calibration.py --data ../shared/data --spread {budget}{flags} "
             f"--out benchmarks/results/judges`. nDCG@{top_k} (x100, mean of the DL19 and DL20 means; judge seed 0, "
             f"randomized and auto rows over {seeds} oracle seeds). `auto` = auto/auto, the current default. Last "
             "row: each ranker x oracle's worst gap to the best row of the same judge, over the family (the "
             "worst-case regret of always using it).", "",
             "| judge | " + " | ".join(k.replace("/randomized", " r").replace("/bidirectional", " b")
                                       .replace("auto/auto", "auto") for k in keys)
             + " | best |", "|---|" + "---|" * (len(keys) + 1)]
    for r in recs:
        top = max(r["ndcg"], key=r["ndcg"].get)
        lines.append(f"| `{r['judge']}` | " + " | ".join(
            f"**{v:.1f}**" if k == top else f"{v:.1f}" for k, v in r["ndcg"].items()) + f" | {top} |")
    lines.append("| worst gap | " + " | ".join(f"{worst_gap[k]:.1f}" for k in keys) + " | |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Calibrate / measure the bench's judge family on TREC DL19 + DL20.")
    ap.add_argument("--data", type=Path, required=True, help="the shared/data directory")
    ap.add_argument("--out", type=Path, help="write judges.json and README.md here")
    ap.add_argument("--judges", nargs="+", default=list(J.FAMILY), choices=list(J.JUDGES))
    ap.add_argument("--seeds", type=int, default=2, help="oracle seeds of the randomized rows")
    ap.add_argument("--judge-seeds", type=int, default=2, help="noise realisations of each simulated judge")
    ap.add_argument("--fit", nargs="*", choices=FIT_PARTS, help="re-fit the knobs (all, or the parts named) and "
                    "print them (writes fit.json)")
    ap.add_argument("--spread", type=int, metavar="B", help="instead: every ranker x oracle at budget B for each "
                    "judge (writes spread_nN_kK_bB[_rR].json and .md)")
    ap.add_argument("--depth", type=int, default=100, help="N for --spread")
    ap.add_argument("--top-k", type=int, default=10, help="K for --spread")
    ap.add_argument("--max-rounds", type=int, help="round cap for --spread")
    args = ap.parse_args(argv)
    colls = load(args.data)
    start = time.perf_counter()
    if args.spread is not None:
        recs, text = spread(colls, args.spread, args.seeds, args.depth, args.top_k, args.max_rounds)
        print(text)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            stem = f"spread_n{args.depth}_k{args.top_k}_b{args.spread}" + f"_r{args.max_rounds}" * bool(args.max_rounds)
            (args.out / f"{stem}.json").write_text(json.dumps(recs, indent=1) + "\n")
            (args.out / f"{stem}.md").write_text(text)
        return
    if args.fit is not None:
        fitted = fit(colls, args.fit or FIT_PARTS)
        print(json.dumps(fitted, default=lambda o: o.__dict__, indent=1))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "fit.json").write_text(json.dumps(fitted, default=lambda o: o.__dict__, indent=1) + "\n")
        return
    recs = []
    for name in args.judges:
        recs.append(measure(name, colls, args.seeds, args.judge_seeds))
        print(name, json.dumps({k: v for k, v in recs[-1].items() if k != "rows"}), flush=True)
    command = "python benchmarks/judge_calibration.py --data ../shared/data --out benchmarks/results/judges"
    text = report(recs, command, time.perf_counter() - start)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "judges.json").write_text(json.dumps(recs, indent=1) + "\n")
        write_readme(args.out / "README.md", text)


if __name__ == "__main__":
    main()
