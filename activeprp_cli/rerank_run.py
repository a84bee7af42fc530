"""``activeprp rerank-run``: rerank every query of a TREC run file and write the reranked run.

Example (TREC DL19, a corpus JSONL made from the BM25 hits, the simulated judge)::

    activeprp rerank-run --run trec_results_dl19_top100.bm25.txt --queries topics.dl19-passage.txt \\
        --corpus corpus.jsonl --qrels qrels.dl19-passage.txt --comparator simulated --out reranked.run

Every input file is read and checked before the comparator is built, so bad input costs no LLM call: it ends in
one line ``activeprp: error: FILE:LINE: reason`` and exit status 2. Each query's rows are taken in the order
trec_eval and ir-measures evaluate (score descending, ties by docid descending; the rank column is not used, and a
note says when it disagrees); its top ``--depth`` rows in that order are reranked, and OUT holds exactly those
(qid, docid) pairs, ranks 1.. and strictly decreasing scores.

All queries go through ``rerank_many`` (``arerank_many`` for ``--comparator openai``, at most
``--max-concurrency`` requests in flight across queries; ``--max-active`` queries in progress), or through Ray Data
with ``--ray [ADDRESS]``. A query that fails on its own is reported on stderr (qid and reason); the others are
reranked and written, and the command then exits with status 1 (OUT lacks the failed queries' lines), unless
``--on-failure prior`` was given: then a failed query is written in its input order and the exit status is 0. A
dead endpoint (authentication error, open circuit breaker) stops everything with exit status 1 and no OUT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from activeprp_core.comparators.base import Comparator, as_comparator
from activeprp_core.comparators.hf_model import model_location
from activeprp_core.comparators.simulated import CALIBRATED_PARAMS, SimulatedComparator
from activeprp_core.judging import JudgeStats, pooled
from activeprp_core.many import DEFAULT_MAX_ACTIVE, RerankFailure, arerank_many, rerank_many
from activeprp_core.settings import RerankSettings
from activeprp_core.types import Candidate, RerankResult

from . import InputError, discard_stdout, fail, printable, progress_wanted, require_extra
from .metrics import EVAL_EXTRA
from .rerank import (
    Given,
    add_comparator_args,
    add_settings_args,
    argv_text,
    check_comparator,
    check_comparator_flags,
    count,
    make_comparator,
    model_bars,
    refuse_unused,
    seconds,
    settings_from_args,
)
from .trecfiles import (
    STDOUT,
    RunWriteError,
    check_token,
    is_stdout,
    named_fd,
    rank_disagreements,
    read_qrels,
    read_run_candidates,
    write_run,
    writing,
)

Request = tuple[str, str, list[Candidate]]  # (qid, query text, candidates in the run's trec_eval order)
RUNNERS = "activeprp.runners"  # entry-point group: name -> a function running many queries elsewhere (ray)


class Outcome(NamedTuple):
    """One query's rerank as the command uses it: ``order`` (indices into its candidates; None when it failed),
    the LLM ``calls`` it spent, ``error`` (why it failed), ``failure`` (why it degraded, with ``--on-failure
    prior``) and ``judge`` (its ``JudgeStats``; None when it failed)."""

    order: list[int] | None
    calls: int
    error: str | None = None
    failure: str | None = None
    judge: JudgeStats | None = None

    @classmethod
    def of(cls, item: RerankResult | RerankFailure) -> Outcome:
        if isinstance(item, RerankFailure):
            spent = getattr(item.error, "accounting", None)
            return cls(None, spent.calls if spent is not None else 0, item.reason)
        return cls(item.order, item.calls, None, item.failure, item.judge)


def rerank_requests(requests: Sequence[Request], comparator: Any, args: argparse.Namespace,
                    progress: bool = False) -> Iterator[Outcome]:
    """One ``Outcome`` per request, in input order: ``rerank_many`` over all requests (``max_active`` =
    ``--max-active``, ``carry_judge=False``: each query's result is that of ``rerank`` of it alone), or for
    ``--comparator openai`` ``arerank_many`` with ``max_concurrency`` = ``--max-concurrency`` requests in flight
    across queries (each result as it comes, ``iterate_async``). ``progress``: a tqdm bar over queries on stderr.

    Raises:
        ComparatorAuthError / ComparatorUnavailable: a dead endpoint (with ``--on-failure raise``).
    """
    pairs = [(query, candidates) for _, query, candidates in requests]
    settings = settings_from_args(args)
    # each query reads only its own answers, as with --ray: --max-active bounds memory, never changes the run
    kw = {"comparator": comparator, "max_active": args.max_active, "progress": progress, "carry_judge": False}
    if args.comparator != "openai":
        yield from map(Outcome.of, rerank_many(pairs, settings, **kw))
        return

    yield from map(Outcome.of, iterate_async(arerank_many(pairs, settings, **kw)))


_DONE = object()


def iterate_async(agen: AsyncIterator[Any]) -> Iterator[Any]:
    """The items of ``agen`` here, each as soon as it comes: an event loop of its own runs ``agen`` up to its next
    item, then waits (as ``asyncio.run`` runs a whole coroutine). On the way out (exhausted, closed early, an
    exception, Ctrl-C) the step in flight is cancelled and ``agen`` closed, so that no call is sent after it, then
    the loop's other tasks are cancelled and it is closed, as ``asyncio.run`` does."""

    async def step() -> Any:
        return await anext(agen, _DONE)

    loop = asyncio.new_event_loop()
    task = None
    try:
        while (item := loop.run_until_complete(task := loop.create_task(step()))) is not _DONE:
            yield item
    finally:
        try:
            if task is not None and not task.done():  # interrupted while waiting for the next item
                task.cancel()
                loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
            loop.run_until_complete(agen.aclose())
            left = asyncio.all_tasks(loop)
            if left:  # gather() of nothing would belong to another loop
                for other in left:
                    other.cancel()
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


LOCAL_RAY = "local"
"""``--ray``'s value for a Ray started for this command on this machine."""


def ray_address(text: str) -> str:
    """``--ray``'s type: ``LOCAL_RAY`` for ``none`` or ``local`` (any case), else ``text``, a cluster's address.
    argparse turns its error (an empty address) into a usage error (exit 2)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, ray://HOST:PORT, none or local, got {text!r}")
    return LOCAL_RAY if text.lower() in ("none", "local") else text


def ray_outcomes(requests: Sequence[Request], factory: Callable[[], Any], args: argparse.Namespace
                 ) -> Iterator[Outcome]:
    """One ``Outcome`` per request, in input order, from the Ray integration (``rerank_records`` of
    ``activeprp_integrations.ray``, found through the ``activeprp.runners`` entry point ``ray``) on the Ray cluster
    at ``--ray ADDRESS`` (``LOCAL_RAY``: a Ray started for this command on this machine and stopped after it; a
    Ray already running in this process is used as it is).

    Raises:
        InputError: the integration or Ray is not installed (names ``activeprp[ray]``).
        The comparator's error when a dead endpoint stopped a batch (a ``RayTaskError`` whose cause is not an
        ``ActivePRPError`` is raised as it is).
    """
    hint = 'rerank-run --ray needs the Ray integration: pip install "activeprp[ray]"'
    found = entry_points(group=RUNNERS, name="ray")
    if not found:
        raise InputError(hint)
    try:
        rerank_records = next(iter(found)).load()
    except ImportError as err:
        raise InputError(f"{hint} ({err})") from None
    records = [{"qid": qid, "query": query, "candidates": [{"id": c.id, "text": c.text} for c in candidates]}
               for qid, query, candidates in requests]
    try:
        rows = rerank_records(records, factory, address=None if args.ray == LOCAL_RAY else args.ray,
                              columns=["qid", *Outcome._fields], progress=progress_wanted(args.no_progress),
                              num_actors=args.ray_actors, num_gpus=args.ray_gpus, max_active=args.max_active,
                              use_async=args.comparator == "openai", settings=settings_from_args(args))
    except ImportError as err:
        raise InputError(str(err)) from None
    done = {row["qid"]: Outcome(row["order"], row["calls"] or 0, row["error"], row["failure"],
                                JudgeStats(**row["judge"]) if row.get("judge") else None) for row in rows}
    return (done[qid] for qid, _, _ in requests)


def check_out(path: str, directory: bool = False, parents: bool = False) -> None:
    """Raise ``InputError`` unless ``path`` can be written: as a file (the default; ``-`` is stdout) whose
    directory exists and is writable, or with ``parents`` whose directory ``mkdir -p`` can make; with
    ``directory``, as a directory that is there and writable or that ``mkdir -p`` can make. A directory that
    ``mkdir -p`` can make: the nearest part of it that exists is a writable directory. A file that names an open
    file descriptor (``trecfiles.named_fd``: ``/dev/stdout``, ``/dev/fd/N``) must be open for writing."""
    if path == STDOUT and not directory:
        return
    fd = None if directory else named_fd(path)
    if fd is not None:
        if not _open_for_writing(fd):
            raise InputError(f"{path}: file descriptor {fd} is not open for writing")
        return
    out = Path(os.path.realpath(path))  # write_run writes through a symlink
    if not directory and out.is_dir():
        raise InputError(f"{path}: is a directory, not a file")
    folder = out if directory else out.parent
    if not (directory or parents or folder.is_dir()):
        raise InputError(f"{path}: no such directory {str(folder)!r}")
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise InputError(f"{path}: {str(existing)!r} is a file, not a directory")
    if not os.access(existing, os.W_OK):
        raise InputError(f"{path}: directory {str(existing)!r} is not writable")


INPUT_FLAGS = ("run", "queries", "corpus", "qrels")


def check_out_is_no_input(args: argparse.Namespace) -> None:
    """Raise ``InputError`` when ``--out`` is one of the input files (by name, a symlink or a hard link: the same
    file, ``os.path.samefile``): the run would overwrite it. Stdout, a FIFO, a device and a file not there yet are
    none."""
    if not os.path.isfile(args.out):
        return
    for flag in INPUT_FLAGS:
        given = getattr(args, flag)
        with contextlib.suppress(OSError):  # an input not there: its own error comes when it is read
            if given and given != STDOUT and os.path.samefile(args.out, given):
                raise InputError(f"--out {args.out} is the --{flag} file {given}: the run would overwrite it")


def _open_for_writing(fd: int) -> bool:
    import fcntl  # POSIX, as are the names named_fd finds

    try:
        return (fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
    except OSError:  # not open
        return False


RAY_FLAGS = {"ray_actors": ("--ray", "without it nothing runs on Ray"),
             "ray_gpus": ("--ray", "without it nothing runs on Ray")}
"""``refuse_unused``'s table of the flags that do nothing without ``--ray``."""


