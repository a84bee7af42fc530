"""The FastAPI app of ``activeprp serve``: Cohere's rerank API (``/v1/rerank``, ``/v2/rerank``), Jina's and TEI's
``/rerank``, ``/health`` and Prometheus ``/metrics``, over one shared ``RerankService``.

Error contract: a caller's mistake is a 4xx with a JSON body ``{"message": ..., "type": ...}`` (400 for a body
that does not validate, including malformed JSON; 413 for a body, a document or a document count over the
server's caps); a judge failure is 502
(the endpoint refused the request, or answered nonsense) or 503 (the endpoint keeps failing) with the typed
error's message, API keys scrubbed.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from activeprp_core import Candidate, RerankResult
from activeprp_core.budget import check_count
from activeprp_core.errors import ComparatorError, ComparatorUnavailable, scrub
from activeprp_core.trecfiles import model_text

from .._common import DEFAULT_BUDGET, DEFAULT_MAX_ROUNDS, DEFAULT_ORACLE, DEFAULT_RANKER
from . import DEFAULT_MAX_ACTIVE, DEFAULT_MAX_DOCUMENT_BYTES, DEFAULT_MAX_DOCUMENTS
from .service import RerankService

API_VERSIONS = {"v1": "1", "v2": "2"}
RERANK_ROUTES = ("/v1/rerank", "/v2/rerank", "/rerank")
SEARCH_UNIT_DOCUMENTS = 100  # Cohere bills one search unit per query and 100 documents

JudgeBlock = Callable[[RerankResult], Mapping[str, Any] | None]


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class TextDocument(_Body):
    text: str


class RerankRequest(_Body):
    """A Cohere rerank request (v1 and v2), plus ActivePRP's extensions ``budget``, ``max_rounds``, ``seed``.

    ``max_tokens_per_doc`` cuts each document to that many whitespace-separated words before judging.
    """

    model: str | None = None
    query: str
    documents: list[str | TextDocument]
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False
    max_tokens_per_doc: int | None = Field(None, ge=1)
    budget: int | None = Field(None, ge=0)
    max_rounds: int | None = Field(None, ge=0)
    seed: int | None = None


class TEIRequest(_Body):
    """A Hugging Face text-embeddings-inference ``/rerank`` request (``truncate``/``raw_scores`` are accepted)."""

    query: str
    texts: list[str]
    return_text: bool = False
    truncate: bool = False
    raw_scores: bool = False


class CallerError(ValueError):
    """A request the server refuses (HTTP ``status``, default 400); the message says what to change."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Limits:
    """The server's caps on a request: documents, bytes per document, and the most ``budget``/``max_rounds`` a
    request may ask for (None = no cap); the defaults are the caps."""

    def __init__(self, max_documents: int, max_document_bytes: int, budget: int | None,
                 max_rounds: int | None) -> None:
        self.max_documents, self.max_document_bytes = max_documents, max_document_bytes
        self.budget, self.max_rounds = budget, max_rounds

    @property
    def max_body_bytes(self) -> int:
        """Bytes of a request body beyond which it is refused unread (413): the documents at their cap, JSON
        escaping included (up to 6 bytes per byte), plus room for the rest."""
        return 6 * self.max_documents * self.max_document_bytes + 65536

    def own_settings(self, request: RerankRequest) -> dict[str, Any]:
        """The request's own settings for ``RerankService.rerank``, checked against the server's caps."""
        own: dict[str, Any] = {}
        for name in ("budget", "max_rounds"):
            value, cap = getattr(request, name), getattr(self, name)
            if value is None:
                continue
            if cap is not None and value > cap:
                raise CallerError(f"{name} {value} is over this server's cap of {cap}: ask for at most {cap}")
            own[name] = value
        if request.seed is not None:
            own["seed"] = request.seed
        return own

    def texts(self, query: str, documents: list[Any], max_words: int | None) -> tuple[str, list[str]]:
        """The query and document texts to judge (lone surrogates replaced, cut to ``max_words`` words)."""
        if not query.strip():
            raise CallerError("query is empty: send the question the documents are ranked for")
        if not documents:
            raise CallerError("documents is empty: send at least one document")
        if len(documents) > self.max_documents:
            raise CallerError(f"{len(documents)} documents is over this server's cap of {self.max_documents} "
                              "per request: send fewer", 413)
        texts = []
        for i, doc in enumerate(documents):
            text = doc if isinstance(doc, str) else doc.text
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > self.max_document_bytes:
                raise CallerError(f"documents[{i}] has {size} bytes, over this server's cap of "
                                  f"{self.max_document_bytes} bytes per document: shorten it", 413)
            text = model_text(text)
            texts.append(text if max_words is None else " ".join(text.split()[:max_words]))
        return model_text(query), texts


