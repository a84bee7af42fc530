"""The route and error handlers of ``activeprp serve`` (see ``app`` for the error contract)."""

from __future__ import annotations

import json
import logging
import math
import re
import traceback
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from activeprp_core import (
    Candidate,
    ComparatorAuthError,
    ComparatorError,
    ComparatorRequestError,
    ComparatorUnavailable,
    InvalidAnswer,
    RerankResult,
)
from activeprp_core.comparators.prompts import cut_words
from activeprp_core.errors import describe, scrub
from activeprp_core.reranking import log as engine_log

from .bodies import CallerError, IntegerTooLong, Limits, RerankRequest, TEIRequest, parse_json, returned_document
from .service import Overloaded, RerankService, ShuttingDown

API_VERSIONS = {"v1": "1", "v2": "2"}
SEARCH_UNIT_DOCUMENTS = 100  # Cohere bills one search unit per query and 100 documents
MODEL = "activeprp"
"""The ``model`` of a Jina answer to a request that named none (Jina's answers always name one, a string)."""

JudgeBlock = Callable[[RerankResult], Mapping[str, Any] | None]
Respond = Callable[[RerankResult, list[int], list[str], str], Any]
"""Builds a route's response body from the result, the returned indices (best first), the judged texts and the
request id."""

log = logging.getLogger("activeprp.serve")


def response_id() -> str:
    """A random UUID4 string for a response's ``id`` and a request id: read from ``os.urandom`` each time, so
    processes forked from one parent (gunicorn ``--preload`` workers) never repeat each other's."""
    return str(uuid.uuid4())


REQUEST_ID = "request_id"
"""The key of a request's id in its ASGI scope's ``state`` (starlette's ``request.state.request_id``)."""


def request_id(scope: Mapping[str, Any]) -> str:
    """The id the ``gate.Gate`` gave the request of ``scope`` when it arrived (a ``response_id``; a client's own
    ``X-Request-ID`` is not taken): every answer has it in ``X-Request-ID`` (the gate adds it), an error body in
    ``request_id``, and the server logs under it."""
    return scope["state"][REQUEST_ID]


def see_log(rid: str) -> str:
    """Where a body that says what failed points for the judge's own words: the server's log, under ``rid``."""
    return f"; request id {rid} (the server's log has the details)"


def error_body(message: str, kind: str, rid: str) -> dict[str, str]:
    """Every error's JSON body: ``{"message", "type", "request_id"}`` (``rid``: the request's ``request_id``)."""
    return {"message": message, "type": kind, "request_id": rid}


def error_response(status: int, message: str, kind: str, rid: str, retry_after: int | None = None) -> JSONResponse:
    """An error's response: ``error_body``, with ``Retry-After`` when given (its ``X-Request-ID`` is the gate's)."""
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    return JSONResponse(error_body(message, kind, rid), status_code=status, headers=headers)


TOO_LONG = re.compile(r"context (length|size|window)|maximum context|too long|too many tokens|token limit|exceed|"
                      r"must be <=", re.IGNORECASE)
"""What the endpoints' messages say when a prompt is too long for the model (vLLM, llama.cpp, OpenAI, TGI)."""


def too_long(error: ComparatorError) -> bool:
    """Whether the judge's endpoint rejected a prompt as too long for its context (a 400/413/422 saying so)."""
    return isinstance(error, ComparatorRequestError) and error.status_code in (400, 413, 422) and \
        bool(TOO_LONG.search(error.message))


JUDGE_KINDS = ((ComparatorAuthError, "the judge's endpoint refused the server's key or model"),
               (ComparatorRequestError, "the judge's endpoint rejected the request"),
               (ComparatorUnavailable, "the judge is unavailable"),
               (InvalidAnswer, "the comparator answered the wrong shape (a comparator bug)"))
