"""Ray Data: rerank a dataset of queries on a Ray cluster (``pip install "activeprp[ray]"``).

``rerank_dataset(ds, comparator_factory, **rerank_kwargs)`` runs ``activeprp_core.rerank_many`` inside
``Dataset.map_batches`` on a pool of actors, each holding one comparator built once from ``comparator_factory``:
the rounds of all queries of a batch are merged, as in a single process, and the actors work in parallel.

Input rows: ``query`` (str) and ``candidates`` (a list of ``{"id": str, "text": str, ...}`` records in prior order, best
first; other keys become ``Candidate.metadata``). Every input column is kept; an input column named like an output
column raises ``ValueError`` (nothing is reranked; rename it). Output columns added: ``order`` (list of int: indices
into ``candidates``, best first), one column per ``RerankResult.stats()`` key, typed from the ``RerankResult``
declaration: every ``RerankSettings`` field (``ranker``, ``oracle``, ``budget``, ``max_rounds``, ``token_budget``,
``time_budget``, ``top_k``, ``seed``, ``cache``, ``on_failure``, ``max_concurrency``, ``max_consecutive_failures``), the
``Accounting`` fields (``calls``, ``comparisons``, ``rounds``, ``cache_hits``, ``ties``, ``failed_calls``,
``cut_calls``, ``retries``, ``prompt_tokens``, ``completion_tokens``, ``wall_time_s``), the status (``exhausted``,
``exhausted_by``, ``converged``, ``failure``, ``errors``) and ``judge`` (a struct of ``JudgeStats``), then ``error``. A
row that failed on its own (a ``RerankFailure``: bad or null candidates, a null query, a comparator error for its
prompts, a ranker error) has ``order`` null, ``error`` = ``"<ErrorType>: <message>"``, the accounting columns
(``calls`` ...) filled where the error carried them and the other stats null; a row that succeeded has ``error`` null.
An authentication error, or the circuit breaker the batch's rows share (below; with ``on_failure="raise"``), fails
the whole dataset, as it stops ``rerank_many``. Its error's ``accounting`` is then the spend of that batch's rows not
yet handed out only: Ray discards the rows finished before (other batches'), and the calls they billed with them; to
keep the bill, consume the output as it comes (``iter_batches``, writing each batch out) or use ``on_failure="prior"``.

Results per row are identical to ``rerank`` with the same arguments and seed, however rows are split into batches and
actors: each row's confidence gate and ``adaptive`` oracle read only that row's answers (``rerank_many`` with
``carry_judge=False``), and each row has its own circuit breaker, so a row whose calls all fail fails (or degrades)
alone, as it would alone. The exceptions: the breaker the batch's rows share opens on failed calls in a row of two
query texts or more (a dead endpoint, or two rows whose prompts make the judge fail, back to back): a row in progress
then is stopped (or degraded) with them, where alone it might have gone on; and with a comparator that batches queries
(a local model, GPU actors) a merged call's failed calls are not told apart by row and all count on the shared breaker,
so one row whose calls all fail can stop (or degrade) the batch's rows in progress. Output
rows follow Ray's block order, which is not the input order unless
``DataContext.get_current().execution_options.preserve_order = True``: join on a key column (e.g. ``qid``).

Importing this module imports no Ray; ``rerank_dataset`` and ``connect`` raise ``ImportError`` naming
``activeprp[ray]`` when Ray Data is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any

from activeprp_core import Candidate, RerankFailure, RerankResult, RerankSettings, arerank_many, rerank_many
from activeprp_core.budget import check_count, check_flag, check_real
from activeprp_core.errors import InputError
from activeprp_core.judging import JudgeStats
from activeprp_core.many import DEFAULT_MAX_ACTIVE

from ._common import is_loopback

RAY_EXTRA = 'pip install "activeprp[ray]"'
RAY_CLIENT_EXTRA = 'pip install "ray[client]"'
PROBE_TIMEOUT_S = 5.0
"""Seconds ``connect`` waits for a TCP connection to a cluster's address before raising ``ConnectionError``
(``ray.init`` itself retries an address where nothing listens for many minutes)."""
DEFAULT_NUM_CPUS = 0.5
"""CPUs reserved per actor when ``num_cpus`` is not given, or less on a small cluster (``_cpus_per_actor``).
Fractional on purpose: the comparator waits on an endpoint or a GPU, and a pool that holds every CPU starves the
dataset's read tasks (docs/ray-notes.md)."""
TASK_CPUS = 1.0
"""CPUs the pool leaves free for the dataset's own tasks: Ray Data's read tasks (``read_json``, ``read_parquet``
...) ask for one CPU each (Ray's default); with less free, the dataset waits for it forever, with no error."""
RAY_ADDRESS_ENV = "RAY_ADDRESS"
"""Where ``ray.init`` looks first for the cluster of ``address="auto"`` (or of no address)."""
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for a single-machine instance (its default on macOS/Windows): "0" makes a local Ray use
127.0.0.1 as its node address, so its servers listen on loopback only (checked with ``ss -ltnp`` on ray 2.60). Ray
reads it when it is imported; ``connect`` also applies it to a Ray imported earlier (``_start_local``)."""
ORDER, ERROR = "order", "error"

_RESERVED = ("requests", "comparator", "progress")


def _ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401 - needs the data extra (pandas, pyarrow)
    except ImportError as err:
        raise ImportError(f"activeprp_integrations.ray needs Ray Data: {RAY_EXTRA}") from err
    return ray


def _stat_types() -> dict[str, Any]:
    """The Arrow type of every output column: ``order``, the ``RerankResult.stats()`` fields (typed from the
    ``RerankResult`` declaration) and ``error``."""
    import pyarrow as pa

    arrow = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string(),
             "list[str]": pa.list_(pa.string())}
    arrow["JudgeStats"] = pa.struct([(f.name, arrow[str(f.type).removesuffix(" | None")]) for f in fields(JudgeStats)])
    declared = {f.name: str(f.type).removesuffix(" | None") for f in fields(RerankResult)}
    sample = RerankResult(candidates=[], order=[], scores=[], ranker="", oracle="", budget=None, top_k=1)
    return {ORDER: pa.list_(pa.int64()), **{k: arrow[declared[k]] for k in sample.stats()}, ERROR: pa.string()}


def _candidate(record: Any) -> Candidate:
    """A candidate record as a ``Candidate``: its other keys are the metadata, less those whose value is null.
    Arrow gives every record of a column the keys of all of them, null where a record had none, so a null
    cannot be told from a missing key; leaving it out gives the metadata ``rerank`` of the row would see."""
    if not isinstance(record, dict) or "id" not in record or "text" not in record:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"each candidate must be a record with 'id' and 'text', got {keys}")
    return Candidate(record["id"], record["text"],
                     {k: v for k, v in record.items() if k not in ("id", "text") and v is not None})


def _row(item: RerankResult | RerankFailure | Exception, types: dict[str, Any]) -> dict[str, Any]:
    """One output row's added columns."""
    row = dict.fromkeys(types)
    if isinstance(item, RerankResult):
        row.update(item.stats(), order=list(item.order))
        return row
    error = item.error if isinstance(item, RerankFailure) else item
    spent = getattr(error, "accounting", None)
    row.update(spent.counts() if spent is not None else {}, error=f"{type(error).__name__}: {error}")
    return row


