"""LlamaIndex node postprocessor: budgeted pairwise LLM reranking with ActivePRP.

``ActivePRPRerank`` is a drop-in ``BaseNodePostprocessor`` (``node_postprocessors=[...]`` of a query engine or
retriever). Needs ``pip install 'activeprp[llama-index]'``.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

from activeprp_core import Comparator
from activeprp_core.comparators import SupportsCompare
from activeprp_core.comparators.base import check_comparator, comparator_name
from activeprp_core.comparators.prompts import SwappablePrompts

from . import _common as common

try:
    from llama_index.core.bridge.pydantic import ConfigDict, PrivateAttr
    from llama_index.core.callbacks import CBEventType, EventPayload
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
    from llama_index.core.llms import LLM
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
    from llama_index.core.prompts.mixin import PromptDictType, PromptMixin
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
except ImportError as exc:  # pragma: no cover - exercised by simulating the missing module
    raise ImportError(common.missing_extra("llama-index-core", "llama-index")) from exc

from ._chat_judge import exactly_one_judge  # noqa: E402 - after the framework check
from .llama_index_judge import LLMComparator  # noqa: E402

__all__ = ["PROMPT_ATTRS", "ActivePRPRerank", "LLMComparator"]

dispatcher = get_dispatcher(__name__)

_JUDGES = ("comparator", "llm")
"""The judge's names: no fields (the judge is a private attribute), yet taken by ``__init__`` and ``model_copy``."""

PROMPT_ATTRS = {"prp_prompt": "prompt", "ql_prompt": "ql_prompt"}
"""Prompt keys of ``_get_prompts``/``_update_prompts`` -> the comparator attribute holding that prompt."""


def _has_work(nodes: Any, query_bundle: Any) -> bool:
    """Whether there are nodes to rerank, after checking the call's arguments.

    Raises:
        ValueError: no query. TypeError: ``nodes`` is not a list of ``NodeWithScore``, or ``query_bundle`` is not a
            ``QueryBundle``; each message names what to pass instead.
    """
    if query_bundle is None:
        raise ValueError("ActivePRPRerank needs a query_bundle (or query_str).")
    if not isinstance(query_bundle, QueryBundle):
        raise TypeError(f"query_bundle must be a QueryBundle, got {type(query_bundle).__name__} (pass a query text "
                        "as query_str=)")
    if not isinstance(nodes, list):
        raise TypeError(f"nodes must be a list of NodeWithScore, got {type(nodes).__name__}")
    for n in nodes:
        if not isinstance(n, NodeWithScore):
            raise TypeError(f"nodes must be NodeWithScore objects, got {type(n).__name__} (wrap a node as "
                            "NodeWithScore(node=node))")
    return bool(nodes)