CAUSES = tuple((re.compile(pattern, re.IGNORECASE), words) for pattern, words in (
    (r"timed? ?out|timeout", "timed out"),
    (r"connection refused|errno 111\b|econnrefused", "connection refused"),
    (r"name or service not known|nodename nor servname|name resolution|getaddrinfo|no address associated",
     "the host name did not resolve"),
    (r"cannot connect to host|connect call failed", "connection failed"),  # aiohttp's, which says "ssl:default"
    (r"ssl|certificate|\btls\b", "TLS failure"),
    (r"reply too large", "reply too large"),
    (r"unusable answer", "unusable answers"),
    (r"no answer in time", "no answer in time"),  # the breaker's, for a judge that answered none of its calls
    (r"connection|disconnect|protocol", "connection failed"),
))
"""What a judge's failure says about its transport, in words that name no endpoint (first match)."""
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-f:.]*:[0-9a-f:.]*\](?::\d+)?|"
                     r"\b[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?:\d{1,5}\b", re.IGNORECASE)
"""An IP address (v4, or v6 in brackets) or a ``host:port``, with its port."""


def without_addresses(text: str) -> str:
    """``text`` less its URLs, IP addresses and ``host:port``s, whose digits are no status nor count of tokens."""
    return ADDRESS.sub("", URL.sub("", text))


STATUS = re.compile(r"\b(?:HTTP|status(?: code)?|error code)[ :=]*([1-5]\d\d)(?![\w.:-])", re.IGNORECASE)
"""An HTTP status (100-599) named in a judge's message (``without_addresses``): ``(HTTP 429)`` (a
``ComparatorError``'s), ``Error code: 500``; not the start of a longer number, version or name (``status 503.1``)."""
ERROR_TYPE = re.compile(r"[A-Z][A-Za-z0-9_]*(?:Error|Exception|Timeout|TimedOut|Closed|Unavailable|Answer)\b")
"""The exception type that begins a failed call's ``error`` or a result's ``failure`` (``errors.describe``)."""
CONTEXT_LIMIT = re.compile(r"(?:maximum context length|context (?:length|size|window)|token limit)"
                           r"\D{0,40}?(?<![\w.:/-])(\d{1,9}) ?tokens\b|must be <= ?(\d{1,9})\b", re.IGNORECASE)
PROMPT_TOKENS = re.compile(r"(?:requested|resulted in|request \(|given:?) ?(\d{1,9}) ?(?:`inputs` )?tokens\b",
                           re.IGNORECASE)
"""The judge's context limit and the prompt's tokens in its "too long" message (vLLM, OpenAI, llama.cpp, TGI), read
``without_addresses``: a number of tokens ("2048 tokens"; TGI's limit is "must be <= 2048")."""


def cause_words(message: str, status_code: int | None = None) -> str:
    """Why a judge failed, in words that name no endpoint, host, port or model (a service's clients must not
    learn where its judge is): ``status_code`` as "HTTP 429", else the kind of transport failure read from
    ``message`` ("timed out", "connection refused"); "" when it says neither."""
    if status_code is not None:
        return f"HTTP {status_code}"
    said = URL.sub("", message)  # a host named e.g. "timeout-proxy" says nothing of the failure
    return next((words for pattern, words in CAUSES if pattern.search(said)), "")


def judge_cause(error: ComparatorError) -> str:
    """``cause_words`` of a judge's failure: its HTTP status, else the kind of transport failure."""
    return cause_words(error.message, error.status_code)


def _summary(name: str, kind: str, message: str, status_code: int | None) -> str:
    """``name`` (an exception type; "" for none), ``kind`` (what it means), and in brackets the breaker if
    ``message`` says it is open and ``cause_words``."""
    cause = ", ".join(c for c in ("circuit breaker open" if "circuit breaker open" in message else "",
                                  cause_words(message, status_code)) if c)
    return f"{f'{name}: ' if name else ''}{kind}{f' ({cause})' if cause else ''}"


