"""Token cap: what share of ``token_budget`` a capped rerank spends, per ranker, with the remote upper bound.

The judge is the calibrated simulated judge on DL19 + DL20 BM25 top-100 (N=100, K=10, seed 0) that reports token
usage the way an endpoint does; the engine reserves ``Comparator.estimate_tokens`` (the default: UTF-8 bytes of
the PRP prompt filled with the query and both passages, plus 32) and refunds the difference to the reported usage
(prompt tokens = a quarter of the prompt's bytes, the usual English BPE ratio, plus 1 completion token). A rerank
is "capped" when the token cap refused a question (``"token_budget" in exhausted_by``); the share is reported
tokens / token_budget. Command (from the repository root; writes ``rows.json`` and ``table.md`` into ``--out``,
by default ``benchmarks/results/token_budget/``):

    python benchmarks/token_budget.py [--queries N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy

from same_results import JUDGE, judged_queries  # noqa: E402 (benchmarks/, on sys.path when run as a script)

from activeprp_core import Candidate, Comparator, SimulatedComparator, rerank  # noqa: E402
from activeprp_core.rankers import RANKERS  # noqa: E402
from activeprp_core.types import Judgment  # noqa: E402

CAPS = (20_000, 50_000, 100_000)
OUT = ROOT / "benchmarks" / "results" / "token_budget"


class ReportingJudge(Comparator):
    """The simulated judge, reporting usage like an endpoint: prompt tokens = bytes of the prompt / 4, 1 answer
    token."""

    def __init__(self, labels: dict[str, int]) -> None:
        self.sim = SimulatedComparator(labels, **JUDGE)

    def judge(self, query, pairs, *, guard=None):
        bounds = self.estimate_tokens(query, pairs)
        return [Judgment(p, prompt_tokens=(b - self.ESTIMATE_OVERHEAD_TOKENS) // 4, completion_tokens=1)
                for p, b in zip(self.sim.compare(query, pairs), bounds)]


def load(n_queries: int | None) -> list[tuple[str, list[Candidate], dict[str, int]]]:
    return [(query, [Candidate(str(h["docid"]), h["content"]) for h in hits], qrels)
            for _, _, query, hits, qrels in judged_queries()][:n_queries]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=None, help="first N judged queries (default: all 97)")
    p.add_argument("--oracles", nargs="+", default=["randomized", "bidirectional"])
    p.add_argument("--out", type=Path, default=OUT,
                   help="directory for rows.json and table.md (default: benchmarks/results/token_budget)")
    args = p.parse_args(argv)
    queries = load(args.queries)
    rows, lines = [], ["| ranker | oracle | token_budget | capped reranks | share of the cap: mean | min | max |",
                       "| --- | --- | --- | --- | --- | --- | --- |"]
    for ranker in sorted(r for r in RANKERS if r != "auto"):
        for oracle in args.oracles:
            for cap in CAPS:
                shares, over = [], 0
                for query, cands, labels in queries:
                    res = rerank(query, cands, ranker=ranker, oracle=oracle, comparator=ReportingJudge(labels),
                                 budget=None, token_budget=cap)
                    used = res.prompt_tokens + res.completion_tokens
                    over += used > cap
                    if "token_budget" in res.exhausted_by:
                        shares.append(used / cap)
                row = {"ranker": ranker, "oracle": oracle, "token_budget": cap, "queries": len(queries),
                       "capped": len(shares), "over_cap": over,
                       "share_mean": round(statistics.mean(shares), 4) if shares else None,
                       "share_min": round(min(shares), 4) if shares else None,
                       "share_max": round(max(shares), 4) if shares else None}
                rows.append(row)
                lines.append(f"| {ranker} | {oracle} | {cap} | {len(shares)}/{len(queries)} | "
                             f"{row['share_mean']} | {row['share_min']} | {row['share_max']} |")
                print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    head = ["# Token cap: share of token_budget spent by capped reranks (DL19+DL20, N=100, K=10, seed 0)", "",
            "Command: `python benchmarks/token_budget.py` (estimate = default `Comparator.estimate_tokens`, "
            "reported usage = prompt bytes / 4 + 1 answer token). Reported tokens over the cap: "
            f"{sum(r['over_cap'] for r in rows)}.", ""]
    (args.out / "table.md").write_text("\n".join(head + lines) + "\n")
    assert not any(r["over_cap"] for r in rows), "reported tokens exceeded the cap"
    return 0


if __name__ == "__main__":
    sys.exit(main())
