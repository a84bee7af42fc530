r"""``activeprp bench``: the benchmark harness (grid, calibration, overhead) on local test collections.

``--data DIR`` names the directory that holds the collections (the layout each loader reads is in
docs/benchmarks.md); nothing is read from a default path. Examples (from the repository root, data in
``../shared/data``)::

    activeprp bench grid --data ../shared/data --out benchmarks/results/sim_dl1920     # the paper's Table 1 grid
    activeprp bench grid --data ../shared/data --comparator bundled --collections dl19 --queries 20 --depth 30 \
        --scale-budgets
    activeprp bench calibrate --data ../shared/data --out benchmarks/results/calibration
    activeprp bench overhead --out benchmarks/results/overhead
    activeprp bench flip --data ../shared/data --comparator bundled --mode ab --collections dl19 --queries 10
    activeprp bench grid --data ../shared/data --max-rounds none 10 --rankers parallel_mohajer mohajer \
        --out /tmp/latency
    activeprp bench walltime --data ../shared/data --rankers auto --oracles auto --budgets 50 --max-rounds 6 \
        --depth 20 --top-k 3
    activeprp bench auto-table --from-csv ROWS...   # the shipped table: the command in its own "source"
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import inspect
import json
import lzma
import random
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

from activeprp_cli import encodable, progress_wanted, require_extra
from activeprp_cli.rerank import (
    DEFAULT_BATCH_SIZE,
    Given,
    add_judge_args,
    count,
    judge_options,
    model_bars,
    refuse_unused,
    seconds,
)
from activeprp_cli.rerank_run import check_out, out_name
from activeprp_cli.trecfiles import STDOUT, json_type, read_json
from activeprp_core.comparators.hf import BATCH_SIZE
from activeprp_core.errors import InputError, scrub

from .instrumented import CALL_LATENCY_S, CALLS_IN_FLIGHT


def _sim_knobs(spec: str) -> dict[str, float]:
    """``--sim-params``' type: the simulator knobs of a JSON object or of a calibration JSON file (its
    ``params``), checked by building a ``SimulatedComparator`` with them (its own check of each knob's type and
    range, so that a bad knob fails here, not in the grid; a name that is not one of its keyword knobs is refused
    before, saying which they are). ``seed`` is refused: the judge's noise realisation is
    ``--judge-seed``, one flag for one setting (with both, one would override the other unseen, and the rows
    would not say which). A usage error names the file where ``spec`` is one."""
    from activeprp_core.comparators.simulated import SimulatedComparator

    is_file = Path(spec).is_file()
    expected = f"expected simulator knobs as a JSON object or file: {spec if is_file else repr(spec)}"
    try:
        data = json.loads(Path(spec).read_text(encoding="utf-8") if is_file else spec)
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{expected}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:  # UnicodeDecodeError too
        raise argparse.ArgumentTypeError(f"{expected}: {'not JSON' if is_file else 'no such file, not JSON'} "
                                         f"({err})") from None
    try:
        knobs = data.get("params", data) if isinstance(data, dict) else data
        if not isinstance(knobs, dict):
            raise TypeError(f"{'params' if knobs is not data else 'the JSON'}: expected an object, got "
                            f"{type(knobs).__name__}")
        if "seed" in knobs:
            raise ValueError("seed: not a knob here, the simulated judge's noise realisation is --judge-seed N")
        names = [p.name for p in inspect.signature(SimulatedComparator).parameters.values()
                 if p.kind is p.KEYWORD_ONLY and p.name != "seed"]
        unknown = [k for k in knobs if k not in names]  # labels, its positional argument: "got multiple values"
        if unknown:
            raise TypeError(f"SimulatedComparator: {unknown[0]} is not a knob, got {json_type(knobs[unknown[0]])}; "
                            f"expected one of {', '.join(names)}")
        SimulatedComparator({}, **knobs)
    except (ValueError, TypeError) as err:
        raise argparse.ArgumentTypeError(f"{expected}: {err}") from None
    return dict(knobs)


def _sim_params(args) -> dict[str, float]:
    """``--sim-params``' knobs, or the committed calibration when it is not given."""
    from activeprp_core.comparators.simulated import CALIBRATED_PARAMS

    return dict(CALIBRATED_PARAMS if args.sim_params is None else args.sim_params)


def _existing_file(path: str) -> str:
    """An argparse type: ``path`` unchanged when it names a file."""
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {path!r}")
    return path


def _pair(spec: str) -> str:
    """``--paired``' type: ``A:B``, two ranker names."""
    if len(spec.split(":")) != 2 or not all(spec.split(":")):
        raise argparse.ArgumentTypeError(f"expected A:B, two rankers, got {spec!r}")
    return spec


#: ``--paired``'s default: the pairs of the paper's Tables A.2/A.3, left out quietly where the grid lacks a ranker.
PAIRED = ["mohajer_bubble:bubblesort", "mohajer_bubble:heapsort"]


def _check_paired(paired: list[str], rankers) -> None:
    """Raises InputError for a ``--paired`` ranker outside the grid's ``rankers``, so that a misspelt pair stops the
    run before it starts instead of printing nothing; the default pairs (``PAIRED``) are not checked."""
    if paired is PAIRED:  # argparse hands the default object itself when --paired is not given
        return
    for spec in paired:
        missing = [r for r in spec.split(":") if r not in rankers]
        if missing:
            raise InputError(f"--paired {spec}: the grid has no ranker {missing[0]} "
                             f"(it has {' '.join(sorted(rankers))})")


def _check_out(path: str, flag: str = "--out", **kind: bool) -> None:
    """``rerank_run.check_out(path, **kind)``, its InputError naming ``flag``."""
    try:
        check_out(path, **kind)
    except InputError as err:
        raise InputError(f"{flag} {err}") from None


def _out_dir(path: str, flag: str = "--out") -> Path:
    """``path`` (given as ``flag``) made as the output directory (``mkdir -p``).

    Raises:
        InputError: it cannot be one (``rerank_run.check_out``: a file in the way, not writable) or mkdir fails.
    """
    _check_out(path, flag, directory=True)
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{flag} {path}: cannot make the directory ({err.strerror or err})") from None
    return Path(path)