def judge_summary(error: ComparatorError) -> str:
    """``error`` for a service's clients: its type, what it means, whether the breaker is open, ``judge_cause``
    and the judge calls spent; never its message, which names the judge's endpoint and model (the server's log
    has it)."""
    kind = next((words for cls, words in JUDGE_KINDS if isinstance(error, cls)), "the judge failed")
    return f"{_summary(type(error).__name__, kind, error.message, error.status_code)}; {_calls_spent(error)}"


def own_breaker_summary(error: ComparatorUnavailable) -> str | None:
    """``error`` for a service's clients when the request's own breaker stopped it (``breaker == "own"``) while
    the service's stayed closed: its own calls failed N (``in_a_row``) in a row, others were answered between them,
    the service is up (as ``judge_summary``, no word of the judge's endpoint); None for any other error."""
    if error.breaker != "own" or error.in_a_row is None:
        return None
    cause = cause_words(error.message, error.status_code)
    return (f"{type(error).__name__}: this request's judge calls failed, {error.in_a_row} in a row, which stopped it "
            f"(its own circuit breaker{f'; {cause}' if cause else ''}); the service is up and answers other "
            f"requests; {_calls_spent(error)}")


def _calls_spent(error: ComparatorError) -> str:
    """The judge calls ``error``'s accounting says were spent, and how many failed."""
    spent = error.accounting
    return "no judge call sent" if spent is None or not spent.calls else \
        f"{spent.calls} judge call{'s' * (spent.calls != 1)}, {spent.failed_calls} failed"


def error_summary(text: str) -> str:
    """A failed call's ``error`` or a result's ``failure`` (a line of the judge's words) for a service's clients,
    as ``judge_summary`` says an error: made only of the exception type that begins it, fixed words and an HTTP
    status, so no URL, host, port or model in ``text`` can reach them (the server's log has ``text``)."""
    named = ERROR_TYPE.match(text)
    name = named.group() if named else ""
    kind = next((words for cls, words in JUDGE_KINDS if cls.__name__ == name), "a judge call failed")
    statuses = STATUS.findall(without_addresses(text))  # the last: a ComparatorError's own "(HTTP n)" ends its line
    return _summary(name, kind, text, int(statuses[-1]) if statuses else None)


DEGRADED = {"by": ("time_budget", "failure"), "judged": ("none", "partly")}
"""The values of ``degraded``'s two fields (a fixed set: the labels of ``activeprp_requests_degraded_total``)."""


def degraded(result: RerankResult) -> dict[str, str] | None:
    """How an answered rerank fell short of the judge's ranking, or None: ``by`` ``"failure"`` (the judge failed and
    ``on_failure="prior"`` kept the prior order for what was unknown: ``result.failure``; or some of its calls
    failed, ``failed_calls``, and the rerank did not converge: those pairs went unjudged) or ``"time_budget"`` (the
    time budget refused calls or cut them in flight: ``exhausted_by``), and ``judged`` ``"none"`` (no call was
    answered, ``judge.answers`` 0: no judge answer shaped the order) or ``"partly"`` (some did; the rest is
    best-effort, from the prior order).
    ``meta.activeprp.degraded`` of a 200, and the labels of ``activeprp_requests_degraded_total``."""
    if result.failure:
        by = "failure"
    elif "time_budget" in result.exhausted_by:
        by = "time_budget"
    elif result.failed_calls > 0 and not result.converged:
        by = "failure"
    else:
        return None
    return {"by": by, "judged": "partly" if result.judge.answers else "none"}


def context_limit(error: ComparatorError) -> str:
    """The numbers of tokens a judge's "too long" message names, in words of ours ("the judge's context holds
    2048 tokens, the prompt had 9000"), or "": how far to shorten, and no other word of the judge's."""
    said = without_addresses(error.message)
    limit, asked = CONTEXT_LIMIT.search(said), PROMPT_TOKENS.search(said)
    said = ([f"the judge's context holds {limit.group(1) or limit.group(2)} tokens"] if limit else []) + \
        ([f"the prompt had {asked.group(1)}"] if asked else [])
    return ", ".join(said)


