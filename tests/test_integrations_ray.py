"""activeprp_integrations.ray on a local Ray (``ray.init(num_cpus=2)``): the same orders as ``rerank`` of each row
in one process, failed rows, a dead endpoint, ``rerank-run --ray``; plus the import contract (no Ray needed).

The local Ray is started by the fixture below with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (set before Ray is
imported here; ``connect()`` also applies it to a Ray imported earlier): then its node address is 127.0.0.1 and every
server it starts (GCS, raylet, workers, the runtime-env agent) listens on loopback only, which
``test_ray_listens_on_loopback_only`` checks with ``ss -ltnp`` (without the variable, ray 2.60 binds them on all
interfaces even with ``_node_ip_address="127.0.0.1"``: docs/ray-notes.md).
Each pipeline runs under a time limit; the fixture stops Ray (about 1.5 s) whatever happens.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from activeprp_cli import main
from activeprp_cli.trecfiles import read_qrels
from activeprp_core import Candidate, ComparatorAuthError, SimulatedComparator, rerank
from tests.conftest import SHARED_DATA, needs_data

DL19 = SHARED_DATA / "trec-dl-2019"
KW = {"ranker": "mohajer", "oracle": "randomized", "budget": 40, "top_k": 5, "seed": 3}
LIMIT_S = 90
starts_ray = pytest.mark.slow  # the tests that start a local Ray (about 10 s to start and stop)


def test_every_test_of_the_module_s_local_ray_is_slow():
    """``-m "not slow"`` must leave out every test that starts Ray (a second module-level ``pytestmark`` once
    replaced the module's ``slow`` marker, so all of them ran there)."""
    uses = [f for name, f in globals().items()
            if name.startswith("test_") and "local_ray" in inspect.signature(f).parameters]
    assert len(uses) >= 10 and all(any(m.name == "slow" for m in getattr(f, "pytestmark", [])) for f in uses)


def test_a_missing_ray_names_the_extra(monkeypatch):
    from activeprp_integrations import ray as adapter

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r'pip install "activeprp\[ray\]"'):
        adapter.rerank_dataset(None, dict, budget=1)
    with pytest.raises(ImportError, match=r"activeprp\[ray\]"):
        adapter.connect()


class FakeRay:
    """What ``_start_local`` calls of Ray: ``init`` notes the private constant it ran under; the node address is
    ``node``."""

    def __init__(self, constants, node: str) -> None:
        self.constants, self.seen, self.shut = constants, [], False
        self.util = type("util", (), {"get_node_ip_address": staticmethod(lambda: node)})

    def init(self, **kw) -> None:
        self.seen.append((kw["address"], self.constants.ENABLE_RAY_CLUSTER))

    def shutdown(self) -> None:
        self.shut = True

    def is_initialized(self) -> bool:
        return False


@pytest.mark.parametrize("variable, during_init", [("0", False), (None, False), ("1", True), ("true", True)])
def test_a_local_ray_follows_the_loopback_variable_though_ray_was_imported_first(monkeypatch, variable, during_init):
    """Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER into ray_constants.ENABLE_RAY_CLUSTER when it is imported: after
    an ``import ray`` before ``connect()`` (docs/many-queries.md's snippet), the local Ray took the machine's address
    and listened on every interface (review s66b, finding 2). The constant follows the variable during ``ray.init``
    and is put back after it; no Ray runs here."""
    from types import SimpleNamespace

    from activeprp_integrations import ray as adapter

    constants = SimpleNamespace(ENABLE_RAY_CLUSTER=True)  # as Ray imported without the variable on Linux has it
    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", constants)
    if variable is None:
        monkeypatch.delenv(adapter.LOOPBACK_ENV, raising=False)
    else:
        monkeypatch.setenv(adapter.LOOPBACK_ENV, variable)
    fake = FakeRay(constants, "127.0.0.1")
    adapter._start_local(fake, 1)
    assert fake.seen == [("local", during_init)] and constants.ENABLE_RAY_CLUSTER is True and not fake.shut


def test_a_local_ray_on_a_public_address_is_shut_down_and_refused(monkeypatch):
    """Where the constant no longer decides (a later Ray), a local Ray that took a public address is refused."""
    from types import SimpleNamespace

    from activeprp_integrations import ray as adapter

    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", SimpleNamespace())
    monkeypatch.setenv(adapter.LOOPBACK_ENV, "0")
    fake = FakeRay(SimpleNamespace(ENABLE_RAY_CLUSTER=None), "192.0.2.2")
    with pytest.raises(RuntimeError, match=r"node address 192\.0\.2\.2, not 127\.0\.0\.1.*before importing ray"):
        adapter._start_local(fake, 1)
    assert fake.shut
    monkeypatch.setenv(adapter.LOOPBACK_ENV, "1")  # asked for: left as it is
    fake = FakeRay(SimpleNamespace(ENABLE_RAY_CLUSTER=None), "192.0.2.2")
    adapter._start_local(fake, 1)
    assert not fake.shut


