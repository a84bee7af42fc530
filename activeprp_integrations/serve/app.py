"""The FastAPI app of ``activeprp serve``: Cohere's rerank API (``/v1/rerank``, ``/v2/rerank``), Jina's and TEI's
``/rerank``, ``/health``, ``/ready`` and Prometheus ``/metrics``, over one shared ``RerankService`` (request bodies
and caps: ``bodies``; handlers: ``routes``; the key, body cap and disconnects: ``gate``). The package's
``create_app`` checks its arguments and wires these parts (it imports this module on first use).

Error contract (the body is always JSON ``{"message": ..., "type": ..., "request_id": ...}``, and every answer has
the request's id in ``X-Request-ID``: ``routes.request_id``): a caller's mistake is a 4xx (400 for a
body that does not validate, including malformed JSON; 401 without a right key; 413 for a body, query, document
or document count over the server's caps, and for a prompt too long for the judge's context); 429 with
``Retry-After`` when the queue is full; a judge failure is 502 (the endpoint refused the request or the key, or a
comparator answered the wrong shape) or 503 with ``Retry-After`` (``ComparatorUnavailable``: the endpoint keeps
failing, the breaker is open), saying the typed error's type, cause and the calls spent with a request id, never
the judge's URL or model (the server's log has the whole message under that id: ``routes.judge_summary``); 503
``unavailable`` with ``Retry-After`` too for a request the server's graceful shutdown refuses or cuts
(``protocol.DrainingServer``). A 200's ``meta.activeprp.errors`` and ``failure`` say the judge's errors the same
way (``routes.error_summary``).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from activeprp_core import RerankResult

from . import create_app  # noqa: F401  (still importable from here; defined once, beside its docstring)
from .gate import Gate
from .routes import DEGRADED, Routes, add_error_handlers, degraded
from .service import RerankService

RERANK_ROUTES = ("/v1/rerank", "/v2/rerank", "/rerank")


class Metrics:
    """The Prometheus metrics of one app, in their own registry (so several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        kw = {"registry": self.registry, "namespace": "activeprp"}
        self.requests = Counter("requests", "HTTP rerank requests by status (499: the client went away)",
                                ["route", "status"], **kw)
        self.calls = Counter("judge_calls", "LLM calls sent to the judge (every request's, and the breaker's probes)",
                             **kw)
        self.failed_calls = Counter("judge_failed_calls", "LLM calls that failed after their retries", **kw)
        self.tokens = Counter("judge_tokens", "tokens the judge reported for the answered requests", ["kind"], **kw)
        self.rounds = Counter("rounds", "sequential rounds of judge calls, summed over the answered requests", **kw)
        self.retries = Counter("judge_retries", "transport retries of judge calls (HTTP requests beyond the calls; "
                               "never billed), of every call counted in judge_calls", **kw)
        self.latency = Histogram("request_seconds", "wall time of a rerank request", ["route"], **kw,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.in_progress = Gauge("requests_in_progress", "rerank requests being answered", **kw)
        self.active = Gauge("requests_active", "rerank requests being reranked (at most --max-active)", **kw)
        self.queued = Gauge("requests_queued", "rerank requests waiting for a slot (at most --max-queue)", **kw)
        self.breaker_open = Gauge("judge_breaker_open", "1 while the judge's circuit breaker is open", **kw)
        self.degraded = Counter("requests_degraded", "rerank answers (200) short of the judge's ranking, by cause "
                                "(time_budget, failure) and by whether any judge answer shaped them (judged: none, "
                                "partly)", list(DEGRADED), **kw)
        for by in DEGRADED["by"]:  # every series from the start, at 0
            for judged in DEGRADED["judged"]:
                self.degraded.labels(by, judged)

    def call(self, ok: bool | None, retries: int = 0) -> None:
        """One call reached the judge (``ok``: answered, failed, or None: cancelled in flight) after ``retries``
        transport retries, whatever became of its request (answered, failed, abandoned by its client)."""
        self.calls.inc()
        self.retries.inc(retries)
        if ok is False:
            self.failed_calls.inc()

    def watch(self, service: RerankService) -> None:
        """Read the gauges of ``service`` at each scrape."""
        self.active.set_function(lambda: service.admission.active)
        self.queued.set_function(lambda: service.admission.queued)
        self.breaker_open.set_function(lambda: float(service.breaker.open))

    def spent(self, result: RerankResult) -> None:
        """What an answered request spent: its rounds and the judge's tokens (its calls and retries are counted
        as they reach the judge: ``call``); and whether it was ``degraded``."""
        self.rounds.inc(result.rounds)
        self.tokens.labels("prompt").inc(result.prompt_tokens)
        self.tokens.labels("completion").inc(result.completion_tokens)
        short = degraded(result)
        if short is not None:
            self.degraded.labels(short["by"], short["judged"]).inc()


def fastapi_app(routes: Routes, gate: dict[str, Any]) -> FastAPI:
    """The app serving ``routes``, with the error handlers and the ``Gate`` middleware."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await routes.service.start()
        yield
        await routes.service.stop()

    app = FastAPI(title="ActivePRP rerank", lifespan=lifespan)
    app.state.service, app.state.metrics = routes.service, routes.metrics
    add_error_handlers(app)
    app.add_middleware(Gate, routes=RERANK_ROUTES, max_body_bytes=routes.limits.max_body_bytes,
                       max_body_values=routes.limits.max_body_values, metrics=routes.metrics,
                       overloaded=routes.service.overloaded, secrets=routes.secrets,
                       arrival_refused=routes.service.arrival_refused, **gate)
    routes.mount(app)
    return app