class ActivePRPRerank(common.ComparatorFactories, BaseNodePostprocessor, PromptMixin, common.settings_model(int)):
    """Rerank retrieved nodes with a pairwise LLM judge under a per-query call budget.

    A ``PromptMixin`` (which LlamaIndex's ``BaseNodePostprocessor`` is not, though it has its private methods), so
    ``get_prompts()`` / ``update_prompts(...)`` reach the judge's prompts (``prp_prompt``, ``ql_prompt``). A query
    engine's own ``get_prompts`` lists its response synthesizer's alone, not its node postprocessors': call them on
    the postprocessor.

    Args / fields (the same names as the LangChain compressor):
        comparator: a ``activeprp_core.Comparator`` or any object with ``compare(query, pairs) ->
            list[float | None]``; kept in a private attribute (not serialised), readable as ``.comparator``.
            Never changed by the postprocessor (``_update_prompts`` switches to a copy with the new prompts).
        llm: instead of ``comparator``, your LlamaIndex LLM (any ``llama_index.core.llms.LLM``: OpenAI,
            OpenAILike, Ollama ...) as the judge: the comparator becomes ``LLMComparator(llm)`` (the PRP prompt,
            P(A) from logprobs when the model gives them; see docs/frameworks-llm.md). The LLM object is never
            changed; readable as ``.llm`` (None when the judge was given as ``comparator``). Exactly one of
            ``comparator`` and ``llm``: both is a ValueError, neither a TypeError. The judge is no field: assigning
            ``p.comparator = ...`` or ``p.llm = ...`` replaces it (the other one then reads None), checked as the
            constructor checks it (None is a TypeError; a refused assignment changes nothing).
        top_n: how many nodes to return (int >= 1, default 3, as in the LangChain wrapper); also the core's top-K.
        Every other ``activeprp_core.RerankSettings`` field under its own name, checked as the core checks it
        and defaulting to the online preset ``activeprp_core.settings.ONLINE`` (the LangChain compressor's
        docstring lists them): ``ranker="auto"``, ``oracle="auto"``, ``budget=50`` calls, ``max_rounds=6``, no
        token or time cap (``token_budget``, ``time_budget``), ``seed=0``, ``cache=True``, ``on_failure="raise"``
        (a comparator failure propagates; ``"prior"`` returns the best-effort order and the end payload's
        ``stats`` say why), ``max_concurrency=None`` (the comparator's own; each postprocessor keeps its own cap
        on a shared comparator), ``max_consecutive_failures=5``.

    The passage text is ``node.get_content(metadata_mode=MetadataMode.NONE)`` (like LangChain's ``page_content``).
    Returns new ``NodeWithScore`` objects (the input ones are never changed) holding copies of the nodes
    (``model_copy``, the metadata deep-copied before any call: ``_common.make_candidates``, a TypeError there if it
    cannot be copied; changing a returned node or its metadata never changes yours; other fields, e.g. an
    ``IndexNode``'s ``obj``, are shared) whose ``score`` is ``(n - rank) / n`` over the n input nodes: in (0, 1],
    higher is better, rank-based. Emits ``ReRankStartEvent``/``ReRankEndEvent`` inside a dispatcher span and the
    legacy ``CBEventType.RERANKING`` event, whose end payload also carries ``"stats"`` (``RerankResult.stats()``:
    the settings, calls, rounds, exhausted, ...).

    Copies and rebuilds: the judge is no field, so ``model_copy(update=...)`` takes ``comparator`` or ``llm`` as
    the constructor does (exactly one; the copy's judge replaces this one's; without either the copy shares this
    judge) and checks every other updated field as an assignment is (pydantic's own checks nothing) and refuses a
    name that is no field. ``dict(p)``, ``p.model_dump()`` and ``p.to_dict()`` hold no judge: rebuild with it
    passed again, e.g. ``ActivePRPRerank(**p.model_dump(), comparator=p.comparator)`` (the ``class_name`` that
    LlamaIndex's dump adds is accepted). ``copy.deepcopy`` and ``model_copy(deep=True)`` copy the judge too, and a
    pickle holds it: a remote judge's copy opens clients of its own, an ``llm=`` judge's calls a copy of the model
    (see ``RemoteComparator``); a judge that cannot be pickled is a TypeError, not dropped as LlamaIndex drops
    other attributes that do not pickle.

    Raises:
        ValueError: ``query_bundle`` missing; a bad field value (at construction, assignment or ``model_copy``),
            or both ``comparator`` and ``llm`` (at construction or in ``model_copy``). TypeError: neither of them
            (also an assigned None), ``llm`` is not a LlamaIndex ``LLM``, a comparator without ``compare`` (at
            construction, assignment or in ``model_copy``), a field of the wrong type, a
            name in ``model_copy``'s update that is no field, or pickling with a judge that does not pickle.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    _comparator: Comparator | SupportsCompare = PrivateAttr()
    _llm: LLM | None = PrivateAttr(default=None)  # the LLM the judge was built from (llm=), else None

    def __init__(self, comparator: Comparator | SupportsCompare | None = None, *, llm: LLM | None = None,
                 **fields: Any) -> None:
        exactly_one_judge(comparator, llm)
        if fields.get("class_name") == self.class_name():  # model_dump() / to_dict() add it; not a field
            del fields["class_name"]
        super().__init__(**fields)
        self._set_judge(comparator, llm)

    def _set_judge(self, comparator: Any, llm: Any) -> None:
        """Judge with ``comparator``, or ``LLMComparator(llm)``: exactly one of them (at construction, assignment
        and in ``model_copy``), checked before anything changes.

        Raises:
            TypeError: neither; ``llm`` is no LlamaIndex ``LLM``; a comparator without ``compare``. ValueError: both.
        """
        exactly_one_judge(comparator, llm)
        self._comparator = check_comparator(comparator) if llm is None else LLMComparator(llm)
        self._llm = llm
        common.judge_of(self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ActivePRPRerank:
        """pydantic's ``model_copy`` (which validates nothing, and knows no judge: it is no field), taking
        ``comparator`` or ``llm`` in ``update`` as the constructor does, as the copy's judge (exactly one of them;
        without either the copy keeps this judge), and checking every other updated field on the copy as an
        assignment is (``_common.checked_copy``). The original is never changed.

        Raises:
            TypeError: a name that is no field, neither judge left, an ``llm`` that is no LlamaIndex ``LLM``, a
                comparator without ``compare``. ValueError: both judges, a bad setting.
        """
        fields = dict(update or {})
        judges = {name: fields.pop(name) for name in _JUDGES if name in fields}
        copied = common.checked_copy(self, super().model_copy, fields, deep, also=_JUDGES)
        if judges:
            copied._set_judge(judges.get("comparator"), judges.get("llm"))
        return copied

    def __getstate__(self) -> dict[str, Any]:
        """LlamaIndex's pickle state (``BaseComponent``'s, which drops what does not pickle with a logged warning),
        except that a judge that does not pickle is an error: without it the unpickled postprocessor could not
        rerank.

        Raises:
            TypeError: the comparator cannot be pickled (pickle's reason in the message), saying what to do instead.
        """
        state = super().__getstate__()
        if "_comparator" not in (state.get("__pydantic_private__") or {}):
            try:  # BaseComponent logged no reason: find it
                pickle.dumps(self._comparator)
            except Exception as err:
                why = f"{type(err).__name__}: {err}"
            else:
                why = "BaseComponent.__getstate__ dropped it"
            raise TypeError(f"ActivePRPRerank cannot be pickled: its comparator {comparator_name(self._comparator)} "
                            f"cannot be ({why}). Build the postprocessor where it runs (Ray: pass a factory, as "
                            "rerank_dataset's comparator_factory), or give it a judge that pickles")
        return state

    @property
    def comparator(self) -> Any:
        """The pairwise comparator (see ``activeprp_core.Comparator``); assigning one makes it the judge."""
        return self._comparator

    @comparator.setter
    def comparator(self, comparator: Any) -> None:
        self._set_judge(comparator, None)

    @property
    def llm(self) -> LLM | None:
        """The LlamaIndex LLM the judge was built from (``llm=``), else None; assigning one makes its
        ``LLMComparator`` the judge."""
        return self._llm

    @llm.setter
    def llm(self, llm: LLM | None) -> None:
        self._set_judge(None, llm)

    @classmethod
    def class_name(cls) -> str:
        return "ActivePRPRerank"

    def _prompt_names(self) -> tuple[str, ...]:
        """The comparator's swappable template attributes (``SwappablePrompts.prompt_names``; none otherwise)."""
        return self._comparator.prompt_names if isinstance(self._comparator, SwappablePrompts) else ()

    def _get_prompts(self) -> PromptDictType:
        """The comparator's prompts as templates: ``prp_prompt`` (its ``prompt`` attribute, the PRP A/B prompt)
        and ``ql_prompt`` (its ``ql_prompt``, used in query-likelihood mode), each only when the comparator is a
        ``SwappablePrompts`` listing it."""
        names = self._prompt_names()
        return {key: PromptTemplate(getattr(self._comparator, attr))
                for key, attr in PROMPT_ATTRS.items() if attr in names}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        """Rerank with other prompts from now on, without changing the comparator object the user passed in:
        the postprocessor switches to ``comparator.with_prompts(...)``, a copy carrying the new templates that
        shares the model or client (see ``activeprp_core.comparators.prompts.SwappablePrompts``). A template
        object is stored as its template string.

        Raises:
            ValueError: the comparator is not a ``SwappablePrompts`` (it has no ``with_prompts`` to make such a
                copy), has no template for a given key (e.g. no ``ql_prompt``), or refuses the template (a
                missing placeholder).
        """
        changes = {attr: prompts[key].get_template() if isinstance(prompts[key], BasePromptTemplate) else prompts[key]
                   for key, attr in PROMPT_ATTRS.items() if key in prompts}
        if not changes:
            return
        if not isinstance(self._comparator, SwappablePrompts):
            raise ValueError(f"{type(self._comparator).__name__} has no with_prompts(**prompts): its prompts cannot "
                             "be changed without changing the comparator object itself")
        self._comparator = self._comparator.with_prompts(**changes)

    def _start(self, nodes: list[NodeWithScore], query_bundle: QueryBundle) -> dict[str, Any]:
        name = comparator_name(self._comparator)
        dispatcher.event(ReRankStartEvent(query=query_bundle, nodes=nodes, top_n=self.top_n, model_name=name))
        return {EventPayload.NODES: nodes, EventPayload.MODEL_NAME: name,
                EventPayload.QUERY_STR: query_bundle.query_str, EventPayload.TOP_K: self.top_n}

    @staticmethod
    def _candidates(nodes: list[NodeWithScore]) -> list:
        return common.make_candidates((n.node.node_id, n.node.get_content(metadata_mode=MetadataMode.NONE),
                                n.node.metadata) for n in nodes)

    def _finish(self, nodes: list[NodeWithScore], result: Any, event: Any) -> list[NodeWithScore]:
        picked = common.picked(result)
        new_nodes = [NodeWithScore(node=common.with_own_metadata(nodes[i].node, result.candidates[i].metadata),
                                   score=score) for i, score, _ in picked]
        event.on_end(payload={EventPayload.NODES: new_nodes, "stats": result.stats()})
        dispatcher.event(ReRankEndEvent(nodes=new_nodes))
        return new_nodes

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        """Rerank ``nodes`` for ``query_bundle.query_str``; the top ``top_n`` as new nodes, best first.
        Empty input returns ``[]`` without any call or event (no ReRank event, no ``RERANKING`` callback), as
        LlamaIndex's own ``LLMRerank`` and ``SentenceTransformerRerank`` do."""
        if not _has_work(nodes, query_bundle):
            return []
        with self.callback_manager.event(CBEventType.RERANKING, payload=self._start(nodes, query_bundle)) as ev:
            result = common.rerank_fields(self, query_bundle.query_str, self._candidates(nodes))
            return self._finish(nodes, result, ev)

    @dispatcher.span
    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        """Native async ``_postprocess_nodes`` on ``activeprp_core.arerank`` (each round's calls go to the
        comparator at once, so they run concurrently); same result for the same seed."""
        if not _has_work(nodes, query_bundle):
            return []
        with self.callback_manager.event(CBEventType.RERANKING, payload=self._start(nodes, query_bundle)) as ev:
            result = await common.arerank_fields(self, query_bundle.query_str, self._candidates(nodes))
            return self._finish(nodes, result, ev)