@pytest.mark.parametrize("host, via_env", [("127.0.0.1", False), ("localhost", False), ("127.0.0.1", True)])
def test_joining_a_loopback_address_keeps_ray_on_loopback(monkeypatch, host, via_env):
    """``connect("127.0.0.1:PORT")`` probed that address, then ``ray.init`` replaced the loopback host with the
    machine's IP (Ray's cluster mode), where a loopback-only Ray (``connect()``'s own) does not listen, and retried
    it for minutes (review s67a, finding 1). The constant is off during that ``ray.init``, as for a local Ray, and
    put back after it; no Ray runs here (a listening socket answers the probe)."""
    import socket
    from types import SimpleNamespace

    from activeprp_integrations import ray as adapter

    constants = SimpleNamespace(ENABLE_RAY_CLUSTER=True)
    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", constants)
    fake = FakeRay(constants, "127.0.0.1")
    monkeypatch.setattr(adapter, "_ray", lambda: fake)
    with socket.create_server(("127.0.0.1", 0)) as head:
        address = f"{host}:{head.getsockname()[1]}"
        if via_env:
            monkeypatch.setenv(adapter.RAY_ADDRESS_ENV, address)
        assert adapter.connect("auto" if via_env else address)
    assert fake.seen == [("auto" if via_env else address, False)] and constants.ENABLE_RAY_CLUSTER is True


def test_joining_another_address_leaves_ray_as_it_is(monkeypatch):
    from types import SimpleNamespace

    from activeprp_integrations import ray as adapter

    constants = SimpleNamespace(ENABLE_RAY_CLUSTER=True)
    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", constants)
    fake = FakeRay(constants, "192.0.2.2")
    monkeypatch.setattr(adapter, "_ray", lambda: fake)
    monkeypatch.setattr(adapter, "_probe", lambda address, source="": None)
    assert adapter.connect("192.0.2.7:6379")
    assert fake.seen == [("192.0.2.7:6379", True)]


RAY_TOKEN_REFUSED = (  # ray 2.60's ConnectionError's cause when a token cluster is joined without RAY_AUTH_MODE=token
    "Failed to connect to GCS. Last connection error: Traceback (most recent call last):\n  File \"python/ray/"
    "includes/common.pxi\", line 119, in ray._raylet.check_status\nray.exceptions.AuthenticationError: RPC error: "
    "InvalidAuthToken: Authentication token is missing or incorrect. Note: RAY_AUTH_MODE is currently 'disabled' "
    "(not 'token'). Ensure that the token for the cluster is available in a local file ...\n")


class RefusingRay(FakeRay):
    """A Ray whose ``init`` fails as ray 2.60's does at ``address``: ``ConnectionError`` from ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(None, "127.0.0.1")
        self.cause = cause

    def init(self, **kw) -> None:
        raise ConnectionError(f"Failed to connect to Ray cluster at {kw['address']}") from self.cause


@pytest.mark.parametrize("mode, hint", [
    (None, "the cluster asks for Ray's auth token, which Ray sends to a HOST:PORT only with RAY_AUTH_MODE=token: set "
           "RAY_AUTH_MODE=token here, with the cluster's token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
           "~/.ray/auth_token"),
    ("token", "the cluster refused this client's Ray auth token (RAY_AUTH_MODE=token is set): put the cluster's "
              "token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token")])
def test_a_refused_ray_token_says_what_to_set(monkeypatch, mode, hint):
    """Joining a token cluster by HOST:PORT without ``RAY_AUTH_MODE=token`` (ray 2.60 then sends no token) ended in
    Ray's bare "Failed to connect to Ray cluster at ..." (review s67a): Ray's note on it is inside its cause's
    text, which no one sees. Its message is now followed by what to set; another failure's is left as it is."""
    from activeprp_integrations import ray as adapter

    monkeypatch.setattr(adapter, "_probe", lambda address, source="": None)
    if mode is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", mode)
    monkeypatch.setattr(adapter, "_ray", lambda: RefusingRay(RuntimeError(RAY_TOKEN_REFUSED)))
    with pytest.raises(ConnectionError) as info:
        adapter.connect("192.0.2.7:6379")
    assert str(info.value) == f"Failed to connect to Ray cluster at 192.0.2.7:6379: {hint}"
    other = RuntimeError("Failed to connect to GCS. Last connection error: ... RpcError: Timed out")
    monkeypatch.setattr(adapter, "_ray", lambda: RefusingRay(other))
    with pytest.raises(ConnectionError, match=r"^Failed to connect to Ray cluster at 192\.0\.2\.7:6379$"):
        adapter.connect("192.0.2.7:6379")