STOPS_DATASET = "activeprp_stops_dataset"
"""The attribute that marks an error an actor raised on purpose to stop the dataset (a failed
``comparator_factory``, missing or clashing columns): ``unwrap`` re-raises it as itself and keeps Ray Data's
console quiet about it, as for an ActivePRP error. It holds the error's ``args``: Ray Data appends its retry hint
to the message on the actor, and ``unwrap`` puts them back. An exception's attributes travel with it when Ray
pickles it."""


def _stopping(error: Exception) -> Exception:
    """``error``, marked with ``STOPS_DATASET``."""
    setattr(error, STOPS_DATASET, error.args)
    return error


def _check_columns(columns: list[str], added: Any) -> None:
    """Raise ``ValueError`` unless a dataset with ``columns`` has ``query`` and ``candidates`` and none of the
    ``added`` column names."""
    missing = [c for c in ("query", "candidates") if c not in columns]
    if missing:
        raise ValueError(f"rerank_dataset: every row needs 'query' and 'candidates'; the dataset lacks {missing} "
                         f"(columns: {columns}): rename its columns first (Dataset.rename_columns)")
    taken = [c for c in added if c in columns]
    if taken:
        raise ValueError(f"rerank_dataset adds the columns {taken}, which the dataset already has: rename them "
                         "first (Dataset.rename_columns), or drop them (Dataset.drop_columns)")


