"""activeprp serve's graceful shutdown: requests that the shutdown would cut are refused at once with a JSON 503, a
request uvicorn cancels at --shutdown-timeout gets a JSON 503 counted as such, the others are answered."""

import asyncio
import json
import logging
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
import httpx  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from activeprp_integrations.serve import create_app  # noqa: E402
from tests._serve_helpers import WordJudge, make_request, metric, serve_command, serving  # noqa: E402
from tests.test_integrations_serve import SERVER, GatedJudge  # noqa: E402


class RecordingGatedJudge(GatedJudge):
    """A ``GatedJudge`` that records the queries it was asked about."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.queries: set[str] = set()

    async def acompare(self, query, pairs):
        self.queries.add(query)
        return await super().acompare(query, pairs)


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def _post_in_thread(url, i, answers):
    query, docs = make_request(i, n_docs=6)
    thread = threading.Thread(target=lambda: answers.__setitem__(i, httpx.post(
        f"{url}/v2/rerank", json={"query": query, "documents": docs}, timeout=60)))
    thread.start()
    return thread


def _until(condition, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition was not met in time")
        time.sleep(0.005)


def _statuses(app):
    text = generate_latest(app.state.metrics.registry).decode()
    return {s: metric(text, "activeprp_requests_total", route="/v2/rerank", status=s) for s in ("200", "499", "503")}


def _refused_for_the_shutdown(response):
    return response.status_code == 503 and response.headers["content-type"] == "application/json" and \
        response.json()["type"] == "unavailable" and response.headers["retry-after"] == "1" and \
        "shutdown" in response.json()["message"] and _has_its_request_id(response)


def _has_its_request_id(response):
    """Every rerank answer carries a request id (docs/serve.md); the shutdown's 503s had none."""
    rid = response.json().get("request_id")
    return rid is not None and len(rid) == 36 and response.headers.get("x-request-id") == rid


def test_a_request_uvicorn_cancels_at_the_shutdown_timeout_gets_a_json_503_counted_as_503_without_a_traceback():
    """uvicorn cancels the requests still running when its graceful shutdown passes ``timeout_graceful_shutdown``;
    they got uvicorn's plain-text 500, an "Exception in ASGI application" traceback each, and were counted as 499
    (the client went away). Here under plain ``uvicorn.Server`` (an app of ``create_app`` in one's own server):
    the one being reranked and the one waiting in the queue."""
    judge = GatedJudge()  # never answers while the server runs
    app = create_app(judge, **SERVER, max_active=1, max_queue=1)
    answers, log = {}, Records()
    with serving(app, graceful=0.3) as (url, server):
        logging.getLogger("uvicorn.error").addHandler(log)  # after uvicorn configured its logging
        threads = [_post_in_thread(url, i, answers) for i in range(2)]
        _until(lambda: judge.asked and app.state.service.admission.queued == 1)
    for thread in threads:
        thread.join(30)
    judge.release.set()
    logging.getLogger("uvicorn.error").removeHandler(log)
    assert all(_refused_for_the_shutdown(answers[i]) for i in range(2)), [answers[i].text for i in answers]
    assert "--shutdown-timeout" in answers[0].json()["message"]
    assert _statuses(app) == {"200": 0, "499": 0, "503": 2}
    assert any("Cancel 2 running task(s)" in r.getMessage() for r in log.records)  # the cancel did happen
    assert not [r.getMessage() for r in log.records if r.exc_info or "Exception in ASGI" in r.getMessage()]


def test_the_draining_server_s_shutdown_returns_once_the_cancelled_requests_have_sent_their_503(monkeypatch):
    """uvicorn re-raises the signal once its shutdown returns, and SIGTERM's default action ends the process at
    once: a request it had cancelled at --shutdown-timeout, its 503 not yet sent, got no answer at all under
    SIGTERM (under SIGINT the loop ran on and sent it). The shutdown now returns once those answers are out."""
    from activeprp_integrations.serve import protocol

    pending, original = [], protocol.DrainingServer.shutdown

    async def shutdown(self, sockets=None):
        await original(self, sockets)
        pending.append(sum(not task.done() for task in self.server_state.tasks))

    monkeypatch.setattr(protocol.DrainingServer, "shutdown", shutdown)
    judge, answers = GatedJudge(), {}
    app = create_app(judge, **SERVER, max_active=1, max_queue=1)
    with serving(app, graceful=0.3, drain=True) as (url, server):
        thread = _post_in_thread(url, 0, answers)
        _until(lambda: judge.asked)
    thread.join(30)
    judge.release.set()
    assert pending == [0] and _refused_for_the_shutdown(answers[0]), (pending, answers[0].text)