class Metrics:
    """The Prometheus metrics of one app, in their own registry (so several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        kw = {"registry": self.registry, "namespace": "activeprp"}
        self.requests = Counter("requests", "HTTP rerank requests", ["route", "status"], **kw)
        self.calls = Counter("judge_calls", "LLM calls of the answered requests", **kw)
        self.failed_calls = Counter("judge_failed_calls", "failed LLM calls of the answered requests", **kw)
        self.tokens = Counter("judge_tokens", "tokens the judge reported for the answered requests", ["kind"], **kw)
        self.rounds = Counter("rounds", "sequential rounds of judge calls, summed over the answered requests", **kw)
        self.latency = Histogram("request_seconds", "wall time of a rerank request", ["route"], **kw,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.in_progress = Gauge("requests_in_progress", "rerank requests being answered", **kw)

    def spent(self, result: RerankResult) -> None:
        self.calls.inc(result.calls)
        self.failed_calls.inc(result.failed_calls)
        self.rounds.inc(result.rounds)
        self.tokens.labels("prompt").inc(result.prompt_tokens)
        self.tokens.labels("completion").inc(result.completion_tokens)


class CapAndCount:
    """ASGI middleware: refuses a body whose Content-Length is over ``limits.max_body_bytes`` (413) before it is
    read, and counts the rerank routes' requests by status and their latency in ``metrics``."""

    def __init__(self, app: Any, limits: Limits, metrics: Metrics) -> None:
        self.app, self.limits, self.metrics = app, limits, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        route = scope.get("path") if scope["type"] == "http" else None
        if route not in RERANK_ROUTES:
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.limits.max_body_bytes:
            message = f"request body over this server's cap of {self.limits.max_body_bytes} bytes"
            await error_response(413, message, "too_large")(scope, receive, send)
            status[0] = 413
        else:
            async def send_counting(message: dict) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            self.metrics.in_progress.inc()
            try:
                await self.app(scope, receive, send_counting)
            finally:
                self.metrics.in_progress.dec()
        self.metrics.requests.labels(route, str(status[0])).inc()
        self.metrics.latency.labels(route).observe(time.perf_counter() - started)


_IDS = random.Random()  # seeded from os.urandom once: response ids need to be unique, not secret


def response_id() -> str:
    """A random UUID4 string for a response's ``id`` (without a system call per response)."""
    return str(uuid.UUID(int=_IDS.getrandbits(128), version=4))


def error_response(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"message": message, "type": kind}, status_code=status)