class _Reranker:
    """The ``map_batches`` callable of one actor: builds the comparator once, reranks each batch with
    ``rerank_many`` (``arerank_many`` on the actor's own event loop with ``use_async``).

    An error of ``comparator_factory`` (or a None from it) is raised, marked (``_stopping``), by the first batch
    rather than by the constructor: Ray restarts an actor whose constructor fails, again and again, and the driver
    gets ``ActorDiedError`` instead of the error."""

    def __init__(self, comparator_factory: Callable[[], Any], settings: RerankSettings, max_active: int,
                 use_async: bool) -> None:
        self.failed: Exception | None = None
        try:
            self.comparator = comparator_factory()
            if self.comparator is None:
                raise ValueError("comparator_factory returned None instead of a comparator")
        except Exception as error:  # noqa: BLE001 - any error of the caller's factory, raised by __call__
            self.failed = _stopping(error)
        self.settings, self.max_active = settings, max_active
        self.loop = asyncio.new_event_loop() if use_async else None
        self.types = _stat_types()

    def _rerank(self, requests: list) -> list:
        # no running record of the judge across a batch's rows: a row's result must not depend on the batching
        kw = {"comparator": self.comparator, "max_active": self.max_active, "carry_judge": False}
        if self.loop is None:
            return list(rerank_many(requests, self.settings, **kw))

        async def collect() -> list:
            return [item async for item in arerank_many(requests, self.settings, **kw)]

        return self.loop.run_until_complete(collect())

    def __call__(self, table: Any) -> Any:
        import pyarrow as pa

        if self.failed is not None:
            raise self.failed
        try:  # a dataset whose columns rerank_dataset could not see (ds.columns(fetch_if_missing=False) was None)
            _check_columns(table.column_names, self.types)
        except ValueError as error:
            raise _stopping(error) from None
        rows = table.to_pylist()
        items: list[Any] = [None] * len(rows)
        good: list[int] = []
        requests = []
        for i, row in enumerate(rows):
            try:
                if row["candidates"] is None:  # a bad join, say: a row error, not an empty ranking that looks right
                    raise TypeError("candidates must be a list of {'id', 'text'} records, got null")
                requests.append((row["query"], [_candidate(c) for c in row["candidates"]]))
                good.append(i)
            except (TypeError, ValueError) as error:
                items[i] = error
        for i, item in zip(good, self._rerank(requests)):
            items[i] = item
        added = [_row(item, self.types) for item in items]
        for name, kind in self.types.items():
            table = table.append_column(name, pa.array([r[name] for r in added], type=kind))
        return table


