"""LangChain document compressor: budgeted pairwise LLM reranking with ActivePRP.

``ActivePRPRerank`` is a drop-in ``BaseDocumentCompressor`` (use it in ``ContextualCompressionRetriever``, a
``DocumentCompressorPipeline``, or an LCEL chain through ``as_runnable()``). Needs ``pip install
'activeprp[langchain]'``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from activeprp_core import Comparator
from activeprp_core.comparators import SupportsCompare
from activeprp_core.comparators.base import check_comparator, comparator_name
from activeprp_core.errors import scrub

from . import _common as common

try:
    from langchain_core.callbacks import AsyncCallbackManager, CallbackManager, Callbacks
    from langchain_core.documents import Document
    from langchain_core.documents.compressor import BaseDocumentCompressor
    from langchain_core.language_models import BaseChatModel, BaseLanguageModel
    from langchain_core.load import dumpd
    from langchain_core.runnables import Runnable, RunnableLambda, ensure_config
    from langchain_core.runnables.config import patch_config, var_child_runnable_config
    from pydantic import ConfigDict, PrivateAttr, field_serializer, field_validator, model_validator
except ImportError as exc:  # pragma: no cover - exercised by simulating the missing module
    raise ImportError(common.missing_extra("langchain-core", "langchain")) from exc

from ._chat_judge import FrameworkJudge, exactly_one_judge, model_secrets  # noqa: E402 - after the framework check
from ._common import RANK_KEY, SCORE_KEY  # noqa: E402 - imported, not assigned: the API page shows their docstrings
from .langchain_judge import ChatModelComparator  # noqa: E402

__all__ = ["RANK_KEY", "SCORE_KEY", "ActivePRPRerank", "ChatModelComparator"]

_RUN_NAME = "ActivePRPRerank"


def _documents(documents: Any) -> list[Document]:
    """``documents`` as a list, after checking that it is an iterable of ``Document`` (not a str, not None).

    Raises:
        TypeError: anything else, naming what to pass instead.
    """
    # None is no Iterable; one Document (a pydantic model) or a dict iterates as (key, value) pairs
    if isinstance(documents, (str, bytes, Document, Mapping)) or not isinstance(documents, Iterable):
        raise TypeError(f"documents must be a list of langchain_core Document, got {type(documents).__name__}")
    docs = list(documents)
    for d in docs:
        if not isinstance(d, Document):
            raise TypeError(f"documents must be langchain_core Document objects, got {type(d).__name__} (wrap a "
                            "text as Document(page_content=text))")
    return docs


def _runnable_input(x: Any) -> tuple[list[Document], str]:
    """``(documents, query)`` of ``as_runnable``'s input dict.

    Raises:
        TypeError: ``x`` is not a mapping with the keys ``documents`` and ``query``.
    """
    if not isinstance(x, Mapping) or "documents" not in x or "query" not in x:
        keys = sorted(map(str, x)) if isinstance(x, Mapping) else type(x).__name__
        raise TypeError(f"ActivePRPRerank.as_runnable() takes a dict with the keys 'documents' and 'query', got {keys}")
    return x["documents"], x["query"]


def _configure(manager_cls: Any, callbacks: Callbacks | None) -> Any:
    """A callback manager for the rerank run: the given callbacks, else those of the enclosing runnable (they
    carry its tags and metadata), so the run nests under the caller's run either way."""
    return manager_cls.configure(callbacks if callbacks is not None else ensure_config().get("callbacks"))


def _scrubbed(value: Any, secrets: Sequence[str]) -> Any:
    """A JSON value (dicts, lists, strings, numbers) with ``secrets`` scrubbed from every string in it."""
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {k: _scrubbed(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v, secrets) for v in value]
    return value


def _traced(judge: Any) -> Any:
    """A judge (``llm`` or ``comparator``) in JSON as LangChain's tracing records a model (``dumpd``, which
    ``BaseChatModel._serialized`` is): a serializable model's constructor arguments, each of its ``lc_secrets`` a
    reference to its environment variable, not its value; any other object its class path and ``repr``. The model's
    secrets (``model_secrets``: ``SecretStr`` fields, str fields named key, token ...; of ``judge``, or of the model a
    judge of it calls) are scrubbed from it all the same: a key in a field LangChain does not list, or in a repr."""
    model = judge.llm if isinstance(judge, FrameworkJudge) else judge
    return _scrubbed(dumpd(judge), model_secrets(model))


