"""``LLMComparator``: any LlamaIndex LLM (``llama_index.core.llms.LLM``: OpenAI, OpenAILike, Ollama, Anthropic
...) as the pairwise judge, a ``RemoteComparator`` provider (see ``_chat_judge.FrameworkJudge``). Re-exported by
``activeprp_integrations.llama_index``. Needs ``pip install 'activeprp[llama-index]'``.
"""

from __future__ import annotations

import sys
from typing import Any

from activeprp_core.comparators.answers import Answer, answer_from, choice_said, field, snippet

from ._chat_judge import FrameworkJudge, no_sdk_retries, own_pool
from ._common import missing_extra

try:
    from llama_index.core.llms import LLM, ChatMessage, ChatResponse, CustomLLM
except ImportError as exc:  # pragma: no cover - exercised by simulating the missing module
    raise ImportError(missing_extra("llama-index-core", "llama-index")) from exc

__all__ = ["LLMComparator"]

_SDK_CLIENTS = ("_client", "_aclient")
"""LlamaIndex OpenAI's (and OpenAILike's) cached openai clients, private attributes made with its
``max_retries``."""


def openai_logprobs(logprobs: Any) -> Any:
    """LlamaIndex's ``ChatResponse.logprobs`` (per answer token, the list of its top ``LogProb(token, logprob)``)
    in OpenAI's shape for ``answers.answer_from`` (the first token's alternatives); None when absent."""
    if not isinstance(logprobs, list) or not logprobs or not isinstance(logprobs[0], list):
        return None
    tops = [{"token": field(lp, "token"), "logprob": field(lp, "logprob")} for lp in logprobs[0]]
    return {"content": [{"top_logprobs": tops}]}


class LLMComparator(FrameworkJudge):
    """P(first preferred) from a LlamaIndex LLM answering the PRP prompt of ``OpenAIChatComparator`` (the same
    messages), one ``achat`` (async) or ``chat`` (sync) per ordered pair; on a model whose ``achat`` is
    ``CustomLLM``'s (it runs the blocking ``chat``), the async path runs ``chat`` in worker threads instead
    (``sends_in_thread``).

    P(A) comes from the answer token's top logprobs in ``ChatResponse.logprobs`` (LlamaIndex's OpenAI and
    OpenAILike fill it when asked: the judge's copy sets ``logprobs=True, top_logprobs=5`` on a model that has
    these fields), else from the one-letter answer (1.0 / 0.0); tokens from ``ChatResponse.raw.usage``
    (``prompt_tokens``, ``completion_tokens``), else ``additional_kwargs``; 0 when the model reports none.

    The model object is never changed: the judge calls ``model_copy(update=...)`` of it with
    ``_chat_judge.JUDGE_SETTINGS`` (greedy, one answer token, ``max_retries=0``, which turns off both LlamaIndex
    OpenAI's own retry decorator and its client's retries; a client it already cached is swapped, in the copy,
    for a ``with_options(max_retries=0)`` copy); a reasoning model (``O1_MODELS``) keeps its own
    ``_chat_judge.REASONING_KEEPS``. The judge retries itself (``max_attempts``), so every attempt
    is counted in ``Judgment.retries``.

    Failures follow ``OpenAIChatComparator``'s contract (``FrameworkJudge.classify``): 401/403 raise
    ``ComparatorAuthError`` at once and stop the rerank, timeouts/429/5xx are retried then fail the call, the
    circuit breaker counts failed calls, and no message holds the model's API key.

    Args:
        llm: a ``llama_index.core.llms.LLM``. The other arguments: see ``FrameworkJudge``.

    Raises:
        TypeError: ``llm`` is not a LlamaIndex ``LLM``. ValueError: see ``FrameworkJudge``.
    """

    model_type, model_kind = LLM, "a LlamaIndex LLM (llama_index.core.llms.LLM: OpenAI, OpenAILike ...)"
    call, acall = "chat", "achat"
    # CustomLLM (LlamaCPP, HuggingFaceLLM, MockLLM, most in-house wrappers): its achat calls chat on the loop
    async_work, blocking_async = "achat", (CustomLLM,)

    def reasoning_model(self, llm: LLM) -> bool:
        """A model that LlamaIndex OpenAI lists as a reasoning model (``llama_index.llms.openai.utils.O1_MODELS``:
        gpt-5, o1, o3, o4-mini ...), which its own constructor gives temperature 1."""
        utils = sys.modules.get("llama_index.llms.openai.utils")  # loaded wherever such a model exists
        return utils is not None and getattr(llm, "model", None) in getattr(utils, "O1_MODELS", ())

    def responses_api(self, llm: LLM) -> bool:
        """LlamaIndex's ``OpenAIResponses`` (``llama_index.llms.openai``)."""
        module = sys.modules.get("llama_index.llms.openai.responses")  # loaded wherever such a model exists
        return module is not None and isinstance(llm, module.OpenAIResponses)

    def request_timeout_keyword(self, llm: LLM) -> str | None:
        """LlamaIndex OpenAI (and OpenAILike: an openai client in ``_client``) passes a ``timeout`` keyword of
        ``chat`` on to the SDK's request; other models get none (the transport bounds the wait)."""
        return "timeout" if "_client" in (type(llm).__private_attributes__ or {}) else None

    def judge_copy(self, llm: LLM, settings: dict[str, Any]) -> LLM:
        judge = llm.model_copy(update=settings)
        if settings.get("max_retries") == 0:
            for name in _SDK_CLIENTS:
                client = getattr(judge, name, None)
                if client is not None:
                    setattr(judge, name, no_sdk_retries(client))  # the copy's own private state, not the user's
        return judge

    def framework_messages(self, messages: list[dict[str, str]]) -> list[ChatMessage]:
        return [ChatMessage(role=m["role"], content=m["content"]) for m in messages]

    def loop_copy(self, judge: LLM) -> LLM | None:
        """LlamaIndex OpenAI caches one ``AsyncOpenAI`` whose pool belongs to the loop that opened it, so a second
        ``asyncio.run`` would reuse dead connections: each loop gets a copy with a pool of its own (unless you gave
        ``async_http_client``, which is then yours to manage). A copy without a client opens one on its first call
        (OpenAI, OpenAILike); OpenAIResponses opens its client at construction only, so its copy gets a copy of
        that client with its own pool."""
        if "_aclient" not in (type(judge).__private_attributes__ or {}) or getattr(
                judge, "_async_http_client", None) is not None:
            return None
        copy = judge.model_copy()
        client = getattr(judge, "_aclient", None)
        copy._aclient = None if client is None else own_pool(client)  # the copy's own private state
        return copy

    async def aclose_loop_copy(self, judge: LLM) -> None:
        client = getattr(judge, "_aclient", None)
        if client is not None:
            await client.close()

    def parse(self, response: Any) -> Answer:
        """(P(A), prompt tokens, completion tokens) of a ``ChatResponse``. Raises ValueError (only): not usable."""
        if not isinstance(response, ChatResponse):
            raise ValueError(f"the model returned {snippet(response)}, not a ChatResponse")
        usage, choices = field(response.raw, "usage"), field(response.raw, "choices")
        counts = usage if usage is not None else response.additional_kwargs
        said = choice_said(choices[0]) if isinstance(choices, list) and choices else {}  # OpenAI's, as it came
        return answer_from(openai_logprobs(response.logprobs), response.message.content,
                           field(counts, "prompt_tokens"), field(counts, "completion_tokens"), **said)