def rerank_dataset(
    ds: Any,
    comparator_factory: Callable[[], Any],
    *,
    num_actors: int = 1,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    batch_size: int = 64,
    use_async: bool = False,
    settings: RerankSettings | None = None,
    max_active: int = DEFAULT_MAX_ACTIVE,
    **rerank_kwargs: Any,
) -> Any:
    """Rerank every row of a Ray dataset (see the module docstring for the row layout).

    Args:
        ds: a ``ray.data.Dataset`` whose rows have ``query`` (str) and ``candidates`` (list of ``{"id", "text"}``).
        comparator_factory: a picklable callable with no arguments that returns a comparator; called once per
            actor (so a local model is loaded once per actor, on the actor's GPU with ``num_gpus``). Keep it
            small (a class or a ``functools.partial``, not a loaded model): Ray ships it to every actor.
        num_actors: actors in the pool (``ray.data.ActorPoolStrategy(size=num_actors)``).
        num_cpus, num_gpus: resources reserved per actor (passed to ``map_batches``). The actors must leave
            ``TASK_CPUS`` (1) of the cluster's CPUs (``ray.cluster_resources()`` at this call, all nodes together)
            free for the dataset's read tasks, or it waits forever: ``num_actors * num_cpus <= CPUs - 1``.
            ``num_cpus`` None: ``DEFAULT_NUM_CPUS`` (0.5), or less so that it fits (0 on a 1-CPU Ray); a
            ``num_cpus`` given that does not fit raises ``ValueError``. Neither before Ray is initialised, nor on
            a cluster with no CPU yet (one that scales up from a head with ``--num-cpus=0``), nor for a
            ``MaterializedDataset`` (``from_items``, ``from_pandas``, ``from_arrow``, ``.materialize()``): it has
            no task of its own to run, and its actors may hold every CPU (``num_cpus`` None: 0.5).
        batch_size: rows per ``map_batches`` batch: the queries one ``rerank_many`` call merges.
        use_async: run ``arerank_many`` on each actor's event loop (for endpoint comparators: the calls of the
            batch's queries run concurrently, at most ``max_concurrency`` in flight per actor).
        settings, rerank_kwargs: the ``RerankSettings`` of every row, and/or its fields as keyword arguments
            (``budget`` required; ``time_budget`` is per row, from the row's start), as for ``rerank_many``. With
            a ``time_budget`` and a comparator with only ``compare``, pass ``use_async=True`` (or
            ``max_active=1``): the sync path judges a batch's rows one after another while every row's clock runs.
        max_active: ``rerank_many``'s cap on queries in progress per actor.

    Returns: a lazy ``ray.data.Dataset`` (nothing runs until consumed): the input columns, ``order``, stats, ``error``.

    Raises:
        ImportError: Ray Data is missing (names ``activeprp[ray]``).
        TypeError / ValueError: a bad argument (checked here, before anything runs), ``num_actors * num_cpus``
        above the cluster's CPUs less ``TASK_CPUS`` included (not for a ``MaterializedDataset``), and a dataset
        without ``query``/``candidates`` columns or with a column named like an added one when its columns are
        known without running it (``ds.columns(fetch_if_missing=False)``: ``from_items``, ``from_pandas``,
        ``read_parquet`` ...). While the dataset runs (all wrapped by Ray; ``unwrap`` re-raises them as
        themselves): that column ``ValueError`` for a dataset whose columns were not known (``read_json``), the
        error of ``comparator_factory`` on an actor (``ValueError`` for a None), and the comparator's error when a
        dead endpoint stops a batch.
    """
    ray = _ray()
    settings = _check(comparator_factory, num_actors, batch_size, max_active, num_cpus, num_gpus, settings,
                      rerank_kwargs, use_async=use_async)
    columns = _known_columns(ds)
    if columns is not None:
        _check_columns(columns, _stat_types())
    # A materialized dataset (from_items, from_pandas, .materialize()) holds its blocks: it has no task left to run
    tasks = not isinstance(ds, ray.data.dataset.MaterializedDataset)
    resources = {"num_cpus": _cpus_per_actor(ray, num_actors, num_cpus, tasks=tasks)}
    resources |= {"num_gpus": num_gpus} if num_gpus is not None else {}
    out = ds.map_batches(
        _Reranker, fn_constructor_kwargs={"comparator_factory": comparator_factory, "settings": settings,
                                          "max_active": max_active, "use_async": use_async},
        compute=ray.data.ActorPoolStrategy(size=num_actors), batch_size=batch_size, batch_format="pyarrow",
        **resources)
    # Needed by unwrap: without it Ray Data raises its UserCodeException, and the error that stopped the dataset
    # (a dead endpoint's ComparatorAuthError, a failed comparator_factory) is not in what reaches the driver
    out.context.raise_original_map_exception = True
    return out


def _known_columns(ds: Any) -> list[str] | None:
    """The columns of ``ds`` when Ray knows them without running anything, else None (a ``read_json``, a ``map``)."""
    try:
        return ds.columns(fetch_if_missing=False)
    except Exception as error:
        import pyarrow as pa  # here, not above: a dataset that answers needs no pyarrow (nor do the CLI's test fakes)

        if isinstance(error, pa.ArrowException):  # blocks whose types differ (an int qid in one, a str in another)
            return None  # have no one schema
        raise


