"""Facts about Ray Data that the ``activeprp[ray]`` adapter (issue 12, part 3) relies on, checked on this machine.

Prints one JSON object per check (and writes them all to OUT/facts.json):

- versions, and whether ``ray.data`` imports (it needs pandas and pyarrow, which the ``ray[data]`` extra brings);
- ``ray.init(num_cpus=2)`` start and ``ray.shutdown()`` time;
- ``from_items(rows)`` -> ``map_batches(Reranker, fn_constructor_kwargs=..., compute=ActorPoolStrategy(size=2),
  num_cpus=0.5, batch_format=F)`` for F in numpy, pandas, pyarrow: how a ``candidates`` column (a list of
  ``{"id", "text"}`` records) arrives, how an ``order`` (list of int) and a ``stats`` (dict) output column come
  back, how many times ``__init__`` ran (one comparator per actor) and the rerank results vs a plain loop;
- ``concurrency=`` (deprecated) still accepted or not;
- the hang: an actor pool of 2 at ``num_cpus=1`` on a 2-CPU instance, fed by ``from_items`` (no read task) and by
  ``read_json`` (read tasks), and at ``num_cpus=0.5`` (a run still going after ``--hang-timeout`` s counts as hung);
- which addresses a local instance listens on (``ss -ltn``), by default and with ``_node_ip_address="127.0.0.1"``;
- ``ray start --head`` + ``ray.init(address=...)``: the same pipeline on an existing (local) cluster.

Run (from the repository root): PYTHONPATH=. python benchmarks/ray_facts.py --out benchmarks/results/ray_facts
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

FACTS: list[dict] = []
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")  # a thread left in a hung pipeline must not start a new instance


def fact(name: str, **values) -> None:
    values = {"check": name, **values}
    FACTS.append(values)
    print(json.dumps(values, default=str), flush=True)


def dl19_rows(data: Path, n_queries: int, depth: int) -> tuple[list[dict], dict[str, dict[str, int]]]:
    from activeprp_bench.datasets import load_trec_dl

    coll = load_trec_dl(data, 2019).subset(n_queries, depth)
    rows = [{"qid": q, "query": coll.queries[q],
             "candidates": [{"id": c.id, "text": c.text} for c in coll.candidates[q]]} for q in coll.qids]
    return rows, {q: coll.qrels[q] for q in coll.qids}


class Reranker:
    """A map_batches callable class: builds its comparator once per actor, reranks each row of a batch."""

    def __init__(self, qrels: dict, batch_format: str) -> None:
        from activeprp_core import SimulatedComparator

        self.judges = {q: SimulatedComparator(labels) for q, labels in qrels.items()}
        self.batch_format = batch_format
        self.pid = os.getpid()
        self.seen: list[str] = []

    def _rows(self, batch):
        if self.batch_format == "pyarrow":
            return batch.to_pylist()
        if self.batch_format == "pandas":
            return batch.to_dict("records")
        n = len(batch["qid"])
        return [{k: batch[k][i] for k in batch} for i in range(n)]

    def __call__(self, batch):
        from activeprp_core import Candidate, rerank

        rows = self._rows(batch)
        first = rows[0]["candidates"]
        shape = {"batch_type": type(batch).__name__, "candidates_type": type(first).__name__,
                 "candidate_type": type(first[0]).__name__, "candidate": repr(first[0])[:60]}
        orders, calls = [], []
        for row in rows:
            cands = [Candidate(str(c["id"]), str(c["text"])) for c in row["candidates"]]
            result = rerank(row["query"], cands, ranker="mohajer", oracle="randomized",
                            comparator=self.judges[row["qid"]], budget=40, top_k=10, seed=0)
            orders.append([int(i) for i in result.order])
            calls.append({"calls": result.calls, "rounds": result.rounds})
        out = {"qid": [r["qid"] for r in rows], "order": orders, "stats": calls,
               "actor": [f"{self.pid}:{id(self)}"] * len(rows), "shape": [json.dumps(shape)] * len(rows)}
        if self.batch_format == "pandas":
            import pandas as pd

            return pd.DataFrame(out)
        if self.batch_format == "pyarrow":
            import pyarrow as pa

            return pa.table(out)
        import numpy as np

        arr = {k: np.empty(len(v), dtype=object) for k, v in out.items()}
        for k, v in out.items():
            arr[k][:] = v
        return arr


def expected_orders(rows, qrels) -> dict[str, list[int]]:
    from activeprp_core import Candidate, SimulatedComparator, rerank

    return {r["qid"]: rerank(r["query"], [Candidate(c["id"], c["text"]) for c in r["candidates"]], ranker="mohajer",
                             oracle="randomized", comparator=SimulatedComparator(qrels[r["qid"]]), budget=40,
                             top_k=10, seed=0).order for r in rows}


def pipeline(rows, qrels, batch_format: str, source: str = "items", **kw):
    """``source``: ``items`` (``from_items``: no read task) or a JSONL path read with ``read_json`` (read tasks
    that need a CPU slot each)."""
    import ray

    ds = ray.data.from_items(rows) if source == "items" else ray.data.read_json(source)
    return ds.map_batches(Reranker, fn_constructor_kwargs={"qrels": qrels, "batch_format": batch_format},
                          batch_size=4, batch_format=batch_format, **kw)


def check_formats(rows, qrels, want) -> None:
    import ray

    for batch_format in ("numpy", "pandas", "pyarrow"):
        started = time.perf_counter()
        out = pipeline(rows, qrels, batch_format, compute=ray.data.ActorPoolStrategy(size=2), num_cpus=0.5).take_all()
        seconds = time.perf_counter() - started
        first = out[0]
        fact("map_batches", batch_format=batch_format, seconds=round(seconds, 2), rows=len(out),
             arrived=json.loads(first["shape"]), order_type=type(first["order"]).__name__,
             order_item_type=type(first["order"][0]).__name__, stats_type=type(first["stats"]).__name__,
             stats=repr(first["stats"])[:80], actors=len({r["actor"] for r in out}),
             same_as_loop=all(list(map(int, r["order"])) == want[r["qid"]] for r in out),
             input_order_kept=[r["qid"] for r in out] == [r["qid"] for r in rows])


def check_concurrency_kwarg(rows, qrels) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            n = len(pipeline(rows, qrels, "pandas", concurrency=2, num_cpus=0.5).take_all())
            error = None
        except Exception as err:  # noqa: BLE001 - recording what the API does
            n, error = 0, f"{type(err).__name__}: {err}"[:300]
    fact("concurrency_kwarg", rows=n, error=error,
         warnings=[f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught][:3])


def check_hang(rows, qrels, timeout: float, source: str, num_cpus: float) -> bool:
    """An actor pool of 2 at ``num_cpus`` each on the 2-CPU instance; True when it finished within ``timeout``."""
    import ray

    done: dict = {}

    def target() -> None:
        try:
            done["rows"] = len(pipeline(rows, qrels, "pandas", source, compute=ray.data.ActorPoolStrategy(size=2),
                                        num_cpus=num_cpus).take_all())
        except Exception as err:  # noqa: BLE001
            done["error"] = f"{type(err).__name__}: {err}"[:300]

    started = time.perf_counter()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    fact("two_actors_on_2_cpus", source="from_items" if source == "items" else "read_json", num_cpus=num_cpus,
         finished=not thread.is_alive(), waited_s=round(time.perf_counter() - started, 1), **done)
    return not thread.is_alive()


def listening() -> set[str]:
    """Listening TCP sockets as ``address:port process`` (``ss -ltnp``)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines()
    rows = set()
    for line in out:
        cols = line.split()
        proc = cols[5].split('"')[1] if len(cols) > 5 and '"' in cols[5] else "?"
        rows.add(f"{cols[3]} {proc}")
    return rows


