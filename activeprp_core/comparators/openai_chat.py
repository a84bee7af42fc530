"""A pairwise judge on any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp server ...): the
provider half of ``RemoteComparator``; ``openai`` and ``tenacity`` are imported when a comparator is built."""

from __future__ import annotations

import base64
import os
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import unquote, urlsplit, urlunsplit

from ..budget import check_count, check_seconds
from ..types import Candidate
from .answers import Answer, NoReply, answer_from, choice_said, error_said, field, snippet, token_count
from .failures import MAX_MESSAGE, Failure, Fault, error_message, retry_after_s, status_failure
from .prompts import (
    ANSWER_TOKENS,
    MAX_PASSAGE_WORDS,
    PRP_PROMPT,
    TOP_LOGPROBS,
    ChatPrompts,
    chat_token_bound,
)
from .remote import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    MAX_ATTEMPTS,
    MAX_CONCURRENCY,
    MAX_RETRY_AFTER,
    RemoteComparator,
    require,
)

if TYPE_CHECKING:
    import ssl

MAX_REPLY_BYTES = 1 << 20
"""The default ``max_reply_bytes`` (1 MiB). A judge's reply to a PRP question is one token with at most 20 top
logprobs: about 3 KB of JSON; an error body (a 4xx/5xx, a proxy's HTML page) is a few KB to a few dozen. 1 MiB is
far above any of them and still bounds what one call holds."""
TIMEOUT = 60.0
"""The default ``timeout``: seconds per request attempt. With ``remote.MAX_ATTEMPTS`` (3) attempts and their
backoffs, a call to a judge that never answers fails after about 3 minutes."""

__all__ = ["MAX_MESSAGE", "MAX_REPLY_BYTES", "TIMEOUT", "OpenAIChatComparator", "UrlCredentials", "url_credentials"]

OPENAI_EXTRA = 'pip install "activeprp[openai]"'


def _parse(response: Any) -> Answer:
    """The ``Answer`` of a chat completion (``answers.answer_from`` on its first choice and usage, with its
    ``finish_reason`` and ``message.refusal``); raises ``ValueError`` (only) when the body is not a usable answer:
    ``NoReply`` for a body without choices (with its usage's tokens, and the message of its ``error`` member when
    it has one: some proxies answer an error with a 200)."""
    choices, usage = field(response, "choices"), field(response, "usage")
    tokens = field(usage, "prompt_tokens"), field(usage, "completion_tokens")
    if not isinstance(choices, list) or not choices:
        what = error_said(field(response, "error")) or snippet(response)
        raise NoReply(f"no choices in the response ({what})", *map(token_count, tokens))
    return answer_from(field(choices[0], "logprobs"), field(field(choices[0], "message"), "content"), *tokens,
                       **choice_said(choices[0]))