#: What reading a file that is not a rows file of ``bench grid`` raises (``grid.read_csv``, ``autotable.read_family``):
#: an unknown or missing column, a bad value, not gzip/xz, a truncated archive, broken CSV.
_ROWS_ERRORS = (KeyError, ValueError, TypeError, OSError, EOFError, lzma.LZMAError, zlib.error, csv.Error)


@contextlib.contextmanager
def _rows_files(paths: str) -> Iterator[None]:
    """Within the block, reading the rows files ``paths`` (as shown to the user) raises InputError where one is
    not a rows file of ``activeprp bench grid``."""
    try:
        yield
    except _ROWS_ERRORS as err:
        detail = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise InputError(f"--from-csv {paths}: not a rows file of activeprp bench grid "
                         f"({type(err).__name__}: {detail})") from None


def _auto_table_file(flag: str, path: str) -> dict:
    """The auto table in the JSON file ``path``, given as ``flag`` (``--base``, ``--reference``).

    Raises:
        InputError: naming ``flag`` and ``path``: the file cannot be read (missing, a directory, not UTF-8), is not
            JSON, or is not an auto table (``activeprp_core.rankers.auto.check_table``).
    """
    from activeprp_core.rankers.auto import check_table

    try:
        table = read_json(path)
    except OSError as err:
        raise InputError(f"{flag} {path}: cannot read it ({err.strerror or err})") from None
    except InputError as err:
        raise InputError(f"{flag} {err}") from None
    try:
        return check_table(table)
    except ValueError as err:
        raise InputError(f"{flag} {path}: not an auto table ({err})") from None


def _cell_pair(spec: str) -> str:
    """``--compare``' type: ``A:B``, two cells ``ranker/oracle/budget/max_rounds`` (``report.parse_cell``)."""
    from .report import parse_cell

    try:
        if len(spec.split(":")) != 2:
            raise ValueError(f"expected A:B, two cells, got {spec!r}")
        for cell in spec.split(":"):
            parse_cell(cell)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return spec


def _check_compare(specs: list[str], rankers, oracles, budgets, caps) -> None:
    """Raises InputError for a ``--compare`` cell outside the grid's rankers, oracles, budgets and round caps
    (budgets and caps as rows hold them: -1 = no cap), so that a misspelt cell stops the run before it starts."""
    from .report import parse_cell

    for spec in specs:
        for cell in spec.split(":"):
            ranker, oracle, budget, cap = parse_cell(cell)
            if (ranker not in {*rankers, "best"} or (ranker != "best" and oracle not in oracles)
                    or budget not in budgets or cap not in caps):
                raise InputError(f"--compare {spec}: the grid has no cell {cell}")


def _collections(args):
    """The collections of ``--collections`` under ``--data``, cut to ``--queries`` and ``--depth``.

    Raises:
        InputError: no ``--data``, a file a collection needs is not there, or one that is broken (not UTF-8, not
            JSON, truncated, a line not in the collection's layout), each naming ``--data`` and the file; or qrels
            that judge none of a collection's queries or none of their candidates (``_check_judged``).
    """
    from .datasets import load_named

    if not args.data:
        raise InputError("--data DIR is required: the directory holding the collections (e.g. ../shared/data; "
                         "where to get them: docs/benchmarks.md, section \"Getting the data\")")
    try:
        return [_check_judged(load_named(n, args.data)).subset(args.queries, args.depth) for n in args.collections]
    except FileNotFoundError as err:
        raise InputError(f"--data {args.data}: no such file: {err.filename}") from None
    except InputError as err:
        raise InputError(f"--data {args.data}: {err}") from None


def _check_judged(coll):
    """``coll`` when its qrels judge at least one of its queries and one candidate of those, over all its
    candidates (a small ``--depth`` may rightly cut every judged one); else InputError naming the collection.
    Otherwise a grid divides by zero queries, and flip and walltime measure nothing, or every nDCG is 0."""
    if not coll.qids:
        raise InputError(f"{coll.name}: no query has a judgment: the qrels' query ids match none of its "
                         f"{len(coll.candidates)} queries")
    if not any(c.id in coll.qrels[q] for q in coll.qids for c in coll.candidates[q]):
        raise InputError(f"{coll.name}: no candidate has a judgment: the qrels' document ids match none of the "
                         f"candidates of its {len(coll.qids)} judged queries")
    return coll


def _check_judge(args) -> None:
    """Raises InputError for ``--comparator openai`` without ``--model``."""
    if args.comparator == "openai" and not args.model:
        raise InputError("--comparator openai needs --model NAME")


def _judge_names(args) -> list[str]:
    """The names given as ``--judge NAME`` and ``--judges family`` ([] in a mode without them)."""
    return list(getattr(args, "judge", None) or []) + ([args.judges] if getattr(args, "judges", None) else [])


#: The comparators each comparator flag of ``activeprp bench`` configures; with another it does nothing.
_COMPARATOR_FLAGS = {"mode": ("bundled",), "batch_size": ("bundled",), "throughput_pairs": ("bundled",),
                     "model": ("openai",), "base_url": ("openai",), "api_key": ("openai",),
                     "max_reply_bytes": ("openai",), "judge_timeout": ("openai",), "judge_retries": ("openai",),
                     "cache": ("bundled", "openai"), "sim_params": ("simulated",), "judge_seed": ("simulated",)}

#: grid's flags that only a grid of bench judges (the family grid) reads.
# --jobs is not among them: a resource setting, harmless where unread, and committed commands give it to plain grids
_FAMILY_FLAGS = ("rows_cache", "refresh", "judge_tag")


