"""Same results: the order (hashed), calls and rounds of every explicit ranker x oracle x budget x round cap on
TREC DL19 + DL20 BM25 top-100 (N=100, K=10, seed 0) with the calibrated simulated judge.

The fixture ``tests/data/same_results.json.gz`` was written on the code before the issue-18 refactor (main at
242195e); it also holds each query's candidate ids and qrels, so ``tests/test_core_same_results.py`` checks a subset
without the data files. Commands (from the repository root):

    python benchmarks/same_results.py --write   # (re)write the fixture from ../shared/data (only on purpose)
    python benchmarks/same_results.py           # the full grid against the fixture; exit 1 on any difference
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy

from activeprp_core import Candidate, SimulatedComparator, rerank  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "same_results.json.gz"
DATA = [ROOT.parent / "shared" / "data", Path("/work/shared/data")]
RANKERS = ("mohajer", "mohajer_bubble", "parallel_mohajer", "pac_bubble", "bubblesort", "heapsort", "quicksort",
           "allpairs", "sliding_window")
ORACLES = ("bidirectional", "randomized", "single")
BUDGETS = (50, 150, 300)
CAPS = (None, 6)
TOP_K, SEED = 10, 0
#: The committed calibration of the simulated judge (activeprp_core.evaluation.calibration.CALIBRATED_PARAMS).
JUDGE = {"strength": 1.0, "doc_noise": 1.172, "position_bias": 0.484, "pair_noise": 0.5}


def judged_queries():
    """``(collection, qid, query, hits, qrels)`` per judged DL19 + DL20 query, hits in rank order (RankGPT layout:
    ``{"docid", "content", "rank", ...}``), qrels ``{docid: grade}`` (negative grades as 0)."""
    data = next(d for d in DATA if d.is_dir())
    for year, tag in ((2019, "dl19"), (2020, "dl20")):
        d = data / f"trec-dl-{year}"
        qrels: dict[str, dict[str, int]] = {}
        for line in (d / f"qrels.{tag}-passage.txt").read_text().splitlines():
            qid, _, doc, grade = line.split()
            qrels.setdefault(qid, {})[doc] = max(0, int(grade))
        for line in (d / f"bm25_{tag}_top100.jsonl").read_text().splitlines():
            rec = json.loads(line)
            hits = sorted(rec["hits"], key=lambda h: int(h["rank"]))
            qid = str(hits[0]["qid"])
            if qrels.get(qid):
                yield tag, qid, rec["query"], hits, qrels[qid]


def load_queries() -> dict[str, dict]:
    """``{collection/qid: {"ids": [...], "qrels": {docid: grade}}}`` for the judged DL19 + DL20 queries."""
    return {f"{tag}/{qid}": {"ids": [str(h["docid"]) for h in hits], "qrels": qrels}
            for tag, qid, _, hits, qrels in judged_queries()}


def cells():
    return [(r, o, b, m) for r in RANKERS for o in ORACLES for b in BUDGETS for m in CAPS]


def key(ranker: str, oracle: str, budget: int, cap: int | None) -> str:
    return f"{ranker}/{oracle}/{budget}/{cap}"


def run_cell(query: dict, ranker: str, oracle: str, budget: int, cap: int | None) -> list:
    """``[order hash, calls, rounds]`` of one rerank."""
    cands = [Candidate(i, "") for i in query["ids"]]
    judge = SimulatedComparator(query["qrels"], **JUDGE)
    res = rerank("", cands, ranker=ranker, oracle=oracle, comparator=judge, budget=budget, top_k=TOP_K, seed=SEED,
                 max_rounds=cap)
    digest = hashlib.sha256(",".join(map(str, res.order)).encode()).hexdigest()[:16]
    return [digest, res.calls, res.rounds]


def compute(queries: dict[str, dict], names: list[str] | None = None) -> dict[str, dict[str, list]]:
    """``{cell key: {query: [hash, calls, rounds]}}`` over ``names`` (default: all queries)."""
    names = list(queries) if names is None else names
    return {key(*c): {q: run_cell(queries[q], *c) for q in names} for c in cells()}


def read_fixture() -> dict:
    with gzip.open(FIXTURE, "rt") as f:
        return json.load(f)


def differences(expected: dict, got: dict) -> list[str]:
    """One line per (cell, query) whose ``[order hash, calls, rounds]`` differs from ``expected``."""
    return [f"{cell} {q}: expected {expected[cell][q]}, got {v}" for cell, row in got.items() for q, v in row.items()
            if expected[cell][q] != v]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="write the fixture instead of comparing")
    args = p.parse_args()
    queries = load_queries()
    results = compute(queries)
    if args.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(FIXTURE, "wt") as f:
            json.dump({"queries": queries, "results": results}, f, sort_keys=True)
        print(f"wrote {FIXTURE} ({len(results)} cells x {len(queries)} queries)")
        return 0
    expected = read_fixture()["results"]
    diff = differences(expected, results)
    print(f"{len(results)} cells x {len(queries)} queries = {len(results) * len(queries)} reranks: "
          f"{len(diff)} differences")
    print("\n".join(diff[:20]))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
