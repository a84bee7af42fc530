"""``activeprp serve``: a rerank HTTP service compatible with Cohere's rerank API, backed by any comparator.

Routes: ``POST /v2/rerank`` and ``/v1/rerank`` (Cohere), ``POST /rerank`` (Jina's ``documents`` or TEI's
``texts`` shape), ``GET /health`` (liveness), ``GET /ready`` (the judge's breaker is closed, no shutdown),
``GET /metrics`` (Prometheus). Concurrent requests are admitted up to ``--max-active`` at once and
``--max-queue`` waiting, each within its time budget, on one shared judge with one circuit breaker
(``service.RerankService`` over ``activeprp_core.stream.RerankPool``); API keys, body caps and disconnects are
checked by ``gate.Gate``. ``create_app`` builds the FastAPI app for mounting or tests; the command runs it under
uvicorn (graceful shutdown finishes the requests in flight, ``protocol.DrainingServer``).
Needs the ``serve`` extra: ``pip install "activeprp[serve]"`` (fastapi, uvicorn, prometheus-client); importing
this package does not import them, ``create_app`` and the command do.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import inspect
import os
import socket
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from activeprp_cli import fail
from activeprp_cli.rerank import (
    add_comparator_args,
    add_settings_args,
    count,
    make_comparator,
    seconds,
    settings_from_args,
)
from activeprp_core.budget import check_count, check_seconds
from activeprp_core.comparators.openai_chat import url_credentials
from activeprp_core.errors import InputError
from activeprp_core.settings import FIELDS, ONLINE, RerankSettings, takes_settings

from .._common import is_loopback

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .routes import JudgeBlock

__all__ = ["add_parser", "create_app", "main"]

DEFAULT_MAX_DOCUMENTS = 1000
DEFAULT_MAX_DOCUMENT_BYTES = 32 * 1024
DEFAULT_MAX_ACTIVE = 32
"""Requests reranked at once by default: enough to keep the judge's calls in flight busy (each request's round
holds a few calls; a remote judge has ``comparators.remote.MAX_CONCURRENCY``, 8, in flight by default) and a local
model's batches full, few enough that the requests that came first finish first (benchmarks/results/serve/)."""
DEFAULT_MAX_QUEUE = 256
"""Requests waiting for a slot by default; one more is refused at once with 429."""
SERVE = RerankSettings.of(ONLINE, time_budget=30.0)
"""The service's settings by default: the online preset (``activeprp_core.settings.ONLINE``) with 30 seconds per
request, counted from its arrival. Each cap (``budget``, ``max_rounds``, ``token_budget``, ``time_budget``) is also
the most a request may ask for."""
DEFAULT_MAX_QUERY_BYTES = 8192
"""UTF-8 bytes of a query by default (the query goes into every prompt)."""
DEFAULT_COOL_DOWN = 5.0
"""Seconds the judge's circuit breaker stays open before one probe call decides whether it closes."""
DEFAULT_JUDGE_TIMEOUT = 10.0
DEFAULT_JUDGE_RETRIES = 1
"""The judge's per-call timeout and retries by default: a dead judge's call fails in about 21 s (two attempts and
a backoff), inside the default time budget, so the breaker opens rather than every request running out of time."""
DEFAULT_CLIENT_TIMEOUT = 30.0
"""Seconds a client may take to send a request's head (from connecting or its previous answer) and, then, its
body, and to read an answer, by default: a stalled or trickling client holds a connection and up to a body's cap (or
an answer) of memory that long."""
MAX_BODY_BYTES = 64_000_000
"""The most the default body cap may be (``bodies.Limits.default_body_bytes``)."""
DEFAULT_SHUTDOWN_TIMEOUT = 60.0
"""Seconds a graceful shutdown waits for the requests in flight by default (``--shutdown-timeout``)."""
HALF = "half"
MIN_UPLOADS_PER_CLIENT = 16
"""The least ``HALF`` comes to: a small server's pool (``max_active=1, max_queue=1``) halved would refuse one client
its second request sent at once (its bodies arrive together)."""
DEFAULT_MAX_UPLOADS_PER_CLIENT = HALF
"""Request bodies received at once from one peer address by default: half of the ``max_active + max_queue`` the
server receives at once (144 of the default 288), so that the other clients always have the other half; at least
``MIN_UPLOADS_PER_CLIENT``, so a pool of up to 32 has no cap per client. 300
connections from one client that sent a head and then a byte every 2 s took every slot, and every other client's
rerank got 429 for as long as they went on. Not lower: a burst holds its slots while its bodies arrive (200 requests
sent at once over loopback all held one), and a service's usual client is one application server. Behind a proxy
every client has the proxy's address: raise it there (docs/serve.md, "Size caps")."""
AUTH_KEYS_ENV = "ACTIVEPRP_AUTH_KEYS"
"""The environment variable holding API keys the service accepts (comma-separated), beside ``--auth-key``."""
SIMULATED_HELP = ("a judge without a model and without labels (a request's documents carry none: each counts as "
                  "label 0, no noise): it prefers the second passage of every pair, so the order it returns says "
                  "nothing about relevance; for trying the service, its limits and its load")
