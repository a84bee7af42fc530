"""The parts the LangChain and LlamaIndex rerankers share (imports no framework; pydantic on first use), and
``is_loopback``, which ``activeprp serve`` and the Ray adapter share.

Both wrappers inherit their settings fields from ``settings_model``: every ``RerankSettings`` field under the
same name (``top_k`` is the wrappers' ``top_n``), defaulting to the online preset ``activeprp_core.settings.ONLINE``
and checked on its way in by the setting's own declaration, so a new setting reaches both wrappers without an edit
here. The functions below turn those fields plus one query's documents into an ``activeprp_core.rerank`` /
``arerank`` call, so the two wrappers order documents identically to the core API for the same inputs, seed and
comparator. The comparator object the user passes in is never changed: per-call settings (the cap on calls in
flight) go to the rerank as arguments.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any, get_type_hints

from activeprp_core import Candidate, RerankResult, RerankSettings, arerank, rerank
from activeprp_core.comparators import Comparator, as_comparator
from activeprp_core.settings import FIELDS, ONLINE, SPECS, Count, check_setting

SCORE_KEY = "relevance_score"
"""Metadata key of the score: ``RerankResult.scores``, ``(n - rank) / n`` for ``n`` input documents (rank
0-based), so in (0, 1], higher is better, strictly decreasing along the reranked order. It is a rank-derived
score, not a calibrated probability of relevance."""
RANK_KEY = "rerank_rank"
"""Metadata key of the 1-based position in the reranked order (1 = best)."""

DEFAULT_TOP_N = 3
"""Both wrappers' ``top_n`` default: documents returned per query, the rerank's K (``activeprp rerank`` and
``activeprp serve`` rerank ``ONLINE.top_k``, 10). The online preset's budget and round cap were chosen at N=20 and
this K (docs/judges.md, "Defaults")."""
NAMES = {"top_k": "top_n"}
"""The wrappers' name of a setting where it differs from the ``RerankSettings`` field."""
TOP_N = Count(minimum=1, allow_none=True)
"""How ``top_n`` is checked: an int >= 1, or None = every document, reranked (the LangChain wrapper)."""
TOP_N_INT = Count(minimum=1)
"""How the LlamaIndex wrapper's ``top_n`` (typed ``int``, as LlamaIndex's rerankers have it) is checked."""


def check_field(value: Any, name: str, top_n: Count = TOP_N) -> Any:
    """A wrapper's settings field checked by its declaration (``check_setting``; ``top_n`` by ``top_n``): a
    TypeError / ValueError saying what to pass."""
    return top_n(value, name) if name == "top_n" else check_setting(name, value)


@cache
def settings_model(top_n: Any = int | None) -> type:
    """A pydantic model of the settings fields for a wrapper to inherit: every ``RerankSettings`` field under the
    wrappers' name for it (``NAMES``; ``top_n`` of type ``top_n``), typed as declared, defaulting to ``ONLINE``
    (``top_n``: ``DEFAULT_TOP_N``) and described by its declaration's help. A before-validator checks each value
    passed (or assigned) with ``check_field``, so ``budget=True`` is a TypeError rather than pydantic's 1.

    Raises:
        ImportError: pydantic is missing (it comes with either framework).
    """
    from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model, field_validator

    class Base(BaseModel):
        model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)
        _judge: Any = PrivateAttr(default=None)  # (comparator, as_comparator(comparator)), see ``judge_of``

    hints = get_type_hints(RerankSettings)
    fields = {}
    for name in FIELDS:
        spec = SPECS[name]
        default = DEFAULT_TOP_N if name == "top_k" else getattr(ONLINE, name)
        description = spec.help + (f" (None = {spec.none})" if spec.none else "")
        fields[NAMES.get(name, name)] = (top_n if name == "top_k" else hints[name],
                                         Field(default=default, description=description))

    def check(cls: type, value: Any, info: Any) -> Any:
        return check_field(value, info.field_name, TOP_N_INT if top_n is int else TOP_N)

    return create_model("RerankSettingsFields", __base__=Base, __module__=__name__,
                        __validators__={"check_settings": field_validator(*fields, mode="before")(check)}, **fields)


def settings_of(wrapper: Any, n: int) -> RerankSettings:
    """The ``RerankSettings`` a wrapper's fields stand for, for ``n`` documents (``top_n`` None = all). The fields
    were checked on their way in (``settings_model``), so nothing is checked again."""
    values = {name: getattr(wrapper, NAMES.get(name, name)) for name in FIELDS}
    if values["top_k"] is None:
        values["top_k"] = max(1, n)
    return RerankSettings.from_checked(**values)


def judge_of(wrapper: Any) -> Comparator:
    """The wrapper's ``comparator`` as a ``Comparator`` (``as_comparator``, once per comparator object; the object
    itself is never changed).

    Raises:
        TypeError: the comparator has no ``compare`` (so a wrapper fails at construction, not at first use).
    """
    comparator, judged = wrapper.comparator, wrapper._judge
    if judged is None or judged[0] is not comparator:
        judged = wrapper._judge = (comparator, as_comparator(comparator))
    return judged[1]


