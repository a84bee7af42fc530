"""``TransformersQLComparator``: ``TransformersComparator`` in mode ``"query_likelihood"`` (UPR, Sachan et al.
2022, "Improving Passage Retrieval with Zero-Shot Question Generation")."""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

from ..types import Candidate, Judgment
from .base import CallGuard, Item
from .hf import TransformersComparator, _Answers
from .hf_model import pad

Key = tuple[str, str]
"""(query, passage text): one query-likelihood score, as a call names it; the cache holds ``_score_key`` of it."""


def _score_key(query: str, passage: str) -> bytes:
    """What the score of ``passage`` for ``query`` is cached under: a 32-byte BLAKE2b digest of both texts (the
    query's length first, so no other split of the same characters collides), so that an entry holds neither text:
    a 30 KB document costs the cache 32 bytes, not 30 KB. Any str hashes, lone surrogates included."""
    q = query.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(b"%d:%b%b" % (len(q), q, passage.encode("utf-8", "surrogatepass")), digest_size=32).digest()


class TransformersQLComparator(TransformersComparator):
    """Each passage is scored by the mean per-token log P(query | ``ql_prompt`` with the passage);
    P(first preferred) = sigmoid(score1 - score2): no position bias by construction.

    Scores are cached per (query, passage) in this comparator (at most ``score_cache_size``, oldest dropped
    first), so a pair costs at most two passage scorings and a query with N candidates at most N; a pair's
    ``prompt_tokens`` are the tokens of the passages it scored first (0 when both were already scored), and
    ``judge_batch`` runs only the (query, passage) pairs not yet scored, queries mixed in one pass. An entry is a
    float under a digest of the two texts (``_score_key``): about 200 bytes whatever their length, ~20 MB at the
    default 100,000.
    ``with_prompts`` copies start with an empty cache (scores depend on ``ql_prompt``), and so do deep copies and
    unpickled comparators (a pickle holds no scores: they belong to the model as loaded, its device and dtype).
    """

    mode = "query_likelihood"
    fresh_state = (*TransformersComparator.fresh_state, "_scores")  # scores of the loaded model: never copied

    def reset_prompt_state(self) -> None:
        """Start an empty score cache (run by ``__init__`` and ``with_prompts``: scores depend on ``ql_prompt``)."""
        self._scores: OrderedDict[bytes, float] = OrderedDict()

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
        target, mask = (torch.tensor(x, device=logits.device) for x in pad(queries, 0, left=not self.seq2seq))
        logp = torch.log_softmax(logits, dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
        return (logp.masked_fill(mask == 0, 0.0).sum(-1) / mask.sum(-1)).tolist()

    def _fresh(self, keys: Sequence[Key]) -> tuple[dict[Key, bytes], dict[Key, tuple[list[int], list[int]]], list[int]]:
        """The cache key (``_score_key``) of each distinct key; (prompt ids, query ids) of each distinct key not yet
        scored, in order of first use; and per entry of ``keys``, the prompt + query tokens of a key not yet scored
        at its first use (0 elsewhere)."""
        cached = {k: _score_key(*k) for k in dict.fromkeys(keys)}
        fresh = {k: self.ql_prompt_ids(*k) for k, c in cached.items() if c not in self._scores}
        tokens = {k: len(p) + len(q) for k, (p, q) in fresh.items()}
        return cached, fresh, [tokens.pop(k, 0) for k in keys]

    def _score(self, cached: dict[Key, bytes], fresh: dict, size: int, guard: CallGuard,
               start: Callable[[list[Key]], bool] | None = None) -> Iterator[dict[Key, float]]:
        """Yield the scores known so far of the keys of ``cached`` (``_fresh``), before the first pass and after
        each pass of at most ``size`` ``fresh`` keys (queries mixed; ``_passes``: none of a query past its deadline,
        ``start(keys of the pass)`` may stop them); the new scores are cached."""
        known = {k: self._scores[c] for k, c in cached.items() if c in self._scores}
        todo, units = list(fresh), list(fresh.values())
        yield known
        begin = None if start is None else (lambda idx: start([todo[u] for u in idx]))
        for idx, scores in self._passes(units, [q for q, _ in todo], size, guard, begin):
            for u, score in zip(idx, scores):
                known[todo[u]] = self._scores[cached[todo[u]]] = score
            yield known
        while len(self._scores) > self.score_cache_size:
            self._scores.popitem(last=False)

    def passage_scores(self, query: str, passages: Sequence[str]) -> list[float]:
        """Mean per-token log P(query | passage) for each passage (nats/token, <= 0), batched and cached."""
        import torch

        keys = [(query, p) for p in passages]
        with self._lock, torch.inference_mode():
            cached, fresh, _ = self._fresh(keys)
            *_, known = self._score(cached, fresh, self.batch_size, CallGuard())
        return [known[k] for k in keys]

    def _judge_items(self, items: Sequence[Item], guard: CallGuard, size: int, answers: _Answers) -> None:
        """A pair is answered once both its passages are scored; the tokens of a passage scored here are its first
        pair's, which a pass scoring it spends on (``answers.start``)."""
        keys = [(q, c.text) for q, a, b in items for c in (a, b)]
        cached, fresh, used = self._fresh(keys)
        owner: dict[Key, int] = {}
        for n, k in enumerate(keys):
            owner.setdefault(k, n // 2)
        pending = set(range(len(items)))
        for known in self._score(cached, fresh, size, guard, lambda ks: answers.start([owner[k] for k in ks])):
            ready = sorted(i for i in pending if keys[2 * i] in known and keys[2 * i + 1] in known)
            pending.difference_update(ready)
            answers.answer({i: Judgment(prob=1.0 / (1.0 + math.exp(known[keys[2 * i + 1]] - known[keys[2 * i]])),
                                        prompt_tokens=used[2 * i] + used[2 * i + 1]) for i in ready})

    def estimate_tokens(self, query: str, pairs: Sequence[tuple[Candidate, Candidate]]) -> list[int]:
        """Exact prompt tokens per ordered pair, as ``judge`` would report them now: the tokens of the passages
        not yet scored, each counted for the first pair that needs it (0 for a pair whose passages are cached)."""
        keys = [(query, c.text) for a, b in pairs for c in (a, b)]
        used = self._fresh(keys)[2]
        return [a + b for a, b in zip(used[::2], used[1::2])]
