"""The FastAPI app of ``activeprp serve``: Cohere's rerank API (``/v1/rerank``, ``/v2/rerank``), Jina's and TEI's
``/rerank``, ``/health`` and Prometheus ``/metrics``, over one shared ``RerankService`` (request bodies and
caps: ``bodies``; handlers: ``routes``).

Error contract: a caller's mistake is a 4xx with a JSON body ``{"message": ..., "type": ...}`` (400 for a body
that does not validate, including malformed JSON; 413 for a body, a document or a document count over the
server's caps); a judge failure is 502
(the endpoint refused the request, or answered nonsense) or 503 (the endpoint keeps failing) with the typed
error's message, API keys scrubbed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from activeprp_core import RerankResult, RerankSettings
from activeprp_core.budget import check_count

from .._common import DEFAULT_BUDGET, DEFAULT_MAX_ROUNDS, DEFAULT_ORACLE, DEFAULT_RANKER
from . import DEFAULT_MAX_ACTIVE, DEFAULT_MAX_DOCUMENT_BYTES, DEFAULT_MAX_DOCUMENTS
from .bodies import Limits
from .routes import JudgeBlock, Routes, add_error_handlers, error_response
from .service import RerankService

RERANK_ROUTES = ("/v1/rerank", "/v2/rerank", "/rerank")


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
    settings = dict(ranker=ranker, oracle=oracle, budget=budget, top_k=top_k, seed=seed, max_rounds=max_rounds,
                    on_failure=on_failure, max_concurrency=max_concurrency)
    RerankSettings(**settings)  # validates the settings now
    for name, value in [("max_active", max_active), ("max_documents", max_documents),
                        ("max_document_bytes", max_document_bytes)]:
        check_count(value, name, minimum=1)
    routes = Routes(RerankService(comparator, settings, max_active),
                    Limits(max_documents, max_document_bytes, budget, max_rounds), Metrics(),
                    [s for s in secrets if s], judge_block)
    return _app(routes)


def _app(routes: Routes) -> FastAPI:
    """The app serving ``routes``, with the error handlers and the ``CapAndCount`` middleware."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await routes.service.stop()

    app = FastAPI(title="ActivePRP rerank", lifespan=lifespan)
    app.state.service, app.state.metrics = routes.service, routes.metrics
    add_error_handlers(app)
    app.add_middleware(CapAndCount, limits=routes.limits, metrics=routes.metrics)
    routes.mount(app)
    return app