def _check(comparator_factory, num_actors, batch_size, max_active, num_cpus, num_gpus, settings,
           rerank_kwargs, *, use_async=False) -> RerankSettings:
    """``rerank_dataset``'s arguments checked (before anything runs); returns the settings of every row."""
    if not callable(comparator_factory):
        raise TypeError(f"comparator_factory must be a callable returning a comparator, got "
                        f"{type(comparator_factory).__name__}")
    for name, value in (("num_actors", num_actors), ("batch_size", batch_size), ("max_active", max_active)):
        check_count(value, name, minimum=1)
    check_real(num_cpus, "num_cpus", unit="CPUs", allow_none=True)
    check_real(num_gpus, "num_gpus", unit="GPUs", allow_none=True)
    check_flag(use_async, "use_async")
    reserved = sorted(set(rerank_kwargs) & set(_RESERVED))
    if reserved:
        raise TypeError(f"rerank_dataset sets {reserved} itself: pass comparator_factory, and no {reserved}")
    return RerankSettings.of(settings, **rerank_kwargs)  # checks names and values, as rerank_many does


def _cpus_per_actor(ray: Any, num_actors: int, num_cpus: float | None, *, tasks: bool = True) -> float:
    """The CPUs of each of ``num_actors`` actors: ``num_cpus``, or for None ``DEFAULT_NUM_CPUS``, less where the
    pool would leave under ``TASK_CPUS`` of the cluster's CPUs free (rounded down to Ray's 0.0001 CPU) and the
    dataset has ``tasks`` of its own to run (not a ``MaterializedDataset``).

    Raises:
        ValueError: ``num_cpus`` given, ``tasks``, and the pool would leave under ``TASK_CPUS`` free.
    """
    # No task to starve, Ray not started yet (Ray Data starts one when the dataset runs), or no CPU at all (a head
    # that leaves the work to nodes it has yet to scale up): nothing to count
    cpus = ray.cluster_resources().get("CPU", 0) if tasks and ray.is_initialized() else 0
    if not cpus:
        return DEFAULT_NUM_CPUS if num_cpus is None else num_cpus
    spare = max(cpus - TASK_CPUS, 0)
    fits = math.floor(spare / num_actors * 10_000) / 10_000  # Ray's resource unit: 0.0001
    if num_cpus is None:
        return min(DEFAULT_NUM_CPUS, fits)
    if num_actors * num_cpus > spare + 1e-9:  # num_cpus > 0 here
        most = math.floor(spare / num_cpus + 1e-9)
        fewer = f"num_actors <= {most} at num_cpus={num_cpus:g}, or " if most else ""
        raise ValueError(f"num_actors={num_actors} x num_cpus={num_cpus:g} leaves under {TASK_CPUS:g} of the Ray "
                         f"cluster's {cpus:g} CPUs free for the dataset's own tasks (reads, maps), so it would wait "
                         f"forever: use {fewer}num_cpus <= {fits:g} for {num_actors} actors, or leave num_cpus unset "
                         "(sized to fit)")
    return num_cpus