def test_rerank_records_tells_the_refused_local_ray_in_one_line(monkeypatch, capsys):
    """``rerank-run --ray``'s runner let that RuntimeError through (it caught only ConnectionError and ValueError
    from ``connect``): a traceback. It is now an ``InputError``: one line."""
    from types import SimpleNamespace

    from activeprp_cli import InputError
    from activeprp_integrations import ray as adapter

    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", SimpleNamespace())
    monkeypatch.setenv(adapter.LOOPBACK_ENV, "0")
    fake = FakeRay(SimpleNamespace(ENABLE_RAY_CLUSTER=None), "192.0.2.2")
    monkeypatch.setattr(adapter, "_ray", lambda: fake)
    with pytest.raises(InputError, match=r"^the local Ray took the node address 192\.0\.2\.2, not 127\.0\.0\.1"):
        adapter.rerank_records([{"qid": "q", "query": "q", "docid": "d", "text": "t"}], lambda: None)
    assert fake.shut


@pytest.mark.parametrize("cpus, actors, want", [(2, 2, 0.5), (2, 3, 0.3333), (2, 4, 0.25), (8, 4, 0.5), (1, 2, 0.0),
                                                 (0, 1, 0.5)])
def test_the_default_cpus_per_actor_leave_one_cpu_for_read_tasks(cpus, actors, want):
    """A pool that held the last CPU starved the dataset's read tasks: ``read_json`` + 3 or 4 actors at the default
    0.5 on a 2-CPU Ray waited forever (review s67a, finding 2). Unset, ``num_cpus`` is sized to fit (no Ray here)."""
    from types import SimpleNamespace

    from activeprp_integrations.ray import _cpus_per_actor

    fake = SimpleNamespace(is_initialized=lambda: True, cluster_resources=lambda: {"CPU": float(cpus)})
    got = _cpus_per_actor(fake, actors, None)
    assert got == want and (actors * got <= cpus - 1 or not cpus)  # no CPU: a cluster yet to scale up, not sized
    assert _cpus_per_actor(SimpleNamespace(is_initialized=lambda: False), actors, None) == 0.5  # nothing to count


@pytest.mark.parametrize("cpus, actors, num_cpus, message", [
    (2, 3, 0.5, r"num_actors=3 x num_cpus=0\.5 leaves under 1 of the Ray cluster's 2 CPUs free for the dataset's "
                r"own tasks \(reads, maps\), so it would wait forever: use num_actors <= 2 at num_cpus=0\.5, or "
                r"num_cpus <= 0\.3333 for 3 actors, or leave num_cpus unset"),
    (2, 2, 1, r"num_actors=2 x num_cpus=1 .*: use num_actors <= 1 at num_cpus=1, or num_cpus <= 0\.5 for 2 actors"),
    (1, 1, 0.5, r"cluster's 1 CPUs free .*: use num_cpus <= 0 for 1 actors")])
def test_cpus_per_actor_given_that_leave_no_cpu_for_read_tasks_are_refused(cpus, actors, num_cpus, message):
    from types import SimpleNamespace

    from activeprp_integrations.ray import _cpus_per_actor

    fake = SimpleNamespace(is_initialized=lambda: True, cluster_resources=lambda: {"CPU": float(cpus)})
    with pytest.raises(ValueError, match=message):
        _cpus_per_actor(fake, actors, num_cpus)
    assert _cpus_per_actor(fake, 1, 0) == 0 and _cpus_per_actor(SimpleNamespace(is_initialized=lambda: False),
                                                                  actors, num_cpus) == num_cpus
    scaling = SimpleNamespace(is_initialized=lambda: True, cluster_resources=lambda: {"GPU": 1.0})  # no CPU yet
    assert _cpus_per_actor(scaling, actors, num_cpus) == num_cpus
    assert _cpus_per_actor(fake, actors, num_cpus, tasks=False) == num_cpus  # no task of its own to starve
    assert _cpus_per_actor(fake, actors, None, tasks=False) == 0.5


def test_candidate_records_keep_extra_keys_as_metadata():
    from activeprp_integrations.ray import _candidate

    assert _candidate({"id": "d1", "text": "t", "rank": 3}) == Candidate("d1", "t", {"rank": 3})
    # Arrow's merged struct gives a record the keys of the others, null: left out, as the row had no such key
    assert _candidate({"id": "d1", "text": "t", "src": None, "rank": 0}) == Candidate("d1", "t", {"rank": 0})
    with pytest.raises(ValueError, match="'id' and 'text', got \\['id'\\]"):
        _candidate({"id": "d1"})


def test_an_input_column_named_like_an_output_column_is_refused_not_overwritten():
    pa = pytest.importorskip("pyarrow")
    from activeprp_core import RerankSettings
    from activeprp_integrations.ray import _Reranker

    asked = []

    class Judge:
        def compare(self, query, pairs):
            asked.append(query)
            return [1.0] * len(pairs)

    rows = [{"query": "q", "candidates": [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}], "order": "po-17",
             "error": "upstream note"}]
    reranker = _Reranker(Judge, RerankSettings(budget=4), 4, False)
    with pytest.raises(ValueError, match=r"already has: \['order', 'error'\]|\['order', 'error'\], which"):
        reranker(pa.Table.from_pylist(rows))
    assert not asked
    out = reranker(pa.Table.from_pylist([{k: v for k, v in rows[0].items() if k in ("query", "candidates")}]))
    assert out.column_names[:3] == ["query", "candidates", "order"] and asked