def _refuse_unused(args) -> None:
    """Raises InputError (one line, exit 2) for a flag given that this mode, with the other flags given, does not
    read, so that it cannot look applied (config.json records it): a comparator flag of another ``--comparator``
    (``_COMPARATOR_FLAGS``), ``--sim-params`` with bench judges, the family grid's flags without them,
    overhead's collection flags without the model whose speed they serve, and calibrate's ``--sim-params``
    without ``--check`` or ``--pair-noise`` with it. A flag no combination of a mode reads is not in its parser."""
    kind = getattr(args, "comparator", "simulated")
    refuse_unused(args, {dest: (f"--comparator {' or '.join(users)}", f"--comparator {kind} does not use it")
                         for dest, users in _COMPARATOR_FLAGS.items() if kind not in users})
    if _judge_names(args):
        refuse_unused(args, {"sim_params": ("the calibrated simulator", "--judge/--judges answer instead")})
    elif args.bench_mode == "grid":
        refuse_unused(args, dict.fromkeys(_FAMILY_FLAGS, ("--judge or --judges", "only a grid of bench judges "
                                                                              "reads it")))
    if args.bench_mode == "overhead" and kind != "bundled":
        refuse_unused(args, dict.fromkeys(("data", "collections", "queries", "depth"), (
            "--comparator bundled", "overhead reads a collection only to time the model")))
    if args.bench_mode == "calibrate":
        refuse_unused(args, {"pair_noise": ("no --check", "--check measures --sim-params, its pair_noise too")}
                      if args.check else {"sim_params": ("--check", "the fit starts from its own knobs")})


def _judges(args) -> list[str]:
    """The judge names of ``--judge NAME`` (repeatable) and ``--judges family`` (``judges.resolve_judges``),
    kept only where they cover every chosen collection at ``--depth`` (default 100); [] when neither is given
    (the calibrated simulator of ``--sim-params``, as before). Raises InputError for an unknown judge, one that
    does not cover the setting, or judges combined with a ``--comparator`` other than ``simulated``."""
    from .judges import resolve_judges

    names = _judge_names(args)
    if not names:
        return []
    if getattr(args, "comparator", "simulated") != "simulated":
        raise InputError(f"--judge/--judges choose a bench judge: drop --comparator {args.comparator}")
    try:
        per_coll = [resolve_judges(names, args.depth or 100, c) for c in args.collections]
    except ValueError as err:
        raise InputError(str(err)) from None
    return [n for n in per_coll[0] if all(n in names_c for names_c in per_coll)]


def _comparator_for(args, out: Path, judge: str | None = None):
    """``collection -> (qid -> comparator)`` for the chosen backend (real models behind the disk cache), or the
    bench judge ``judge`` (``judges.comparator_for`` at ``--judge-seed``)."""
    from .grid import simulator_factory

    if judge:
        from .judges import comparator_for

        return comparator_for(judge, args.judge_seed)
    if args.comparator == "simulated":
        params = _sim_params(args)
        return lambda c: simulator_factory(c, params, args.judge_seed)
    from .cached import CachedComparator, identity

    if args.comparator == "bundled":
        from activeprp_core.comparators import TransformersComparator

        inner = TransformersComparator.from_bundled(args.mode, batch_size=args.batch_size, device="cpu")
        name = f"smollm2-135m-q4_1/{args.mode}"
    else:
        from activeprp_core.comparators import OpenAIChatComparator
        from activeprp_core.comparators.openai_chat import url_credentials

        inner = OpenAIChatComparator(args.model, base_url=args.base_url, api_key=args.api_key, **judge_options(args))
        name = f"openai/{url_credentials(args.base_url).url}/{args.model}"  # the cache's key: no password in it
        name += "" if inner.logprobs else "/no-logprobs"  # hard answers: never mixed with soft ones in the cache
    cached = CachedComparator(inner, args.cache or out / "answers.sqlite", identity(inner, name))
    return lambda c: (lambda qid: cached)


def _report(rows, out: Path, seed: int, paper: bool, paired: list[str], top_k: int = 10,
            compare: list[str] | None = None) -> str:
    import numpy as np

    from .report import (
        Summary,
        compare_table,
        markdown_table,
        paired_table,
        pareto_plot,
        pareto_table,
        plot,
    )

    summary = Summary(rows, np.random.default_rng(seed))
    metric = f"nDCG@{top_k}"
    parts = [f"## {metric} (%), mean ±95% bootstrap CI half-width over seeds" +
             (" (paper Table 1 in brackets)" if paper else ""), markdown_table(summary, "ndcg", paper),
             "## LLM calls per query", markdown_table(summary, "calls"),
             "## Sequential rounds per query", markdown_table(summary, "rounds"),
             f"## Wall time per query (s) at {summary.latency_s:g} s per call, {summary.in_flight} calls in flight "
             "(modelled from each round's calls)",
             markdown_table(summary, "wall"),
             f"## Pareto front (mean calls, mean rounds, {metric}) over all cells", pareto_table(summary)]
    rankers = {r for r, *_ in summary.keys}
    for spec in paired:
        a, b = spec.split(":")
        if {a, b} <= rankers:
            parts += [f"## Paired bootstrap over queries: {a} vs {b} (10k resamples, p < 0.05)",
                      paired_table(summary, a, b, np.random.default_rng(seed))]
    if compare:
        parts += [f"## Cells compared, paired over queries ({metric} points; 10k resamples)",
                  compare_table(summary, compare, np.random.default_rng(seed))]
    text = "\n\n".join(parts) + "\n"
    (out / "tables.md").write_text(text, encoding="utf-8")
    plot(summary, out / "ndcg_vs_budget.png", "budget", top_k)
    plot(summary, out / "ndcg_vs_rounds.png", "rounds", top_k)
    pareto_plot(summary, out / "pareto.png")
    return text


