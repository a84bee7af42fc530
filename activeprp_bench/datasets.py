"""Test-collection loaders for the benchmark: TREC DL 2019/2020 (RankGPT layout), BEIR, TREC files,
NovelEval and Cranfield. Every loader returns a ``Collection``: queries, the first-stage top-N candidates per
query (best first, as ``Candidate`` objects with text) and graded qrels.

Formats and sources are described in ``../shared/README.md``; loaders take the data directory (or files) as
arguments and never touch the network. Collections without a first-stage run (BEIR, Cranfield) get BM25
top-N from ``bm25s`` (Lucene variant, k1=0.9, b=0.4, English stop words), as in the paper's BM25 rows.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from activeprp_cli.metrics import ndcg_at_k, ranking_to_run
from activeprp_cli.trecfiles import (
    iter_json_objects,
    iter_lines,
    read_corpus,
    read_json,
    read_qrels,
    read_queries,
    read_run_candidates,
)
from activeprp_core.errors import InputError
from activeprp_core.types import Candidate

Qrels = dict[str, dict[str, int]]


@dataclass
class Collection:
    """One test collection ready for reranking.

    Attributes:
        name: a short label (``dl19``, ``scifact`` ...).
        queries: ``{qid: query text}``.
        candidates: ``{qid: [Candidate, ...]}``, the first-stage top-N in rank order (best first).
        qrels: ``{qid: {docid: grade}}`` (graded, >= 0).
    """

    name: str
    queries: dict[str, str]
    candidates: dict[str, list[Candidate]]
    qrels: Qrels = field(default_factory=dict)

    @property
    def qids(self) -> list[str]:
        """Queries that have candidates and at least one judgment (the ones trec_eval scores), file order."""
        return [q for q in self.candidates if self.qrels.get(q)]

    def subset(self, n_queries: int | None = None, depth: int | None = None) -> Collection:
        """The first ``n_queries`` judged queries, each cut to its top ``depth`` candidates."""
        qids = self.qids[:n_queries]
        return Collection(self.name, {q: self.queries[q] for q in qids},
                          {q: self.candidates[q][:depth] for q in qids}, {q: self.qrels[q] for q in qids})

    def first_stage_ndcg(self, k: int = 10) -> dict[str, float]:
        """Per-query nDCG@k of the first-stage order (ir-measures), for the judged queries."""
        run = {q: ranking_to_run([c.id for c in self.candidates[q]]) for q in self.qids}
        return ndcg_at_k(self.qrels, run, k)


def read_trec_qrels(path: str | Path) -> Qrels:
    """TREC qrels ``qid iter docid grade`` (strictly read by ``trecfiles.read_qrels``); negative grades become 0.

    Raises:
        InputError (a ValueError): a malformed line, named ``FILE:LINE``.
    """
    return {q: {d: max(0, g) for d, g in docs.items()} for q, docs in read_qrels(path).items()}


def _integer(path: Path, n: int, what: str, text: str) -> int:
    """``text``, the ``what`` column of line ``n`` of ``path``, as an integer; else InputError naming the line."""
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{path}:{n}: {what} {text!r} is not an integer") from None


def load_rankgpt(name: str, jsonl: str | Path, qrels: str | Path) -> Collection:
    """RankGPT layout: one JSON object per line (or a JSON list) ``{"query", "hits": [{"content", "qid",
    "docid", "rank", "score"}]}``, hits in rank order; plus TREC qrels.

    Raises:
        FileNotFoundError: ``jsonl`` is missing. InputError (a ValueError): a file that is not UTF-8, not JSON
            (e.g. truncated), or a record not in this layout, named ``FILE:LINE`` (``FILE: record N`` in a list).
            A UTF-8 BOM is accepted.
    """
    with open(jsonl, "rb") as f:
        one_list = f.read(64).removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"[")
    records = ([(f"{jsonl}: record {i}", r) for i, r in enumerate(read_json(jsonl), 1)] if one_list
               else [(f"{jsonl}:{n}", r) for n, r in iter_json_objects(jsonl)])
    queries, cands = {}, {}
    for where, rec in records:
        try:
            hits = sorted(rec["hits"], key=lambda h: int(h["rank"]))
            qid = str(hits[0]["qid"])
            queries[qid] = rec["query"]
            cands[qid] = [Candidate(str(h["docid"]), h["content"], {"bm25": float(h["score"])}) for h in hits]
        except (KeyError, IndexError, TypeError, ValueError) as err:
            detail = f"no field {err.args[0]!r}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
            raise InputError(f"{where}: not a RankGPT record ({detail})") from None
    return Collection(name, queries, cands, read_trec_qrels(qrels))


def load_trec_dl(data_dir: str | Path, year: int) -> Collection:
    """TREC DL 2019 or 2020 passage task, BM25 top-100 with text (``data_dir`` = e.g. ``../shared/data/
    trec-dl-2019``). 43 (2019) / 54 (2020) judged queries; BM25 nDCG@10 0.506 / 0.480.

    Raises:
        ValueError: year not 2019 or 2020. FileNotFoundError: missing files.
    """
    tag = {2019: "dl19", 2020: "dl20"}.get(year)
    if tag is None:
        raise ValueError(f"year must be 2019 or 2020, got {year}")
    d = Path(data_dir)
    return load_rankgpt(tag, d / f"bm25_{tag}_top100.jsonl", d / f"qrels.{tag}-passage.txt")


def tokenize_bm25(texts: Sequence[str]):
    """``bm25s`` tokens of ``texts`` (lower-cased words, English stop words removed, no stemming)."""
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", show_progress=False)


def bm25_top(name: str, queries: Mapping[str, str], docs: Mapping[str, str], qrels: Qrels,
             depth: int = 100, k1: float = 0.9, b: float = 0.4) -> Collection:
    """First-stage BM25 (``bm25s``, Lucene scoring) over ``docs`` (``{docid: text}``) for every query."""
    import bm25s

    ids = list(docs)
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(tokenize_bm25([docs[i] for i in ids]), show_progress=False)
    qids = list(queries)
    k = min(depth, len(ids))
    results, scores = retriever.retrieve(tokenize_bm25([queries[q] for q in qids]), k=k, show_progress=False,
                                         n_threads=1)
    cands = {
        q: [Candidate(ids[j], docs[ids[j]], {"bm25": float(s)}) for j, s in zip(results[r], scores[r])]
        for r, q in enumerate(qids)
    }
    return Collection(name, dict(queries), cands, qrels)


def resort(collection: Collection, scores: Mapping[str, Mapping[str, float]], name: str) -> Collection:
    """``collection`` with each query's candidates re-ordered by ``scores`` (``{query text: {docid: score}}``,
    highest first; ties and unscored candidates keep their first-stage order, after the scored ones): the same
    candidates under another first stage, e.g. a dense retriever's order of BM25's top-N (a hybrid)."""
    def order(q: str) -> list[Candidate]:
        s = scores.get(collection.queries[q], {})
        ranked = sorted(enumerate(collection.candidates[q]), key=lambda rc: (rc[1].id not in s, -s.get(rc[1].id, 0),
                                                                            rc[0]))
        return [c for _, c in ranked]

    return Collection(name, dict(collection.queries), {q: order(q) for q in collection.candidates},
                      collection.qrels)


def load_beir(data_dir: str | Path, name: str | None = None, split: str = "test", depth: int = 100) -> Collection:
    """BEIR layout: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries*.jsonl`` (``_id``, ``text``),
    qrels as TREC lines (``qrels*.txt``) or BEIR TSV (``qrels/<split>.tsv``); BM25 top-``depth`` first stage.
    Only judged queries are kept. (SciFact: BM25 nDCG@10 ~0.66.)"""
    d = Path(data_dir)
    docs = read_corpus(d / "corpus.jsonl")
    qfile = next(iter(sorted(d.glob(f"queries.{split}.jsonl")) or sorted(d.glob("queries*.jsonl"))))
    tsv = d / "qrels" / f"{split}.tsv"
    if tsv.exists():
        qrels: Qrels = {}
        for n, line in iter_lines(tsv):
            cols = line.split("\t")
            if n == 1:  # the header
                continue
            if len(cols) < 3:
                raise InputError(f"{tsv}:{n}: expected query-id<TAB>corpus-id<TAB>score, got {len(cols)} column(s)")
            qrels.setdefault(cols[0], {})[cols[1]] = _integer(tsv, n, "score", cols[2])
    else:
        qrels = read_trec_qrels(next(iter(sorted(d.glob(f"qrels*{split}*.txt")) or sorted(d.glob("qrels*.txt")))))
    queries = {q: text for q, text in read_queries(qfile).items() if q in qrels}
    return bm25_top(name or d.name, queries, docs, qrels, depth)


def load_trec_files(name: str, topics: str | Path, qrels: str | Path, run: str | Path,
                    corpus: str | Path | Mapping[str, str], depth: int = 100) -> Collection:
    """TREC files: topics or queries (``qid<TAB>text`` or JSONL), qrels, a run (``qid Q0 docid rank score tag``,
    cut to its top ``depth`` by score as trec_eval orders it) and the passages (a corpus file or ``{docid: text}``);
    read by ``trecfiles.read_run_candidates``.

    Raises:
        InputError (a ValueError): a malformed line, a run qid without a topic, a run docid without a passage.
    """
    _, requests = read_run_candidates(run, topics, corpus, depth)
    return Collection(name, {q: text for q, text, _ in requests}, {q: cands for q, _, cands in requests},
                      read_trec_qrels(qrels))


def load_noveleval(data_dir: str | Path) -> Collection:
    """NovelEval-2306 (21 queries x 20 passages, graded 0-2): ``data.json`` in RankGPT layout + ``qrels.txt``."""
    d = Path(data_dir)
    return load_rankgpt("noveleval", d / "data.json", d / "qrels.txt")


def _cran_records(path: Path) -> list[tuple[str, dict[str, str]]]:
    records: list[tuple[str, dict[str, str]]] = []
    field_name = None
    for n, line in iter_lines(path):
        m = re.match(r"^\.([ITABW])\b\s*(.*)$", line)
        if m and m.group(1) == "I":
            records.append((m.group(2).strip(), {}))
            field_name = None
        elif m and not records:
            raise InputError(f"{path}:{n}: .{m.group(1)} before the first .I line")
        elif m:
            field_name = m.group(1)
            records[-1][1].setdefault(field_name, "")
        elif field_name is not None:
            records[-1][1][field_name] += " " + line.strip()
    return records


def load_cranfield(data_dir: str | Path, depth: int = 100) -> Collection:
    """Cranfield: ``cran.all.1400`` (docs: title + abstract), ``cran.qry`` (queries, numbered 1..225 by their
    position in the file), ``cranqrel`` (code 1..4 -> gain 5 - code, -1 -> 0); BM25 top-``depth``.

    Raises:
        InputError (a ValueError): a missing file, one that is not UTF-8 or a malformed line, named ``FILE:LINE``.
    """
    d = Path(data_dir)
    docs = {i: f"{r.get('T', '')} {r.get('W', '')}".strip() for i, r in _cran_records(d / "cran.all.1400")}
    queries = {str(pos): r.get("W", "").strip() for pos, (_, r) in enumerate(_cran_records(d / "cran.qry"), 1)}
    qrels: Qrels = {}
    for n, line in iter_lines(d / "cranqrel"):
        parts = line.split()
        if len(parts) >= 3:
            code = _integer(d / "cranqrel", n, "relevance code", parts[2])
            qrels.setdefault(parts[0], {})[parts[1]] = 5 - code if 1 <= code <= 4 else 0
    return bm25_top("cranfield", queries, docs, qrels, depth)


def _minilm(root: Path, year: int) -> Collection:
    from .judges import MINILM_CACHE, similarities

    return resort(load_trec_dl(root / f"trec-dl-{year}", year), similarities(str(MINILM_CACHE)),
                  f"dl{year % 100}-minilm")


LOADERS: dict[str, Callable[[Path], Collection]] = {
    "dl19": lambda root: load_trec_dl(root / "trec-dl-2019", 2019),
    "dl20": lambda root: load_trec_dl(root / "trec-dl-2020", 2020),
    "scifact": lambda root: load_beir(root / "beir-scifact", "scifact"),
    "noveleval": lambda root: load_noveleval(root / "noveleval"),
    "cranfield": lambda root: load_cranfield(root / "cranfield"),
    "dl19-minilm": lambda root: _minilm(root, 2019),
    "dl20-minilm": lambda root: _minilm(root, 2020),
}
"""The collections ``load_named`` loads, by name, each from the ``shared/data`` directory."""
COLLECTIONS = tuple(LOADERS)


def load_named(name: str, data_root: str | Path) -> Collection:
    """Load a collection by name (``dl19``, ``dl20``, ``scifact``, ``noveleval``, ``cranfield``; ``dl19-minilm`` and
    ``dl20-minilm``: the BM25 top-100 re-ordered by all-MiniLM-L6-v2's cosine of query and passage, a dense first
    stage over the same candidates, from the bench's cache ``judges.MINILM_CACHE``) from ``data_root`` (the
    ``shared/data`` directory). Raises ValueError for an unknown name."""
    if name not in LOADERS:
        raise ValueError(f"unknown collection {name!r}; choose one of {list(COLLECTIONS)}")
    return LOADERS[name](Path(data_root))


__all__ = ["Collection", "bm25_top", "load_beir", "load_cranfield", "load_named", "load_noveleval", "load_rankgpt",
           "load_trec_dl", "load_trec_files", "read_trec_qrels", "resort"]
