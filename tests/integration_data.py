"""Real passages for the integration tests: NovelEval-2306 (sunnweiwei/RankGPT, in ../shared/data/noveleval)."""

from __future__ import annotations

import json
from functools import cache

from tests.conftest import SHARED_DATA

NOVELEVAL = SHARED_DATA / "noveleval"


@cache
def noveleval(query_index: int = 0, n: int = 12) -> tuple[str, list[tuple[str, str]], dict[str, int]]:
    """(query, [(docid, passage)] in the first-stage order, {docid: grade 0-2}) for one NovelEval query."""
    entry = json.loads((NOVELEVAL / "data.json").read_text())[query_index]
    hits = entry["hits"][:n]
    qid = str(hits[0]["qid"])
    grades = {}
    for line in (NOVELEVAL / "qrels.txt").read_text().splitlines():
        q, _, docid, grade = line.split()
        if q == qid:
            grades[docid] = int(grade)
    return entry["query"], [(str(h["docid"]), h["content"]) for h in hits], grades