def _grid(args) -> int:
    from .grid import SLIM_COLUMNS, read_csv, row_cap, run_grid, write_csv
    from .report import paper_setting

    out = Path(args.out)
    if args.from_csv:
        rows = []
        for path in args.from_csv:
            with _rows_files(path):
                rows += read_csv(path)
        if not rows:
            raise InputError(f"--from-csv {' '.join(args.from_csv)}: no rows, only a header")
        _check_compare(args.compare, {r.ranker for r in rows}, {r.oracle for r in rows}, {r.budget for r in rows},
                       {r.max_rounds for r in rows})
        _check_paired(args.paired, {r.ranker for r in rows})
        _out_dir(args.out)
    else:
        _check_judge(args)
        colls = _collections(args)
        budgets = args.budgets
        if args.scale_budgets:
            n = min(len(c.candidates[q]) for c in colls for q in c.qids)
            budgets = _scaled(budgets, n)
        seeds = {"bidirectional": [0], "single": [0], "randomized": list(range(args.seeds))}
        judges = _judges(args)
        for name in args.refresh:
            if name not in {*judges, *args.oracles}:
                raise InputError(f"--refresh {name}: not a judge or oracle of this grid (it has "
                                 f"{' '.join([*judges, *args.oracles])})")
        _check_compare(args.compare, args.rankers, args.oracles, set(map(row_cap, budgets)),
                       set(map(row_cap, args.max_rounds)))
        _check_paired(args.paired, set(args.rankers))
        _out_dir(args.out)
        if judges:  # the family grid: worker processes, rows cached per judge x ranker x oracle
            from .family import run_family_grid

            rows = run_family_grid(args.data, args.collections, judges, args.rankers, args.oracles, budgets,
                                   args.max_rounds, seeds, top_k=args.top_k, queries=args.queries, depth=args.depth,
                                   judge_seed=args.judge_seed, cache=args.rows_cache or out / "rows_cache",
                                   jobs=args.jobs, refresh=args.refresh, tag=args.judge_tag)
        else:
            with model_bars(args, progress_wanted(args.no_progress)):
                rows = run_grid(colls, _comparator_for(args, out), args.rankers, args.oracles, budgets, seeds,
                                args.top_k, progress=progress_wanted(args.no_progress), max_rounds=args.max_rounds)
        if judges:  # millions of slim rows: xz, a third of gzip's size; it replaces this grid's older .gz file
            write_csv(rows, out / "rows.csv.xz", SLIM_COLUMNS)
            (out / "rows.csv.gz").unlink(missing_ok=True)
        else:
            write_csv(rows, out / "rows.csv.gz")
        (out / "config.json").write_text(json.dumps(_config(args, budgets), indent=1, default=str), encoding="utf-8")
    top_k = rows[0].top_k if rows else args.top_k
    baseline = _baseline(args, top_k) if not args.from_csv else ""
    paper = not (args.no_paper or args.scale_budgets) and paper_setting(rows)
    judges = sorted({r.judge for r in rows})
    if len(judges) < 2:
        print(encodable(baseline + _report(rows, out, args.bootstrap_seed, paper, args.paired, top_k, args.compare)))
        return 0
    from .regret import regret_report

    for judge in judges:  # one report per judge in OUT/<judge>/, the family's regret table in OUT/tables.md
        (out / judge).mkdir(exist_ok=True)
        _report([r for r in rows if r.judge == judge], out / judge, args.bootstrap_seed, False, args.paired, top_k,
                args.compare)
    text = regret_report(rows)
    (out / "tables.md").write_text(text, encoding="utf-8")
    print(encodable(baseline + text))
    return 0


def _scaled(budgets: list[int | None], n: int) -> list[int | None]:
    """``--scale-budgets``: each budget times ``n``/100, rounded, once each in the order given; a positive budget
    keeps at least 1 call, and 0 (no call) and None (no cap) stay as they are."""
    return list(dict.fromkeys(b if not b else max(1, round(b * n / 100)) for b in budgets))


def _config(args, budgets) -> dict:
    """What OUT/config.json records: the command line, the budgets run and every option, with the API key and a
    credentials in ``--base-url`` replaced by ``***`` (the project commits these files)."""
    from activeprp_core.comparators.openai_chat import url_credentials

    secrets = [args.api_key, *url_credentials(args.base_url).secrets]

    def clean(value):
        if isinstance(value, list):
            return [clean(v) for v in value]
        return scrub(value, secrets) if isinstance(value, str) else value

    options = {k: clean(v) for k, v in vars(args).items() if k not in ("func", "given_flags", "budgets")}
    return {"argv": clean(sys.argv[1:]), "budgets": budgets, **options}  # the budgets as given are in argv


def _baseline(args, top_k: int = 10) -> str:
    """The line of the first stage's nDCG@``top_k`` (%) per collection, the grid's metric."""
    colls = _collections(args)
    vals = {c.name: c.first_stage_ndcg(top_k) for c in colls}
    return f"First stage nDCG@{top_k}: " + ", ".join(
        f"{n} {100 * sum(v.values()) / len(v):.2f}" for n, v in vals.items()) + "\n\n"


def _calibrate(args) -> int:
    from .calibration import calibrate

    colls = _collections(args)
    out = _out_dir(args.out)
    if args.check:
        from .calibration import Calibration, converged_quality, flip_rate

        params = _sim_params(args)
        conv = converged_quality(colls, params, args.judge_seed)
        cal = Calibration(params, flip_rate(colls, params, args.judge_seed), conv.pop("mean"), conv, args.judge_seed)
        name = "check"
    else:
        cal, name = (calibrate(colls, pair_noise=args.pair_noise, seed=args.judge_seed),
                     f"pair_noise_{args.pair_noise}")
    text = json.dumps(vars(cal), indent=1)
    (out / f"calibration_{name}.json").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def _flip(args) -> int:
    from .calibration import measured_flip_rate

    _check_judge(args)
    colls, judges = _collections(args), _judges(args)
    out = _out_dir(args.out)
    for judge in judges or [""]:
        with model_bars(args, progress_wanted(False)):  # flip has no --no-progress: a bar on a terminal only
            rate, pairs = measured_flip_rate(_comparator_for(args, out, judge), colls,
                                             args.pairs_per_query, random.Random(args.seed))
        name = judge or args.comparator + (f" {args.mode}" if args.comparator == "bundled" else "")
        text = f"{name}: flip rate {100 * rate:.1f}% of {pairs} pairs (both slot orders asked)\n"
        (out / f"flip_{name.replace(' ', '')}.md").write_text(text, encoding="utf-8")
        print(text)
    return 0