"""What ``--comparator simulated`` does in ``serve``: ``make_comparator`` builds ``SimulatedComparator({})``, which
answers 0.0 (the second slot wins) for every pair (``activeprp_cli.rerank.add_comparator_args``' ``simulated``)."""
EXTRA_HINT = ('activeprp serve needs the serve extra: pip install "activeprp[serve]" '
              "(fastapi, uvicorn, prometheus-client)")


_Func = TypeVar("_Func", bound=Callable[..., Any])


def serve_settings(func: _Func) -> _Func:
    """Decorator: like ``activeprp_core.settings.takes_settings`` (``func`` takes the ``RerankSettings`` fields as
    ``**options``, and its signature shows them), with the service's defaults (``SERVE``)."""
    signature = inspect.signature(takes_settings(func))
    func.__signature__ = signature.replace(parameters=[  # type: ignore[attr-defined]
        p.replace(default=getattr(SERVE, p.name)) if p.name in FIELDS else p for p in signature.parameters.values()])
    return func


@serve_settings
def create_app(
    comparator: Any,
    settings: RerankSettings | None = None,
    *,
    max_active: int = DEFAULT_MAX_ACTIVE,
    max_queue: int = DEFAULT_MAX_QUEUE,
    max_documents: int = DEFAULT_MAX_DOCUMENTS,
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    max_query_bytes: int = DEFAULT_MAX_QUERY_BYTES,
    max_body_bytes: int | None = None,
    auth_keys: Iterable[str] = (),
    cool_down: float = DEFAULT_COOL_DOWN,
    secrets: Iterable[str | None] = (),
    judge_block: JudgeBlock | None = None,
    client_timeout: float | None = DEFAULT_CLIENT_TIMEOUT,
    max_uploads_per_client: int | str | None = DEFAULT_MAX_UPLOADS_PER_CLIENT,
    **options: Any,
) -> FastAPI:
    """A FastAPI app serving Cohere-compatible reranking with ``comparator`` as the judge (the app's modules are
    imported on first use: they need the ``serve`` extra).

    Args:
        comparator: the judge shared by every request (any ``Comparator`` or object with ``compare``; an async
            ``ajudge``/``acompare`` keeps the event loop free). Not closed by the app.
        settings, **options: the ``RerankSettings`` of every request (default: ``SERVE``, the online preset with
            ``time_budget`` 30 s), ``options`` replacing its fields (``budget=30``, ``max_rounds=6``, ...). Each cap
            (``budget``, ``max_rounds``, ``token_budget``, ``time_budget``) is the default of a request and the most
            it may ask for in its body (None = no cap); ``time_budget`` counts from the request's arrival (its time
            in the queue counts). ``top_k`` is the reranked prefix when a request sends no ``top_n``; a request may
            send its own ``seed``. ``max_concurrency`` caps the judge calls in flight across all requests (None =
            the comparator's own): the requests open to the judge, a cut call's slot freed once its connection is
            closed (a judge that finishes abandoned requests may have more at work: docs/serve.md, "Deploying");
            ``max_consecutive_failures`` failed calls in a row open the judge's breaker.
        max_active, max_queue: the most requests reranked at once, and waiting for that (beyond: 429).
        max_documents, max_document_bytes, max_query_bytes: caps per request (413 over them).
        max_body_bytes: the body cap (413 over it, checked as it is read); None = the documents at their caps
            with JSON escaping, at most ``bodies.MAX_BODY_BYTES``.
        auth_keys: when any, the rerank routes need ``Authorization: Bearer <one of them>`` (else 401). Blank
            entries (None, '' or spaces) are skipped, but not all of them: a missing secret must not open the
            service. Spaces and newlines around a key are stripped (as the gate strips the client's token).
        cool_down: seconds the judge's breaker stays open before one probe call decides whether it closes.
        secrets: strings (API keys) scrubbed from every error message, from a degraded rerank's ``meta`` and from
            the engine's log records (the ``auth_keys`` are added).
        judge_block: hook filling ``meta.activeprp.judge`` from a result (default: ``result.judge``, the
            ``JudgeStats`` of the query's answers, as a dict).
        client_timeout: seconds a request's body may take to arrive whole after its head (else 408; None = no
            limit). At most ``max_active + max_queue`` bodies are received at once (one more: 429), so the bodies
            held in memory are bounded by that times the body cap, each for at most these seconds.
        max_uploads_per_client: the most bodies received at once from one peer address (one more: 429), so that
            one client's slow uploads cannot take every slot; ``"half"`` (``HALF``, the default): half of
            ``max_active + max_queue``, at least ``MIN_UPLOADS_PER_CLIENT`` (16); None = no cap per client. The
            address is the ASGI scope's client: the TCP peer's, a proxy's behind one (the app reads no forwarded
            header; uvicorn takes X-Forwarded-For's only from a peer in its ``forwarded_allow_ips``, by default
            loopback).

    Returns:
        the app; its lifespan starts the breaker's probes and stops the service after the requests in flight
        have finished. ``app.state.service`` is the ``RerankService``, ``app.state.metrics`` the ``Metrics``.

    Raises:
        ImportError: the ``serve`` extra is not installed (the message says what to install).
        TypeError / ValueError: bad settings (checked here, before any request); ``auth_keys`` a str, holding
            a key that is not a str (nor None), or holding only blank keys.
    """
    try:
        from .app import Metrics, fastapi_app
        from .bodies import CAPPED, Limits
        from .routes import Routes, scrub_logs
        from .service import RerankService
    except ImportError as err:
        raise ImportError(f"{EXTRA_HINT}: {err}") from err
    settings = RerankSettings.of(SERVE if settings is None else settings, **options)
    for name, value, minimum in [("max_active", max_active, 1), ("max_queue", max_queue, 0),
                                 ("max_documents", max_documents, 1), ("max_document_bytes", max_document_bytes, 1),
                                 ("max_query_bytes", max_query_bytes, 1)]:
        check_count(value, name, minimum=minimum)
    if max_uploads_per_client == HALF:
        max_uploads_per_client = max(MIN_UPLOADS_PER_CLIENT, (max_active + max_queue) // 2)
    for name, value in [("max_body_bytes", max_body_bytes), ("max_uploads_per_client", max_uploads_per_client)]:
        check_count(value, name, minimum=1, allow_none=True)
    client_timeout = check_seconds(client_timeout, "client_timeout", positive=True, allow_none=True)
    if isinstance(auth_keys, (str, bytes)):  # its characters would each be a key
        raise TypeError(f"auth_keys must be a list of keys, not one {type(auth_keys).__name__}: pass [key]")
    auth_keys = list(auth_keys)
    wrong = [k for k in auth_keys if k is not None and not isinstance(k, str)]
    if wrong:
        raise TypeError(f"auth_keys must hold str keys (or None for a missing one), not "
                        f"{type(wrong[0]).__name__}: pass each key as a str")
    # the gate strips the client's token, so a key read with its newline would match no one
    keys = [k.strip() for k in auth_keys if k and k.strip()]
    if auth_keys and not keys:
        raise ValueError(f"auth_keys holds no key, only blanks ({len(auth_keys)} of None, '' or spaces): pass the "
                         "keys themselves, or none at all to serve without a key")
    metrics = Metrics()
    service = RerankService(comparator, settings, max_active=max_active, max_queue=max_queue,
                            cool_down=check_seconds(cool_down, "cool_down", positive=True), on_call=metrics.call)
    metrics.watch(service)
    limits = Limits(max_documents, max_document_bytes, {name: getattr(settings, name) for name in CAPPED},
                    max_query_bytes, max_body_bytes)
    secrets = [s for s in [*secrets, *keys] if s]
    scrub_logs(secrets)
    gate = dict(keys=keys, max_uploads=max_active + max_queue, body_timeout=client_timeout,
                max_uploads_per_client=max_uploads_per_client)
    return fastapi_app(Routes(service, limits, metrics, secrets, judge_block), gate)


def uploads_per_client(text: str) -> int | str | None:
    """``--max-uploads-per-client``'s type: ``half`` (``HALF``), ``none`` or a count >= 1."""
    return HALF if text == HALF else count(minimum=1, allow_none=True)(text)


def auth_keys(args: argparse.Namespace) -> list[str]:
    """The API keys the service accepts: every ``--auth-key`` and those in ``$ACTIVEPRP_AUTH_KEYS`` (comma-separated,
    blank entries between the commas skipped), stripped of spaces; none when neither is given.

    Raises:
        InputError: a key source is given but yields no key (exit 2): an ``--auth-key`` is blank, or
            ``$ACTIVEPRP_AUTH_KEYS`` is set but holds only spaces and commas (a secret that did not reach it, as in
            ``ACTIVEPRP_AUTH_KEYS="$MY_SERVICE_KEY"``, would otherwise serve with no key).
    """
    flags = [k.strip() for k in args.auth_key or []]
    if "" in flags:
        raise InputError("--auth-key was given a blank key: pass the key itself (--auth-key KEY), or leave the flag "
                         "out to serve without a key")
    env = os.environ.get(AUTH_KEYS_ENV)
    from_env = [] if env is None else [k.strip() for k in env.split(",") if k.strip()]
    if env is not None and not from_env:
        raise InputError(f"${AUTH_KEYS_ENV} is set but holds no key: set it to the keys (comma-separated), or unset "
                         "it to serve without a key")
    return [*flags, *from_env]


loopback = is_loopback
"""Whether ``host`` is a loopback interface (``activeprp_integrations._common.is_loopback``: 127.0.0.0/8, ::1,
localhost in any case, brackets or not)."""


SERVE_HELPS = {
    "time_budget": "most seconds per request from its arrival (its wait in the queue included): 0 = no call at all",
    "max_concurrency": "most judge calls in flight across all requests of the server",
    "max_consecutive_failures": "judge calls in a row, across all requests, that may fail before the server's "
                                "circuit breaker opens (then requests get 503 until a probe is answered: --cool-down)",
}
"""What the settings whose meaning is the service's own say in ``activeprp serve --help`` (``add_settings_args``'
``helps``): the time budget counts from a request's arrival; the cap on calls in flight and the breaker are the
server's, shared by every request (``RerankService``)."""

#: the users' summary in ``activeprp serve --help`` (plain text; the module docstring is the developers')
_DESCRIPTION = """\
A rerank HTTP service in the shape of Cohere's rerank API (POST /v2/rerank and
/v1/rerank; POST /rerank takes Jina's and TEI's shapes), with GET /health,
/ready and /metrics. Each request is reranked by a pairwise LLM judge within
its budget of calls and seconds. Needs pip install "activeprp[serve]".
The service's keys are read from $ACTIVEPRP_AUTH_KEYS (--auth-key would show
them to every local user in ps), the judge's from $OPENAI_API_KEY (--api-key
would too).

Example:
  ACTIVEPRP_AUTH_KEYS="$MY_SERVICE_KEY" activeprp serve --comparator openai \\
      --model gpt-4o-mini --base-url https://api.openai.com/v1 \\
      --port 8080 --budget 50 --time-budget 20"""


def add_parser(subparsers: Any) -> None:
    """Register ``activeprp serve``."""
    p = subparsers.add_parser("serve", help="serve Cohere-compatible reranking over HTTP (/v2/rerank)",
                              description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default %(default)s)")
    p.add_argument("--port", type=count(minimum=0, maximum=65535), default=8080, help="TCP port (default %(default)s)")
    add_settings_args(p.add_argument_group("settings of every request (each cap is also the most a request may ask "
                                           "for in its body; --time-budget counts from a request's arrival, its "
                                           "wait in the queue included)"), SERVE,
                      helps=SERVE_HELPS)
    add_comparator_args(p, simulated=SIMULATED_HELP)
    g = p.add_argument_group("server limits (a request over them is refused with a 4xx)")
    g.add_argument("--max-documents", type=count(minimum=1), default=DEFAULT_MAX_DOCUMENTS,
                   help="documents per request (default %(default)s)")
    g.add_argument("--max-document-bytes", type=count(minimum=1), default=DEFAULT_MAX_DOCUMENT_BYTES,
                   help="UTF-8 bytes per document (default %(default)s)")
    g.add_argument("--max-query-bytes", type=count(minimum=1), default=DEFAULT_MAX_QUERY_BYTES,
                   help="UTF-8 bytes of the query (default %(default)s)")
    g.add_argument("--max-body-bytes", type=count(minimum=1), default=None,
                   help="bytes of a request body, refused as soon as it is passed, chunked or not (default: the "
                        f"documents at their caps with JSON escaping, at most {MAX_BODY_BYTES / 1e6:g} MB)")
    g.add_argument("--max-active", type=count(minimum=1), default=DEFAULT_MAX_ACTIVE,
                   help="requests reranked at once, the others queue (default %(default)s)")
    g.add_argument("--max-queue", type=count(minimum=0), default=DEFAULT_MAX_QUEUE,
                   help="requests waiting for a slot; one more gets 429 with Retry-After (default %(default)s)")
    g.add_argument("--auth-key", action="append", metavar="KEY",
                   help="an API key the rerank routes accept as 'Authorization: Bearer KEY' (repeatable; also "
                        f"${AUTH_KEYS_ENV}, comma-separated); without any, no key is asked; a blank one, or "
                        f"${AUTH_KEYS_ENV} set but blank, is an error; a key given here shows to every local user "
                        f"in ps, as --api-key's would: prefer ${AUTH_KEYS_ENV}")
    g.add_argument("--client-timeout", type=seconds(allow_none=False, positive=True), default=DEFAULT_CLIENT_TIMEOUT,
                   help="seconds a client may take to send a request's head, from connecting or from its previous "
                        "answer (else the connection is closed), then its whole body (else 408), and to read an "
                        "answer (else what is unsent is dropped and the connection reset); at most --max-active "
                        "plus --max-queue bodies are received at once (default %(default)s)")
    g.add_argument("--max-uploads-per-client", type=uploads_per_client,
                   default=DEFAULT_MAX_UPLOADS_PER_CLIENT,
                   help="request bodies received at once from one peer address, one more gets 429 with Retry-After, "
                        "so that one client's slow uploads cannot take every slot; behind a proxy every client has "
                        "its address (X-Forwarded-For is read only from $FORWARDED_ALLOW_IPS, by default loopback "
                        "addresses): raise it there; half = half of --max-active plus --max-queue, at "
                        f"least {MIN_UPLOADS_PER_CLIENT}; none = no cap per client (default %(default)s)")
    g.add_argument("--shutdown-timeout", type=seconds(allow_none=False), default=DEFAULT_SHUTDOWN_TIMEOUT,
                   help="seconds a graceful shutdown (Ctrl-C, SIGTERM) waits for the requests in flight: a request "
                        "not yet reranked whose time budget would end after that gets 503 with Retry-After at "
                        "once, those still running then get 503 and their connection is closed; keep it over "
                        "--time-budget and every request admitted is answered (default %(default)s)")
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True,
                   help="log a line per request (uvicorn's access log, INFO on stdout; the server's other lines, "
                        "its WARNINGs and errors, go to stderr); --no-access-log leaves it out, and the WARNINGs of "
                        "failed or degraded reranks and the server's errors stay (default: on)")
    j = p.add_argument_group("the judge's failures")
    j.add_argument("--cool-down", type=seconds(allow_none=False, positive=True), default=DEFAULT_COOL_DOWN,
                   help="seconds the judge's circuit breaker stays open before one probe call decides whether it "
                        "closes; longer when the judge asked so with Retry-After (default %(default)s)")
    # --judge-timeout / --judge-retries are add_comparator_args' (one definition); the service's defaults are shorter
    p.set_defaults(func=main, judge_timeout=DEFAULT_JUDGE_TIMEOUT, judge_retries=DEFAULT_JUDGE_RETRIES)


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration plus the package's logger (``activeprp``, WARNING and up: a failed or
    degraded rerank, scrubbed of secrets) on uvicorn's stderr handler: the library itself prints nothing. The
    access log stays on uvicorn's stdout handler, as under the ``uvicorn`` command (``--access-log``'s help and
    docs/serve.md say so)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["activeprp"] = {"handlers": ["default"], "level": "WARNING", "propagate": False}
    return config