def bound_addresses(before: set[str]) -> dict[str, list[str]]:
    """``{listen address: sorted process names}`` of the sockets opened since ``before``."""
    by_address: dict[str, set[str]] = {}
    for row in listening() - before:
        address, proc = row.split(" ", 1)
        by_address.setdefault(address.rsplit(":", 1)[0], set()).add(proc)
    return {a: sorted(p) for a, p in sorted(by_address.items())}


def check_address(rows, qrels, want, port: int) -> None:
    import ray

    ray_bin = str(Path(sys.executable).with_name("ray"))
    started = time.perf_counter()
    head = subprocess.run([ray_bin, "start", "--head", "--num-cpus=2", "--node-ip-address=127.0.0.1",
                           f"--port={port}", "--include-dashboard=false", "--disable-usage-stats"],
                          capture_output=True, text=True, timeout=180)
    head_s = time.perf_counter() - started
    try:
        if head.returncode:
            fact("ray_start_head", rc=head.returncode, stderr=head.stderr[-500:])
            return
        started = time.perf_counter()
        ctx = ray.init(address=f"127.0.0.1:{port}")
        init_s = time.perf_counter() - started
        out = pipeline(rows, qrels, "pandas", compute=ray.data.ActorPoolStrategy(size=2), num_cpus=0.5).take_all()
        fact("existing_cluster", ray_start_s=round(head_s, 1), init_s=round(init_s, 2),
             address=getattr(ctx, "address_info", {}).get("address"),
             same_as_loop=all(list(map(int, r["order"])) == want[r["qid"]] for r in out),
             resources=ray.cluster_resources())
        started = time.perf_counter()
        ray.shutdown()
        fact("existing_cluster_disconnect", seconds=round(time.perf_counter() - started, 2),
             cluster_still_up=subprocess.run([ray_bin, "status", f"--address=127.0.0.1:{port}"],
                                             capture_output=True, timeout=60).returncode == 0)
    finally:
        stop = subprocess.run([ray_bin, "stop"], capture_output=True, text=True, timeout=180)
        fact("ray_stop", rc=stop.returncode, out=stop.stdout.strip()[-200:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/trec-dl-2019")
    ap.add_argument("--out", required=True)
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--hang-timeout", type=float, default=60.0)
    ap.add_argument("--port", type=int, default=6390)
    args = ap.parse_args()

    from importlib import metadata

    requires = [r for r in metadata.requires("ray") or [] if "extra == \"data\"" in r]
    fact("versions", python=sys.version.split()[0], ray=metadata.version("ray"), pandas=metadata.version("pandas"),
         pyarrow=metadata.version("pyarrow"), numpy=metadata.version("numpy"), ray_data_extra_requires=requires,
         load1=os.getloadavg()[0])
    import ray

    rows, qrels = dl19_rows(Path(args.data), args.queries, args.depth)
    want = expected_orders(rows, qrels)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = listening()
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False)
    fact("ray_init_num_cpus_2", seconds=round(time.perf_counter() - started, 2), resources=ray.cluster_resources(),
         listening_on=bound_addresses(before))
    check_formats(rows, qrels, want)
    check_concurrency_kwarg(rows, qrels)
    check_hang(rows, qrels, args.hang_timeout, "items", 1)
    check_hang(rows, qrels, args.hang_timeout, str(jsonl), 0.5)
    started = time.perf_counter()
    ray.shutdown()
    fact("ray_shutdown", seconds=round(time.perf_counter() - started, 2))
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    fact("ray_init_loopback", seconds=round(time.perf_counter() - started, 2),
         listening_on=bound_addresses(before))
    ray.shutdown()
    check_address(rows, qrels, want, args.port)
    ray.init(num_cpus=2, include_dashboard=False)
    hung = not check_hang(rows, qrels, args.hang_timeout, str(jsonl), 1)  # last: a hung pipeline is left behind
    started = time.perf_counter()
    ray.shutdown()
    fact("ray_shutdown", seconds=round(time.perf_counter() - started, 2), after_a_hang=hung)
    jsonl.unlink()
    fact("done", load1=os.getloadavg()[0])
    (out / "facts.json").write_text(json.dumps(FACTS, indent=1, default=str) + "\n")
    os._exit(0)  # the hung pipeline's thread must not outlive the instance


if __name__ == "__main__":
    main()