@pytest.mark.parametrize("factory, error, message", [
    (functools.partial(open, "/no/such/model/dir"), FileNotFoundError, "No such file or directory"),
    (lambda: None, ValueError, "comparator_factory returned None instead of a comparator")])
def test_a_failing_comparator_factory_is_raised_by_the_first_batch_marked(factory, error, message):
    """Raised by the actor's constructor, it made Ray restart the actor again and again, and the driver got
    ``ActorDiedError`` (review s67a, finding 3). It is kept and raised by ``__call__``, marked so that ``unwrap``
    re-raises it as itself; the mark (the original ``args``) survives pickling, as Ray moves it (no Ray here)."""
    import pickle

    pa = pytest.importorskip("pyarrow")
    from activeprp_core import RerankSettings
    from activeprp_integrations.ray import STOPS_DATASET, _Reranker, _stopped_by

    reranker = _Reranker(factory, RerankSettings(budget=4), 4, False)  # does not raise
    with pytest.raises(error, match=message) as info:
        reranker(pa.Table.from_pylist([{"query": "q", "candidates": [{"id": "a", "text": "x"}]}]))
    moved = pickle.loads(pickle.dumps(info.value))
    assert type(moved) is error and getattr(moved, STOPS_DATASET) == info.value.args and _stopped_by(moved) is moved


def test_a_row_with_null_candidates_or_query_is_a_row_error_not_an_empty_ranking():
    """A null ``candidates`` cell (a bad join, say) is that row's error, as a null query is; the other rows are
    reranked (no Ray needed: the actor's batch function alone)."""
    pa = pytest.importorskip("pyarrow")
    from activeprp_core import RerankSettings
    from activeprp_integrations.ray import _Reranker

    good = [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}]
    rows = [{"query": "q", "candidates": None}, {"query": None, "candidates": good}, {"query": "q", "candidates": good}]
    judge = functools.partial(SimulatedComparator, {"a": 1.0, "b": 0.0})
    out = _Reranker(judge, RerankSettings(budget=4), 4, False)(pa.Table.from_pylist(rows)).to_pylist()
    assert out[0]["order"] is None and out[0]["calls"] is None
    assert out[0]["error"] == "TypeError: candidates must be a list of {'id', 'text'} records, got null"
    assert out[1]["order"] is None and out[1]["error"].startswith("TypeError: ")
    assert sorted(out[2]["order"]) == [0, 1] and out[2]["error"] is None


os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read when Ray is imported: loopback only (above)
ray = pytest.importorskip("ray", reason='Ray Data is not installed (pip install "activeprp[ray]")')


