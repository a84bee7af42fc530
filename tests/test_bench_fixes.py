"""``activeprp bench`` fixes of review s68e: broken qrels, the rows cache's key, the answer cache's judgments,
calibration's order, flags a mode or combination does not use, and the small ones."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA as DATA
from tests.conftest import needs_data, skip_without_bench

np = skip_without_bench()

from activeprp_cli import main
from activeprp_core.comparators.base import Comparator
from activeprp_core.types import Candidate, Judgment

ROOT = Path(__file__).resolve().parents[1]

_CONVERGED_KEYS = """
from activeprp_bench.calibration import converged_quality
from activeprp_bench.datasets import Collection
from activeprp_core.types import Candidate
cands = [Candidate(f"d{i}", f"passage {i}") for i in range(6)]
colls = [Collection(name, {"q": "query"}, {"q": cands}, {"q": {f"d{i}": i % 3 for i in range(6)}})
         for name in ("one", "two")]
print(list(converged_quality(colls, {"doc_noise": 0.5})))
"""


def test_calibration_keys_come_out_in_one_order_whatever_the_hash_seed():
    """``converged_quality`` iterated a set of string tuples, so ``bench calibrate`` wrote its ``converged`` keys
    (and summed its mean) in an order that changed with PYTHONHASHSEED (review s68e #4); now sorted."""
    outs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        outs.add(subprocess.run([sys.executable, "-c", _CONVERGED_KEYS], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1
    keys = ast.literal_eval(outs.pop())
    assert keys[-1] == "mean" and len(keys) == 19  # 9 (ranker, oracle) rows x 2 collections


def _noveleval_with_qrels(tmp_path: Path, edit) -> Path:
    """A copy of ../shared/data's noveleval whose qrels lines went through ``edit`` (the columns of one line)."""
    data = tmp_path / "data"
    (data / "noveleval").mkdir(parents=True)
    (data / "noveleval" / "data.json").symlink_to(DATA / "noveleval" / "data.json")
    lines = (DATA / "noveleval" / "qrels.txt").read_text().split("\n")
    (data / "noveleval" / "qrels.txt").write_text("\n".join(" ".join(edit(line.split())) for line in lines if line)
                                                + "\n")
    return data


_MODES = {"grid": ["--rankers", "mohajer", "--oracles", "randomized", "--budgets", "20", "--seeds", "1",
                   "--no-progress"],
          "calibrate": ["--check"], "flip": [], "walltime": ["--rankers", "mohajer", "--oracles", "bidirectional",
                                                             "--budgets", "10", "--latency", "0.001"]}


@needs_data
@pytest.mark.parametrize("mode", list(_MODES))
@pytest.mark.parametrize(("edit", "says"), [
    (lambda cols: ["x" + cols[0], *cols[1:]], "noveleval: no query has a judgment: the qrels' query ids match "
     "none of its 21 queries"),
    (lambda cols: [*cols[:2], "x" + cols[2], cols[3]], "noveleval: no candidate has a judgment: the qrels' "
     "document ids match none of the candidates of its 21 judged queries"),
], ids=["qids", "docids"])
def test_qrels_that_judge_nothing_are_one_line_and_exit_2(tmp_path, capsys, mode, edit, says):
    """Qrels whose query ids match no query were a ZeroDivisionError in grid and calibrate and a silent success
    (0 pairs, no rows) in flip and walltime; qrels whose document ids match no candidate ran every mode to an
    nDCG of 0 (review s68e #1). Now one usage error, before any work (OUT not made)."""
    data, out = _noveleval_with_qrels(tmp_path, edit), tmp_path / "out"
    code = main(["bench", mode, "--data", str(data), "--collections", "noveleval", *_MODES[mode], "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err == f"activeprp: error: --data {data}: {says}\n" and not out.exists()


@pytest.mark.parametrize("mode", ["grid", "flip", "overhead"])
def test_a_misspelt_mode_is_a_usage_error(capsys, mode):
    """``--comparator bundled --mode nosuch`` loaded the model, then ended in a 22-line traceback (review s68e #5)."""
    from activeprp_cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser("bench").parse_args(["bench", mode, "--comparator", "bundled", "--mode", "nosuch"])
    assert exit_.value.code == 2 and "argument --mode: invalid choice: 'nosuch'" in capsys.readouterr().err


@needs_data
def test_a_rows_cache_is_not_reused_when_the_data_changed(tmp_path):
    """The family grid's rows cache was keyed on the collections' names, not their contents: after a qrels file
    changed, a re-run into the same cache returned the old rows (review s68e #2). Now its key holds a digest of the
    collections as loaded."""
    from activeprp_bench.family import run_family_grid

    swapped = _noveleval_with_qrels(tmp_path, lambda cols: [*cols[:3], "2" if cols[3] == "0" else "0"])
    grid = dict(collections=["noveleval"], judges=["calibrated"], rankers=["mohajer"], oracles=["bidirectional"],
                budgets=[10], caps=[None], seeds={"randomized": [0]}, queries=2, depth=6)

    def ndcg(data, cache):
        return [r.ndcg10 for r in run_family_grid(str(data), cache=tmp_path / cache, **grid)]

    before, fresh = ndcg(DATA, "cache"), ndcg(swapped, "fresh")
    assert fresh != before
    assert ndcg(swapped, "cache") == fresh  # the same cache, the new data: computed again
    assert ndcg(DATA, "cache") == before


@needs_data
def test_refresh_of_a_name_the_grid_lacks_is_a_usage_error(tmp_path, capsys):
    """``--refresh calibratd`` was accepted and refreshed nothing (review s68e #2)."""
    out = tmp_path / "out"
    code = main(["bench", "grid", "--data", str(DATA), "--collections", "noveleval", "--queries", "1", "--depth", "4",
                 "--judge", "calibrated", "--rankers", "mohajer", "--oracles", "randomized", "--budgets", "10",
                 "--seeds", "1", "--no-progress", "--refresh", "calibratd", "--out", str(out)])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == ("activeprp: error: --refresh calibratd: not a judge or oracle of this grid "
                                       "(it has calibrated randomized)\n")


class _Judge(Comparator):
    """A judge reporting what an endpoint reports: retries and tokens per answer, or (``fail``) an error text."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def judge(self, query, pairs, *, guard=None):
        if self.fail:
            return [Judgment(None, error="ConnectError: All connection attempts failed") for _ in pairs]
        return [Judgment(0.7 if a.id < b.id else 0.3, prompt_tokens=50, completion_tokens=1, retries=1)
                for a, b in pairs]


def test_the_answer_cache_keeps_each_answers_error_retries_and_tokens(tmp_path):
    """``CachedComparator`` called ``inner.compare``, which keeps only the probability: a bench run billed 0 tokens
    and 0 retries, and a dead judge's error said "no answer" instead of its cause (review s68e #3). Now the inner
    comparator's own judgments pass through; an answer from disk costs nothing."""
    from activeprp_bench.cached import CachedComparator
    from activeprp_core import rerank
    from activeprp_core.errors import ComparatorUnavailable

    cands = [Candidate(str(i), f"passage {i}") for i in range(6)]
    run = dict(ranker="mohajer", oracle="bidirectional", budget=20, top_k=3, seed=0)
    plain = rerank("q", cands, comparator=_Judge(), **run)
    for hits in (0, plain.calls):  # a fresh cache, then the same answers from disk
        with CachedComparator(_Judge(), tmp_path / "a.sqlite", "m") as cached:
            res = rerank("q", cands, comparator=cached, **run)
        assert res.order == plain.order and cached.hits == hits
        spent = (res.calls, res.retries, res.prompt_tokens, res.completion_tokens)
        assert spent == ((plain.calls, plain.retries, plain.prompt_tokens, plain.completion_tokens) if not hits
                         else (plain.calls, 0, 0, 0))
    assert plain.retries > 0 and plain.prompt_tokens > 0
    with (CachedComparator(_Judge(fail=True), tmp_path / "b.sqlite", "m") as cached,
          pytest.raises(ComparatorUnavailable, match="last: ConnectError: All connection attempts failed")):
        rerank("q", cands, comparator=cached, **run)


@needs_data
def test_bench_against_a_dead_endpoint_names_the_connection_error(tmp_path, capsys):
    """``bench grid --comparator openai`` against a closed port said "every one of the 3 calls failed: no answer";
    ``rerank`` names the connection error, and the bench now does too."""
    pytest.importorskip("openai")
    with socket.socket() as s:  # a port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["bench", "grid", "--data", str(DATA), "--collections", "noveleval", "--queries", "1", "--depth", "3",
                 "--comparator", "openai", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1", "--api-key",
                 "k", "--judge-timeout", "5", "--judge-retries", "0", "--rankers", "allpairs", "--oracles",
                 "randomized", "--budgets", "none", "--seeds", "1", "--no-paper", "--no-progress", "--out",
                 str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and "ComparatorUnavailable: every one of the 3 calls failed: APIConnectionError" in err
    assert "Connection refused" in err and "no answer" not in err


def test_cache_identity_keys_the_openai_judges_answer_kind_away_from_its_default():
    """Soft (logprobs) and hard answers of one model and prompt shared cache entries (review s68e #8); the
    defaults are keyed as before, so the committed caches still read."""
    from activeprp_bench.cached import identity
    from activeprp_core.comparators.prompts import TOP_LOGPROBS

    class Judge:
        model, prompt = "m", "Which is better? {query} {first} {second}"

    def judge(**settings):
        j = Judge()
        for k, v in settings.items():
            setattr(j, k, v)
        return identity(j, "openai/m")

    keys = {judge(), judge(logprobs=True, top_logprobs=TOP_LOGPROBS), judge(logprobs=False),
            judge(top_logprobs=TOP_LOGPROBS + 1)}
    assert judge() == judge(logprobs=True, top_logprobs=TOP_LOGPROBS) and len(keys) == 3


_SMALL = ["--collections", "noveleval", "--queries", "1", "--depth", "4"]
_CELLS = ["--rankers", "mohajer", "--oracles", "randomized", "--budgets", "4"]
_GRID = ["grid", *_SMALL, *_CELLS, "--seeds", "1", "--no-progress", "--no-paper"]
_DEAD = ["--comparator", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--judge-retries", "0"]
_KNOBS = ["--sim-params", '{"doc_noise": 5.0, "position_bias": 3.0}']


@needs_data
@pytest.mark.parametrize(("argv", "says"), [
    ([*_GRID, "--judge", "calibrated", *_KNOBS], "--sim-params needs the calibrated simulator: --judge/--judges "
     "answer instead"),
    (["walltime", *_SMALL, *_CELLS, "--latency", "0.001", "--judge", "calibrated", *_KNOBS],
     "--sim-params needs the calibrated simulator: --judge/--judges answer instead"),
    ([*_GRID, *_DEAD, *_KNOBS], "--sim-params needs --comparator simulated: --comparator openai does not use it"),
    ([*_GRID, *_DEAD, "--judge-seed", "1"], "--judge-seed needs --comparator simulated: --comparator openai does "
     "not use it"),
    ([*_GRID, "--model", "m"], "--model needs --comparator openai: --comparator simulated does not use it"),
    ([*_GRID, "--mode", "ab"], "--mode needs --comparator bundled: --comparator simulated does not use it"),
    ([*_GRID, "--cache", "x.sqlite"], "--cache needs --comparator bundled or openai: --comparator simulated does not "
     "use it"),
    (["flip", *_SMALL, "--batch-size", "4"], "--batch-size needs --comparator bundled: --comparator simulated does "
     "not use it"),
    ([*_GRID, "--rows-cache", "rc"], "--rows-cache needs --judge or --judges: only a grid of bench judges reads it"),
    ([*_GRID, "--refresh", "randomized"], "--refresh needs --judge or --judges: only a grid of bench judges reads it"),
    ([*_GRID, "--judge-tag", "t"], "--judge-tag needs --judge or --judges: only a grid of bench judges reads it"),
    (["calibrate", *_SMALL, *_KNOBS], "--sim-params needs --check: the fit starts from its own knobs"),
    (["calibrate", *_SMALL, "--check", "--pair-noise", "1.0"], "--pair-noise needs no --check: --check measures "
     "--sim-params, its pair_noise too"),
    (["overhead", "--data", "{data}", "--rankers", "mohajer", "--oracles", "randomized", "--repeats", "1"],
     "--data needs --comparator bundled: overhead reads a collection only to time the model"),
    (["overhead", "--throughput-pairs", "4", "--rankers", "mohajer", "--oracles", "randomized", "--repeats", "1"],
     "--throughput-pairs needs --comparator bundled: --comparator simulated does not use it"),
    (["calibrate", *_SMALL, "--check", "--judge", "nosuch"], "unrecognized arguments: --judge nosuch"),
    (["calibrate", *_SMALL, "--check", "--comparator", "openai"], "unrecognized arguments: --comparator openai"),
    (["calibrate", *_SMALL, "--check", "--rankers", "mohajer"], "unrecognized arguments: --rankers mohajer"),
    (["overhead", "--judge", "calibrated", "--repeats", "1"], "unrecognized arguments: --judge calibrated"),
    (["overhead", "--comparator", "openai", "--repeats", "1"], "argument --comparator: invalid choice: 'openai' "
     "(choose from 'simulated', 'bundled')"),
    (["calibrate", *_SMALL, "--check", "--judge", "1"], "unrecognized arguments: --judge 1"),  # not --judge-seed 1
    (["walltime", *_SMALL, *_CELLS, "--latency", "0.001", "--comparator", "bundled"],
     "unrecognized arguments: --comparator bundled"),
    (["flip", *_SMALL, "--rankers", "mohajer"], "unrecognized arguments: --rankers mohajer"),
])
def test_a_flag_the_mode_does_not_read_is_a_usage_error(tmp_path, capsys, argv, says):
    """Every mode took every flag, and several read only some of them: ``--sim-params`` with a bench judge, the
    openai flags with the simulator, ``calibrate --judge nosuch --comparator openai``, ``walltime --comparator
    bundled`` (which ran the simulator) exited 0 as if the flag had been applied (review s68e #6). Now each mode
    has only its own flags, and a flag the other flags given make idle is refused, before any work."""
    out = tmp_path / "out"
    try:
        code = main(["bench", *[a.replace("{data}", str(DATA)) for a in argv],
                     *(["--data", str(DATA)] if argv[0] != "overhead" else []), "--out", str(out)])
    except SystemExit as exit_:  # argparse's own error
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert err.splitlines()[-1].endswith(says) and "error: " in err.splitlines()[-1], err


def test_every_bench_flag_has_help_and_the_grid_states_its_defaults():
    """``--top-k``, ``--bootstrap-seed``, ``--repeats``, ``--throughput-pairs``, ``--pairs-per-query`` and
    ``--seed`` had no help, and grid's main axes and ``--out`` did not say their defaults (review s68e #7, #8)."""
    import argparse

    from activeprp_cli import build_parser

    bench = next(a for a in build_parser("bench")._actions if isinstance(a, argparse._SubParsersAction))
    modes = next(a for a in bench.choices["bench"]._actions if isinstance(a, argparse._SubParsersAction)).choices
    bare = [f"{name} {a.option_strings[0]}" for name, mode in modes.items() for a in mode._actions
            if a.option_strings and not a.help]
    assert not bare
    grid = " ".join(modes["grid"].format_help().split())
    for default in ("output directory (default: benchmarks/results/latest, under the current directory)",
                    "(default: dl19 dl20)", "(default: the paper's six, mohajer mohajer_bubble pac_bubble bubblesort "
                    "heapsort quicksort)", "(default: bidirectional randomized)",
                    "default: the paper's, 100 150 200 250 300 350 400 450 500)"):
        assert default in grid


def _simulator_for_bundled(seen: list):
    """A stand-in for ``cli._comparator_for`` (no model loaded): the simulator, recording whether transformers'
    progress bars were on when the comparator was built."""
    from activeprp_bench.grid import simulator_factory
    from activeprp_core.comparators.simulated import CALIBRATED_PARAMS

    def comparator_for(args, out, judge=""):
        from transformers.utils import logging as hf_logging

        seen.append(hf_logging.is_progress_bar_enabled())
        return lambda c: simulator_factory(c, CALIBRATED_PARAMS, 0)

    return comparator_for


@needs_data
def test_flip_label_keeps_its_space_and_the_bundled_models_bars_stay_off_the_file(tmp_path, capsys, monkeypatch):
    """``flip --comparator bundled`` printed ``bundledquery_likelihood: flip rate ...`` since 212d203 (the committed
    files say ``bundled query_likelihood``; their file name has no space), and the bench drew transformers'
    "Loading weights" bar into a stderr that is no terminal (review s68e #8)."""
    pytest.importorskip("transformers")
    seen: list = []
    monkeypatch.setattr("activeprp_bench.cli._comparator_for", _simulator_for_bundled(seen))
    assert main(["bench", "flip", "--data", str(DATA), *_SMALL, "--comparator", "bundled", "--out",
                 str(tmp_path)]) == 0
    text = (tmp_path / "flip_bundledquery_likelihood.md").read_text()
    assert text.startswith("bundled query_likelihood: flip rate ") and text in capsys.readouterr().out
    assert main(["bench", *_GRID, "--data", str(DATA), "--comparator", "bundled", "--out", str(tmp_path / "g")]) == 0
    assert seen == [False, False]


@needs_data
def test_config_records_the_budgets_run_and_a_no_call_cell_plots_without_warnings(tmp_path, monkeypatch):
    """With ``--scale-budgets`` config.json said the budgets given (100) while the rows ran the scaled ones (6);
    a cell of 0 calls (round cap 0: 0 rounds) made matplotlib warn twice that it cannot log-scale (review s68e
    #8)."""
    import warnings

    out = tmp_path / "out"
    argv = ["bench", "grid", "--data", str(DATA), "--collections", "noveleval", "--queries", "2", "--depth", "6",
            "--rankers", "mohajer", "--oracles", "bidirectional", "--budgets", "100", "--max-rounds", "0",
            "--seeds", "1", "--scale-budgets", "--judge-seed", "1", "--no-progress", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["activeprp", *argv])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["budgets"] == [6] and "given_flags" not in config and "--budgets 100" in " ".join(config["argv"])


@needs_data
def test_scale_budgets_keeps_a_budget_of_0_and_runs_each_scaled_budget_once(tmp_path, monkeypatch):
    """``--scale-budgets`` made a budget of 0 (no call) 1 call, and two budgets that scale to the same one (2 and 3
    at N=6: 1 call each) ran that cell twice, its rows counted twice in the tables. Now 0 stays 0, a positive budget
    keeps at least 1 call, and each scaled budget runs once."""
    from activeprp_bench.grid import read_csv

    out = tmp_path / "out"
    argv = ["bench", "grid", "--data", str(DATA), "--collections", "noveleval", "--queries", "2", "--depth", "6",
            "--rankers", "mohajer", "--oracles", "bidirectional", "--budgets", "0", "2", "3", "--seeds", "1",
            "--scale-budgets", "--judge-seed", "1", "--no-progress", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["activeprp", *argv])
    assert main(argv) == 0
    assert json.loads((out / "config.json").read_text())["budgets"] == [0, 1]
    rows = read_csv(out / "rows.csv.gz")
    assert sorted((r.budget, r.qid) for r in rows) == sorted((b, q) for b in (0, 1) for q in {r.qid for r in rows})
    assert all(r.calls == 0 for r in rows if r.budget == 0) and len({r.qid for r in rows}) == 2


def test_committed_grid_commands_pass_the_flag_checks_as_recorded():
    """``--jobs`` is a resource setting: a plain grid leaves it unread, harmlessly, and the committed
    ``latency_auto`` commands give it (``--jobs 2``). Refusing it made those recorded commands fail when run by hand;
    every committed grid's ``argv`` passes the flag checks as it was recorded (its paths aside)."""
    from activeprp_bench.cli import _refuse_unused
    from activeprp_cli import build_parser

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    configs = sorted(results.glob("latency_auto/*/config.json"))
    assert configs
    for config in configs:
        argv = json.loads(config.read_text())["argv"]
        assert "--jobs" in argv
        argv[argv.index("--data") + 1] = str(DATA)
        _refuse_unused(build_parser("bench").parse_args(argv))  # raises InputError on a refused flag