STARTUP_FAILURE = 3
"""uvicorn's exit status when the app's start-up failed: ``uvicorn.config.STARTUP_FAILURE`` since uvicorn 0.50
(``uvicorn.main``'s before, the same 3); not imported, so that the serve extra's older uvicorn works. Before 0.50,
``Server.run`` returns there instead (``uvicorn.run`` exited 3), its ``started`` false."""

_LISTEN_HINTS = {
    errno.EADDRINUSE: "another process listens there: stop it, or pass another --port",
    errno.EACCES: "a port below 1024 needs privileges: pass another --port (e.g. 8080)",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address: pass one that does with --host "
                         "(127.0.0.1, or 0.0.0.0 for every interface)",
}


def listen_sockets(host: str, port: int) -> list[socket.socket]:
    """``protocol.bind_sockets(host, port)``, a failure told in one line.

    Raises:
        InputError: the host does not resolve, or the address cannot be bound (exit 2).
    """
    from .protocol import bind_sockets

    try:
        return bind_sockets(host, port)
    except OSError as err:
        raise cannot_listen(host, port, err) from None


def cannot_listen(host: str, port: int, err: OSError) -> InputError:
    """The one line (exit 2) telling why ``host``:``port`` cannot be bound or listened on (``err``), and what to
    do."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = (err.strerror or str(err)).lower()
    hint = (f"--host {host!r} must name this machine (an address of one of its interfaces, or a name that "
            "resolves to one)" if isinstance(err, socket.gaierror) else _LISTEN_HINTS.get(err.errno, ""))
    return InputError(f"cannot listen on {where}: {reason}{f': {hint}' if hint else ''}")


def check_multiproc_dir() -> None:
    """Refuses a ``$PROMETHEUS_MULTIPROC_DIR`` (or its old spelling) that is not a writable directory: in that mode
    prometheus-client writes every metric to a file there, and the app's first metric raised a traceback.

    Raises:
        InputError: the variable is set to no writable directory (exit 2).
    """
    name = next((n for n in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir") if n in os.environ), None)
    if name is None:
        return
    path = os.environ[name]
    if not (os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)):
        raise InputError(f"${name} is {path!r}, not a writable directory: prometheus-client writes its metrics "
                         "there in that mode; activeprp serve does not need it (its /metrics serves the metrics of "
                         "its own process: run one process per port, docs/serve.md, \"Several replicas\"), so "
                         "unset it")


def main(args: argparse.Namespace) -> int:
    """Handler of ``activeprp serve``: binds its address, builds the comparator and serves until interrupted
    (Ctrl-C / SIGTERM), finishing the requests in flight (at most ``--shutdown-timeout`` seconds), then closes the
    comparator; exit status 0 after either signal, 1 when the app's start-up failed (a bug: uvicorn logged it).

    Raises:
        InputError: the serve extra is missing, ``$PROMETHEUS_MULTIPROC_DIR`` is no writable directory
            (``check_multiproc_dir``), the address cannot be bound (checked before the judge is built:
            a model may take minutes to load; the port is reserved meanwhile, ``protocol.bind_sockets``) or
            listened on once it is (another server took a port that could not be reserved), or the comparator
            cannot be built (exit 2).
    """
    try:
        import uvicorn

        from activeprp_cli.rerank_run import sigterm_exits

        from .app import create_app as create
        from .protocol import DrainingServer, head_timeout_protocol, listen
    except ImportError as err:
        raise InputError(f"{EXTRA_HINT} ({err})") from None
    keys = auth_keys(args)
    check_multiproc_dir()
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(sock) for sock in listen_sockets(args.host, args.port)]
        if not keys and not loopback(args.host):
            print(f"warning: serving on {args.host} without an API key: anyone who can reach it spends the judge's "
                  f"budget; set --auth-key or ${AUTH_KEYS_ENV}", file=sys.stderr)
        comparator = held.enter_context(make_comparator(args))
        try:
            app = create(comparator, settings_from_args(args, SERVE), max_active=args.max_active,
                         max_queue=args.max_queue, max_documents=args.max_documents,
                         max_document_bytes=args.max_document_bytes, max_query_bytes=args.max_query_bytes,
                         max_body_bytes=args.max_body_bytes, auth_keys=keys, cool_down=args.cool_down,
                         secrets=[args.api_key, os.environ.get("OPENAI_API_KEY"),
                                  *url_credentials(args.base_url).secrets], client_timeout=args.client_timeout,
                         max_uploads_per_client=args.max_uploads_per_client)
        except (TypeError, ValueError) as err:
            raise InputError(str(err)) from None
        config = uvicorn.Config(app, host=args.host, port=args.port, timeout_graceful_shutdown=args.shutdown_timeout,
                                log_level="info", access_log=args.access_log, log_config=log_config(),
                                http=head_timeout_protocol(args.client_timeout))
        for sock in sockets:
            try:
                listen(sock, config.backlog)
            except OSError as err:  # another server took a port bind_sockets could not reserve
                raise cannot_listen(args.host, sock.getsockname()[1], err) from None
        # uvicorn re-raises the signal that stopped it once its graceful shutdown is done, to the handler it found
        # at its start: Ctrl-C's KeyboardInterrupt; SIGTERM's default handler would end the process there (-15)
        server = DrainingServer(config, app.state.service)
        try:
            with sigterm_exits(0), contextlib.suppress(KeyboardInterrupt):
                server.run(sockets=sockets)
        except SystemExit as stop:
            if stop.code not in (0, STARTUP_FAILURE):  # 0: SIGTERM's
                raise
        if not server.started:  # the app's start-up failed (uvicorn logged why)
            return fail("the server did not start: its application start-up failed (the log above says why)", 1)
    return 0