@contextmanager
def _child_runs_of(run: Any) -> Iterator[None]:
    """Within it, runnables called without a config (the ``llm=`` judge's ``invoke`` / ``ainvoke``, also in the
    comparator's worker threads, which copy the context) report to ``run``'s child callbacks, as LangChain's own
    runnables hand their children ``run_manager.get_child()``: the judge's calls nest under the rerank's run and
    the caller's handlers (token usage, tracing) see them."""
    token = var_child_runnable_config.set(patch_config(ensure_config(), callbacks=run.get_child()))
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


class ActivePRPRerank(common.ComparatorFactories, BaseDocumentCompressor, common.settings_model()):
    """Rerank retrieved ``Document`` objects with a pairwise LLM judge under a per-query call budget.

    Fields (the same names as the LlamaIndex postprocessor):
        comparator: a ``activeprp_core.Comparator`` or any object with ``compare(query, pairs) ->
            list[float | None]``; its ``ajudge``/``acompare`` is used by ``acompress_documents``. Never changed.
        llm: instead of ``comparator``, your LangChain chat model (any ``BaseChatModel``: ChatOpenAI,
            ChatAnthropic, ChatOllama ...) as the judge: ``comparator`` becomes ``ChatModelComparator(llm)``
            (the PRP prompt, P(A) from logprobs when the model gives them; see docs/frameworks-llm.md). The model
            object is never changed. Exactly one of ``comparator`` and ``llm``: both is a ValueError, neither a
            TypeError, at construction, at assignment and in ``model_copy(update=...)`` (a refused assignment
            changes nothing); assigning another ``llm``, or a copy's update of it, makes it the judge. A
            ``ChatModelComparator`` of that same model object beside it is its judge, not a second one (it is
            the one used), so ``ActivePRPRerank(**dict(r))`` rebuilds ``r`` with its judge.
        top_n: how many documents to return (int >= 1, default 3; None = all, reranked). It is the core's top-K.
        Every other ``activeprp_core.RerankSettings`` field under its own name (``ranker``, ``oracle``,
        ``budget``, ``max_rounds``, ``token_budget``, ``time_budget``, ``seed``, ``cache``, ``on_failure``,
        ``max_concurrency``, ``max_consecutive_failures``), checked as the core checks it, with the defaults of
        the online preset ``activeprp_core.settings.ONLINE``: ``ranker="auto"`` and ``oracle="auto"`` (chosen
        from measured data for N, K, budget and round cap), ``budget=50`` calls (the knob of spend),
        ``max_rounds=6`` (latency ~ rounds x call latency), no token or time cap, ``seed=0``, ``cache=True``,
        ``on_failure="raise"``, ``max_concurrency=None`` (the comparator's own), ``max_consecutive_failures=5``.
        In LangChain terms: ``on_failure="raise"`` lets a failure propagate, so ``with_fallbacks`` works;
        ``"prior"`` returns the best-effort order (``stats`` in the run's outputs say why; a WARNING is logged on
        the ``activeprp`` logger). ``max_concurrency`` is handed to each rerank, so rerankers sharing one
        comparator keep their own caps.

    Output: new ``Document`` objects (``model_copy``; ``id``, ``page_content`` and all metadata kept, the metadata
    deep-copied before any call (``_common.make_candidates``): changing an output never changes an input; metadata
    that cannot be copied is a TypeError before any call), best first, with ``metadata["relevance_score"]`` (``(n -
    rank) / n`` over the n input documents: in (0, 1], higher is better; rank-based, not a probability) and
    ``metadata["rerank_rank"]`` (1 = best). Each call is a child run named ``ActivePRPRerank`` in LangChain
    callbacks/tracing; its outputs hold the documents and ``stats`` (``RerankResult.stats()``: the settings, calls,
    rounds, exhausted, ...), and the ``llm=`` judge's chat calls are its child runs (your handlers see their tokens).

    Copies: ``model_copy(update=...)`` checks every updated field on the copy as an assignment is (pydantic's
    own checks nothing, so a copy could hold a budget or judge the constructor refuses) and refuses a name that is
    no field; ``copy.copy`` and ``model_copy()`` share the judge object (safe: a rerank's caps and counters are its
    own). ``copy.deepcopy``, ``model_copy(deep=True)`` and pickling copy the judge and the ``llm`` (the copy's judge
    calls the copy's model; a remote judge's copy opens clients of its own: see ``RemoteComparator``); a model that
    cannot be copied (``ChatOpenAI``: its client holds a lock) makes a deep copy raise a TypeError that says to share
    the judge or build a new reranker. ``model_dump()`` turns ``llm`` into a dict, which is no chat model: rebuild
    from ``dict(r)`` instead. ``model_dump_json()`` and ``model_dump(mode="json")`` (for logs and trace configs)
    record each judge as LangChain's tracing records a model (``langchain_core.load.dumpd``: a key LangChain knows
    as a reference to its environment variable) with the model's secrets scrubbed: a record, not a rebuild.

    Raises:
        TypeError / ValueError: a bad field, at construction, assignment or ``model_copy(update=...)`` (the message
            says what to pass).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    comparator: Comparator | SupportsCompare | None = None
    llm: BaseChatModel | None = None

    @field_validator("comparator", mode="before")
    @classmethod
    def _check_comparator(cls, value: Any) -> Any:
        return value if value is None else check_comparator(value)

    @field_validator("llm", mode="before")
    @classmethod
    def _check_llm(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, BaseChatModel):
            if isinstance(value, Mapping):
                hint = (" (model_dump() turns the model into a dict; rebuild with ActivePRPRerank(**dict(reranker)) "
                        "or reranker.model_copy(update=...))")
            elif isinstance(value, BaseLanguageModel):  # a text-completion model (BaseLLM: OpenAI, Ollama ...)
                hint = " (a text-completion model: the judge needs a chat model, e.g. ChatOpenAI(...), ChatOllama(...))"
            elif isinstance(value, Runnable):  # .bind(), .with_retry(), .with_config(), .with_fallbacks() ...
                hint = (" (a wrapped model: pass the chat model itself, e.g. ChatOpenAI(...), with its options set "
                        "on it; the judge sets its own request settings and retries, settings= adds yours)")
            else:
                hint = ""
            raise TypeError(f"llm must be a LangChain BaseChatModel (ChatOpenAI, ChatAnthropic ...), got "
                            f"{type(value).__name__}{hint}; for another judge pass comparator=")
        return value

    @field_serializer("comparator", "llm", when_used="json")
    def _judge_json(self, judge: Any) -> Any:
        """``model_dump_json()`` and ``model_dump(mode="json")`` (a trace's or log's record of the configuration):
        each judge as ``_traced`` (pydantic has no JSON for a comparator, and would dump only the
        ``BaseChatModel`` fields of a model, e.g. its callbacks). A record, not a way to rebuild the reranker."""
        return None if judge is None else _traced(judge)

    _llm_judge: Any = PrivateAttr(default=None)  # the judge of ``llm`` while it is set, see ``_one_judge``

    @staticmethod
    def _judges_with(comparator: Any, llm: Any) -> bool:
        """Whether ``comparator`` is a judge of the model ``llm`` (a ``ChatModelComparator`` calling that object),
        as the one built from ``llm=`` is: not a second judge beside it."""
        return llm is not None and isinstance(comparator, ChatModelComparator) and comparator.llm is llm

    def _judges(self, **change: Any) -> tuple[Any, Any]:
        """``(comparator, llm)`` as the user set them, with ``change`` applied: the judge of ``llm`` (the one built
        from it, or one of that same model object) and the judge of the ``llm`` being replaced count as no
        comparator."""
        judges = {"comparator": self.comparator, "llm": self.llm, **change}
        comparator, llm = judges["comparator"], judges["llm"]
        if comparator is self._llm_judge or self._judges_with(comparator, llm):
            comparator = None
        return comparator, llm

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("comparator", "llm"):  # checked before the field changes, so a refused judge changes nothing
            exactly_one_judge(*self._judges(**{name: value}))
        super().__setattr__(name, value)

    @model_validator(mode="after")
    def _one_judge(self) -> ActivePRPRerank:
        """At construction, at every assignment and in ``model_copy``: exactly one judge; while ``llm`` is set,
        ``comparator`` is a judge of it (the one given, else ``ChatModelComparator(llm)``, built again only when
        another model is set)."""
        exactly_one_judge(*self._judges())
        if self.llm is None:
            self._llm_judge = None  # the comparator is the user's, whatever object it is
        else:
            if not self._judges_with(self.comparator, self.llm):
                keep = self._judges_with(self._llm_judge, self.llm)
                judge = self._llm_judge if keep else ChatModelComparator(self.llm)
                self.__dict__["comparator"] = judge  # not an assignment: no validation again
            self._llm_judge = self.comparator
        common.judge_of(self)  # a comparator without compare() fails here, at construction
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ActivePRPRerank:
        """pydantic's ``model_copy`` (which validates nothing), with every updated field checked on the copy as an
        assignment is (``_common.checked_copy``): the copy judges with the ``llm`` it shows and holds only settings
        the constructor would take. The original is never changed.

        Raises:
            TypeError: a name that is no field; an ``llm`` that is no ``BaseChatModel``; no judge left. ValueError:
                both judges (as ``exactly_one_judge``), a bad setting.
        """
        copied = common.checked_copy(self, super().model_copy, update, deep)
        if deep and self._llm_judge is self.comparator and "comparator" not in (update or {}):
            # pydantic < 2.14 deep-copies the private attributes apart from the fields (another memo): the copy's
            # judge of its llm is then its comparator, not a second copy of it
            copied._llm_judge = copied.comparator
        return copied

    def _inputs(self, documents: Sequence[Document], query: str) -> dict[str, Any]:
        return {"query": query, "documents": list(documents), "model": comparator_name(self.comparator)}

    def _outputs(self, documents: Sequence[Document], result: Any) -> list[Document]:
        return [common.with_own_metadata(documents[i], {**result.candidates[i].metadata, common.SCORE_KEY: score,
                                                        common.RANK_KEY: rank})
                for i, score, rank in common.picked(result)]

    @staticmethod
    def _candidates(documents: Sequence[Document]) -> list:
        return common.make_candidates((d.id, d.page_content, d.metadata) for d in documents)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Rerank ``documents`` for ``query`` and return the top ``top_n`` as new documents, best first.

        ``callbacks``: LangChain callbacks (None = those of the enclosing runnable, if any); the work runs in a
        child chain run, every call's (empty input returns ``[]`` without any LLM call, and its run's ``stats`` say
        0 calls). Errors of the core ``rerank`` (e.g. an ``activeprp_core.ComparatorError`` when the endpoint fails)
        are reported to the run and re-raised.

        Raises:
            TypeError: ``documents`` is not a list of ``Document`` (a str, None, a list of str).
        """
        documents = _documents(documents)
        manager = _configure(CallbackManager, callbacks)
        run = manager.on_chain_start(None, self._inputs(documents, query), name=_RUN_NAME)
        try:
            with _child_runs_of(run):
                result = common.rerank_fields(self, query, self._candidates(documents))
            out = self._outputs(documents, result)
        except BaseException as e:
            run.on_chain_error(e)
            raise
        run.on_chain_end({"documents": out, "stats": result.stats()})
        return out

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Async ``compress_documents`` (same result for the same seed) on ``activeprp_core.arerank``: each
        round's calls go to the comparator's ``ajudge``/``acompare`` at once, so they run concurrently."""
        documents = _documents(documents)
        manager = _configure(AsyncCallbackManager, callbacks)
        run = await manager.on_chain_start(None, self._inputs(documents, query), name=_RUN_NAME)
        try:
            with _child_runs_of(run):
                result = await common.arerank_fields(self, query, self._candidates(documents))
            out = self._outputs(documents, result)
        except BaseException as e:
            await run.on_chain_error(e)
            raise
        await run.on_chain_end({"documents": out, "stats": result.stats()})
        return out

    def as_runnable(self) -> RunnableLambda:
        """This reranker as an LCEL runnable: input ``{"documents": list[Document], "query": str}``, output the
        reranked documents (sync and native async), e.g.
        ``{"documents": retriever, "query": RunnablePassthrough()} | reranker.as_runnable()``."""

        async def _arun(x: dict) -> Sequence[Document]:
            return await self.acompress_documents(*_runnable_input(x))

        return RunnableLambda(lambda x: self.compress_documents(*_runnable_input(x)), afunc=_arun,
                              name=f"{_RUN_NAME}Runnable")