def test_a_shutdown_refuses_at_once_the_requests_it_would_cut_and_answers_those_being_reranked():
    """With --shutdown-timeout under the requests' time budget, the requests waiting in the queue when the shutdown
    begins would wait for the one being reranked and be cancelled at the deadline: they get 503 at once, with no
    judge call, while the one being reranked runs on and is answered."""
    judge = RecordingGatedJudge()
    app = create_app(judge, **SERVER, max_active=1, max_queue=2, time_budget=60)
    answers = {}
    with serving(app, graceful=30, drain=True) as (url, server):
        first = _post_in_thread(url, 0, answers)
        _until(lambda: judge.asked)
        queued = [_post_in_thread(url, i, answers) for i in (1, 2)]
        _until(lambda: app.state.service.admission.queued == 2)
        server.should_exit = True  # the shutdown begins; its deadline is 30 s away, the queued requests' 60 s
        for thread in queued:
            thread.join(10)
        running = first.is_alive()  # its judge has not answered yet
        judge.release.set()
        first.join(30)
    assert running
    assert all(_refused_for_the_shutdown(answers[i]) for i in (1, 2)), [answers[i].text for i in (1, 2)]
    assert judge.queries == {make_request(0)[0]}  # no judge call for the refused requests
    assert answers[0].status_code == 200 and len(answers[0].json()["results"]) == 6
    assert _statuses(app) == {"200": 1, "499": 0, "503": 2}


def test_a_shutdown_answers_the_queued_requests_whose_time_budget_ends_before_its_deadline():
    """With --shutdown-timeout over the time budget (the documented advice), the graceful shutdown answers every
    request admitted, those waiting in the queue included."""
    judge = GatedJudge()
    app = create_app(judge, **SERVER, max_active=1, max_queue=2, time_budget=20)
    service, drained, answers = app.state.service, threading.Event(), {}
    drain = service.drain
    service.drain = lambda deadline: (drain(deadline), drained.set())
    with serving(app, graceful=30, drain=True) as (url, server):
        threads = [_post_in_thread(url, 0, answers)]
        _until(lambda: judge.asked)
        threads += [_post_in_thread(url, i, answers) for i in (1, 2)]
        _until(lambda: service.admission.queued == 2)
        server.should_exit = True
        assert drained.wait(20)
        judge.release.set()
        for thread in threads:
            thread.join(30)
    assert [answers[i].status_code for i in range(3)] == [200, 200, 200]
    assert _statuses(app) == {"200": 3, "499": 0, "503": 0}


@pytest.mark.parametrize(("time_budget", "graceful", "own_budget", "refused"),
                         [(20.0, 1.0, None, True), (5.0, 30.0, None, False), (30.0, 3.0, 1.0, False),
                          (None, 3.0, 1.0, False)])
def test_a_body_still_arriving_when_the_shutdown_begins_is_read_on_and_refused_only_at_the_deadline(
        time_budget, graceful, own_budget, refused):
    """A client that sent a head and part of a body, then stalled: on SIGTERM its read went on until uvicorn
    cancelled it at --shutdown-timeout (503 10.17 s after SIGTERM, an ERROR "Cancel 1 running task(s)" in the log).
    The fix for that cut the read at once when the server's time budget would end past the deadline (or there was
    none), so an upload whose own budget fitted got 503 too (review s67i: --shutdown-timeout 10 or 25, or
    --time-budget none, with a body's "time_budget": 5). Now a body still arriving is read on and judged by its own
    budget; one still arriving just before the deadline is cut there, answered 503, with no ERROR."""
    from tests.test_integrations_serve import HEAD, _connect, _raw_answer, _until_closed

    request = {"query": "alpha", "documents": ["alpha a", "beta b", "alpha c"]}
    if own_budget is not None:
        request["time_budget"] = own_budget
    body = json.dumps(request).encode()
    app = create_app(GatedJudge(), **SERVER, time_budget=time_budget, client_timeout=60)
    app.state.service.pool.judge.release.set()  # it answers at once
    log = Records()
    with serving(app, graceful=graceful, drain=True) as (url, server):
        logging.getLogger("uvicorn.error").addHandler(log)
        sock = _connect(url, HEAD % len(body) + body[:15])
        _until(lambda: metric(generate_latest(app.state.metrics.registry).decode(),
                              "activeprp_requests_in_progress") == 1)
        server.should_exit = True
        _until(lambda: app.state.service.draining)
        if not refused:
            sock.sendall(body[15:])
        answer = _until_closed(sock)  # the shutdown closes the connection once it is answered
    logging.getLogger("uvicorn.error").removeHandler(log)
    status, headers, said = _raw_answer(answer)
    assert not [r.getMessage() for r in log.records if "Cancel" in r.getMessage()]  # not cut at the deadline
    if refused:
        assert status == 503 and said["type"] == "unavailable" and headers["retry-after"] == "1", answer
        assert headers["connection"] == "close" and "shutdown" in said["message"]
        assert _statuses(app) == {"200": 0, "499": 0, "503": 1}
    else:
        assert status == 200 and len(said["results"]) == 3, answer


