"""What the serve tests and benchmarks/serve_throughput.py share: a text judge and a uvicorn server in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from activeprp_core import Candidate, Comparator


def overlap(query: str, text: str) -> int:
    """How many of the query's distinct words the text holds."""
    return len(set(query.lower().split()) & set(text.lower().split()))


class WordJudge(Comparator):
    """A deterministic judge: P(first preferred) = 1 when the first text holds more of the query's words, 0 when
    fewer, 0.5 on a tie. ``acompare`` waits ``delay`` seconds per call (the calls of a chunk at once, like an endpoint
    with no cap on calls in flight); ``steps`` records the (query count, prompt count) of each ``ajudge_batch`` step.
    With ``max_batch_size`` it stands for a local model that batches across queries (the service merges calls)."""

    def __init__(self, delay: float = 0.0, max_batch_size: int | None = None) -> None:
        self.delay, self.calls, self.steps, self.max_batch_size = delay, 0, [], max_batch_size
        self.asked = 0  # calls started (``calls``: answered)

    def compare(self, query, pairs):
        self.calls += len(pairs)
        return [0.5 + 0.5 * ((overlap(query, a.text) > overlap(query, b.text)) -
                             (overlap(query, a.text) < overlap(query, b.text))) for a, b in pairs]

    async def acompare(self, query, pairs):
        self.asked += len(pairs)
        await asyncio.sleep(self.delay)  # the chunk's calls wait together
        return self.compare(query, pairs)

    async def ajudge_batch(self, items, *, guard=None):
        self.steps.append((len({q for q, _, _ in items}), len(items)))
        return await super().ajudge_batch(items, guard=guard)


def metric(text: str, name: str, **labels: str) -> float:
    """The value of sample ``name`` with ``labels`` in Prometheus text ``text`` (0.0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


_GREEK = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon"
WORDS = _GREEK.split()


def make_request(i: int, n_docs: int = 20) -> tuple[str, list[str]]:
    """Request ``i``: a 3-word query and ``n_docs`` documents of 6 words each (deterministic in ``i``)."""
    query = " ".join(WORDS[(i + k * 5) % len(WORDS)] for k in range(3))
    docs = [" ".join(WORDS[(i * 7 + d * 3 + k * k) % len(WORDS)] for k in range(6)) + f" doc{d}"
            for d in range(n_docs)]
    return query, docs


def candidates(docs: list[str]) -> list[Candidate]:
    """The candidates the server builds from a request's documents (ids = positions)."""
    return [Candidate(str(i), d) for i, d in enumerate(docs)]


@contextlib.contextmanager
def serving(app, timeout: float = 30.0, graceful: float = 10.0, drain: bool = False, **options):
    """Run ``app`` under uvicorn on 127.0.0.1 (a free port) in a daemon thread, with ``options`` for
    ``uvicorn.Config``; yields its base URL and the ``uvicorn.Server``; stops it (graceful shutdown) on exit.
    ``drain``: the server ``activeprp serve`` runs (``protocol.DrainingServer``), for an app of ``create_app``."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=graceful, **options)
    if drain:
        from activeprp_integrations.serve.protocol import DrainingServer

        server = DrainingServer(config, app.state.service)
    else:
        server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout)


def serve_command(monkeypatch, argv: list[str], servers: list | None = None) -> list:
    """Run ``activeprp serve ARGV`` without binding a port (``--host 0.0.0.0`` included): the list of apps the
    command built (one per call); the servers it would have run are appended to ``servers``. uvicorn's logging
    set-up is skipped too: it binds the ``activeprp`` logger to the sys.stderr of the moment, a capture that pytest
    closes after the test, and later tests' warnings then hit a closed file."""
    import uvicorn

    from activeprp_cli import main
    from activeprp_integrations.serve import protocol

    apps: list = []
    servers = [] if servers is None else servers
    monkeypatch.setattr(protocol, "bind_sockets", lambda host, port: [])

    def run(server, sockets=None):  # as if it served until stopped
        apps.append(server.config.app)
        servers.append(server)
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    monkeypatch.setattr(uvicorn.Config, "configure_logging", lambda config: None)
    assert main(["serve", *argv]) == 0
    return apps
