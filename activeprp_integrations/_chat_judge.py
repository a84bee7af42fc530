"""What the framework-LLM judges share (imports no framework): ``FrameworkJudge``, a ``RemoteComparator`` provider
whose transport is a LangChain ``BaseChatModel`` or a LlamaIndex ``LLM`` instead of an HTTP client. The
framework providers (``ChatModelComparator``, ``LLMComparator``) add only how messages go in and how a reply
comes out; the prompt, the judge settings, the failure classes and the token bound are here, once.

The user's model object is never changed: the judge calls a copy (``model_copy(update=...)``; both frameworks'
models are pydantic models) with the judge settings of ``JUDGE_SETTINGS`` that the model's class declares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from activeprp_core.comparators.answers import error_said, field
from activeprp_core.comparators.failures import Failure, Fault, error_message, retry_after_s, status_failure
from activeprp_core.comparators.openai_chat import not_found
from activeprp_core.comparators.prompts import (
    ANSWER_TOKENS,
    MAX_PASSAGE_WORDS,
    PRP_PROMPT,
    TOP_LOGPROBS,
    ChatPrompts,
    chat_token_bound,
)
from activeprp_core.comparators.remote import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    MAX_ATTEMPTS,
    MAX_CONCURRENCY,
    MAX_RETRY_AFTER,
    RemoteComparator,
)
from activeprp_core.types import Candidate

JUDGE_SETTINGS: dict[str, Any] = {"temperature": 0, "max_tokens": ANSWER_TOKENS, "num_predict": ANSWER_TOKENS,
                                  "max_output_tokens": ANSWER_TOKENS, "streaming": False, "max_retries": 0}
"""The settings of the judge's copy of the model, each applied only when the model's class declares that field:
greedy (``temperature``), a one-token answer (``max_tokens``; Ollama's ``num_predict``, Google's
``max_output_tokens``), no streaming, and the framework's own retries off (``max_retries=0``: the judge
retries, counts and bills each attempt itself). With ``logprobs=True`` also ``logprobs`` / ``top_logprobs``."""

TOKEN_CAPS = ("max_tokens", "num_predict", "max_output_tokens")
REASONING_KEEPS = ("temperature", *TOKEN_CAPS, "logprobs", "top_logprobs")
"""The judge settings left as the model has them on a reasoning model (``FrameworkJudge.reasoning_model``): such a
model takes only its default temperature (OpenAI's gpt-5 and o-series answer 400 to ``temperature=0``), its
reasoning tokens count against the completion cap (a cap of 1 leaves no room for the answer), and it returns no
logprobs."""
RESPONSES_MIN_OUTPUT_TOKENS = 16
"""The smallest ``max_output_tokens`` OpenAI's Responses API accepts (it answers 400 below): the judge's cap on a
model that calls that API (``FrameworkJudge.responses_api``)."""
UNCAPPED_COMPLETION_TOKENS = 16
"""Completion tokens assumed by ``estimate_tokens`` for a model whose answer length the judge cannot cap."""

_RETRIED = ("APIConnectionError", "APITimeoutError", "TransportError", "TimeoutException")
"""Exception class names (anywhere in the MRO) of transient transport failures in the SDKs behind the
frameworks (openai, anthropic, httpx): retried like a timeout."""
_CLIENT_ERRORS = ("OpenAIError", "AnthropicError", "APIError")
"""SDK error base classes that are failed calls when nothing more specific applies."""


class ModelStopIteration(Exception):
    """Raised in place of a ``StopIteration`` that the model raised in a call (``FrameworkJudge.send``/``asend``): it
    cannot pass through the judge's coroutines (Python makes it a ``RuntimeError``, "coroutine raised StopIteration",
    PEP 479). A failed call, as a ``ValueError`` the model raises is (``FrameworkJudge.classify``)."""

    def __init__(self, stop: StopIteration) -> None:
        super().__init__(f"the model raised {stop!r}")


def _named(error: BaseException, names: tuple[str, ...]) -> bool:
    return any(cls.__name__ in names for cls in type(error).__mro__)


def exactly_one_judge(comparator: Any, llm: Any) -> None:
    """Check that a reranker got exactly one judge.

    Raises:
        TypeError: neither ``comparator=`` nor ``llm=`` (as for a missing argument). ValueError: both.
    """
    if comparator is None and llm is None:
        raise TypeError("ActivePRPRerank needs a judge: pass llm= (your framework's chat model) or comparator= (an "
                        "activeprp comparator)")
    if comparator is not None and llm is not None:
        raise ValueError("ActivePRPRerank got both comparator= and llm=: pass exactly one (llm= your framework's "
                         "chat model as the judge, or comparator= an activeprp comparator)")


def model_secrets(llm: Any) -> list[str]:
    """The secrets a framework model holds (pydantic ``SecretStr`` fields, and str fields whose name says key,
    token or secret), so that no message shows them."""
    out = []
    for name in getattr(type(llm), "model_fields", {}):
        value = getattr(llm, name, None)
        secret = getattr(value, "get_secret_value", None)
        if callable(secret):
            value = secret()
        elif not any(word in name.lower() for word in ("key", "token", "secret", "password")):
            continue
        if isinstance(value, str) and len(value) >= 4:
            out.append(value)
    return out


MODEL_KEYS = ("model_name", "model", "model_id", "deployment_name", "azure_deployment", "engine")
"""The names the frameworks' model classes give a field that names the model, or the Azure deployment the requests
go to, which is the model (ChatOpenAI's ``model_name``, alias ``model``; ChatAnthropic's and LlamaIndex OpenAI's
``model``; Bedrock's ``model_id``; AzureChatOpenAI's ``deployment_name``, alias ``azure_deployment``; LlamaIndex
AzureOpenAI's ``engine`` and ``azure_deployment``). Also the keys that name the model inside a request-body dict
(``BODY_DICTS``)."""
BODY_DICTS = ("model_kwargs", "extra_body", "additional_kwargs")
"""Model fields whose dict goes into each request's body (ChatOpenAI's ``model_kwargs`` and ``extra_body``,
LlamaIndex OpenAI's ``additional_kwargs``; the last two may hold an ``extra_body`` of their own): a ``MODEL_KEYS``
key there would send another model than the one the judge was set up for."""


def _keywords(name: str, info: Any) -> list[str]:
    """The names a pydantic field goes by: its constructor keyword first (``validation_alias``, a str or the str
    choices of ``AliasChoices``; else ``alias``), then the others, then its own name."""
    valias = info.validation_alias
    choices = getattr(valias, "choices", [valias])
    names = [c for c in (*choices, info.alias, name) if isinstance(c, str)]
    return list(dict.fromkeys(names))


def model_fields_named(llm: Any) -> dict[str, str]:
    """Each ``settings`` key that names ``llm``'s model, mapped to the keyword that builds the class with it: the
    name and aliases of each field of its class that one of ``MODEL_KEYS`` names (ChatOpenAI: ``model_name`` and
    ``model``, both to ``model``; AzureChatOpenAI also ``deployment_name`` and ``azure_deployment``, to
    ``azure_deployment``). A key that is no field of the class is not here (it is no setting at all)."""
    out: dict[str, str] = {}
    for name, info in getattr(type(llm), "model_fields", {}).items():
        names = _keywords(name, info)
        if set(names) & set(MODEL_KEYS):
            out |= {n: names[0] for n in names if n not in out}
    return out


def body_model_keys(settings: Mapping[str, Any], path: str = "settings") -> list[tuple[str, str]]:
    """Where ``settings`` name the model inside a request-body dict, whatever the value: each ``MODEL_KEYS`` key of a
    ``BODY_DICTS`` dict, and of a ``BODY_DICTS`` dict inside one, as ``("settings['model_kwargs']['model']",
    "model")``."""
    found = []
    for field_name in BODY_DICTS:
        body = settings.get(field_name)
        if isinstance(body, Mapping):
            where = f"{path}[{field_name!r}]"
            found += [(f"{where}[{k!r}]", k) for k in body if k in MODEL_KEYS]
            found += body_model_keys(body, where)
    return found


def model_label(llm: Any) -> str:
    """The model's name (``model_name``, ``model`` or ``model_id``), else its class name."""
    for name in MODEL_KEYS:
        value = getattr(llm, name, None)
        if isinstance(value, str) and value:
            return value
    return type(llm).__name__


def defining_class(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO that defines the attribute ``name`` (None: none does). The class, not the
    attribute's value: LlamaIndex wraps its methods anew (wrapt) at each lookup."""
    return next((c for c in cls.__mro__ if name in vars(c)), None)


def no_sdk_retries(client: Any) -> Any:
    """An SDK client (openai, anthropic: ``with_options``) without its own retries, sharing its connection pool;
    anything else unchanged."""
    with_options = getattr(client, "with_options", None)
    return with_options(max_retries=0) if callable(with_options) and hasattr(client, "max_retries") else client


def own_pool(client: Any) -> Any:
    """A copy of an openai async client with a connection pool of its own (``with_options(http_client=...)``), for
    one event loop."""
    import openai  # only called with an openai client

    return client.with_options(http_client=openai.DefaultAsyncHttpxClient())


class FrameworkJudge(ChatPrompts, RemoteComparator):
    """A ``RemoteComparator`` provider over a framework's model object: the PRP prompt of
    ``OpenAIChatComparator`` (the same messages: ``prompts.ChatPrompts``), one call per ordered pair through
    the framework's native async call, P(A) from the answer token's logprobs when the reply carries them, else
    the one-letter answer (``answers.answer_from``, the OpenAI provider's parser).

    Subclasses name the model's class and its calls (``model_type``, ``call``/``acall``), implement
    ``framework_messages`` (chat messages in the framework's type) and ``parse``, and may override
    ``reasoning_model``, ``responses_api``, ``provider_settings``, ``request_timeout_keyword`` / ``timed_call``
    (the time left as each request's timeout), ``judge_copy`` and ``loop_copy`` / ``aclose_loop_copy`` (a copy of
    the model per event loop, for SDK clients bound to one loop), and name the framework's blocking async fallback
    (``async_work``, ``blocking_async``: ``sends_in_thread``).

    Args:
        llm: the framework's model; never changed (the judge calls ``judge_copy(llm)``).
        prompt, system_prompt: the PRP template (``{query}``, ``{first}``, ``{second}``) and an optional system
            message; ``with_prompts(...)`` gives a copy with others.
        logprobs, top_logprobs: ask for the top ``top_logprobs`` alternatives of the answer token, on models that
            declare a ``logprobs`` field (ChatOpenAI, LlamaIndex's OpenAI / OpenAILike), except on OpenAI's
            Responses API (``responses_api``), which has none: there the judge's copy also clears the model's own
            ``logprobs`` / ``top_logprobs``.
        settings: fields of the judge's copy over ``JUDGE_SETTINGS`` (less ``REASONING_KEEPS`` on a reasoning
            model); a value None keeps the model's own (e.g. ``{"temperature": None}``, ``{"model": None}``).
            Every key must be a field of the model, and none may name the model, nor the Azure deployment, which is
            the model (``model_fields_named``: a field of the class, or its alias, that one of ``MODEL_KEYS`` names:
            ``model``, ``model_name``, ``deployment_name`` / ``azure_deployment``, LlamaIndex Azure's ``engine``
            ...), nor may a ``MODEL_KEYS`` key sit in a request-body dict (``BODY_DICTS``: ``model_kwargs``,
            ``extra_body``, ``additional_kwargs``, and an ``extra_body`` in one of them): a copy's update would not
            make the framework see another model (e.g. a reasoning one, or another deployment). Build the model
            with it, by the keyword the error names (``ChatOpenAI(model=...)``, ``OpenAI(model=...)``,
            ``AzureChatOpenAI(azure_deployment=...)``). Whether the copy is on the Responses API or a reasoning
            model is read from the model as these settings make it (``configured_model``):
            ``{"use_responses_api": True}`` counts.
        max_passage_words: passages are cut to this many words (``prompts.cut_words``: whitespace-separated, each
            character of a script written without spaces, such as Chinese or Thai, counted as one).
        max_concurrency, max_attempts, backoff_initial, backoff_max, max_retry_after: the transport's
            (``RemoteComparator``): calls in flight (the default cap of each rerank, not of the judge), and the
            judge's own retry policy.

    Copies (``RemoteComparator``): ``copy.copy`` / ``with_prompts`` share ``llm``; ``copy.deepcopy`` and pickling
    copy ``llm`` (deep) and make the judge's model again from that copy. A model whose client cannot be copied
    (LangChain's ``ChatOpenAI``) makes ``copy.deepcopy`` raise a ``TypeError`` saying to share the judge or build a
    new one, and pickling raise pickle's own error: build the judge where it runs (Ray: ``comparator_factory``).

    Raises:
        ValueError: a ``settings`` key that names the model (or a key naming it in a request-body dict) or is not a
            field of it, a ``logprobs`` in ``settings`` on the Responses API, a prompt without its placeholders, a
            count below its minimum. TypeError: a prompt that is not a str, a count that is not an int, a
            ``logprobs`` that is not a bool (``ChatPrompts.set_chat_settings``, as ``OpenAIChatComparator``).
    """

    fresh_state = (*RemoteComparator.fresh_state, "judge_llm")  # made from ``llm``: its clients are (or share) yours
    model_type: type
    model_kind: str
    """``llm`` must be a ``model_type``; ``model_kind`` names it in the ``TypeError`` otherwise."""
    call: str
    acall: str
    """The model's sync and async chat methods, called with the framework's messages (e.g. ``invoke``/``ainvoke``)."""
    async_work: str = ""
    blocking_async: tuple[type, ...] = ()
    """``sends_in_thread``: the method of the model's class that does the async call's work (LangChain's
    ``_agenerate``, LlamaIndex's ``achat``) and the framework classes whose version of it only runs the blocking
    call (LangChain's in the loop's default executor, LlamaIndex's ``CustomLLM`` on the loop itself)."""

    def __init__(self, llm: Any, *, prompt: str = PRP_PROMPT, system_prompt: str | None = None,
                 logprobs: bool = True, top_logprobs: int = TOP_LOGPROBS, settings: Mapping[str, Any] | None = None,
                 max_passage_words: int = MAX_PASSAGE_WORDS, max_concurrency: int = MAX_CONCURRENCY,
                 max_attempts: int = MAX_ATTEMPTS, backoff_initial: float = BACKOFF_INITIAL,
                 backoff_max: float = BACKOFF_MAX, max_retry_after: float = MAX_RETRY_AFTER) -> None:
        if not isinstance(llm, self.model_type):
            raise TypeError(f"llm must be {self.model_kind}, got {type(llm).__name__}")
        super().__init__(max_concurrency=max_concurrency, max_attempts=max_attempts, backoff_initial=backoff_initial,
                         backoff_max=backoff_max, max_retry_after=max_retry_after, secrets=model_secrets(llm))
        self.llm = llm
        self.model, self.endpoint = model_label(llm), type(llm).__name__
        self.set_chat_settings(prompt=prompt, system_prompt=system_prompt, logprobs=logprobs,
                               top_logprobs=top_logprobs, max_passage_words=max_passage_words)
        named_fields = model_fields_named(llm)
        # a None value keeps the model's own: naming no model, it changes nothing
        settings = {k: v for k, v in (settings or {}).items() if not (v is None and k in named_fields)}
        named = sorted(set(settings) & set(named_fields))
        if named:
            self._refuse_model(llm, f"settings {named} name", named_fields[named[0]])
        fields = getattr(type(llm), "model_fields", {})
        unknown = sorted(set(settings) - set(fields))
        if unknown:
            raise ValueError(f"settings {unknown} are not fields of {type(llm).__name__}; its fields are "
                             f"{sorted(fields)[:40]}")
        nested = body_model_keys(settings)
        if nested:
            self._refuse_model(llm, ", ".join(k for k, _ in nested) + (" name" if nested[1:] else " names"),
                               named_fields.get(nested[0][1], next(iter(named_fields.values()), None)))
        asked = {"logprobs": True, "top_logprobs": self.top_logprobs} if self.logprobs else {}
        wanted = dict(JUDGE_SETTINGS, **asked)
        configured = self.configured_model(llm, settings)
        self.responses = self.responses_api(configured)
        if self.responses:
            wanted = {k: RESPONSES_MIN_OUTPUT_TOKENS if k in TOKEN_CAPS else v for k, v in wanted.items()
                      if k not in ("logprobs", "top_logprobs")}
        self.reasoning = self.reasoning_model(configured)
        if self.reasoning:
            wanted = {k: v for k, v in wanted.items() if k not in REASONING_KEEPS}
        merged = {k: v for k, v in wanted.items() if k in fields} | settings
        merged = self.provider_settings(configured, merged)
        self.settings = {k: v for k, v in merged.items() if v is not None}
        # the fields the judge's copy sets to None (settings' None values keep the model's own): on the Responses
        # API the model's own logprobs / top_logprobs, which the SDK's Responses.create refuses (a TypeError)
        self.cleared: dict[str, None] = {}
        if self.responses:
            if settings.get("logprobs") is not None:
                raise ValueError(f"settings logprobs={settings['logprobs']!r} on OpenAI's Responses API, which has "
                                 f"no logprobs parameter: drop it (the judge parses the answer's text there)")
            self.cleared = {k: None for k in ("logprobs", "top_logprobs")
                            if k in fields and k not in self.settings and getattr(configured, k, None) is not None}
        self.timeout_keyword = self.request_timeout_keyword(llm)
        self.judge_llm = self.judged_model()
        self._load_sdk()

    @staticmethod
    def _refuse_model(llm: Any, where: str, keyword: str | None) -> None:
        """Raise the ValueError for settings that name the model (``where``: which, and the verb), naming the
        keyword (None: the class has no model field) that builds ``llm``'s class with another."""
        build = f"{type(llm).__name__}({keyword}=...)" if keyword else f"a {type(llm).__name__} of that model"
        raise ValueError(f"{where} the model, which settings= cannot change (whether a model reasons is read "
                         f"from the model as built, which a copy's update does not rebuild): build the model with "
                         f"it, {build}, and pass that as llm")

    @staticmethod
    def configured_model(llm: Any, settings: Mapping[str, Any]) -> Any:
        """``llm`` as the caller's ``settings`` make it (a ``model_copy`` with those not None; ``llm`` itself when
        none), which ``responses_api``, ``reasoning_model`` and ``provider_settings`` read: e.g.
        ``settings={"use_responses_api": True}`` puts ChatOpenAI on the Responses API. Only read, never called."""
        given = {k: v for k, v in settings.items() if v is not None}
        return llm.model_copy(update=given) if given else llm

    def judged_model(self) -> Any:
        """The model the judge calls: ``judge_copy(llm, settings | cleared)``, else ``llm`` itself (neither)."""
        update = self.settings | self.cleared
        return self.judge_copy(self.llm, update) if update else self.llm

    def renew_state(self) -> None:
        """Fresh clients (``RemoteComparator.renew_state``) and a judge model made again from this comparator's
        ``llm`` (on a deep copy or an unpickled judge: the copied model, so the copy shares nothing with yours)."""
        super().renew_state()
        self.judge_llm = self.judged_model()
        self._load_sdk()

    def _load_sdk(self) -> None:
        """``openai_chat.load_openai_sdk`` when the model is of a framework's openai integration: at construction
        and in an unpickled judge's process, not in the first call (LlamaIndex's OpenAI builds its client there)."""
        if any("openai" in cls.__module__ for cls in type(self.llm).__mro__):
            from activeprp_core.comparators.openai_chat import load_openai_sdk

            load_openai_sdk()

    # ---- what a framework provider adds ---------------------------------------------------------------
    def reasoning_model(self, llm: Any) -> bool:
        """Whether the framework itself knows ``llm`` (the model as the caller's settings make it,
        ``configured_model``) for a reasoning model (LangChain's model profile, LlamaIndex OpenAI's list of
        reasoning models); the judge's copy then keeps the model's own ``REASONING_KEEPS``. Default: False."""
        return False

    def responses_api(self, llm: Any) -> bool:
        """Whether ``llm`` (the model as the caller's settings make it, ``configured_model``) calls OpenAI's
        Responses API, which has no ``logprobs`` parameter and caps an answer at ``RESPONSES_MIN_OUTPUT_TOKENS`` or
        more: the judge's copy then asks for no logprobs, has that cap, and the answer's text is parsed. Default:
        False."""
        return False

    def provider_settings(self, llm: Any, settings: dict[str, Any]) -> dict[str, Any]:
        """The judge's settings (``JUDGE_SETTINGS`` with the caller's ``settings`` over them; a value None keeps the
        model's own) as a model class should get them. Default: unchanged."""
        return settings

    def request_timeout_keyword(self, llm: Any) -> str | None:
        """The keyword of the model's chat call that takes a per-request timeout in seconds, under a
        ``time_budget`` (``timed``); None (default): the transport alone bounds the wait, cancelling the call
        (async) or no longer waiting for it (sync)."""
        return None

    def timed_call(self, model: Any, seconds: float) -> tuple[Any, dict[str, Any]]:
        """The model to call and the keywords of its chat call for an attempt with ``seconds`` left before the
        deadline, on a model with a ``request_timeout_keyword``. Default: ``model`` itself, with the seconds as that
        keyword."""
        return model, {self.timeout_keyword: seconds}

    def sends_in_thread(self) -> bool:
        """Whether the judge model's class leaves ``async_work`` to one of the framework's ``blocking_async``
        classes, whose async call only runs the blocking one (a model written with its sync method alone): the
        async path then runs the sync ``call`` in daemon threads of its own (``RemoteComparator._threaded``), each
        holding one of the ``max_concurrency`` slots until it returns, cut at the deadline, and never in the event
        loop's default executor (which ``asyncio.run`` waits for at its exit, and whose few workers a cut call keeps
        from later calls) nor on the loop itself. A class with its own ``async_work`` is awaited."""
        return defining_class(type(self.judge_llm), self.async_work) in self.blocking_async

    def judge_copy(self, llm: Any, settings: dict[str, Any]) -> Any:
        """The model the judge calls: a copy of ``llm`` with ``settings`` (``llm`` is not changed)."""
        return llm.model_copy(update=settings)

    def loop_copy(self, judge: Any) -> Any:
        """The judge model for one event loop (None = ``judge`` itself serves every loop). A model whose async SDK
        client pools connections bound to the loop that opened them returns a copy with a fresh async client, which
        ``aclose_loop_copy`` closes inside that loop when it shuts down. Default: None."""
        return None

    async def aclose_loop_copy(self, judge: Any) -> None:
        """Close what ``loop_copy`` opened."""

    def framework_messages(self, messages: list[dict[str, str]]) -> Any:
        """The chat messages (``{"role", "content"}`` dicts) in the framework's own type."""
        return messages

    # ---- provider: requests, failures, tokens ----------------------------------------------------------
    def open_async_client(self) -> Any:
        return self.loop_copy(self.judge_llm)

    async def aclose_client(self, client: Any) -> None:
        await self.aclose_loop_copy(client)

    def timed(self, request: Any, seconds: float) -> Any:
        """The messages and the time left, ``(messages, seconds)``, when the model takes a per-request timeout
        (``request_timeout_keyword``): ``send``/``asend`` hand it to the call through ``timed_call``."""
        return request if self.timeout_keyword is None else (request, seconds)

    def _call_of(self, model: Any, request: Any) -> tuple[Any, Any, dict[str, Any]]:
        """The model to call, the messages and the call's keywords for ``request`` (``request`` or ``timed``'s)."""
        if not isinstance(request, tuple):
            return model, request, {}
        messages, seconds = request
        model, kw = self.timed_call(model, seconds)
        return model, messages, kw

    async def asend(self, client: Any, request: Any) -> Any:
        model, messages, kw = self._call_of(client or self.judge_llm, request)
        try:
            return await getattr(model, self.acall)(messages, **kw)
        except RuntimeError as error:
            if isinstance(error.__cause__, StopIteration):  # PEP 479: it left the model's coroutine as this
                raise ModelStopIteration(error.__cause__) from error.__cause__
            raise

    def send(self, client: Any, request: Any) -> Any:
        model, messages, kw = self._call_of(self.judge_llm, request)
        try:
            return getattr(model, self.call)(messages, **kw)
        except StopIteration as stop:
            raise ModelStopIteration(stop) from stop

    def request(self, query: str, first: str, second: str) -> Any:
        """The PRP prompt of one ordered pair as the framework's chat messages (the same messages as
        ``OpenAIChatComparator``)."""
        return self.framework_messages(self.messages(query, first, second))

    def classify(self, error: Exception) -> Failure | None:
        """An error carrying an HTTP ``status_code`` (the openai / anthropic SDKs' ``APIStatusError``, an httpx
        status error's response) by ``failures.status_failure`` (a 404 names its URL, with
        ``OpenAIChatComparator``'s /v1 hint: ``openai_chat.not_found``); connection errors and timeouts retry;
        another SDK error, a ``ValueError`` (an unreadable reply; langchain-openai raises one with a 200 body's
        ``error`` member, said as ``OpenAIChatComparator`` says it: ``answers.error_said``) or a ``StopIteration``
        (``ModelStopIteration``) is a failed call; anything else propagates as is."""
        message = error_message(error)
        status = field(error, "status_code")
        if status is None:
            status = field(field(error, "response"), "status_code")
        if isinstance(status, int) and not isinstance(status, bool):
            return status_failure(status, not_found(error, message) if status == 404 else message,
                                  retry_after_s(error))
        said = error_said(error.args[0]) if isinstance(error, ValueError) and len(error.args) == 1 else None
        if said is not None:
            return Failure(Fault.FAIL, f"an error in a 200 response ({said})")
        if isinstance(error, (TimeoutError, ConnectionError)) or _named(error, _RETRIED):
            return Failure(Fault.RETRY, message)
        if isinstance(error, (ValueError, ModelStopIteration)) or _named(error, _CLIENT_ERRORS):
            return Failure(Fault.FAIL, message)
        return None

    def estimate_tokens(self, query: str, pairs: Sequence[tuple[Candidate, Candidate]]) -> list[int]:
        """An upper bound on prompt + completion tokens per ordered pair (``prompts.chat_token_bound``), with the
        judge model's completion cap (a field of ``TOKEN_CAPS``, or ``max_tokens`` in its ``extra_body``) as
        completion (``UNCAPPED_COMPLETION_TOKENS`` when it has none: then, as for a reasoning model left uncapped,
        reported tokens can pass ``token_budget``)."""
        extra_body = getattr(self.judge_llm, "extra_body", None)
        caps = [getattr(self.judge_llm, k, None) for k in TOKEN_CAPS]
        caps.append(extra_body.get("max_tokens") if isinstance(extra_body, Mapping) else None)
        cap = next((c for c in caps if isinstance(c, int) and not isinstance(c, bool)), UNCAPPED_COMPLETION_TOKENS)
        return [chat_token_bound(self.messages(query, a.text, b.text), cap) for a, b in pairs]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.llm).__name__}(model={self.model!r}))"