def bounded(fn, seconds: float = LIMIT_S):
    """``fn()`` in a thread, failing the test when it has not returned after ``seconds`` (a hung pipeline)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            box["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the Ray pipeline did not finish within {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture(scope="module")
def local_ray():
    from activeprp_integrations.ray import connect

    saved = os.environ.get("RAY_ENABLE_AUTO_CONNECT")
    os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"  # a pipeline cut off by shutdown must not start another Ray
    assert connect(num_cpus=2), "a Ray was already running in the test process"
    try:
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("RAY_ENABLE_AUTO_CONNECT", None)
        else:
            os.environ["RAY_ENABLE_AUTO_CONNECT"] = saved


@pytest.fixture(scope="module")
def dl19():
    """Rows of 4 DL19 queries x 20 BM25 candidates (with an extra candidate key), and their graded qrels."""
    rows = []
    for line in (DL19 / "bm25_dl19_top100.jsonl").read_text(encoding="utf-8").splitlines()[:4]:
        record = json.loads(line)
        hits = record["hits"][:20]
        rows.append({"qid": hits[0]["qid"], "query": record["query"],
                     "candidates": [{"id": h["docid"], "text": h["content"], "bm25": h["score"]} for h in hits]})
    return rows, read_qrels(DL19 / "qrels.dl19-passage.txt")


def judge_factory(rows, qrels, **knobs):
    return functools.partial(SimulatedComparator.from_qrels, qrels, {r["qid"]: r["query"] for r in rows}, doc_noise=1.0,
                             pair_noise=0.5, position_bias=0.3, **knobs)


@starts_ray
def test_ray_listens_on_loopback_only(local_ray):
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    if shutil.which("ss") is None:
        pytest.skip("no ss on this machine")
    listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    ours = [line for line in listening
            if any(name in line for name in ('"gcs_server"', '"raylet"', '"ray::', f"pid={os.getpid()},"))]
    assert len(ours) >= 3, listening  # gcs_server, raylet, this driver at least
    for line in ours:
        local = line.split()[3]
        assert local.rsplit(":", 1)[0] in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"), line


@starts_ray
@needs_data  # reads DL19 from ../shared/data
@pytest.mark.parametrize("oracle, hard", [("randomized", True), ("adaptive", False)])
def test_rerank_dataset_gives_the_orders_of_rerank(local_ray, dl19, oracle, hard):
    from activeprp_integrations.ray import rerank_dataset

    rows, qrels = dl19
    kw = {**KW, "oracle": oracle}  # soft answers' gate and adaptive read each row's own answers, whatever the batch
    bad = {"qid": "bad", "query": "x", "candidates": [{"id": 7, "text": "an int id", "bm25": 0.0}]}
    ds = rerank_dataset(ray.data.from_items([*rows, bad]), judge_factory(rows, qrels, hard=hard), num_actors=2,
                        batch_size=2, **kw)
    out = {r["qid"]: r for r in bounded(ds.take_all)}
    requests = [(r["query"], [Candidate(c["id"], c["text"], {"bm25": c["bm25"]}) for c in r["candidates"]])
                for r in rows]
    want = [rerank(query, cands, comparator=judge_factory(rows, qrels, hard=hard)(), **kw) for query, cands in requests]
    for row, result in zip(rows, want):
        got = out[row["qid"]]
        assert got["order"] == result.order and got["error"] is None
        assert {k: got[k] for k in result.stats() if k != "wall_time_s"} == {
            k: v for k, v in result.stats().items() if k != "wall_time_s"}
        assert got["candidates"] == row["candidates"]  # the input columns are kept
    assert 0 < max(r.calls for r in want) <= 40
    failed = out["bad"]
    assert failed["order"] is None and failed["error"] == "TypeError: Candidate.id must be str, got int"
    assert failed["calls"] is None and failed["ranker"] is None


@starts_ray
def test_a_read_json_dataset_with_more_actors_than_spare_cpus_finishes(local_ray, tmp_path):
    """docs/many-queries.md's snippet (``read_json``, several actors, ``num_cpus`` unset) on the 2-CPU Ray: 3 actors
    at 0.5 held 1.5 CPUs, the read task waited for a whole one forever (review s67a, finding 2); a ``num_cpus``
    given that leaves no CPU is refused before anything runs."""
    from activeprp_integrations.ray import rerank_dataset

    path = tmp_path / "queries.jsonl"
    path.write_text("".join(json.dumps({"qid": f"q{q}", "query": "alpha", "candidates": [
        {"id": f"d{i}", "text": f"t{i}"} for i in range(4)]}) + "\n" for q in range(3)))
    ds = ray.data.read_json(str(path))
    judge = functools.partial(SimulatedComparator, {"d0": 0.0, "d1": 3.0, "d2": 1.0, "d3": 2.0})
    with pytest.raises(ValueError, match=r"num_actors=3 x num_cpus=0\.5 leaves under 1 .* 2 CPUs"):
        rerank_dataset(ds, judge, num_actors=3, num_cpus=0.5, budget=10)
    out = bounded(rerank_dataset(ds, judge, num_actors=3, budget=10, seed=0).take_all)
    assert sorted(r["qid"] for r in out) == ["q0", "q1", "q2"]
    assert all(sorted(r["order"]) == [0, 1, 2, 3] and r["error"] is None for r in out)


@starts_ray
def test_a_materialized_dataset_may_give_the_actors_every_cpu(local_ray):
    """``from_items`` has no read task: 2 actors x 1 CPU on the 2-CPU Ray finish, as before the rule (review s67h,
    finding 1: it was refused, "would wait forever"); a task of its own (a ``map_batches``) brings the rule back."""
    from activeprp_integrations.ray import rerank_dataset

    rows = [{"qid": f"q{q}", "query": "alpha", "candidates": [{"id": f"d{i}", "text": f"t{i}"} for i in range(4)]}
            for q in range(3)]
    ds = ray.data.from_items(rows)
    judge = functools.partial(SimulatedComparator, {"d0": 0.0, "d1": 3.0, "d2": 1.0, "d3": 2.0})
    with pytest.raises(ValueError, match=r"num_actors=2 x num_cpus=1 leaves under 1 .* 2 CPUs"):
        rerank_dataset(ds.map_batches(lambda batch: batch), judge, num_actors=2, num_cpus=1, budget=10)
    out = bounded(rerank_dataset(ds, judge, num_actors=2, num_cpus=1, batch_size=2, budget=10, seed=0).take_all)
    assert sorted(r["qid"] for r in out) == ["q0", "q1", "q2"]
    assert all(r["order"][0] == 1 and r["error"] is None for r in out)


@starts_ray
@pytest.mark.parametrize("rename", [{"query": "question"}, {"qid": "calls"}])
def test_bad_columns_of_a_dataset_whose_columns_are_known_fail_before_anything_runs(local_ray, rename):
    """A ``question`` column, or one named like an added column: the actor's ValueError, which Ray Data printed as
    an "internal" error (~165 lines, "open an issue on the Ray project"; review s67a, finding 3); now raised by
    ``rerank_dataset`` itself, from the dataset's schema (``from_items``: known without running)."""
    from activeprp_integrations.ray import rerank_dataset

    row = {"qid": "q1", "query": "alpha", "candidates": [{"id": "d0", "text": "t"}]}
    ds = ray.data.from_items([{rename.get(k, k): v for k, v in row.items()}])
    with pytest.raises(ValueError, match=r"lacks \['query'\] .*rename|adds the columns \['calls'\]"):
        rerank_dataset(ds, dict, budget=10)


