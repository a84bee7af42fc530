"""``TransformersQLComparator``: ``TransformersComparator`` in mode ``"query_likelihood"`` (UPR, Sachan et al.
2022, "Improving Passage Retrieval with Zero-Shot Question Generation")."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ..types import Candidate, Judgment
from .base import CallGuard, Item
from .hf import TransformersComparator
from .hf_model import pad

Key = tuple[str, str]
"""(query, passage text): what one query-likelihood score is cached under."""


class TransformersQLComparator(TransformersComparator):
    """Each passage is scored by the mean per-token log P(query | ``ql_prompt`` with the passage);
    P(first preferred) = sigmoid(score1 - score2): no position bias by construction.

    Scores are cached per (query, passage) in this comparator (at most ``score_cache_size``, oldest dropped
    first), so a pair costs at most two passage scorings and a query with N candidates at most N; a pair's
    ``prompt_tokens`` are the tokens of the passages it scored first (0 when both were already scored), and
    ``judge_batch`` runs only the (query, passage) pairs not yet scored, queries mixed in one pass.
    ``with_prompts`` copies start with an empty cache (scores depend on ``ql_prompt``).
    """

    mode = "query_likelihood"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scores: OrderedDict[Key, float] = OrderedDict()

    def reset_prompt_state(self) -> None:
        self._scores = OrderedDict()  # query-likelihood scores depend on ql_prompt: never shared across templates

    def _run(self, batch: list[tuple[list[int], list[int]]]) -> list[float]:
        """Mean log P(query | prompt) per (prompt ids, query ids) item; items may hold different queries."""
        import torch

        queries = [q for _, q in batch]
        n = max(map(len, queries))
        if self.seq2seq:  # decoder: start + query[:-1], right-padded (its causal mask keeps the pads unseen)
            decoder = pad([self.lm.decoder_start() + q[:-1] for q in queries], self.pad_id, left=False)[0]
            logits = self.lm.forward([p for p, _ in batch], decoder, n)
        else:  # each row ends with its query: the logits that predict it are the last len(query) of the n kept
            logits = self.lm.forward([p + q for p, q in batch], None, n + 1)[:, :n]
        target, mask = pad(queries, 0, left=not self.seq2seq)
        target_t = torch.tensor(target, device=logits.device)
        mask_t = torch.tensor(mask, device=logits.device, dtype=torch.bool)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, target_t.unsqueeze(-1)).squeeze(-1)
        return (logp.masked_fill(~mask_t, 0.0).sum(-1) / mask_t.sum(-1)).tolist()

    def _fresh(self, keys: Sequence[Key]) -> tuple[list[Key], list[tuple[list[int], list[int]]]]:
        """The distinct keys not yet scored, in order, and their (prompt ids, query ids)."""
        todo = list(dict.fromkeys(k for k in keys if k not in self._scores))
        return todo, [self.ql_prompt_ids(q, p) for q, p in todo]

    def _scores_of(self, keys: Sequence[Key], size: int, guard: CallGuard,
                   on_pass: Callable[[dict[Key, float], dict[Key, int]], None]) -> None:
        """Score the ``keys`` not yet cached in passes of at most ``size`` (queries mixed), then cache them.
        ``on_pass(scores so far, tokens run per freshly scored key)`` runs before the first pass and after each."""
        known = {k: self._scores[k] for k in keys if k in self._scores}
        todo, units = self._fresh(keys)
        tokens = {k: len(u[0]) + len(u[1]) for k, u in zip(todo, units)}
        on_pass(known, tokens)
        for idx, scores in self._passes(units, self._run, size, guard):
            for u, score in zip(idx, scores):
                known[todo[u]] = self._scores[todo[u]] = score
            on_pass(known, tokens)
        while len(self._scores) > self.score_cache_size:
            self._scores.popitem(last=False)

    def passage_scores(self, query: str, passages: Sequence[str]) -> list[float]:
        """Mean per-token log P(query | passage) for each passage (nats/token, <= 0), batched and cached."""
        import torch

        keys = [(query, p) for p in passages]
        known: dict[Key, float] = {}
        with self._lock, torch.inference_mode():
            self._scores_of(keys, self.batch_size, CallGuard(), lambda scores, _: known.update(scores))
        return [known[k] for k in keys]

    def _judge_items(self, items: Sequence[Item], guard: CallGuard, size: int) -> list[Judgment]:
        keys = [(q, c.text) for q, a, b in items for c in (a, b)]
        first: dict[Key, int] = {}
        for n, key in enumerate(keys):
            first.setdefault(key, n // 2)
        out: list[Judgment | None] = [None] * len(items)

        def on_pass(known: dict[Key, float], tokens: dict[Key, int]) -> None:
            ready = [i for i, j in enumerate(out) if j is None and keys[2 * i] in known and keys[2 * i + 1] in known]
            for i in ready:
                a, b = keys[2 * i], keys[2 * i + 1]
                used = sum(tokens.get(k, 0) for k in {a, b} if first[k] == i)
                out[i] = Judgment(prob=1.0 / (1.0 + math.exp(known[b] - known[a])), prompt_tokens=used)
            guard.record_all([out[i] for i in ready])

        self._scores_of(keys, size, guard, on_pass)
        return out  # type: ignore[return-value]

    def estimate_tokens(self, query: str, pairs: Sequence[tuple[Candidate, Candidate]]) -> list[int]:
        """Exact prompt tokens per ordered pair, as ``judge`` would report them now: the tokens of the passages
        not yet scored, each counted for the first pair that needs it (0 for a pair whose passages are cached)."""
        keys = [(query, c.text) for a, b in pairs for c in (a, b)]
        todo, units = self._fresh(keys)
        tokens = {k: len(u[0]) + len(u[1]) for k, u in zip(todo, units)}
        out = [0] * len(pairs)
        for n, key in enumerate(keys):
            out[n // 2] += tokens.pop(key, 0)
        return out