def _overhead(args) -> int:
    from .grid import PAPER_RANKERS
    from .overhead import comparator_throughput, scheduling_overhead

    out = _out_dir(args.out)
    budgets = args.budgets != [None]  # a budget column only when budgets were asked for
    lines = ["| Ranker | Oracle |" + (" budget |" if budgets else "") + " calls/query | µs per call |",
             "|---|---|" + ("---:|" if budgets else "") + "---:|---:|"]
    for budget in args.budgets:
        column = f" {'none' if budget is None else budget} |" if budgets else ""
        for r in scheduling_overhead(args.rankers or PAPER_RANKERS, args.oracles, budget=budget,
                                     repeats=args.repeats):
            lines.append(f"| {r['ranker']} | {r['oracle']} |{column} {r['calls_per_query']:.1f} | "
                         f"{r['us_per_call']:.1f} |")
    if args.comparator == "bundled":
        from activeprp_core.comparators import TransformersComparator

        coll = _collections(args)[0]
        qid = coll.qids[0]
        cands = coll.candidates[qid]
        # disjoint pairs: no passage is scored twice (query-likelihood caches passage scores)
        pairs = [(cands[2 * i], cands[2 * i + 1]) for i in range(min(args.throughput_pairs, len(cands) // 2))]
        for batch in (1, args.batch_size):
            judge = TransformersComparator.from_bundled(args.mode, batch_size=batch, device="cpu")
            t = comparator_throughput(judge, coll.queries[qid], pairs)
            lines.append(f"\nbundled {args.mode} batch_size={batch}: single {t['single_calls_per_s']:.2f} calls/s, "
                         f"batched {t['batched_calls_per_s']:.2f} calls/s over {int(t['pairs'])} pairs")
    text = "\n".join(lines) + "\n"
    (out / "overhead.md").write_text(text, encoding="utf-8")
    print(encodable(text))
    return 0


def _walltime(args) -> int:
    from itertools import product

    from activeprp_cli.demo import current_load

    from .grid import make_ranker, simulator_factory
    from .instrumented import SleepingComparator
    from .overhead import measured_wall_time

    colls, judges = _collections(args), _judges(args)
    out = _out_dir(args.out)
    load_start = current_load()
    lines = [f"Sleeping comparator: {args.latency} s per call, {args.in_flight} calls in flight (arerank); modelled "
             "= sum over rounds of ceil(calls / in_flight) x latency.", "",
             "| judge | collection | qid | N | K | ranker | oracle | runs as | budget | max_rounds | rounds | calls "
             "| measured s | modelled s |", "|---|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for judge_name, coll in product(judges or [""], colls):
        judge_for = (_comparator_for(args, out, judge_name)(coll) if judge_name
                     else simulator_factory(coll, _sim_params(args), args.judge_seed))
        for qid, ranker, oracle, budget, cap in product(coll.qids, args.rankers, args.oracles, args.budgets,
                                                        args.max_rounds):
            judge = SleepingComparator(judge_for(qid), args.latency, args.in_flight)
            t = measured_wall_time(coll.queries[qid], coll.candidates[qid], judge, ranker=make_ranker(ranker),
                                   oracle=oracle, budget=budget, max_rounds=cap, top_k=args.top_k)
            lines.append(f"| {judge_name or 'simulated'} | {coll.name} | {qid} | {len(coll.candidates[qid])} "
                         f"| {args.top_k} | {ranker} | {oracle} "
                         f"| {t['runs_as']} | {budget} | {cap} | {t['rounds']:.0f} | {t['calls']:.0f} | "
                         f"{t['measured_s']:.2f} | {t['modelled_s']:.2f} |")
            print(lines[-1], flush=True)
    # measured minus modelled grows with the machine's load (the event loop waits for a core), so the file says it
    lines[0] += f" Load on the machine: {load_start:.1f} at the start, {current_load():.1f} at the end."
    (out / "walltime_check.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


def _shipped_table_out() -> str:
    """``auto-table --out``'s default: the table that ranker ``auto`` reads (``activeprp_core/data``) when
    ``activeprp_core`` is imported from a source checkout (a ``pyproject.toml`` beside it), relative to the working
    directory where it lies under it. The default was the relative path ``activeprp_core/data/auto_table.json``: from
    anywhere but the repository root it wrote a table that nothing reads, and said it had replaced the shipped one.

    Raises:
        InputError: ``activeprp_core`` is an installed package, whose files pip owns: ``--out`` must be given.
    """
    import activeprp_core
    from activeprp_core.rankers.auto import TABLE

    package = Path(activeprp_core.__file__).resolve().parent
    table = package / "data" / TABLE
    if not (package.parent / "pyproject.toml").is_file():
        raise InputError(f"--out is needed: the table ranker 'auto' reads ({table}) belongs to an installed package, "
                         "which a rebuild does not overwrite; give --out PATH (or run from a source checkout)")
    with contextlib.suppress(ValueError):
        return str(table.relative_to(Path.cwd().resolve()))
    return str(table)


def _auto_table(args) -> int:
    """``auto-table``: the table from the rows of ``--from-csv``; its ``source`` is the command that rebuilds it
    (the paths as given, e.g. relative to the repository root). ``--out -`` or ``--report -`` writes that one to
    stdout, and the line saying what was written goes to stderr.

    Raises:
        InputError: both ``--out -`` and ``--report -`` (one stdout cannot carry the JSON and the report), or any
            unusable path or file (before the rows are read).
    """
    from .autotable import RULE, TOLERANCE, build_auto_table, build_regret_table, read_family
    from .grid import read_csv

    if args.out == STDOUT and args.report == STDOUT:
        raise InputError("--out - and --report - both name stdout: write one of them to a file")
    args.out = args.out or _shipped_table_out()
    args.tolerance = TOLERANCE if args.tolerance is None else args.tolerance
    args.rule = args.rule or RULE
    _check_out(args.out, parents=True)  # before the reading, which can take minutes, as the files below
    if args.report:
        _check_out(args.report, flag="--report", parents=True)
    base = _auto_table_file("--base", args.base) if args.base else None
    reference = _auto_table_file("--reference", args.reference) if args.reference else None
    paths = " ".join(args.from_csv)
    with _rows_files(paths):
        family = read_family(args.from_csv)
    source = "activeprp bench auto-table --from-csv " + " ".join(args.from_csv)
    if any(judge for fam in family.values() for judge in fam.ndcg):  # a family grid: worst-case regret
        source += f" --rule {args.rule} --tolerance {args.tolerance}" + (
            f" --base {args.base}" if args.base else "")
        if args.report:
            from .regret import regret_report

            with _rows_files(paths):
                rows = [r for path in args.from_csv for r in read_csv(path)]
            report = regret_report(rows, args.tolerance, reference, rule=args.rule)
            if args.report == STDOUT:
                sys.stdout.write(report)
            else:
                _out_dir(str(Path(args.report).parent), "--report")
                Path(args.report).write_text(report, encoding="utf-8")
        table = build_regret_table(family, source, args.tolerance, base, args.rule)
    else:
        table = build_auto_table(family, source)
    text = json.dumps(table, indent=None, separators=(",", ":")) + "\n"
    if args.out == STDOUT:
        sys.stdout.write(text)
    else:
        _out_dir(str(Path(args.out).parent))
        Path(args.out).write_text(text, encoding="utf-8")
    print(f"{out_name(args)}: {len(table['settings'])} settings, "
          f"{sum(len(s['cells']) for s in table['settings'])} cells",
          file=sys.stderr if STDOUT in (args.out, args.report) else sys.stdout)
    return 0


def _count(minimum: int | None = 1, none: bool = False):
    """``activeprp_cli``'s integer type; with ``none``, ``none`` or ``-1`` mean no cap (None)."""
    return count(minimum, allow_none=none, none_words=("none", "-1"))


#: the users' summary in ``activeprp bench --help`` (plain text; the module docstring is the developers')
_DESCRIPTION = """\
Benchmark rankers x oracles x budgets on test collections (TREC DL 2019 and
2020, BEIR SciFact, NovelEval, Cranfield) with a simulated judge, the bundled
model or an OpenAI-compatible endpoint, and write per-query rows, Markdown
tables and plots. --data DIR names the directory holding the collections; where
to get them: docs/benchmarks.md, section "Getting the data".

Examples:
  activeprp bench grid --data DIR --out results/sim_dl1920   # the paper's Table 1
  activeprp bench grid --data DIR --collections noveleval --rankers mohajer \\
      bubblesort --budgets 20 40 --seeds 2 --out /tmp/smoke
  activeprp bench flip --data DIR --comparator bundled --mode ab --collections dl19"""


def _mode(modes, name: str, about: str, **kwargs) -> argparse.ArgumentParser:
    """The parser of ``activeprp bench NAME``: ``about`` (plain text, one paragraph) is its ``--help``
    description, and its first sentence, lower-cased as the other commands' lines, its line in ``activeprp bench
    --help``."""
    first = about.split(". ", 1)[0].rstrip(".")
    # no abbreviations: calibrate would read --judge 1, a flag it lacks, as --judge-seed 1
    return modes.add_parser(name, help=first[:1].lower() + first[1:], description=about, allow_abbrev=False,
                            **kwargs)


def add_parser(subparsers) -> None:
    """Register ``activeprp bench {grid,calibrate,overhead,flip,walltime,auto-table}``; each sets ``func``."""
    from activeprp_core.settings import SPECS

    from .datasets import COLLECTIONS
    from .grid import PAPER_BUDGETS, PAPER_RANKERS, VARIANTS

    bench = subparsers.add_parser("bench", help="benchmark rankers x oracles x budgets on test collections",
                                  description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = bench.add_subparsers(dest="bench_mode", required=True)
    # Each mode gets the flag groups it reads, so that its --help lists only those and any other flag is
    # argparse's usage error; a flag whose use depends on another flag's value is refused by _refuse_unused.
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument("--data", action=Given, help="the directory holding the collections, needed by every mode that "
                      "reads one (e.g. ../shared/data: trec-dl-2019/, trec-dl-2020/, beir-scifact/, noveleval/, "
                      "cranfield/; where to get them: docs/benchmarks.md, section \"Getting the data\")")
    data.add_argument("--collections", nargs="+", default=["dl19", "dl20"], choices=COLLECTIONS, metavar="NAME",
                      action=Given, help=" ".join(COLLECTIONS) + " (default: dl19 dl20)")
    data.add_argument("--queries", type=_count(), action=Given,
                      help="first N judged queries per collection (default: all)")
    data.add_argument("--depth", type=_count(), action=Given,
                      help="rerank the top DEPTH candidates (default: all, 100)")
    data.add_argument("--out", default="benchmarks/results/latest",
                      help="output directory (default: %(default)s, under the current directory)")
    ranking = argparse.ArgumentParser(add_help=False)
    rankers, oracles = sorted({*SPECS["ranker"].check.choices, *VARIANTS}), SPECS["oracle"].check.choices
    ranking.add_argument("--rankers", nargs="+", default=list(PAPER_RANKERS), choices=rankers, metavar="NAME",
                         help="the core's rankers and the bench's variants: " + " ".join(rankers)
                         + " (default: the paper's six, " + " ".join(PAPER_RANKERS) + ")")
    ranking.add_argument("--oracles", nargs="+", default=["bidirectional", "randomized"], choices=oracles,
                         metavar="NAME", help=" ".join(oracles) + " (default: bidirectional randomized)")
    sim = argparse.ArgumentParser(add_help=False)
    sim.add_argument("--sim-params", type=_sim_knobs, action=Given, help="simulator knobs as JSON or a calibration "
                     "JSON file (default: the committed calibration; the judge's seed is --judge-seed)")
    sim.add_argument("--judge-seed", type=_count(None), default=0, action=Given,
                     help="the simulated judge's noise realisation, or a bench judge's (default 0)")
    local = argparse.ArgumentParser(add_help=False)
    local.add_argument("--mode", choices=["query_likelihood", "ab"], default="query_likelihood", action=Given,
                       help="bundled model mode (default: %(default)s)")
    local.add_argument("--batch-size", type=_count(), default=BATCH_SIZE, action=Given,
                       help="bundled model batch size: prompts per forward pass (default %(default)s: "
                            "TransformersComparator's own, which the bench measures; activeprp rerank's "
                            f"--batch-size is {DEFAULT_BATCH_SIZE}, to keep the command quick on a CPU)")
    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument("--model", action=Given, help="model name for --comparator openai")
    remote.add_argument("--base-url", action=Given, help="endpoint for --comparator openai")
    remote.add_argument("--api-key", action=Given, help="key for --comparator openai (default: $OPENAI_API_KEY)")
    add_judge_args(remote)  # --max-reply-bytes, --judge-timeout, --judge-retries: rerank's, one definition
    remote.add_argument("--cache", action=Given,
                        help="bundled/openai: sqlite answer cache (default OUT/answers.sqlite)")
    bench_judges = argparse.ArgumentParser(add_help=False)
    bench_judges.add_argument("--judge", action="append", default=[], metavar="NAME",
                              help="a judge of activeprp_bench.judges answers instead of the calibrated simulator "
                              "(repeatable; rows gain its name in the judge column; see docs/bench-judges.md)")
    bench_judges.add_argument("--judges", choices=["family"],
                              help="every judge of the family that covers the collections at --depth")
    models = argparse.ArgumentParser(add_help=False)  # grid's and flip's choice of judge
    models.add_argument("--comparator", choices=["simulated", "bundled", "openai"], default="simulated",
                        help="simulated: the calibrated simulator (--sim-params); bundled: the bundled SmolLM2-135M "
                        "(--mode); openai: an OpenAI-compatible endpoint (--model, --base-url) (default: "
                        "%(default)s)")
    cells = argparse.ArgumentParser(add_help=False)
    cells.add_argument("--budgets", nargs="+", type=_count(0, none=True), default=list(PAPER_BUDGETS),
                       help="per-query call budgets (none = unlimited; default: the paper's, "
                       + " ".join(map(str, PAPER_BUDGETS)) + ")")
    cells.add_argument("--max-rounds", nargs="+", type=_count(0, none=True), default=[None],
                       help="per-query round caps (none or -1 = no cap; default none)")
    cells.add_argument("--top-k", type=_count(), default=10,
                       help="K: the top the rankers find and the nDCG cut-off (default 10)")
    grid = _mode(modes, "grid", parents=[data, ranking, models, sim, local, remote, bench_judges, cells], about=(
        "Run the grid; write rows.csv.gz (rows.csv.xz with judges), tables.md and plots. Every ranker x oracle x "
        "budget x round cap reranks each judged query of the collections (the randomized oracle once per seed "
        "of --seeds), judged by the calibrated simulator unless --comparator, --judge or --judges chooses "
        "another judge; the rows, config.json, tables.md and the plots go into --out, and the tables are "
        "printed. With --from-csv nothing runs: the tables and plots are made again from rows files."))
    grid.add_argument("--scale-budgets", action="store_true",
                      help="multiply budgets by N/100, N the fewest candidates of a query (--depth): rounded, at "
                           "least 1 call; 0 and none stay")
    grid.add_argument("--seeds", type=_count(), default=8, help="seeds for the randomized oracle (default 8)")
    grid.add_argument("--from-csv", nargs="+", type=_existing_file,
                      help="re-make the tables and plots from rows.csv[.gz|.xz] files")
    grid.add_argument("--no-paper", action="store_true", help="do not print the paper's values in the table")
    grid.add_argument("--bootstrap-seed", type=_count(None), default=0,
                      help="seed of the bootstrap CIs and paired tests (default 0)")
    grid.add_argument("--paired", nargs="*", type=_pair,
                      default=PAIRED, metavar="A:B",
                      help="rankers to compare by paired bootstrap over queries (default: " + " ".join(PAIRED)
                      + ", where the grid has them)")
    grid.add_argument("--no-progress", action="store_true", help="no tqdm progress bar (stderr; drawn only when "
                      "stderr is a terminal)")
    grid.add_argument("--compare", nargs="*", type=_cell_pair, default=[], metavar="A:B",
                      help="cells compared by paired bootstrap, each ranker/oracle/budget/max_rounds (-1 = no cap; "
                           "ranker 'best' = the best non-auto row at that budget and cap)")
    grid.add_argument("--jobs", type=_count(), default=1, action=Given,
                      help="with --judge/--judges: worker processes, one judge x ranker x oracle each; other grids run "
                      "in one process and leave it unread (default 1)")
    grid.add_argument("--rows-cache", action=Given, help="with --judge/--judges: directory of cached rows, one JSON "
                      "file per judge x ranker x oracle; only cells not stored are computed (default OUT/rows_cache)")
    grid.add_argument("--refresh", nargs="+", default=[], metavar="NAME", action=Given,
                      help="with --rows-cache: judge or oracle names whose cached rows are recomputed")
    grid.add_argument("--judge-tag", default="", metavar="TAG", action=Given,
                      help="with --judge/--judges: label the rows' judge NAME@TAG (e.g. the collection), so that a "
                      "judge on other collections is another member of the family in the regret reports")
    grid.set_defaults(func=_grid)
    cal = _mode(modes, "calibrate", parents=[data, sim], about=(
        "Fit the simulator to the paper's judge. At the given --pair-noise, position_bias is fitted to the "
        "paper's order-effect flip rate and doc_noise to its converged nDCG@10 on the collections; the knobs, "
        "the values measured with them and the --judge-seed they were measured at are written to "
        "OUT/calibration_pair_noise_P.json and printed. With --check "
        "nothing is fitted: the flip rate and converged quality of --sim-params are measured instead "
        "(OUT/calibration_check.json)."))
    cal.add_argument("--pair-noise", type=seconds(allow_none=False, unit="noise"), default=0.5, action=Given,
                     help="the simulator's noise per ordered prompt, >= 0 (default %(default)s)")
    cal.add_argument("--check", action="store_true", help="no fit: measure flip rate and converged quality of "
                     "--sim-params (default: the committed calibration)")
    cal.set_defaults(func=_calibrate)
    over = _mode(modes, "overhead", parents=[data, ranking, local], about=(
        "Measure scheduling µs/call and comparator calls/s. The engine's and ranker's own time per call of "
        "each ranker x oracle (at each of --budgets) is measured against a judge that costs nothing, over "
        "--repeats runs on synthetic candidates; with --comparator bundled, the bundled model's calls per "
        "second too, one pair at a time and batched. The table is written to OUT/overhead.md and printed."))
    over.add_argument("--comparator", choices=["simulated", "bundled"], default="simulated",
                      help="bundled: measure the bundled model's calls per second too, on the first query of the "
                      "first of --collections under --data (default: %(default)s, scheduling only)")
    over.add_argument("--repeats", type=_count(), default=20,
                      help="seeded runs per ranker x oracle (default 20)")
    over.add_argument("--budgets", nargs="+", type=_count(1, none=True), default=[None],
                      help="per-query call budgets to measure at (none = unlimited, the default)")
    over.add_argument("--throughput-pairs", type=_count(), default=16, action=Given,
                      help="bundled: disjoint candidate pairs timed (default 16)")
    over.set_defaults(func=_overhead)
    flip = _mode(modes, "flip", parents=[data, models, sim, local, remote, bench_judges], about=(
        "Measure a comparator's order-effect flip rate. For --pairs-per-query random candidate pairs of each "
        "judged query both slot orders are asked; a pair flips when the same slot wins both times. The rate of "
        "each judge is written to OUT/flip_NAME.md and printed."))
    flip.add_argument("--pairs-per-query", type=_count(), default=4,
                      help="random candidate pairs per judged query, each asked in both slot orders (default 4)")
    flip.add_argument("--seed", type=_count(None), default=0, help="seed of the pairs drawn (default 0)")
    flip.set_defaults(func=_flip)
    wall = _mode(modes, "walltime", parents=[data, ranking, sim, bench_judges, cells], about=(
        "Measure wall time per query against a sleeping comparator. Each query x ranker x oracle x budget x "
        "round cap is reranked by a judge that sleeps --latency seconds per call with --in-flight calls at "
        "once, and the measured seconds are set beside the modelled ones (the sum over rounds of "
        "ceil(calls / in-flight) x latency). Each line is printed as it comes; the table is written to "
        "OUT/walltime_check.md."))
    wall.add_argument("--latency", type=seconds(allow_none=False), default=CALL_LATENCY_S,
                      help="seconds per call (default %(default)s)")
    wall.add_argument("--in-flight", type=_count(), default=CALLS_IN_FLIGHT, help="calls in flight at once (default "
                      "%(default)s)")
    wall.set_defaults(func=_walltime)
    auto = _mode(modes, "auto-table", about=(
        "Build the table behind ranker/oracle 'auto' from grid rows. Per (N, K) setting, budget and round cap "
        "it holds each ranker x oracle's mean nDCG, rounds and calls in the rows files of --from-csv; for family "
        "grids (rows with a judge) also the choice, by worst-case regret over the judges (--rule, --tolerance). "
        "The table is written to --out, whose default in a source checkout is the table that 'auto' reads, "
        "and its source field is the command that builds it again."))
    auto.add_argument("--from-csv", nargs="+", required=True, type=_existing_file,
                      help="rows.csv[.gz|.xz] files of bench grid runs")
    auto.add_argument("--out", default=None,
                      help="where to write the table; - writes it to stdout, and the line saying what was written "
                      "goes to stderr (not with --report -). Default: activeprp_core/data/auto_table.json of the "
                      "source checkout activeprp_core is imported from, the table 'auto' reads, overwritten; with "
                      "an installed package it is required")
    auto.add_argument("--tolerance", type=seconds(allow_none=False, unit="nDCG points"), default=None,
                      help="family grids (rows with a judge): nDCG points within which rows count as equally good "
                      "and the previous budget's choice is kept (default autotable.TOLERANCE)")
    # autotable.RULES, spelled out: building the parser must not import numpy (tests/test_repo_import_hygiene.py)
    auto.add_argument("--rule", choices=["regret", "single", "fewest"], default=None,
                      help="family grids: per-cell worst-case regret kept along the budget axis (regret), one row "
                      "per round cap (single), or the one row where it is within the tolerance of regret's "
                      "(fewest); default: the shipped table's, autotable.RULE; see activeprp_bench.autotable")
    auto.add_argument("--base", help="family grids: an auto table whose settings and cells the grids lack are kept")
    auto.add_argument("--reference", help="family grids: the auto table the report compares with (default: the "
                      "shipped one)")
    auto.add_argument("--report", help="family grids: write the regret report (Markdown) here; - writes it to "
                      "stdout, and the line saying what was written goes to stderr")
    auto.set_defaults(func=_auto_table)
    for mode in modes.choices.values():  # a missing extra is one line before any work, not a traceback at the end
        mode.set_defaults(func=_with_bench_extra(mode.get_default("func")))


BENCH_EXTRA = 'pip install "activeprp[bench]"'
BENCH_MODULES = ("numpy", "matplotlib", "bm25s", "ir_measures", "pyarrow")
"""What the bench extra installs that its modes import (checked, not imported, when the parser is built)."""


def _with_bench_extra(handler):
    """``handler`` after the check for the bench extra and for flags the mode does not read (``_refuse_unused``)."""
    def run(args: argparse.Namespace) -> int:
        require_extra(f"activeprp bench {args.bench_mode}", BENCH_EXTRA, *BENCH_MODULES)
        _refuse_unused(args)
        return handler(args)

    return run