@starts_ray
def test_bad_columns_and_a_failing_factory_on_the_actors_are_raised_as_themselves_and_quietly(local_ray, tmp_path,
                                                                                              ray_console):
    """Where the columns are known only once the dataset runs (``read_json``), the actor's ValueError; and a
    ``comparator_factory`` that raises on the actors (before: ``ActorDiedError`` after Ray restarted the actor, ~115
    lines). Within ``unwrap``: the error itself, its own message (no Ray retry hint), no traceback on the console."""
    from activeprp_integrations.ray import rerank_dataset, unwrap

    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"qid": "q1", "question": "alpha", "candidates": [{"id": "d0", "text": "t"}]}) + "\n")
    with pytest.raises(ValueError) as info, unwrap():
        bounded(rerank_dataset(ray.data.read_json(str(path)), dict, budget=10).take_all)
    assert type(info.value) is ValueError and str(info.value).startswith("rerank_dataset: every row needs 'query'")
    assert "retr" not in str(info.value)

    def missing_model():
        raise FileNotFoundError("/models/flan-t5-xl: no such model directory on this node")

    rows = [{"qid": "q1", "query": "alpha", "candidates": [{"id": "d0", "text": "t"}]}]
    with pytest.raises(FileNotFoundError) as info, unwrap():
        bounded(rerank_dataset(ray.data.from_items(rows), missing_model, budget=10).take_all)
    assert type(info.value) is FileNotFoundError
    assert str(info.value) == "/models/flan-t5-xl: no such model directory on this node"
    assert "Traceback" not in ray_console.getvalue() and "internal code" not in ray_console.getvalue()


@pytest.fixture
def ray_console(monkeypatch):
    """What Ray Data's console handler writes (it holds the stderr of when Ray Data was imported: under pytest's
    capture, not the test's)."""
    import io

    from ray._private.log import PlainRayHandler

    console = io.StringIO()
    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, PlainRayHandler):
            monkeypatch.setattr(handler, "stream", console)
    return console


@starts_ray
@needs_data  # reads DL19 from ../shared/data
def test_a_dead_endpoint_fails_the_dataset_with_its_own_error(local_ray, dl19, ray_console):
    """... and no traceback on the console (Ray Data printed ~280 lines of two tracebacks of it)."""
    from activeprp_core import Comparator
    from activeprp_integrations.ray import rerank_dataset, unwrap

    class Dead(Comparator):  # defined here: Ray pickles it by value; answers its first call, then dies
        answered = 0

        def compare(self, query, pairs):
            if self.answered:
                raise ComparatorAuthError("invalid key", status_code=401)
            self.answered = len(pairs)
            return [1.0] * len(pairs)

    rows, _ = dl19
    ds = rerank_dataset(ray.data.from_items(rows[:2]), Dead, **KW)
    with pytest.raises(ComparatorAuthError, match="invalid key") as info, unwrap():
        bounded(ds.take_all)
    spent = info.value.accounting  # the calls that reached it before the 401 travel back from the Ray worker
    assert 0 < spent.calls <= KW["budget"] * 2 and spent.failed_calls <= spent.calls
    assert "Dataset" in ray_console.getvalue()  # Ray Data's own lines still show
    assert "Traceback" not in ray_console.getvalue() and "invalid key" not in ray_console.getvalue()


@pytest.mark.parametrize("resources, error, message", [
    ({"num_cpus": float("nan")}, ValueError, "num_cpus must be a finite number of CPUs >= 0"),
    ({"num_gpus": float("inf")}, ValueError, "num_gpus must be a finite number of GPUs >= 0 or None"),
    ({"num_cpus": "1"}, TypeError, "num_cpus must be a number of CPUs >= 0 or None, got str"),
    ({"num_gpus": True}, TypeError, "num_gpus must be a number of GPUs"), ({"num_cpus": -1}, ValueError, "got -1")])
def test_bad_resources_fail_before_ray_is_asked(resources, error, message):
    from activeprp_integrations.ray import DEFAULT_NUM_CPUS, _check

    args = {"num_cpus": DEFAULT_NUM_CPUS, "num_gpus": None} | resources
    with pytest.raises(error, match=message):
        _check(dict, 1, 64, 8, args["num_cpus"], args["num_gpus"], None, {"budget": 1})


@pytest.mark.parametrize("use_async", ["no", 0, None])
def test_use_async_must_be_a_bool_checked_before_anything_runs(use_async):
    """``use_async`` was not checked: ``"no"`` ran ``arerank_many`` on each actor's loop (truthiness). No dataset is
    looked at (None stands for one) and Ray is not started."""
    from activeprp_integrations.ray import rerank_dataset

    with pytest.raises(TypeError, match=f"use_async must be a bool, got {type(use_async).__name__}"):
        rerank_dataset(None, dict, budget=1, use_async=use_async)