def connect(address: str | None = None, *, num_cpus: int | None = None) -> bool:
    """Make sure this process is connected to Ray, for ``rerank_dataset``.

    Args:
        address: an existing cluster (``"HOST:PORT"`` of its head, ``"ray://HOST:10001"`` for Ray Client,
            ``"auto"``); with Ray's token authentication (on by default in ray 2.60) the cluster's token must
            be in ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, and for ``HOST:PORT``
            ``RAY_AUTH_MODE=token`` set (Ray sends no token to an explicit address otherwise). ``HOST:PORT`` and
            ``ray://HOST:PORT`` are first probed with a TCP connection (``PROBE_TIMEOUT_S``), and so is
            ``RAY_ADDRESS`` for ``"auto"`` (Ray connects there when it is set). Without ``RAY_ADDRESS``,
            ``"auto"`` goes where the last ``ray start`` wrote (``ray_current_cluster`` in Ray's temp directory,
            ``/tmp/ray``, or under ``$RAY_TMPDIR`` / ``$TMPDIR``), which only Ray's private helpers read: it is
            not probed, so a file left by a head that died without ``ray stop`` (a crash, an OOM kill, a restarted
            container that kept /tmp) makes ``ray.init`` retry it for minutes; run ``ray stop`` (or remove that
            file), or pass ``HOST:PORT``, which is probed. A loopback host (``127.0.0.1``, ``localhost``, ``::1``;
            in ``RAY_ADDRESS`` too) is joined there, a Ray that listens on loopback only included (``ray.init``
            alone would dial the machine's IP instead and retry it for minutes). None: start a new
            local Ray on this machine that listens on 127.0.0.1 only (Ray's ``address="local"``: ``RAY_ADDRESS``
            and a cluster left by ``ray start`` are ignored; sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` unless
            set, and holds to it whether or not Ray was imported earlier in this process: ``_start_local``), no
            dashboard.
        num_cpus: CPUs of a local Ray (None = all).

    Returns:
        True when this call connected (call ``ray.shutdown()`` when done), False when Ray was already initialised
        in this process (it is used as it is, and left running).

    Raises:
        ImportError: Ray Data is missing (names ``activeprp[ray]``), or ``address`` is ``ray://...`` and Ray
        Client's grpcio is missing (names ``ray[client]``). ConnectionError: nothing answers at ``address``
        within ``PROBE_TIMEOUT_S`` (or Ray's own; when the cluster refused this client's token, or its lack of
        one, Ray's message is followed by what to set: ``RAY_AUTH_MODE=token`` and where the token goes,
        ``_token_hint``). ValueError (from Ray): an address Ray cannot read.
        RuntimeError: a local Ray took an address that is not loopback (``_start_local``; it is shut down).
    """
    if address is None:
        os.environ.setdefault(LOOPBACK_ENV, "0")
    ray = _ray()
    if ray.is_initialized():
        return False
    if address is None:
        _start_local(ray, num_cpus)
    else:
        from_env = address == "auto" and os.environ.get(RAY_ADDRESS_ENV)  # what ray.init reads for "auto"
        _probe(from_env or address, f" ({RAY_ADDRESS_ENV}, which address 'auto' reads)" if from_env else "")
        # else Ray dials the machine's IP instead of the loopback address probed, where a loopback-only Ray
        # (ours, or one started with LOOPBACK_ENV=0) does not listen, and retries it for minutes
        with _ray_on_loopback(is_loopback(_host_port(from_env or address)[0])):
            try:
                ray.init(address=address)
            except ConnectionError as error:
                if not _token_refused(error):
                    raise
                raise ConnectionError(f"{error}: {_token_hint()}") from error
    return True


AUTH_MODE_ENV = "RAY_AUTH_MODE"
"""Ray's switch for token authentication (``token``, ``disabled``); ray 2.60 sends its token to an explicit
address only when this says ``token``."""


def _token_refused(error: BaseException) -> bool:
    """Whether ``ray.init``'s ``error`` is a cluster refusing this client's token (or its lack of one): ray 2.60
    raises ``ConnectionError("Failed to connect to Ray cluster at ...")`` from a ``RuntimeError`` whose message
    holds the last attempt's traceback, ending in ``ray.exceptions.AuthenticationError: RPC error:
    InvalidAuthToken: ...``; an ``AuthenticationError`` in the chain itself counts too."""
    refused = getattr(sys.modules.get("ray.exceptions"), "AuthenticationError", None)
    seen: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and all(link is not other for other in seen):
        if (refused is not None and isinstance(link, refused)) or "InvalidAuthToken" in str(link):
            return True
        seen.append(link)
        link = link.__cause__ or link.__context__
    return False


def _token_hint() -> str:
    """What to do about a refused token, by ``AUTH_MODE_ENV`` here (no token is read, so none is shown)."""
    where = "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
    if os.environ.get(AUTH_MODE_ENV, "").strip().lower() == "token":
        return (f"the cluster refused this client's Ray auth token ({AUTH_MODE_ENV}=token is set): put the "
                f"cluster's token in {where}")
    return (f"the cluster asks for Ray's auth token, which Ray sends to a HOST:PORT only with {AUTH_MODE_ENV}=token: "
            f"set {AUTH_MODE_ENV}=token here, with the cluster's token in {where}")