def _invalid_json(why: str, at: Any) -> str:
    return f"invalid request: the body is not valid JSON ({why} at character {at})"


def _parse_error(error: BaseException | None) -> str | None:
    """What is wrong with a body that the JSON parser refused with ``error``, saying what to change; None when
    ``error`` is no refusal of the parser's."""
    if isinstance(error, json.JSONDecodeError):
        return _invalid_json(error.msg, error.pos)
    if isinstance(error, UnicodeDecodeError):
        return (f"invalid request: the body is not UTF-8, {error.reason} at byte {error.start} (send the body as "
                "UTF-8 JSON)")
    if isinstance(error, RecursionError):  # arrays or objects nested deeper than Python's parser follows
        return "invalid request: the body nests its JSON arrays and objects too deep to parse: send a flatter body"
    if isinstance(error, IntegerTooLong):
        return f"invalid request: {error}"
    return None


class BoundedJSONRequest(Request):
    """A request whose ``json()`` is ``bodies.parse_json`` (no integer of more than ``MAX_INTEGER_DIGITS`` digits)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class BoundedJSONRoute(APIRoute):
    """A route whose handler, and FastAPI's parse of its body model, get a ``BoundedJSONRequest``."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            return await handler(BoundedJSONRequest(request.scope, request.receive))

        return bounded