@pytest.mark.parametrize("shutdown_timeout", [30.0, None])
def test_ready_is_a_json_503_as_soon_as_the_shutdown_begins_and_health_stays_200(shutdown_timeout):
    """A readiness probe must fail once the service drains, so that a load balancer stops sending it requests (each
    would get 503 ``unavailable``): /ready answered 200 ``ready`` while new requests were refused. /health (liveness)
    stays 200 until the process ends. Over the app itself: uvicorn's shutdown also closes its listening socket, but
    not every server that runs the app does, nor a mounted app's parent."""
    app = create_app(GatedJudge(), **SERVER)

    async def probe():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            before = await client.get("/ready")
            loop = asyncio.get_running_loop()
            app.state.service.drain(None if shutdown_timeout is None else loop.time() + shutdown_timeout)
            return before, await client.get("/ready"), await client.head("/ready"), await client.get("/health")

    before, ready, head, health = asyncio.run(probe())
    assert before.status_code == 200 and before.json() == {"status": "ready"}
    assert ready.status_code == 503 and ready.headers["content-type"] == "application/json", ready.text
    assert ready.json()["status"] == "draining" and "shutting down" in ready.json()["message"]
    assert head.status_code == 503 and not head.content
    assert health.status_code == 200 and health.json() == {"status": "ok"}


@pytest.mark.parametrize("time_budget, refused", [(5.0, False), (20.0, True), (None, True)])
def test_the_admission_cut_refuses_who_would_end_past_it_waiting_or_arriving_and_leaks_no_slot(time_budget, refused):
    from activeprp_integrations.serve.service import Admission, ShuttingDown

    async def scenario():
        admission = Admission(max_active=1, max_queue=4)
        assert await admission.enter(None, lambda: 1)  # holds the slot
        waiting = asyncio.ensure_future(admission.enter(time_budget, lambda: 1))
        await asyncio.sleep(0)  # in the queue
        admission.cut(asyncio.get_running_loop().time() + 10)
        arriving = asyncio.ensure_future(admission.enter(time_budget, lambda: 1))
        await asyncio.sleep(0)
        queued = admission.queued
        if refused:
            outcomes = await asyncio.gather(waiting, arriving, return_exceptions=True)
        else:
            outcomes = []
            for request in (waiting, arriving):
                admission.leave()  # the slot goes to the next one waiting
                outcomes.append(await request)
        admission.leave()
        return queued, [type(o).__name__ if isinstance(o, BaseException) else o for o in outcomes], \
            admission.active, admission.queued

    queued, outcomes, active, left = asyncio.run(scenario())
    assert (queued, outcomes) == ((0, ["ShuttingDown"] * 2) if refused else (2, [True, True]))
    assert (active, left) == (0, 0)
    assert issubclass(ShuttingDown, RuntimeError)


def test_the_command_runs_the_draining_server_with_its_service_and_shutdown_timeout(monkeypatch):
    from activeprp_integrations.serve.protocol import DrainingServer

    servers: list = []
    apps = serve_command(monkeypatch, ["--comparator", "simulated", "--shutdown-timeout", "7"], servers)
    assert isinstance(servers[0], DrainingServer) and servers[0].service is apps[0].state.service
    assert servers[0].config.timeout_graceful_shutdown == 7 and servers[0].config.access_log


def test_the_command_leaves_the_access_log_out_with_no_access_log(monkeypatch):
    """uvicorn's access log was always on (a line per request), with no flag to turn it off."""
    servers: list = []
    serve_command(monkeypatch, ["--comparator", "simulated", "--no-access-log"], servers)
    assert servers[0].config.access_log is False


def test_a_shutdown_timeout_of_0_logs_no_error_when_nothing_was_running():
    """uvicorn logged "ERROR: Cancel 0 running task(s), timeout graceful shutdown exceeded" at every stop with
    ``--shutdown-timeout 0``, nothing running (review s68d)."""
    app, log, uvicorn_log = create_app(WordJudge(), **SERVER), Records(), logging.getLogger("uvicorn.error")
    with serving(app, graceful=0, drain=True) as (url, server):
        uvicorn_log.addHandler(log)  # after uvicorn configured its logging
        assert httpx.get(f"{url}/health").status_code == 200
    uvicorn_log.removeHandler(log)
    assert server.started
    assert not [r.getMessage() for r in log.records if r.levelno >= logging.ERROR]
    assert not uvicorn_log.filters
