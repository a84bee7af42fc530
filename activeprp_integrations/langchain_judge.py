"""``ChatModelComparator``: any LangChain chat model (``BaseChatModel``: ChatOpenAI, ChatAnthropic, ChatOllama,
AzureChatOpenAI ...) as the pairwise judge, a ``RemoteComparator`` provider (see ``_chat_judge.FrameworkJudge``).
Re-exported by ``activeprp_integrations.langchain``. Needs ``pip install 'activeprp[langchain]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

from activeprp_core.comparators.answers import Answer, answer_from, field, snippet

from ._chat_judge import FrameworkJudge, no_sdk_retries, own_pool
from ._common import missing_extra

try:
    from langchain_core.language_models import BaseChatModel, SimpleChatModel
    from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
except ImportError as exc:  # pragma: no cover - exercised by simulating the missing module
    raise ImportError(missing_extra("langchain-core", "langchain")) from exc

__all__ = ["ChatModelComparator"]

_MESSAGE = {"system": SystemMessage, "user": HumanMessage}
_SDK_CLIENTS = (("root_client", "client"), ("root_async_client", "async_client"))
"""ChatOpenAI's (and AzureChatOpenAI's) openai clients, built at construction with its ``max_retries``: the
root client and its ``chat.completions`` resource that the model calls."""


def _sdk_clients(llm: BaseChatModel, change: Callable[[Any], Any]) -> dict[str, Any]:
    """The openai clients of ``_SDK_CLIENTS`` that ``llm`` holds, each root client (one with ``with_options``)
    replaced by ``change(root)`` and its resource by that one's, as a ``model_copy`` update (empty for a model
    without them). A resource that is not its root's own (a wrapper the user passed as ``client=``, for tracing or
    a proxy) is kept with its root: replacing it would drop the wrapper."""
    update: dict[str, Any] = {}
    for root, leaf in _SDK_CLIENTS:
        client = getattr(llm, root, None)
        if callable(getattr(client, "with_options", None)) and getattr(llm, leaf, None) is client.chat.completions:
            update[root] = change(client)
            update[leaf] = update[root].chat.completions
    return update


class ChatModelComparator(FrameworkJudge):
    """P(first preferred) from a LangChain chat model answering the PRP prompt of ``OpenAIChatComparator`` (the
    same messages), one ``ainvoke`` (async) or ``invoke`` (sync) per ordered pair.

    A model whose class has no ``_agenerate`` of its own (only ``_generate``, as LangChain's guide to custom chat
    models writes one) is called with ``invoke`` in daemon threads of the judge's own on the async path too
    (``sends_in_thread``), not in the event loop's default executor that LangChain's ``_agenerate`` uses.

    P(A) comes from the answer token's top logprobs in ``AIMessage.response_metadata["logprobs"]`` (ChatOpenAI
    puts them there when it asks for them: the judge's copy sets ``logprobs=True, top_logprobs=5`` on a model
    that has these fields), else from the one-letter answer (1.0 / 0.0); tokens come from
    ``AIMessage.usage_metadata`` (``input_tokens``, ``output_tokens``; 0 when the model reports none).

    The model object is never changed: the judge calls ``model_copy(update=...)`` of it with
    ``_chat_judge.JUDGE_SETTINGS`` (greedy, one answer token, ``max_retries=0``) where the model declares those
    fields; ChatOpenAI's prebuilt openai clients are swapped, in the copy, for ``with_options(max_retries=0)``
    copies sharing their connection pool, and with a ``base_url`` it sends ``max_tokens=1`` in ``extra_body``
    instead of ``max_completion_tokens=1`` (``provider_settings``); a reasoning model (its profile's
    ``reasoning_output``) keeps its own ``_chat_judge.REASONING_KEEPS``. Each event loop gets its own connection
    pool (``loop_copy``). The judge retries itself (``max_attempts``), so every attempt is counted in
    ``Judgment.retries``; a model with retries of its own that the judge cannot see (a ``with_retry`` wrapper, a
    client passed in) makes one judge call cost several requests. Its callbacks still see every call.

    Failures follow ``OpenAIChatComparator``'s contract (``FrameworkJudge.classify``): 401/403 raise
    ``ComparatorAuthError`` at once and stop the rerank, timeouts/429/5xx are retried then fail the call, the
    circuit breaker counts failed calls, and no message holds the model's API key.

    Args:
        llm: a ``langchain_core.language_models.BaseChatModel``. The other arguments: see ``FrameworkJudge``.

    Raises:
        TypeError: ``llm`` is not a ``BaseChatModel``. ValueError: see ``FrameworkJudge``.
    """

    model_type, model_kind = BaseChatModel, "a LangChain BaseChatModel (ChatOpenAI, ChatAnthropic ...)"
    call, acall = "invoke", "ainvoke"
    # a model with only _generate (LangChain's custom chat model guide): their _agenerate runs it in the loop's
    # default executor, which asyncio.run waits for at its exit and whose few workers a cut call keeps
    async_work, blocking_async = "_agenerate", (BaseChatModel, SimpleChatModel)

    def reasoning_model(self, llm: BaseChatModel) -> bool:
        """A model whose LangChain profile (``BaseChatModel.profile``) says ``reasoning_output``: OpenAI's gpt-5
        and o-series, and the reasoning models of other providers' profiles."""
        profile = getattr(llm, "profile", None)
        return isinstance(profile, Mapping) and profile.get("reasoning_output") is True

    def responses_api(self, llm: BaseChatModel) -> bool:
        """ChatOpenAI's ``use_responses_api``, which langchain-openai sets at construction where the model's own
        settings route it to the Responses API (``output_version="responses/v1"``, ``reasoning``, ``include``,
        ``truncation``, codex and -pro models); left None, langchain-openai's routing decides per request, from the
        model's ``model_kwargs`` here."""
        routed = getattr(llm, "use_responses_api", None)
        if isinstance(routed, bool):
            return routed
        decide = getattr(llm, "_use_responses_api", None)  # langchain-openai's own routing
        return callable(decide) and bool(decide(dict(getattr(llm, "model_kwargs", None) or {})))

    def provider_settings(self, llm: BaseChatModel, settings: dict[str, Any]) -> dict[str, Any]:
        """ChatOpenAI sends its ``max_tokens`` as ``max_completion_tokens``, which some OpenAI-compatible servers
        ignore (llama-cpp-python's generates a whole sentence, whose text then may not parse), and OpenAI answers
        400 to both at once: with a ``base_url`` (maybe a proxy in front of OpenAI) the cap goes as ``max_tokens``
        alone, in ``extra_body`` (``judge_copy`` clears the copy's own), except to a reasoning model, on the
        Responses API (which has no ``max_tokens``) or when the caller's ``settings`` name ``extra_body``."""
        cap = settings.get("max_tokens")
        if (cap is None or "extra_body" in settings or self.reasoning or self.responses
                or "extra_body" not in type(llm).model_fields or not getattr(llm, "openai_api_base", None)):
            return settings
        return {**settings, "max_tokens": None,
                "extra_body": {**(getattr(llm, "extra_body", None) or {}), "max_tokens": cap}}

    def request_timeout_keyword(self, llm: BaseChatModel) -> str | None:
        """ChatOpenAI (and the models built on its openai client, ``root_client``) passes a ``timeout`` keyword of
        ``invoke`` on to the SDK's request; other models get none (the transport bounds the wait). The judge
        gives the time left to the model's openai clients instead (``timed_call``)."""
        return "timeout" if "root_client" in type(llm).model_fields else None

    def timed_call(self, model: BaseChatModel, seconds: float) -> tuple[BaseChatModel, dict[str, Any]]:
        """A copy of ``model`` whose openai clients take ``seconds`` as their timeout (``with_options``, sharing
        their connection pool), called with no keyword. Not ``invoke(..., timeout=seconds)``: LangChain puts a
        call's keywords into the key of its LLM cache (``BaseChatModel._get_llm_string``), so a timeout that
        changes with every call makes every lookup miss (the model's ``cache=``, ``set_llm_cache``); the clients
        are not part of the key (fields excluded from the model's serialization). A model with a client that has
        no openai root client (``client=`` given without ``root_client``) gets the ``timeout`` keyword as well: its
        requests are bounded, and a cache then misses."""
        clients = _sdk_clients(model, lambda c: c.with_options(timeout=seconds))
        held = [leaf for _, leaf in _SDK_CLIENTS if getattr(model, leaf, None) is not None]
        keyword = {} if all(leaf in clients for leaf in held) else {self.timeout_keyword: seconds}
        return (model.model_copy(update=clients) if clients else model), keyword

    def judge_copy(self, llm: BaseChatModel, settings: dict[str, Any]) -> BaseChatModel:
        update = dict(settings)
        if "max_tokens" in (settings.get("extra_body") or {}):
            update["max_tokens"] = None  # one cap: ChatOpenAI would also send its own as max_completion_tokens
        if settings.get("max_retries") == 0:
            update |= _sdk_clients(llm, no_sdk_retries)
        copy = llm.model_copy(update=update)
        # model_copy keeps the values of llm's cached properties, among them BaseChatModel._serialized, the model
        # part of LangChain's cache key: once llm was called, the copy's key would carry llm's settings, not the
        # judge's, and a judge with other settings (logprobs=False) would get this one's cached answers.
        for name in [n for n in vars(copy) if isinstance(getattr(type(copy), n, None), cached_property)]:
            del vars(copy)[name]
        return copy

    def framework_messages(self, messages: list[dict[str, str]]) -> list[BaseMessage]:
        return [_MESSAGE[m["role"]](content=m["content"]) for m in messages]

    def loop_copy(self, judge: BaseChatModel) -> BaseChatModel | None:
        """ChatOpenAI's async client pools connections in the loop that opened them (LangChain caches one pool per
        base URL), so a second ``asyncio.run`` would reuse dead connections ("Event loop is closed"): each loop gets
        a copy with its own pool (unless you gave ``http_async_client``, which is then yours to manage)."""
        root = getattr(judge, "root_async_client", None)
        if root is None or not callable(getattr(root, "with_options", None)) or getattr(
                judge, "http_async_client", None) is not None:
            return None
        fresh = own_pool(root)
        return judge.model_copy(update={"root_async_client": fresh, "async_client": fresh.chat.completions})

    async def aclose_loop_copy(self, judge: BaseChatModel) -> None:
        await judge.root_async_client.close()

    def parse(self, response: Any) -> Answer:
        """(P(A), prompt tokens, completion tokens) of an ``AIMessage``. Raises ValueError (only): not usable."""
        if not isinstance(response, BaseMessage):
            raise ValueError(f"the model returned {snippet(response)}, not a message")
        content = response.content if isinstance(response.content, str) else str(response.text)
        usage, meta = field(response, "usage_metadata"), response.response_metadata
        # what the endpoint said of its answer, where langchain-openai keeps it (as answers.choice_said reads it)
        return answer_from(field(meta, "logprobs"), content, field(usage, "input_tokens"),
                           field(usage, "output_tokens"), finish_reason=field(meta, "finish_reason"),
                           refusal=field(response.additional_kwargs, "refusal"))