def _validation_message(exc: RequestValidationError | ValidationError) -> str:
    parts = []
    for err in exc.errors()[:10]:
        if err.get("type") == "json_invalid":  # loc is ("body", character offset)
            at, why = err.get("loc", ("body", "?"))[-1], err.get("ctx", {}).get("error", "JSON decode error")
            return _invalid_json(why, at)
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def _media(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _sent_as_json(request: Request) -> bool:
    """FastAPI's rule for a JSON body (its ``strict_content_type``): ``application/json`` or ``application/*+json``.
    A body of another type (``text/plain``, a form, none) is refused, since a web page may send those to a server on
    the user's machine without asking (no CORS preflight) and spend its judge."""
    media = _media(request)
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _body_hint(request: Request) -> str:
    """What to change when a request's body is not sent as JSON (e.g. curl's ``-d`` without a content type),
    else ""."""
    if _sent_as_json(request) or request.method != "POST":
        return ""
    got = _media(request) or "none"
    return f" (send the body as JSON with the header 'Content-Type: application/json'; got {got!r})"


def log_bug(exc: BaseException, rid: str, secrets: Collection[str], outcome: str) -> None:
    """Log a bug's traceback once (ERROR, ``secrets`` scrubbed) as ``request <rid> <outcome>: <traceback>``, where
    ``outcome`` says what the client got."""
    said = scrub("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), secrets)
    log.error("request %s %s: %s", rid, outcome, said)


def internal_error(exc: BaseException, rid: str, secrets: Collection[str] = ()) -> JSONResponse:
    """A bug's (e.g. a comparator's) 500 ``{"message", "type": "internal_error", "request_id"}``: the message names
    only the exception's type (its message may hold a secret); the server logs its traceback (``log_bug``: ``request
    <rid> answered 500: ...``)."""
    log_bug(exc, rid, secrets, "answered 500")
    return error_response(500, f"internal error ({type(exc).__name__}){see_log(rid)}", "internal_error", rid)


def add_error_handlers(app: FastAPI) -> None:
    """Every caller mistake as a 4xx ``{"message", "type": "invalid_request"}`` (400 for a body that does not
    validate, the ``CallerError``'s own status otherwise), under the request's id. Any other exception (a bug, e.g.
    in a comparator) is ``internal_error``'s 500, answered by the ``gate.Gate`` (not here: starlette's handler for
    ``Exception`` re-raises to the server after answering)."""

    async def invalid(request: Request, exc: RequestValidationError | ValidationError) -> JSONResponse:
        return error_response(400, _validation_message(exc) + _body_hint(request), "invalid_request",
                              request_id(request.scope))

    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code != 400:
            response = error_response(exc.status_code, str(exc.detail), "invalid_request", request_id(request.scope))
            response.headers.update(exc.headers or {})  # a 405's Allow
            return response
        # FastAPI's "There was an error parsing the body" chains the parser's error, which says what is wrong
        why = _parse_error(exc.__cause__) or str(exc.detail) + _body_hint(request)
        return error_response(400, why, "invalid_request", request_id(request.scope))

    async def refused(request: Request, exc: CallerError) -> JSONResponse:
        return error_response(exc.status, str(exc), "invalid_request", request_id(request.scope))

    for kind, handler in ((RequestValidationError, invalid), (ValidationError, invalid),
                          (StarletteHTTPException, http_error), (CallerError, refused)):
        app.add_exception_handler(kind, handler)


def results(body: RerankRequest, result: RerankResult, order: list[int]) -> list[dict[str, Any]]:
    """The ``results`` rows of a Cohere or Jina answer, best first: index, score, and with ``return_documents`` the
    document as sent (``bodies.returned_document``)."""
    return [{"index": i, "relevance_score": result.scores[i],
             **({"document": returned_document(body.documents[i])} if body.return_documents else {})} for i in order]


class ScrubSecrets(logging.Filter):
    """Scrubs the service's secrets (``secrets``: API keys, added by each app made in this process) from the
    records of the engine's logger (``activeprp.engine``), e.g. the WARNING of a failed rerank, which quotes the
    judge's error."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            scrubbed = scrub(message, self.secrets)
            if scrubbed != message:
                record.msg, record.args = scrubbed, None
        return True


SCRUB_SECRETS = ScrubSecrets()


def scrub_logs(secrets: list[str]) -> None:
    """Scrub ``secrets`` from every record of the engine's logger from now on (``ScrubSecrets``)."""
    SCRUB_SECRETS.secrets.update(secrets)
    engine_log.addFilter(SCRUB_SECRETS)  # once: a logger keeps one copy of a filter


class Routes:
    """The handlers of ``/v1/rerank``, ``/v2/rerank`` (Cohere), ``/rerank`` (Jina or TEI), ``/health``, ``/ready``
    and ``/metrics`` over one ``RerankService``; ``mount`` registers them on an app."""

    def __init__(self, service: RerankService, limits: Limits, metrics: Any, secrets: list[str],
                 judge_block: JudgeBlock | None) -> None:
        self.service, self.limits, self.metrics = service, limits, metrics
        self.secrets, self.judge_block = secrets, judge_block

    def mount(self, app: FastAPI) -> None:
        app.router.route_class = BoundedJSONRoute
        for version in API_VERSIONS:
            app.post(f"/{version}/rerank", summary=f"Cohere rerank API {version}")(self.cohere(version))
        app.post("/rerank", summary="Jina (documents) or TEI (texts) rerank API")(self.rerank_jina_tei)
        for path, probe in [("/health", self.health), ("/ready", self.ready), ("/metrics", self.prometheus)]:
            # HEAD: probes that send it (HAProxy's). One route answers both methods (a 405's Allow names both), left
            # out of the schema: FastAPI gives a route one operation id for all its methods, a duplicate there. The
            # schema takes each method from a route of its own, never reached (the first answers both).
            app.api_route(path, methods=["GET", "HEAD"], include_in_schema=False)(probe)
            for method in ("GET", "HEAD"):
                app.api_route(path, methods=[method])(probe)

    async def answer(self, rid: str, query: str, documents: list, top_n: int | None, max_words: int | None,
                     own: dict[str, Any], respond: Respond, rank_fields: list[str] | None = None,
                     field: str = "documents") -> Response:
        """Rerank ``documents`` (the body's ``field``) with the request's ``own`` settings (see ``app`` for the
        statuses): the judge sees each text (``bodies.document_text``) cut to ``max_words`` words; ``respond`` gets
        the whole texts. The server logs under the request's id ``rid`` the judge's own words of a failure or of
        failed calls (a bug's traceback: the gate's ``internal_error``)."""
        query, texts = self.limits.texts(query, documents, rank_fields, field)
        judged = texts if max_words is None else [cut_words(t, max_words) for t in texts]
        candidates = [Candidate(str(i), t) for i, t in enumerate(judged)]
        try:
            result = await self.service.rerank(query, candidates, **own)
        except Overloaded as err:
            return error_response(429, str(err), "overloaded", rid, err.retry_after)
        except ComparatorError as err:
            return self.judge_failure(err, query, judged, rid)
        except (TypeError, ValueError) as err:
            if getattr(err, "accounting", None) is not None:  # raised while judging: a comparator bug, not the caller's
                raise
            raise CallerError(str(err)) from None
        except ShuttingDown as err:
            return error_response(503, str(err), "unavailable", rid, 1)
        self.metrics.spent(result)
        if result.errors or result.failure:
            said = "; ".join(dict.fromkeys(e for e in (result.failure, *result.errors) if e))
            log.warning("request %s answered 200 with the judge's errors: %s", rid, scrub(said, self.secrets))
        order = result.order if top_n is None else result.order[:top_n]
        return JSONResponse(respond(result, order, texts, rid))

    def judge_failure(self, err: ComparatorError, query: str, texts: list[str], rid: str) -> Response:
        """A judge's failure as a response: a prompt too long for the judge's context is the caller's (413);
        ``ComparatorUnavailable`` (the breaker) 503 with ``Retry-After``, but 502 when the request's own breaker
        stopped it and the service's is closed (``_own_failure``); any other 502. The body says what failed
        (``judge_summary``) and a request id; the server's log has the whole message (which names the judge's
        endpoint and model, for the operator only) under that id."""
        see = see_log(rid)
        if too_long(err):
            longest = max(len(t.encode("utf-8", "surrogatepass")) for t in texts)
            status, kind, retry_after = 413, "too_long", None
            limit = context_limit(err)
            message = (f"the judge cannot take a prompt this long ({type(err).__name__}, {judge_cause(err)}"
                       f"{f'; {limit}' if limit else ''}): "
                       f"shorten the query ({len(query.encode('utf-8', 'surrogatepass'))} bytes) or the documents "
                       f"(the longest has {longest} bytes), e.g. with max_tokens_per_doc{see}")
        elif isinstance(err, ComparatorUnavailable) and (own := self._own_failure(err)) is not None:
            status, kind, retry_after, message = 502, "judge_failure", None, own + see
        elif isinstance(err, ComparatorUnavailable):
            status, kind, retry_after = 503, "judge_failure", self.service.breaker.retry_after()
            message = judge_summary(err) + see
        else:
            status, kind, retry_after, message = 502, "judge_failure", None, judge_summary(err) + see
        log.warning("request %s answered %d: %s", rid, status, scrub(describe(err), self.secrets))
        return error_response(status, message, kind, rid, retry_after)

    def _own_failure(self, err: ComparatorUnavailable) -> str | None:
        """``own_breaker_summary`` of ``err`` when the service's breaker is closed and checks no streak (its probe
        may yet open it): the request failed alone, a 502 (an upstream failing this request), not the 503 with
        Retry-After of a service whose judge is down; else None."""
        breaker = self.service.breaker
        return None if breaker.open or breaker.checking else own_breaker_summary(err)

    def meta(self, version: str, result: RerankResult, n: int, rid: str) -> dict[str, Any]:
        """A Cohere answer's ``meta`` (Jina's too): ``activeprp`` is ``result.stats()`` with its ``failure`` and
        ``errors`` (the judge's words, which name where it is) told as ``error_summary`` tells them, and
        ``degraded``."""
        stats = result.stats()
        if stats["failure"]:  # a degraded rerank (on_failure="prior")
            stats["failure"] = error_summary(stats["failure"]) + see_log(rid)
        stats["errors"] = list(dict.fromkeys(error_summary(e) for e in stats["errors"]))
        stats["degraded"] = degraded(result)
        if self.judge_block is not None:  # default: the JudgeStats of result.stats()
            stats["judge"] = self.judge_block(result)
        return {
            "api_version": {"version": version},
            "billed_units": {"search_units": max(1, math.ceil(n / SEARCH_UNIT_DOCUMENTS))},
            "tokens": {"input_tokens": result.prompt_tokens, "output_tokens": result.completion_tokens},
            "activeprp": stats,
        }

    def cohere(self, version: str) -> Callable[[RerankRequest], Any]:
        async def rerank(body: RerankRequest, request: Request) -> Response:
            def respond(result: RerankResult, order: list[int], texts: list[str], rid: str) -> dict[str, Any]:
                return {"id": rid, "results": results(body, result, order),
                        "meta": self.meta(API_VERSIONS[version], result, len(texts), rid)}

            return await self.answer(request_id(request.scope), body.query, body.documents, body.top_n,
                                     body.max_tokens_per_doc, self.limits.own_settings(body), respond,
                                     body.rank_fields)

        rerank.__name__ = f"rerank_{version}"
        return rerank

    async def rerank_jina_tei(self, request: Request) -> Response:
        rid = request_id(request.scope)
        if not _sent_as_json(request):
            return error_response(400, "invalid request: the body is not JSON" + _body_hint(request),
                                  "invalid_request", rid)
        try:
            raw = await request.json()
        except Exception as err:
            return error_response(400, _parse_error(err) or "invalid request: the body is not JSON", "invalid_request",
                                  rid)
        if isinstance(raw, dict) and "texts" in raw:
            return await self.tei(TEIRequest.model_validate(raw), rid)
        jina_default = isinstance(raw, dict) and raw.get("return_documents") is None  # missing or null
        body = RerankRequest.model_validate({**raw, "return_documents": True} if jina_default else raw)

        def jina(result: RerankResult, order: list[int], texts: list[str], rid: str) -> dict[str, Any]:
            tokens = result.prompt_tokens + result.completion_tokens
            return {"model": body.model or MODEL, "results": results(body, result, order),
                    "usage": {"total_tokens": tokens}, "meta": self.meta("jina", result, len(texts), rid)}

        return await self.answer(rid, body.query, body.documents, body.top_n, body.max_tokens_per_doc,
                                 self.limits.own_settings(body), jina, body.rank_fields)

    async def tei(self, body: TEIRequest, rid: str) -> Response:
        def respond(result: RerankResult, order: list[int], texts: list[str], rid: str) -> list[dict[str, Any]]:
            return [{"index": i, "score": result.scores[i], **({"text": texts[i]} if body.return_text else {})}
                    for i in order]

        return await self.answer(rid, body.query, body.texts, body.top_n, None, self.limits.own_settings(body),
                                 respond, field="texts")

    async def health(self) -> dict[str, str]:
        """Liveness: the process answers (whatever the judge's state)."""
        return {"status": "ok"}

    async def ready(self) -> Response:
        """Readiness: 200 while the judge's breaker is closed, from the start on (nothing calls the judge before a
        request does: a judge that cannot be reached shows once calls to it have failed); 503 while the service is
        draining (its shutdown has begun, so that a load balancer stops sending it requests), or with
        ``Retry-After`` while the judge's breaker is open."""
        if self.service.draining:
            return JSONResponse({"status": "draining", "message": "this server is shutting down: send requests to "
                                 "another replica"}, status_code=503)
        breaker = self.service.breaker
        error = breaker.error
        if error is None:
            return JSONResponse({"status": "ready"})
        wait = breaker.retry_after()
        cause = judge_cause(error)
        return JSONResponse({"status": "unavailable", "retry_after": wait,
                             "message": f"the judge's circuit breaker is open ({type(error).__name__}"
                                        f"{f', {cause}' if cause else ''}): the server's log has why"},
                            status_code=503, headers={"Retry-After": str(wait)})

    async def prometheus(self) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)