def check_base_url(base_url: Any, name: str = "base_url") -> str | None:
    """``base_url`` when it is None or an http:// or https:// URL with a host (a str), the API's base rather than
    its completions route, with no ?query or #fragment (the client appends ``/chat/completions`` to it, after
    them too); ``name`` says where it came from in the messages.

    Raises:
        TypeError: not a str. ValueError: not such a URL (the usual slips: ``localhost:8000/v1`` without
            ``http://``, the whole ``.../v1/chat/completions`` pasted); the message shows it as ``_shown_url`` does.
    """
    if base_url is None:
        return None
    if not isinstance(base_url, str):
        raise TypeError(f"{name} must be a str (an http:// or https:// URL), got {type(base_url).__name__}")
    try:
        parts = urlsplit(base_url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # e.g. "http://[::1/v1", a port that is not a number or out of range
        usable = False
    shown = _shown_url(base_url)
    if not usable:
        raise ValueError(f"{name} must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000/v1, "
                         f"got {shown!r}")
    if "?" in base_url or "#" in base_url:
        raise ValueError(f"{name} must have no ?query or #fragment: the client appends /chat/completions after "
                         f"them, got {shown!r}")
    if parts.path.rstrip("/").endswith("/completions"):
        raise ValueError(f"{name} must be the API's base, not its completions route (the client appends "
                         f"/chat/completions): pass e.g. http://127.0.0.1:8000/v1, got {shown!r}")
    return base_url


OPENAI_ROUTES = ("/chat/completions", "/responses")
"""The routes an OpenAI client appends to its base_url for a judge's call (chat completions; ChatOpenAI's and
LlamaIndex's ``OpenAIResponses``' Responses API)."""


def not_found(error: Any, message: str) -> str:
    """The ``message`` of a 404 ``error`` led by the URL its request went to (``error.request.url``: the openai and
    anthropic SDKs' status errors, httpx's; shown as ``_shown_url`` does) and, when that is an OpenAI route
    (``OPENAI_ROUTES``) on a base that does not end in /v1, the hint that it usually does (vLLM's and llama.cpp's
    usual slip); ``message`` alone when the error names no URL. ``OpenAIChatComparator`` and the framework judges
    (``llm=``) say it alike."""
    url = field(field(error, "request"), "url")
    if url is None:
        return message
    path = urlsplit(str(url)).path.rstrip("/")
    base = next((path.removesuffix(route) for route in OPENAI_ROUTES if path.endswith(route)), None)
    hint = " (an OpenAI-compatible base_url usually ends in /v1)" if base is not None and not base.endswith("/v1") \
        else ""
    return f"{_shown_url(str(url))} not found{hint}: {message}"


def _shown_url(url: str) -> str:
    """``url`` as a message may show it: its ``user:password@`` (with or without a scheme), ?query and #fragment
    masked as ``***``, since gateways take their key there too (``?code=``, ``?key=``, ``?api-key=``)."""
    url = re.sub(r"^([^/@]*//)?[^/@]*@", r"\1***@", url)
    return re.sub(r"([?#])[^#]*", r"\1***", url)


class UrlCredentials(NamedTuple):
    """What a URL's ``user:password@`` is (``url_credentials``)."""

    url: str | None
    """The URL without its user:password (None for None)."""
    authorization: str | None
    """The ``Authorization`` header httpx sends for them (``Basic base64(user:password)``); None without any."""
    secrets: list[str]
    """The strings no message may show: the password as written and decoded, and the header's base64 token (the
    user name too when there is no password: then it is the token)."""


def url_credentials(url: str | None) -> UrlCredentials:
    """``url``'s user:password, read as httpx reads them (percent-decoded, the userinfo up to the last ``@``)."""
    parts = urlsplit(url or "")
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return UrlCredentials(url, None, [])
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    secrets = [password, unquote(password), token] if password else [user, unquote(user), token]
    secrets = list(dict.fromkeys(filter(None, secrets)))
    return UrlCredentials(urlunsplit(parts._replace(netloc=host)), f"Basic {token}", secrets)


class OpenAIChatComparator(ChatPrompts, RemoteComparator):
    """P(first preferred) from an OpenAI-compatible chat model answering the PRP prompt with one token.

    Each ordered pair is one request (``max_tokens=1``, ``temperature=0``, ``top_logprobs`` with ``logprobs``):
    P(first) = P(A) / (P(A) + P(B)) over the answer token's top alternatives ("A", " A", "a" ... count as A),
    else 1.0 / 0.0 from the one-token answer. An answer that is neither A nor B, a 200 body that is not a usable
    answer, or a request that still fails after its retries is a failed call: ``Judgment(prob=None, error=...)``.

    Failures (``failures``): 401/403 ``ComparatorAuthError`` and 404 ``ComparatorRequestError`` stop the rerank,
    another 4xx raises ``ComparatorRequestError`` for its call; timeouts, connection errors, 408/409/429
    (Retry-After honoured) and 5xx are retried by ``RemoteComparator`` (the clients have ``max_retries=0``; the
    defaults wait at most 2.5 s per call). A reply's body is read up to ``max_reply_bytes``: one over it is a failed
    call, not retried (``reply_cap``). With an event loop you close yourself, ``await aclose()`` first.
    ``copy.deepcopy`` and a pickle copy the settings (the API key too) and open clients of their own; ``copy.copy``
    and ``with_prompts`` share the clients (``RemoteComparator``).

    Args:
        model: the model name sent to the endpoint.
        base_url: the API's base (e.g. ``http://127.0.0.1:8000/v1``: the client appends ``/chat/completions``);
            None = ``$OPENAI_BASE_URL``, else api.openai.com (read here, as the SDK would read it: checked, and named
            in messages). A ``user:password@`` in it is sent as the ``Authorization: Basic`` header httpx would make
            of it (it replaces the key's Bearer header), taken out of the URL the client gets (httpx logs the URL of
            each request), and counts as a secret (``url_credentials``).
        api_key: the key; None = ``$OPENAI_API_KEY``.
        prompt: the PRP template with ``{query}``, ``{first}``, ``{second}`` (only these are substituted; other
            braces stay literal); ``system_prompt`` optional. ``with_prompts(...)`` gives a copy with others.
        logprobs, top_logprobs: ask for the top ``top_logprobs`` (0..20: ``prompts.MAX_TOP_LOGPROBS``) alternatives
            of the answer token.
        max_passage_words: passages are cut to this many words (``prompts.cut_words``: whitespace-separated, each
            character of a script written without spaces, such as Chinese or Thai, counted as one).
        timeout: seconds per request attempt (> 0; default 60 s: ``TIMEOUT``), whole on the async path
            (``attempt_timeout``; the SDK's own is per read); under a ``time_budget`` an attempt gets at most the
            time left.
        max_reply_bytes: the most bytes of one reply's body that are read (>= 1; default 1 MiB, some 300 times
            a reply with 20 top logprobs: ``MAX_REPLY_BYTES``). A judge that sends more (an endless or
            runaway body) has the call fail at the cap, its connection closed, instead of filling memory until
            ``timeout``. The clients are the comparator's own; it takes none of yours.
        max_concurrency, max_attempts, backoff_initial, backoff_max, max_retry_after: see ``RemoteComparator``.

    Raises:
        ImportError: ``openai`` or ``tenacity`` missing (names the ``activeprp[openai]`` extra).
        ValueError: no API key, an empty model name, a prompt without its placeholders, a count below its
            minimum, or a time that is not a finite number in range (``timeout <= 0``, a negative backoff ...).
        TypeError: a model or prompt that is not a str, a count that is not an int, a time that is not a number.
        TypeError: an ``api_key`` that is not a str (its value is never shown), a ``logprobs`` that is not a bool.
        TypeError / ValueError: a ``base_url`` that is not an http:// or https:// URL with a host, or is a
            completions route or has a ?query or #fragment (``check_base_url``).
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 prompt: str = PRP_PROMPT, system_prompt: str | None = None, logprobs: bool = True,
                 top_logprobs: int = TOP_LOGPROBS, max_passage_words: int = MAX_PASSAGE_WORDS,
                 max_concurrency: int = MAX_CONCURRENCY, timeout: float = TIMEOUT, max_attempts: int = MAX_ATTEMPTS,
                 backoff_initial: float = BACKOFF_INITIAL, backoff_max: float = BACKOFF_MAX,
                 max_retry_after: float = MAX_RETRY_AFTER, max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        require("OpenAIChatComparator", OPENAI_EXTRA, "openai", "tenacity")
        if not isinstance(model, str):
            raise TypeError(f"model must be a str, got {type(model).__name__}")
        if not model:
            raise ValueError("model must not be empty")
        if base_url is None and os.environ.get("OPENAI_BASE_URL"):  # the SDK's default: checked and named here too
            base_url = check_base_url(os.environ["OPENAI_BASE_URL"], "OPENAI_BASE_URL")
        credentials = url_credentials(check_base_url(base_url))
        if api_key is not None and not isinstance(api_key, str):  # never shown: it may be the key, as bytes
            raise TypeError(f"api_key must be a str, got {type(api_key).__name__}")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        super().__init__(max_concurrency=max_concurrency, max_attempts=max_attempts, backoff_initial=backoff_initial,
                         backoff_max=backoff_max, max_retry_after=max_retry_after,
                         secrets=(api_key or "", *credentials.secrets))
        self.set_chat_settings(prompt=prompt, system_prompt=system_prompt, logprobs=logprobs,
                               top_logprobs=top_logprobs, max_passage_words=max_passage_words)
        self.max_reply_bytes = check_count(max_reply_bytes, "max_reply_bytes", minimum=1)
        timeout = check_seconds(timeout, "timeout", positive=True)
        if not api_key:
            raise ValueError("no API key: pass api_key= or set OPENAI_API_KEY (any string for a local server)")
        self.model = model
        self.endpoint = credentials.url or "api.openai.com"
        # user:password@ go as the header httpx would make of them: in the URL, httpx logs them with each request
        header = {"default_headers": {"Authorization": credentials.authorization}} if credentials.authorization else {}
        self._client_kw = {"base_url": credentials.url, "api_key": api_key, "timeout": timeout, "max_retries": 0,
                           **header}
        self.attempt_timeout = timeout  # the SDK's is per read: a judge dripping its answer never trips it
        load_openai_sdk()  # now, not in the first call (a first call under a deadline must not import)

    def renew_state(self) -> None:
        """``RemoteComparator.renew_state``, and ``load_openai_sdk`` in this process: an unpickled comparator (a Ray
        worker's, a spawned process's) runs no ``__init__``, and its first call must not import either."""
        super().renew_state()
        load_openai_sdk()

    @property
    def client(self) -> Any:
        """The sync ``openai.OpenAI`` client (shared with ``with_prompts`` copies)."""
        return self._clients.sync()

    # ---- provider: requests, replies, failures ------------------------------------------------------
    def request(self, query: str, first: str, second: str) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one ordered pair."""
        kw: dict[str, Any] = {"model": self.model, "messages": self.messages(query, first, second),
                              "max_tokens": ANSWER_TOKENS, "temperature": 0}
        if self.logprobs:
            kw.update(logprobs=True, top_logprobs=self.top_logprobs)
        return kw

    def timed(self, request: dict[str, Any], seconds: float) -> dict[str, Any]:
        """The request with the time left as its timeout (the SDK's per-request ``timeout``), when it is shorter
        than the comparator's own ``timeout``."""
        return {**request, "timeout": min(seconds, self._client_kw["timeout"])}

    def send(self, client: Any, request: dict[str, Any]) -> Any:
        return client.chat.completions.create(**request)

    async def asend(self, client: Any, request: dict[str, Any]) -> Any:
        return await client.chat.completions.create(**request)

    parse = staticmethod(_parse)

    def classify(self, error: Exception) -> Failure | None:
        """Timeouts and connection errors retry; a status error by its status (``status_failure``); a reply over
        ``max_reply_bytes``, another client error or an undecodable body (ValueError) is a failed call; anything
        else is not ours."""
        import openai

        from .reply_cap import ReplyTooLarge

        message = error_message(error)
        if isinstance(error.__cause__, ReplyTooLarge):  # the SDK raises APIConnectionError from what the read raised
            return Failure(Fault.FAIL, str(error.__cause__))
        if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
            return Failure(Fault.RETRY, message)
        if isinstance(error, openai.APIStatusError):
            return status_failure(error.status_code, self._explained(error, message), retry_after_s(error))
        return Failure(Fault.FAIL, message) if isinstance(error, (openai.OpenAIError, ValueError)) else None

    def _explained(self, error: Any, message: str) -> str:
        """``message`` of a status error, led by what its status usually means here: a 404 names the URL
        requested (base_url + /chat/completions), with a hint when base_url does not end in /v1; a 400 that names
        logprobs, while they are asked for, says how to ask for none. First: a message is cut at its end."""
        if error.status_code == 404:
            return not_found(error, message)
        if error.status_code == 400 and self.logprobs and "logprobs" in message.lower():
            return f"an endpoint that takes no logprobs needs logprobs=False (command line: --no-logprobs): {message}"
        return message

    def estimate_tokens(self, query: str, pairs: Sequence[tuple[Candidate, Candidate]]) -> list[int]:
        """An upper bound on prompt + completion tokens per ordered pair (``prompts.chat_token_bound``)."""
        requests = (self.request(query, first.text, second.text) for first, second in pairs)
        return [chat_token_bound(kw["messages"], kw["max_tokens"]) for kw in requests]

    # ---- clients --------------------------------------------------------------------------------------
    def open_client(self) -> Any:
        import openai

        from .reply_cap import client_options

        http_client = openai.DefaultHttpxClient(verify=_tls_context(), **client_options(self.max_reply_bytes))
        return _with_chat_loaded(openai.OpenAI(**self._client_kw, http_client=http_client))

    def open_async_client(self) -> Any:
        import openai

        from .reply_cap import client_options

        http_client = openai.DefaultAsyncHttpxClient(verify=_tls_context(),
                                                     **client_options(self.max_reply_bytes, async_=True))
        return _with_chat_loaded(openai.AsyncOpenAI(**self._client_kw, http_client=http_client))

    def close_client(self, client: Any) -> None:
        client.close()

    async def aclose_client(self, client: Any) -> None:
        await client.close()

    def __repr__(self) -> str:
        return f"OpenAIChatComparator(model={self.model!r}, base_url={self.endpoint!r})"


def load_openai_sdk() -> None:
    """What every client of the openai SDK needs, done once per process when a comparator is built (no network
    I/O), not by its first call: a first call under a deadline must not import, and an async one would block its
    event loop meanwhile (``OpenAIChatComparator``; the framework judges over a model of a framework's openai
    integration, whose clients are the SDK's). Measured on a fresh process (2 cores): the SDK's chat resource,
    which ``client.chat`` imports with all the SDK's resources (~1 s, 535 modules); httpcore, imported by the
    first httpx client (~25 ms); anyio's asyncio backend, imported by the first async connection (~30 ms); the
    TLS context of ``OpenAIChatComparator``'s clients (``_tls_context``)."""
    import anyio._backends._asyncio  # noqa: F401 - where anyio 3.5-4.x keep it (openai needs anyio>=3.5,<5)
    import httpcore  # noqa: F401
    import openai.resources.chat.completions  # noqa: F401

    from . import reply_cap  # noqa: F401

    _tls_context()


_TLS_LOCK = threading.Lock()
_TLS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def _tls_context() -> ssl.SSLContext:
    """The TLS context of every client the comparators open, one per process (per ``$SSL_CERT_FILE`` /
    ``$SSL_CERT_DIR``, which httpx's own default context honours too): httpx makes one per client otherwise, and
    loading the CA bundle takes ~50 ms, under the first call's deadline and on its event loop. An
    ``ssl.SSLContext`` is made to be shared by connections and threads."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _TLS_LOCK:
        if key not in _TLS:
            import httpx

            _TLS[key] = httpx.create_ssl_context()
        return _TLS[key]


def _with_chat_loaded(client: Any) -> Any:
    """``client`` with its chat-completions resource made (imported by ``load_openai_sdk`` when the comparator was
    built), so that the first judge call only sends."""
    client.chat.completions  # noqa: B018 (the access is the point)
    return client