@contextlib.contextmanager
def _ray_on_loopback(wanted: bool) -> Iterator[None]:
    """When ``wanted``, ``ray._private.ray_constants.ENABLE_RAY_CLUSTER`` (read from ``LOOPBACK_ENV`` when Ray was
    imported) is False during the block and put back after it; otherwise, or when Ray no longer has it, unchanged.

    ``ray.init`` reads it (through ``services.get_node_ip_address``) to pick the node address of a local Ray and
    to replace a loopback host in the address it joins (``services.resolve_ip_for_localhost``): False keeps both
    on 127.0.0.1."""
    constants = sys.modules.get("ray._private.ray_constants")
    imported_as = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if not wanted or imported_as is None:
        yield
        return
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = imported_as


def _start_local(ray: Any, num_cpus: int | None) -> None:
    """``ray.init`` of a new local Ray, on 127.0.0.1 unless ``LOOPBACK_ENV`` says "1" or "true" (Ray's reading).

    Ray reads ``LOOPBACK_ENV`` once, when it is imported, into ``ray._private.ray_constants.ENABLE_RAY_CLUSTER``,
    which ``ray.init`` reads when it picks the node address: after an ``import ray`` that came before ``connect``
    set the variable, the node took the machine's address and every server listened on all interfaces. So the
    constant follows the variable during this ``ray.init`` (``_ray_on_loopback``), and the node address is
    checked after it through Ray's public ``ray.util.get_node_ip_address``.

    Raises:
        RuntimeError: the node address is not loopback although ``LOOPBACK_ENV`` asks for it (a Ray whose
            constant is gone or no longer decides it); that Ray is shut down first.
    """
    loopback = os.environ.get(LOOPBACK_ENV, "").lower() not in ("1", "true")
    with _ray_on_loopback(loopback):
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False)
    node = ray.util.get_node_ip_address()
    if loopback and not is_loopback(node):
        ray.shutdown()
        raise RuntimeError(f"the local Ray took the node address {node}, not 127.0.0.1, so it would listen on "
                           f"every interface; it was shut down. Call connect() before importing ray, or start "
                           f"Python with {LOOPBACK_ENV}=0 set, or pass the address of a cluster")


def _probe(address: str, source: str = "") -> None:
    """Raise unless ``address`` can be tried: Ray Client's dependency for ``ray://`` (ImportError), then, for
    ``HOST:PORT`` and ``ray://HOST:PORT``, a TCP connection within ``PROBE_TIMEOUT_S`` (ConnectionError; its
    message names ``address`` and then ``source``). Other forms (``"auto"``, other schemes) are Ray's to resolve."""
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise ImportError(f"Ray Client (address {address}) needs grpcio, which activeprp[ray] does not install: "
                          f"{RAY_CLIENT_EXTRA}")
    host, port = _host_port(address)
    if port is None:
        return
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as error:
        raise ConnectionError(f"no Ray cluster at {address}{source}: {type(error).__name__}: {error} (waited at most "
                              f"{PROBE_TIMEOUT_S:g} s)") from None


def _host_port(address: str) -> tuple[str, int | None]:
    """The host (without an IPv6 address's brackets) and port of ``HOST:PORT`` or ``ray://HOST:PORT``; for other
    forms (``"auto"``, other schemes) the address itself and None."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if "://" in host or not port.isdigit():
        return address, None
    return host.removeprefix("[").removesuffix("]"), int(port)  # [::1]:6379


def _stopped_by(error: BaseException) -> BaseException | None:
    """The ActivePRP error, or the error marked ``STOPS_DATASET``, in ``error``'s chain (Ray's ``cause`` links,
    then ``__cause__``), the innermost one (Ray's own wrappers copy its class and attributes); None when there is
    none."""
    from activeprp_core import ActivePRPError

    chain: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and all(link is not seen for seen in chain):
        chain.append(link)
        link = getattr(link, "cause", None) or link.__cause__
    ours = [e for e in chain if (isinstance(e, ActivePRPError) or getattr(e, STOPS_DATASET, None) is not None)
            and not type(e).__module__.startswith("ray")]
    return ours[-1] if ours else None


class _QuietConsole(logging.Filter):
    """Keeps Ray Data's records about the error that stopped a dataset (``_stopped_by``: an ActivePRP error, a
    failed ``comparator_factory``, missing or clashing columns) off the console: ray 2.60 takes the original exception
    (``raise_original_map_exception``) for an internal one and logs its ~140-line traceback twice, asking for a
    Ray issue. Judged by the record's exception, else the one being handled when it is logged (the "internal
    code" line has none). Ray Data's log file still gets every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        return error is None or _stopped_by(error) is None