def check_flags(args: argparse.Namespace) -> None:
    """Raise ``InputError`` for a flag given where it does nothing: ``--ray-actors`` / ``--ray-gpus`` without
    ``--ray``, a comparator flag the chosen ``--comparator`` does not use (``check_comparator_flags``)."""
    if args.ray is None:
        refuse_unused(args, RAY_FLAGS)
    check_comparator_flags(args)


def notes(args: argparse.Namespace) -> TextIO:
    """Where the command's notes go: stdout, or stderr when the run itself goes to stdout (``--out -``,
    ``/dev/stdout``)."""
    return sys.stderr if is_stdout(args.out) else sys.stdout


def note(args: argparse.Namespace, text: str) -> None:
    """Print one of the command's notes (``notes``), made ``printable`` and flushed: a write that fails (a full
    disk) is a ``RunWriteError`` naming the stream, which ``main`` ends with one error line."""
    stream = notes(args)
    with writing("stderr" if stream is sys.stderr else "stdout", in_place=True):
        print(printable(text, stream), file=stream, flush=True)


def out_name(args: argparse.Namespace) -> str:
    return "stdout" if args.out == STDOUT else args.out


def run_tag(text: str) -> str:
    """An argparse ``type`` for the run tag: a TREC run column (``trecfiles.check_token``) of the text as typed
    (``argv_text``), else a usage error."""
    text = argv_text(text)
    try:
        check_token("tag", text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


#: the users' summary in ``activeprp rerank-run --help`` (plain text; the module docstring is the developers')
_DESCRIPTION = """\
Rerank every query of a TREC run file with a pairwise LLM judge and write the
reranked run (TREC format). Each query's top --depth rows are reranked; with
--qrels, nDCG@10 before and after is printed. Every input file is checked
before the first LLM call. A query that fails is reported and left out (exit
status 1), unless --on-failure prior writes it in its input order.

Example (TREC DL 2019, the simulated judge; where to get the files and how to
make corpus.jsonl: docs/benchmarks.md, section "Getting the data"):
  activeprp rerank-run --run trec_results_dl19_top100.bm25.txt \\
      --queries topics.dl19-passage.txt --corpus corpus.jsonl \\
      --qrels qrels.dl19-passage.txt --comparator simulated --out reranked.run"""


#: what the settings shared by the run's queries say in ``activeprp rerank-run --help`` (``add_settings_args``'
#: ``helps``): one cap on calls in flight and one shared circuit breaker for all queries (``rerank_many``; each query
#: has its own as well); with ``--ray``, the cap per actor (its own comparator), the breaker per batch of rows (each
#: batch is one ``rerank_many``)
_SHARED_HELPS = {
    "max_concurrency": "most LLM calls in flight across all queries (with --ray: per actor)",
    "max_consecutive_failures": "calls in a row that may fail before a query's circuit breaker stops it; as many "
                                "beyond one query's stop the calls of every query (with --ray: per batch of rows; "
                                "with a comparator that batches queries, hf and bundled, a merged call's failures "
                                "all count there)",
}


def add_parser(subparsers: Any) -> None:
    """Register ``activeprp rerank-run``."""
    p = subparsers.add_parser("rerank-run", help="rerank every query of a TREC run file; write the reranked run",
                              description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    files = p.add_argument_group("files (.jsonl/.json names are read as JSONL, others as TSV)")
    files.add_argument("--run", required=True, help="TREC run: qid Q0 docid rank score tag; each query's rows "
                       "in trec_eval's order (score descending, ties by docid descending; rank is not used: any "
                       "token, 1.0 too)")
    files.add_argument("--queries", required=True, help="queries: qid<TAB>text, or JSONL with _id/qid and text")
    files.add_argument("--corpus", required=True, help="passages: docid<TAB>text, or JSONL with _id/docid/id, "
                                                       "text/contents and an optional title")
    files.add_argument("--out", required=True, help="the reranked TREC run to write (- or /dev/stdout for stdout; the "
                       "notes then go to stderr)")
    files.add_argument("--qrels", help="TREC qrels: print nDCG@10 of the input and the output (ir-measures); the "
                                       "graded labels of --comparator simulated")
    p.add_argument("--depth", type=count(minimum=1), default=None, metavar="N",
                   help="rerank (and write) each query's top N rows by score, as trec_eval orders them (default: "
                        "all)")
    p.add_argument("--tag", type=run_tag, default="activeprp", help="the run tag of OUT (6th column, no whitespace)")
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bars, over queries and the model's loading (bundled/hf) (stderr; shown "
                        "only when tqdm is installed and stderr is a terminal)")
    p.add_argument("--max-active", type=count(minimum=1), default=DEFAULT_MAX_ACTIVE, metavar="Q",
                   help="queries in progress at once: their rounds are merged into shared batches (default "
                        "%(default)s); bounds memory")
    ray = p.add_argument_group("Ray Data (pip install \"activeprp[ray]\")")
    ray.add_argument("--ray", nargs="?", const=LOCAL_RAY, type=ray_address, default=None, metavar="ADDRESS",
                     help="rerank on a Ray cluster: ADDRESS of an existing one (HOST:PORT, or ray://HOST:10001 with "
                          "pip install \"ray[client]\"; with RAY_AUTH_MODE=token and its token in RAY_AUTH_TOKEN or "
                          "~/.ray/auth_token); no ADDRESS, none or local = a new local Ray for this command "
                          "(RAY_ADDRESS is ignored)")
    ray.add_argument("--ray-actors", type=count(minimum=1), default=2, metavar="N", action=Given,
                     help="actors in the pool, each with its own comparator (default %(default)s)")
    ray.add_argument("--ray-gpus", type=seconds(allow_none=False, unit="GPUs"), default=None, metavar="G", action=Given,
                     help="GPUs per actor (local models)")
    add_settings_args(p, RerankSettings(budget=100), helps=_SHARED_HELPS)
    add_comparator_args(p, simulated="judges by the graded labels of --qrels with the noise calibrated to the paper's "
                        "judge (CALIBRATED_PARAMS; for dry runs)")
    p.set_defaults(func=main)


def comparator_factory(args: argparse.Namespace, requests: Sequence[Request],
                       qrels: Mapping[str, Mapping[str, int]] | None) -> Callable[[], Any]:
    """A picklable no-argument callable building the judge (once here, once per Ray actor with ``--ray``; an ``hf``
    model directory as its absolute path): ``SimulatedComparator.from_qrels`` with ``CALIBRATED_PARAMS`` for
    ``--comparator simulated`` (labels from ``qrels``; its set-up is printed), else ``make_comparator`` (which raises
    ``InputError`` saying why it cannot build one).

    Raises:
        InputError: the simulated judge's qrels are ambiguous (two queries with one text, different labels).
    """
    if args.comparator == "hf" and args.model:  # a Ray actor may run in another directory, or on another machine
        args = argparse.Namespace(**{**vars(args), "model": model_location(args.model)})
    if args.comparator != "simulated":
        return functools.partial(make_comparator, args)
    label = " ".join(f"{k}={v}" for k, v in CALIBRATED_PARAMS.items())
    note(args, f"simulated judge: labels from {args.qrels}, noise calibrated {label}")
    unjudged = [qid for qid, _, _ in requests if not (qrels or {}).get(qid)]
    if unjudged:
        note(args, f"note: {len(unjudged)} queries (e.g. {unjudged[0]}) have no judgments in {args.qrels}; the "
             "simulated judge sees all their passages as grade 0")
    factory = functools.partial(SimulatedComparator.from_qrels, qrels or {}, {qid: q for qid, q, _ in requests},
                                **CALIBRATED_PARAMS)
    try:
        factory()
    except ValueError as err:
        raise InputError(str(err)) from None
    return factory


def build_comparator(args: argparse.Namespace, requests: Sequence[Request],
                     qrels: Mapping[str, Mapping[str, int]] | None) -> Any:
    """The judge built by ``comparator_factory``.

    Raises:
        InputError: it cannot be built (see ``make_comparator``), or the simulated judge's qrels are ambiguous.
    """
    return comparator_factory(args, requests, qrels)()


def ndcg_line(qrels: Mapping[str, Mapping[str, int]], before: Mapping[str, Iterable[str]],
              after: Mapping[str, Iterable[str]], input_label: str = "input") -> str:
    """``nDCG@10 (ir-measures, N judged queries): input X -> reranked Y``: both means over the same queries, those
    of ``after`` that have judgments; ``before``/``after`` are ``{qid: docids best first}``. Queries of ``before``
    missing from ``after`` (failed ones) are left out of both, and the line says how many."""
    from .metrics import ndcg_at_k, ranking_to_run

    means = []
    for ranked in ({q: before[q] for q in after}, after):
        per_query = ndcg_at_k(qrels, {q: ranking_to_run(list(d)) for q, d in ranked.items()}, 10)
        means.append(sum(per_query.values()) / len(per_query) if per_query else float("nan"))
    left_out = len(set(before) - set(after))
    return (f"nDCG@10 (ir-measures, {len(per_query)} judged queries"
            f"{f'; {left_out} failed left out of both' if left_out else ''}): {input_label} {means[0]:.4f} -> "
            f"reranked {means[1]:.4f}")


def read_inputs(args: argparse.Namespace) -> tuple[list[Request], dict[str, dict[str, int]] | None]:
    """Every input read and checked before any comparator is built (prints what was read).

    Raises:
        InputError: a bad file, path or option (``FILE:LINE: reason``), a flag that does nothing here
            (``check_flags``), or ``--qrels`` that judge none of the run's queries (no nDCG to print, no labels
            for the simulated judge).
    """
    check_flags(args)
    if args.comparator == "simulated" and not args.qrels:
        raise InputError("--comparator simulated needs --qrels QRELS (its graded labels)")
    check_out(args.out)  # before the reading, which takes a while on a large corpus
    check_out_is_no_input(args)
    run, requests = read_run_candidates(args.run, args.queries, args.corpus, args.depth)
    qrels = read_qrels(args.qrels) if args.qrels else None
    if qrels is not None:
        require_extra("--qrels", EVAL_EXTRA, "ir_measures")
        if requests and not any(qrels.get(qid) for qid, _, _ in requests):  # nothing to score, no labels to judge by
            raise InputError(f"--qrels {args.qrels} judges none of the {len(requests)} queries of --run {args.run} "
                             f"(e.g. {requests[0][0]}): the qrels of another collection?")
    read, kept = sum(map(len, run.values())), sum(len(c) for _, _, c in requests)
    note(args, f"read {read} lines ({len(run)} queries) from {args.run}; reranking {kept} "
         f"(depth {args.depth or 'all'}) with ranker={args.ranker} oracle={args.oracle} budget={args.budget} "
         f"top_k={args.top_k} comparator={args.comparator}")
    disagree = rank_disagreements(run)
    if disagree:
        note(args, f"note: the rank column of {len(disagree)} queries (e.g. {disagree[0]}) disagrees with their "
             "scores; their rows are taken by score, as trec_eval and ir-measures read them")
    return requests, qrels


def start(args: argparse.Namespace, requests: Sequence[Request], qrels: Mapping[str, Mapping[str, int]] | None
          ) -> tuple[Comparator | None, float, Iterator[Outcome]]:
    """The comparator to close at the end (None with ``--ray``: each actor builds its own), the start time and
    the lazy outcomes (``rerank_requests`` or ``ray_outcomes``)."""
    if args.ray is None:
        progress = progress_wanted(args.no_progress)
        with model_bars(args, progress):
            comparator = as_comparator(build_comparator(args, requests, qrels))
        return comparator, time.perf_counter(), rerank_requests(requests, comparator, args, progress)
    factory = comparator_factory(args, requests, qrels)
    if args.comparator in ("simulated", "openai"):  # cheap to build: its errors show here, before Ray starts
        factory().close()
    else:  # a local model: not loaded here, but a Ray on this machine loads it from the same place
        check_comparator(args, here=args.ray == LOCAL_RAY)
    return None, time.perf_counter(), ray_outcomes(requests, factory, args)


class Written:
    """What went to OUT: the reranked queries (qid -> docids), every query's calls, the failed qids, and how many
    queries degraded."""

    def __init__(self) -> None:
        self.reranked: dict[str, list[str]] = {}
        self.calls: list[int] = []
        self.failed: list[str] = []
        self.degraded = 0
        self.judges: list[JudgeStats | None] = []

    def ranked_lists(self, requests: Sequence[Request], outcomes: Iterable[Outcome], on_failure: str
                     ) -> Iterator[tuple[str, list[str]]]:
        """``(qid, docids best first)`` per query to write; a failed query is reported on stderr and skipped
        (written in its input order with ``on_failure="prior"``)."""
        for (qid, _, candidates), outcome in zip(requests, outcomes):
            self.calls.append(outcome.calls)
            self.judges.append(outcome.judge)
            order = outcome.order
            if order is None:
                self.failed.append(qid)
                print(printable(f"activeprp: query {qid} failed: {outcome.error}"), file=sys.stderr)
                if on_failure != "prior":
                    continue
                order = list(range(len(candidates)))  # its input order
            self.degraded += outcome.failure is not None
            self.reranked[qid] = [candidates[i].id for i in order]
            yield qid, self.reranked[qid]


def report(args: argparse.Namespace, requests: Sequence[Request], qrels: Mapping[str, Mapping[str, int]] | None,
           written: Written) -> int:
    """Print the notes and nDCG@10 (with ``--qrels``); the exit status (1 when queries failed without
    ``--on-failure prior``)."""
    failed, reranked = written.failed, written.reranked
    if written.degraded or (failed and args.on_failure == "prior"):
        note(args, f"note: {written.degraded} queries degraded to the prior order for what was unknown; "
             f"{len(failed)} failed queries were written in their input order (--on-failure prior)")
    if qrels is not None and reranked:
        before = {q: [c.id for c in cands] for q, _, cands in requests}
        label = "input" if args.depth is None else f"input top {args.depth}"
        note(args, ndcg_line(qrels, before, reranked, label))
    if failed and args.on_failure != "prior":
        shown = ", ".join(failed[:10]) + (", ..." if len(failed) > 10 else "")
        holds = (f"{out_name(args)} holds the other {len(reranked)}" if reranked else
                 f"nothing was written to {out_name(args)}")
        return fail(f"{len(failed)} of {len(requests)} queries failed ({shown}); {holds}", 1)
    return 0


def write_failure(args: argparse.Namespace, error: RunWriteError, written: Written, total: int) -> str:
    """The error line of a write to OUT that failed (``RunWriteError``): why, how far the queries had gone and
    the LLM calls they spent, and what OUT holds. Stdout is discarded when it was OUT (see ``discard_stdout``)."""
    if is_stdout(args.out):
        discard_stdout()
    name = out_name(args)
    done = (f"{name}: cannot write ({error.strerror}) with {len(written.calls)} of {total} queries done "
            f"({sum(written.calls)} LLM calls)")
    if error.in_place:
        went = "the lines before it" if error.lines is None else f"{error.lines or 'no'} line{'s' * (error.lines != 1)}"
        return f"{done}; {went} went out"
    return f"{done}, whose lines are lost; {name} is as it was"


@contextlib.contextmanager
def sigterm_exits(status: int | None = None) -> Iterator[None]:
    """Within the block, SIGTERM raises ``SystemExit(status)`` (default 143, 128 + SIGTERM), so that cleanups run as
    for Ctrl-C (``write_run`` removes OUT's temporary file); outside the main thread, nothing changes (no handler
    can be set there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum if status is None else status)

    before = signal.signal(signal.SIGTERM, exit_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def notes_failure(error: RunWriteError, what: str | None) -> str:
    """The error line of a note that could not be written (``note``): why, and ``what`` went to OUT (None: the
    queries were not reranked yet, so OUT is as it was)."""
    if error.filename == "stdout":
        discard_stdout()
    return f"{error.filename}: cannot write the notes ({error.strerror}); {what or 'no query was reranked'}"


def main(args: argparse.Namespace) -> int:
    """Handler of ``activeprp rerank-run``: check every input, rerank all queries (``rerank_many`` or Ray), write
    OUT, print counts (and nDCG@10 with ``--qrels``); report failed queries (see the module docstring)."""
    what = None
    try:
        requests, qrels = read_inputs(args)
        comparator, started, outcomes = start(args, requests, qrels)
        written = Written()
        try:
            with sigterm_exits(), contextlib.closing(outcomes):  # closed: a write error stops the queries left
                # every query failed: a run from before stays, not an empty file (the error line says so)
                lines = write_run(args.out, written.ranked_lists(requests, outcomes, args.on_failure), tag=args.tag,
                                  write_empty=False)
        except RunWriteError as error:
            return fail(write_failure(args, error, written, len(requests)), 1)
        finally:
            if comparator is not None:  # comparators holding a client or a file
                comparator.close()
        calls = written.calls
        what = (f"wrote {lines} lines ({len(written.reranked)} queries) to {out_name(args)}" if lines else
                f"wrote nothing ({out_name(args)} left as it was)")
        note(args, f"{what} in {time.perf_counter() - started:.1f} s; LLM calls: {sum(calls)} total, at most "
             f"{max(calls, default=0)} per query")
        note(args, f"judge (all queries): {pooled(written.judges).summary()}")
        return report(args, requests, qrels, written)
    except RunWriteError as error:  # a note's (OUT's is answered above)
        return fail(notes_failure(error, what), 1)