@starts_ray
def test_bad_arguments_fail_before_anything_runs(local_ray):
    from activeprp_integrations.ray import rerank_dataset

    ds = ray.data.from_items([{"query": "q", "candidates": []}])
    with pytest.raises(ValueError, match="budget"):
        rerank_dataset(ds, dict, budget=-1)
    with pytest.raises(ValueError, match="num_actors"):
        rerank_dataset(ds, dict, budget=1, num_actors=0)
    with pytest.raises(TypeError, match="comparator_factory"):
        rerank_dataset(ds, dict, budget=1, comparator=dict)
    with pytest.raises(TypeError, match="unexpected keyword argument 'budgt'"):
        rerank_dataset(ds, dict, budget=1, budgt=2)


@pytest.fixture
def ray_runner(tmp_path, monkeypatch):
    """The ``activeprp.runners`` entry points as pyproject.toml declares them, on ``sys.path`` as a distribution of
    their own when the installed metadata predates them (an editable install made before the group existed)."""
    from importlib.metadata import entry_points

    if not entry_points(group="activeprp.runners", name="ray"):
        text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
        section = text.split('[project.entry-points."activeprp.runners"]')[1].split("\n\n")[0]
        info = tmp_path / "activeprp_runners-0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: activeprp-runners\nVersion: 0\n")
        lines = section.split("\n", 1)[1].replace('"', "")  # TOML strings -> entry_points.txt values
        (info / "entry_points.txt").write_text(f"[activeprp.runners]\n{lines}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
    (found,) = entry_points(group="activeprp.runners", name="ray")
    assert found.value == "activeprp_integrations.ray:rerank_records"


def rerank_run_args(tmp_path) -> list[str]:
    """``rerank-run`` of 3 DL19 queries x 20 BM25 candidates (files in ``tmp_path``), simulated judge, no ``--out``."""
    run = tmp_path / "three.run"
    lines = (DL19 / "trec_results_dl19_top100.bm25.txt").read_text().splitlines()
    qids = list(dict.fromkeys(line.split()[0] for line in lines))[:3]
    run.write_text("".join(line + "\n" for line in lines if line.split()[0] in qids and int(line.split()[3]) <= 20))
    corpus = tmp_path / "corpus.tsv"
    docids = {line.split()[2] for line in run.read_text().splitlines()}
    with corpus.open("w", encoding="utf-8") as f:
        for line in (DL19 / "bm25_dl19_top100.jsonl").read_text(encoding="utf-8").splitlines():
            for hit in json.loads(line)["hits"]:
                if hit["docid"] in docids:
                    f.write(f"{hit['docid']}\t{' '.join(hit['content'].split())}\n")
                    docids.discard(hit["docid"])
    return ["rerank-run", "--run", str(run), "--queries", str(DL19 / "topics.dl19-passage.txt"), "--corpus",
            str(corpus), "--qrels", str(DL19 / "qrels.dl19-passage.txt"), "--comparator", "simulated",
            "--budget", "30", "--no-progress"]


IMPORTED_FIRST = """
import json, os, re, shutil, subprocess
import ray  # before connect(), as docs/many-queries.md's snippet does
from activeprp_integrations.ray import connect
assert connect(num_cpus=1)
try:
    session, listening = os.getsid(0), None
    if shutil.which("ss"):
        listening = []
        for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines():
            for pid in map(int, re.findall(r"pid=(\\d+),", line)):
                try:
                    ours = os.getsid(pid) == session  # this driver and the Ray it started
                except OSError:
                    ours = False
                if ours:
                    listening.append(line.split()[3].rsplit(":", 1)[0])
    print(json.dumps({"nodes": [n["NodeManagerAddress"] for n in ray.nodes()], "listening": listening}))
finally:
    ray.shutdown()
"""


def _child_json(code_and_args: list[str], env: dict[str, str], late: str):
    """Run ``python -c CODE ARGS...`` in its own session, killed at ``LIMIT_S`` (the test then fails with ``late``),
    assert it exited 0, and return the JSON of its last line of output."""
    child = subprocess.Popen([sys.executable, "-c", *code_and_args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = child.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, 9)
        child.communicate()
        pytest.fail(f"{late} within {LIMIT_S} s")
    assert child.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@starts_ray
def test_connect_keeps_a_local_ray_on_loopback_when_ray_was_imported_first():
    """docs/many-queries.md's Ray snippet imports ray, then calls connect(): the local Ray advertised the machine's
    IP and listened on ``*`` (review s66b, finding 2). In a fresh interpreter, without the variable set, and its own
    session (killed at the time limit; the Ray stops with its ``ray.shutdown()``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    seen = _child_json([IMPORTED_FIRST], env, "a local Ray did not start and stop")
    assert seen["nodes"] == ["127.0.0.1"], seen
    if seen["listening"] is not None:
        assert len(seen["listening"]) >= 3, seen  # gcs_server, raylet, the driver at least
        assert set(seen["listening"]) <= {"127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"}, seen


JOIN = """
import json, sys
from activeprp_integrations.ray import connect
try:
    connect(sys.argv[1])
    said = None
except ConnectionError as error:
    said = str(error)
print(json.dumps(said))
"""


@starts_ray
def test_joining_a_token_cluster_by_host_port_without_the_auth_mode_says_to_set_it(local_ray):
    """The module's Ray (ray 2.60 turns token authentication on for it) joined by HOST:PORT from another process
    without ``RAY_AUTH_MODE``: Ray's own failure is recognised and told with the hint. Ray tries 20 times, ~20 s;
    ``RAY_gcs_server_port_wait_time_s=1`` makes it one try. The child has its own session, killed at the limit."""
    if os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "disabled":
        pytest.skip("RAY_AUTH_MODE=disabled here: the module's Ray asks for no token")
    address = ray.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    env["RAY_gcs_server_port_wait_time_s"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    assert _child_json([JOIN, address], env, f"joining {address} did not end") == (
        f"Failed to connect to Ray cluster at {address}: the cluster asks for Ray's auth token, which Ray sends to a "
        "HOST:PORT only with RAY_AUTH_MODE=token: set RAY_AUTH_MODE=token here, with the cluster's token in "
        "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token")


@starts_ray
@needs_data  # reads DL19 from ../shared/data
def test_rerank_run_with_ray_writes_the_same_run(local_ray, ray_runner, tmp_path, capsys):
    args = rerank_run_args(tmp_path)
    assert main([*args, "--out", str(tmp_path / "local.run")]) == 0
    assert bounded(lambda: main([*args, "--out", str(tmp_path / "ray.run"), "--ray", "--ray-actors", "2"])) == 0
    assert (tmp_path / "ray.run").read_bytes() == (tmp_path / "local.run").read_bytes()
    assert capsys.readouterr().out.count("wrote 60 lines (3 queries)") == 2
    assert ray.is_initialized()  # the command used the running Ray and left it running


@starts_ray
@needs_data  # reads DL19 from ../shared/data
def test_rerank_run_with_ray_and_a_model_the_actors_cannot_load_is_the_same_one_line_error(
        local_ray, ray_runner, tmp_path, capfd, ray_console, monkeypatch):
    """A judge the actors cannot build (an ``hf`` model a node lacks; here the driver's check is skipped, as for
    ``--ray HOST:PORT``, where only the options are checked) ends in the line and exit status of the same failure
    without ``--ray``: ``make_comparator``'s ``InputError``, raised on the actor and re-raised as itself by
    ``unwrap``. A guard: it held before this test was written (review notes said it was a traceback)."""
    from activeprp_cli import rerank_run

    monkeypatch.setattr(rerank_run, "check_comparator", lambda args, here: None)
    args = [*rerank_run_args(tmp_path)[:-5], "--budget", "30", "--no-progress", "--comparator", "hf", "--model",
            str(tmp_path / "no-such-model")]
    codes = [main([*args, "--out", str(tmp_path / "local.run")]),
             bounded(lambda: main([*args, "--out", str(tmp_path / "ray.run"), "--ray", "--ray-actors", "1"]))]
    out, err = capfd.readouterr()
    ours = [line for line in err.splitlines() if line.startswith("activeprp: error:")]
    assert codes == [2, 2] and len(ours) == 2 and ours[0] == ours[1], err
    assert ours[0].startswith("activeprp: error: cannot build the hf comparator: "), err
    assert "Traceback" not in err + ray_console.getvalue()
    assert not (tmp_path / "local.run").exists() and not (tmp_path / "ray.run").exists()


@starts_ray
@needs_data  # reads DL19 from ../shared/data
def test_rerank_run_with_ray_and_a_dead_endpoint_is_one_line_without_tracebacks(local_ray, ray_runner, tmp_path,
                                                                                capfd, ray_console):
    """An OpenAI-compatible judge at a port where nothing listens: the command's one line (exit 1); Ray Data
    printed two tracebacks of it before (~280 lines); the key shows nowhere."""
    pytest.importorskip("openai", reason='pip install "activeprp[openai]"')
    import socket

    key = "sk-test-7f3a9c-not-a-real-key"
    with socket.socket() as closed:  # bound, never listening: a connection is refused
        closed.bind(("127.0.0.1", 0))
        dead = ["--comparator", "openai", "--model", "m", "--api-key", key, "--judge-retries", "0", "--base-url",
                f"http://127.0.0.1:{closed.getsockname()[1]}/v1"]
        code = bounded(lambda: main([*rerank_run_args(tmp_path), *dead, "--ray", "--ray-actors", "1",
                                     "--out", str(tmp_path / "ray.run")]))
    out, err = capfd.readouterr()
    assert code == 1 and "Traceback" not in err + ray_console.getvalue(), err + ray_console.getvalue()
    assert key not in out + err + ray_console.getvalue()
    ours = [line for line in err.splitlines() if line.startswith("activeprp: error:")]
    assert ours == [line for line in err.splitlines() if "ComparatorUnavailable" in line] and len(ours) == 1, err
    assert ours[0].startswith("activeprp: error: ComparatorUnavailable: circuit breaker open"), err