@contextlib.contextmanager
def unwrap() -> Iterator[None]:
    """Re-raise the error that stopped a dataset as itself rather than wrapped in Ray's task error, so callers can
    catch it as such: a dead endpoint's ``ComparatorAuthError`` / ``ComparatorUnavailable``, the error of a
    ``comparator_factory`` that failed on the actors (or its ``ValueError`` for a None), the ``ValueError`` for
    missing or clashing columns that ``rerank_dataset`` could not see before it ran. Needs a dataset
    from ``rerank_dataset``, which asks Ray Data to keep the original exception. Meanwhile Ray Data's console
    handlers (those of the ``ray.data`` logger that write to a stream) drop its records about that error (its
    tracebacks); its log file keeps them."""
    consoles = [h for h in logging.getLogger("ray.data").handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
    quiet = _QuietConsole()
    for handler in consoles:
        handler.addFilter(quiet)
    try:
        yield
    except Exception as error:
        ours = _stopped_by(error)
        if ours is None or ours is error:
            raise
        if getattr(ours, STOPS_DATASET, None) is not None:
            ours.args = getattr(ours, STOPS_DATASET)  # without "To change retry attempts ..."
        raise ours from error
    finally:
        for handler in consoles:
            handler.removeFilter(quiet)


__all__ = ["DEFAULT_NUM_CPUS", "connect", "rerank_dataset", "unwrap"]


def rerank_records(records: list[dict[str, Any]], comparator_factory: Callable[[], Any], *,
                   address: str | None = None, columns: list[str] | None = None, progress: bool = True,
                   **kwargs: Any) -> list[dict[str, Any]]:
    """Rerank ``records`` (rows as ``rerank_dataset`` reads them) on Ray and return the output rows: ``connect``
    to ``address`` (None: a local Ray on 127.0.0.1, stopped afterwards), ``rerank_dataset`` over
    ``ray.data.from_items(records)`` with ``kwargs``, then every row (only ``columns`` when given; Ray's order) with
    ``unwrap`` around the run. ``progress``: Ray Data's progress bars (stderr). The entry point ``ray`` of the
    ``activeprp.runners`` group, behind ``activeprp rerank-run --ray``.

    Raises:
        ImportError: Ray Data (names ``activeprp[ray]``) or, for ``ray://``, Ray Client is missing.
        InputError: ``connect``'s ValueError, ConnectionError or RuntimeError (a bad address, nothing at it, a
        local Ray that took an address not loopback), or ``num_gpus``
        per actor above the GPUs of the local Ray started here (it could never start an actor; a cluster's own
        Ray may scale up, so it is not checked). The errors of ``rerank_dataset``.
    """
    try:
        owned = connect(address)  # before Ray is imported: loopback
    except (ConnectionError, ValueError, RuntimeError) as error:
        raise InputError(str(error)) from error
    ray = _ray()
    try:
        ds = rerank_dataset(ray.data.from_items(records), comparator_factory, **kwargs)
        wanted, have = kwargs.get("num_gpus") or 0, ray.cluster_resources().get("GPU", 0)
        if owned and address is None and wanted > have:
            raise InputError(f"num_gpus {wanted:g} per actor (--ray-gpus), but the local Ray started for this run "
                             f"has {have:g} GPUs: use fewer, or --ray ADDRESS of a cluster with GPUs")
        ds.context.enable_progress_bars = progress
        with unwrap():
            return list((ds.select_columns(columns) if columns else ds).iter_rows())
    finally:
        if owned:
            ray.shutdown()