def checked_copy(model: Any, copy: Callable[..., Any], update: Mapping[str, Any] | None, deep: bool,
                 also: tuple[str, ...] = ()) -> Any:
    """``copy(update=update, deep=deep)`` (pydantic's ``model_copy`` of ``model``, which checks nothing it is
    given), with each updated field then checked on the copy as an assignment is: its field validator, its type and
    the model's after-validators, against the copy's values with the whole update applied. A refused update leaves
    ``model`` as it was (only the copy, discarded, saw it). ``also``: names the caller takes out of the update
    itself (the LlamaIndex judge, which is no field), listed with the fields in the error.

    Raises:
        TypeError: a name in ``update`` that is no field of ``model`` (pydantic would add it silently), or a value
            the field refuses with a TypeError. ValueError: a value the field refuses (a pydantic
            ``ValidationError``).
    """
    update = dict(update or {})
    unknown = sorted(set(update) - set(type(model).model_fields))
    if unknown:
        raise TypeError(f"{type(model).__name__}.model_copy(update=...) has no field {', '.join(unknown)}; its fields: "
                        f"{', '.join([*type(model).model_fields, *also])}")
    copied = copy(update=update, deep=deep)
    for name in update:
        copied.__pydantic_validator__.validate_assignment(copied, name, copied.__dict__[name])
    return copied


def missing_extra(package: str, extra: str) -> str:
    """The ImportError message for a missing optional framework."""
    return f"{package} is not installed; install it with: pip install 'activeprp[{extra}]'"


def make_candidates(items: Iterable[tuple[str | None, str, dict]]) -> list[Candidate]:
    """``Candidate`` objects from ``(id, text, metadata)`` triples in prior order; a missing id becomes the
    position as a string. The metadata is deep-copied (as Cohere's LangChain reranker copies it), here, before any
    call: the outputs take it from these copies (``with_own_metadata``), so changing an output, or a value nested in
    its metadata, never changes the caller's document, and metadata that cannot be copied is refused before anything
    is spent.

    Raises:
        TypeError: a document's metadata cannot be deep-copied (``copy.deepcopy``; e.g. it holds a lock).
    """
    out = []
    for i, (doc_id, text, meta) in enumerate(items):
        try:
            own = copy.deepcopy(dict(meta))
        except (TypeError, copy.Error) as err:
            raise TypeError(f"document {i}: its metadata cannot be copied ({err}); the reranked documents carry a "
                            "copy of it, so keep in metadata only values that copy.deepcopy can copy") from None
        out.append(Candidate(id=str(i) if doc_id is None else str(doc_id), text=text, metadata=own))
    return out


def with_own_metadata(document: Any, metadata: Mapping[str, Any]) -> Any:
    """A copy of a framework's document (a pydantic model with a ``metadata`` dict: LangChain's ``Document``, a
    LlamaIndex node) holding ``metadata``: its candidate's own copy (``make_candidates``), with what the wrapper
    adds."""
    return document.model_copy(update={"metadata": dict(metadata)})


def rerank_fields(fields: Any, query: str, candidates: list[Candidate]) -> RerankResult:
    """``activeprp_core.rerank`` with a wrapper's fields (``top_n`` becomes ``top_k``; None = all)."""
    return rerank(query, candidates, settings_of(fields, len(candidates)), comparator=judge_of(fields))


async def arerank_fields(fields: Any, query: str, candidates: list[Candidate]) -> RerankResult:
    """``activeprp_core.arerank`` (each round's calls go to the comparator concurrently) with a wrapper's
    fields."""
    return await arerank(query, candidates, settings_of(fields, len(candidates)), comparator=judge_of(fields))


def picked(result: RerankResult) -> list[tuple[int, float, int]]:
    """``(input index, score, 1-based rank)`` of the documents to return, best first: the reranked top-K (the
    wrapper's ``top_n`` is the rerank's ``top_k``; with ``top_n`` None, K is every document)."""
    return [(i, result.scores[i], rank) for rank, i in enumerate(result.order[: result.top_k], start=1)]


class ComparatorFactories:
    """Convenience constructors shared by both wrappers: build the comparator, pass every other field on."""

    @classmethod
    def from_local_model(cls, model: str | None = None, *, comparator_kwargs: dict | None = None, **fields: Any):
        """Rerank with a local Hugging Face model (``pip install 'activeprp[hf]'``).

        Args:
            model: a model path or name for ``activeprp_core.comparators.TransformersComparator``; None = the
                bundled SmolLM2-135M (query-likelihood mode, runs offline on CPU).
            comparator_kwargs: extra arguments for the comparator.
            **fields: the reranker's own fields (``ranker``, ``budget``, ``top_n``, ...).
        """
        from activeprp_core.comparators import TransformersComparator

        kwargs = comparator_kwargs or {}
        comparator = (TransformersComparator.from_bundled(**kwargs) if model is None
                      else TransformersComparator(model, **kwargs))
        return cls(comparator=comparator, **fields)

    @classmethod
    def from_openai(cls, model: str, *, base_url: str | None = None, api_key: str | None = None,
                    comparator_kwargs: dict | None = None, **fields: Any):
        """Rerank through any OpenAI-compatible chat endpoint (``pip install 'activeprp[openai]'``).

        Args:
            model: the served model name; base_url: the endpoint (None = OpenAI's); api_key: None reads
                ``OPENAI_API_KEY``.
            comparator_kwargs: extra arguments for ``activeprp_core.comparators.OpenAIChatComparator``.
            **fields: the reranker's own fields (``ranker``, ``budget``, ``top_n``, ``max_concurrency``, ...).
        """
        from activeprp_core.comparators import OpenAIChatComparator

        comparator = OpenAIChatComparator(model=model, base_url=base_url, api_key=api_key,
                                          **(comparator_kwargs or {}))
        return cls(comparator=comparator, **fields)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP address, in brackets or not, in any case) is this machine's loopback:
    ``localhost`` or an address in 127.0.0.0/8 or ::1. The one test of ``activeprp serve``'s warning about an open
    server and of the Ray adapter's loopback-only Ray."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
