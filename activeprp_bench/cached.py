"""An on-disk answer cache for any comparator, so a benchmark grid over budgets and seeds pays for each
distinct prompt once and a re-run costs nothing."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from activeprp_core.comparators.base import CallGuard, Comparator, SupportsCompare, as_comparator
from activeprp_core.comparators.prompts import LABELS, TOP_LOGPROBS
from activeprp_core.types import Judgment, Pair


def prompt_key(model: str, query: str, first_id: str, first_text: str, second_id: str, second_text: str) -> str:
    """A stable hex key for one ordered prompt of one model (blake2b over the model name, the query and both
    candidates' ids and texts, so a changed passage text is a different prompt)."""
    h = hashlib.blake2b(digest_size=16)
    for part in (model, query, first_id, first_text, second_id, second_text):
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()


#: Comparator attributes that change what a prompt asks (templates, truncation, mode, model); see ``identity``.
PROMPT_SETTINGS = ("model", "mode", "prompt", "ql_prompt", "system_prompt", "answer_prefix", "labels",
                   "max_passage_tokens", "max_query_tokens", "max_passage_words")


#: Settings that change the answer asked for, not the prompt (``OpenAIChatComparator``: soft answers from the top
#: logprobs, or the hard label), with their defaults; see ``identity``.
ANSWER_SETTINGS = {"logprobs": True, "top_logprobs": TOP_LOGPROBS}


def identity(comparator: Any, name: str) -> str:
    """``name`` plus a short digest of the comparator's prompt settings (``PROMPT_SETTINGS`` it has) and of its
    ``ANSWER_SETTINGS`` away from their defaults, so a changed template, truncation or answer kind never reads
    answers cached under the old one. Answer labels at their default (``prompts.LABELS``) are keyed as absent:
    the committed caches were keyed before comparators kept their labels (291f4cb), when every judge asked with
    the default ones; the answer settings likewise, at their defaults, as before they were keyed."""
    changed = [(k, v) for k, default in ANSWER_SETTINGS.items() if (v := getattr(comparator, k, default)) != default]
    settings = repr([(k, _keyed(comparator, k)) for k in PROMPT_SETTINGS] + changed)
    return f"{name}#{hashlib.blake2b(settings.encode(), digest_size=6).hexdigest()}"


def _keyed(comparator: Any, setting: str) -> Any:
    value = getattr(comparator, setting, None)
    return None if setting == "labels" and value is not None and tuple(value) == LABELS else value


class CachedComparator(Comparator):
    """Wraps a comparator with a sqlite answer cache keyed on (model, query, ordered pair identity).

    Args:
        inner: a ``Comparator`` or any object with ``compare(query, pairs) -> list[float | None]``.
        path: the sqlite file (created with its parent directory when missing).
        model_name: part of the key: answers of different models or prompt templates never mix (build it
            with ``identity(inner, name)`` to include the prompt settings).

    Attributes:
        inner_calls: prompts sent to ``inner`` through this wrapper; hits: prompts answered from disk.

    Only the probability is stored: an answer from disk is a ``Judgment`` of it alone (no tokens, no retries:
    nothing was sent), while an answer from ``inner`` is its own ``Judgment`` (error text, retries, token counts).
    Failed answers (``None``) are not stored, so they are retried on the next run. Budget accounting is the
    engine's business: a cached answer still counts as an LLM call of the ranker (the cache is a cost saver
    for the benchmark, not a change of the experiment). ``close()`` (or ``with``) closes the sqlite file; the
    inner comparator is the caller's and is not closed.
    """

    def __init__(self, inner: Comparator | SupportsCompare, path: str | Path, model_name: str) -> None:
        self.inner, self.model_name = as_comparator(inner), model_name
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)  # used from worker threads too (locked)
        self._db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, prob REAL NOT NULL)")
        self._lock = threading.Lock()
        self.inner_calls = self.hits = 0

    def _key(self, query: str, pair: Pair) -> str:
        a, b = pair
        return prompt_key(self.model_name, query, a.id, a.text, b.id, b.text)

    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Answers for ``pairs`` in order: from disk where known, the rest from ``inner.judge`` in one batch (the
        engine's chunks and ``guard`` are the base class's, around this method: ``guards_calls`` is False)."""
        keys = [self._key(query, p) for p in pairs]
        known: dict[str, Judgment] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                marks = ",".join("?" * len(chunk))
                known.update((k, Judgment(p)) for k, p in self._db.execute(
                    f"SELECT key, prob FROM answers WHERE key IN ({marks})", chunk))
        missing = [i for i, k in enumerate(keys) if k not in known]
        self.hits += len(keys) - len(missing)
        if missing:
            answers = self.inner.judge(query, [pairs[i] for i in missing])
            self.inner_calls += len(missing)
            fresh = {keys[i]: a for i, a in zip(missing, answers)}
            with self._lock:
                self._db.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?)",
                                     [(k, float(a.prob)) for k, a in fresh.items() if a.prob is not None])
                self._db.commit()
            known.update(fresh)
        return [known[k] for k in keys]

    def close(self) -> None:
        """Close the sqlite connection (the inner comparator stays open)."""
        self._db.close()
