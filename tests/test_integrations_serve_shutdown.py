"""activeprp serve's graceful shutdown: requests that the shutdown would cut are refused at once with a JSON 503, a
request uvicorn cancels at --shutdown-timeout gets a JSON 503 counted as such, the others are answered."""

import logging
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
import httpx  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from activeprp_integrations.serve import create_app  # noqa: E402
from tests._serve_helpers import make_request, metric, serving  # noqa: E402
from tests.test_integrations_serve import SERVER, GatedJudge  # noqa: E402


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
        "shutdown" in response.json()["message"]


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