def _validation_message(exc: RequestValidationError | ValidationError) -> str:
    parts = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def create_app(
    comparator: Any,
    *,
    budget: int | None = DEFAULT_BUDGET,
    max_rounds: int | None = DEFAULT_MAX_ROUNDS,
    top_k: int = 10,
    ranker: str = DEFAULT_RANKER,
    oracle: str = DEFAULT_ORACLE,
    seed: int = 0,
    on_failure: str = "raise",
    max_concurrency: int | None = None,
    max_active: int = DEFAULT_MAX_ACTIVE,
    max_documents: int = DEFAULT_MAX_DOCUMENTS,
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    secrets: Iterable[str | None] = (),
    judge_block: JudgeBlock | None = None,
) -> FastAPI:
    """A FastAPI app serving Cohere-compatible reranking with ``comparator`` as the judge.

    Args:
        comparator: the judge shared by every request (any ``Comparator`` or object with ``compare``; an async
            ``ajudge``/``acompare`` keeps the event loop free). Not closed by the app.
        budget, max_rounds: the default per request and the most a request may ask for in its body (None = no
            cap); calls and sequential rounds of calls per request.
        top_k: the reranked prefix when a request sends no ``top_n`` (else ``top_n`` is the prefix).
        ranker, oracle, seed, on_failure: as for ``activeprp_core.rerank`` (a request may send its own ``seed``).
        max_concurrency: the most judge calls in flight across all requests (None = the comparator's own).
        max_active: the most requests reranked at once (the others queue).
        max_documents, max_document_bytes: caps per request (413 over them).
        secrets: strings (API keys) scrubbed from every error message.
        judge_block: hook filling ``meta.activeprp.judge`` from a result (default: ``result.judge``, the
            ``JudgeStats`` of the query's answers, as a dict).

    Returns:
        the app; its lifespan stops the shared rerank driver after the requests in flight have finished.
        ``app.state.service`` is the ``RerankService``, ``app.state.metrics`` the ``Metrics``.

    Raises:
        TypeError / ValueError: bad settings (checked here, before any request).
    """
    from activeprp_core import RerankSettings

    RerankSettings(ranker=ranker, oracle=oracle, budget=budget, top_k=top_k, seed=seed, max_rounds=max_rounds,
                   on_failure=on_failure, max_concurrency=max_concurrency)  # validates the settings now
    for name, value in [("max_active", max_active), ("max_documents", max_documents),
                        ("max_document_bytes", max_document_bytes), ("max_concurrency", max_concurrency)]:
        check_count(value, name, minimum=1, allow_none=name == "max_concurrency")
    limits = Limits(max_documents, max_document_bytes, budget, max_rounds)
    settings = dict(ranker=ranker, oracle=oracle, budget=budget, top_k=top_k, seed=seed, max_rounds=max_rounds,
                    on_failure=on_failure, max_concurrency=max_concurrency)
    service = RerankService(comparator, settings, max_active)
    metrics = Metrics()
    secrets = [s for s in secrets if s]

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await service.stop()

    app = FastAPI(title="ActivePRP rerank", lifespan=lifespan)
    app.state.service, app.state.metrics = service, metrics

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, _validation_message(exc), "invalid_request")

    @app.exception_handler(ValidationError)
    async def invalid_model(request: Request, exc: ValidationError) -> JSONResponse:
        return error_response(400, _validation_message(exc), "invalid_request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), "invalid_request")

    @app.exception_handler(CallerError)
    async def refused(request: Request, exc: CallerError) -> JSONResponse:
        return error_response(exc.status, str(exc), "invalid_request")

    app.add_middleware(CapAndCount, limits=limits, metrics=metrics)

    async def answer(query: str, documents: list, top_n: int | None, max_words: int | None, own: dict[str, Any],
                     respond: Callable[[RerankResult, list[int], list[str]], Any]) -> Response:
        query, texts = limits.texts(query, documents, max_words)
        if top_n is not None:
            own["top_k"] = top_n
        candidates = [Candidate(str(i), t) for i, t in enumerate(texts)]
        try:
            result = await service.rerank(query, candidates, **own)
        except ComparatorError as err:
            status = 503 if isinstance(err, ComparatorUnavailable) else 502
            return error_response(status, scrub(f"{type(err).__name__}: {err}", secrets), "judge_failure")
        except (TypeError, ValueError) as err:
            if getattr(err, "accounting", None) is not None:  # raised while judging: a comparator bug, not the caller's
                raise
            raise CallerError(str(err)) from None
        metrics.spent(result)
        order = result.order if top_n is None else result.order[:top_n]
        return JSONResponse(respond(result, order, texts))

    def meta(version: str, result: RerankResult, n: int) -> dict[str, Any]:
        stats = result.stats()
        if judge_block is not None:  # default: the JudgeStats of result.stats()
            stats["judge"] = judge_block(result)
        return {
            "api_version": {"version": version},
            "billed_units": {"search_units": max(1, math.ceil(n / SEARCH_UNIT_DOCUMENTS))},
            "tokens": {"input_tokens": result.prompt_tokens, "output_tokens": result.completion_tokens},
            "activeprp": stats,
        }

    def cohere_route(version: str):
        async def rerank(body: RerankRequest) -> Response:
            def respond(result: RerankResult, order: list[int], texts: list[str]) -> dict[str, Any]:
                rows = [{"index": i, "relevance_score": result.scores[i]} for i in order]
                if body.return_documents:
                    for row in rows:
                        row["document"] = {"text": texts[row["index"]]}
                return {"id": response_id(), "results": rows, "meta": meta(API_VERSIONS[version], result,
                                                                               len(texts))}

            return await answer(body.query, body.documents, body.top_n,
                                body.max_tokens_per_doc, limits.own_settings(body), respond)

        rerank.__name__ = f"rerank_{version}"
        return rerank

    for version in API_VERSIONS:
        app.post(f"/{version}/rerank", summary=f"Cohere rerank API {version}")(cohere_route(version))

    @app.post("/rerank", summary="Jina (documents) or TEI (texts) rerank API")
    async def rerank_jina_tei(request: Request) -> Response:
        try:
            raw = await request.json()
        except Exception:
            return error_response(400, "invalid request: the body is not JSON", "invalid_request")
        if isinstance(raw, dict) and "texts" in raw:
            body = TEIRequest.model_validate(raw)

            def tei(result: RerankResult, order: list[int], texts: list[str]) -> list[dict[str, Any]]:
                return [{"index": i, "score": result.scores[i], **({"text": texts[i]} if body.return_text else {})}
                        for i in order]

            return await answer(body.query, body.texts, None, None, {}, tei)
        cohere = RerankRequest.model_validate({"return_documents": True, **raw} if isinstance(raw, dict) else raw)
        own = limits.own_settings(cohere)

        def jina(result: RerankResult, order: list[int], texts: list[str]) -> dict[str, Any]:
            rows = [{"index": i, "relevance_score": result.scores[i],
                     **({"document": {"text": texts[i]}} if cohere.return_documents else {})} for i in order]
            tokens = result.prompt_tokens + result.completion_tokens
            return {"model": cohere.model, "results": rows, "usage": {"total_tokens": tokens},
                    "meta": meta("jina", result, len(texts))}

        return await answer(cohere.query, cohere.documents, cohere.top_n, cohere.max_tokens_per_doc,
                            own, jina)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
