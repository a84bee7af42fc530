"""``activeprp rerank-run`` end to end on TREC DL19 files, and its one-line errors on bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from activeprp_cli import main
from activeprp_cli import rerank_run as cli
from tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
DL19 = SHARED_DATA / "trec-dl-2019"
needs_data = pytest.mark.skipif(not DL19.is_dir(), reason="../shared/data not present")
RUN, TOPICS, QRELS = (DL19 / "trec_results_dl19_top100.bm25.txt", DL19 / "topics.dl19-passage.txt",
                      DL19 / "qrels.dl19-passage.txt")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The corpus JSONL of DL19's BM25 hits, made by docs/benchmarks.md's block ("A corpus JSONL for rerank-run") as
    written: run in a directory with ``../shared`` beside it, as the docs' commands are."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # the tests pass --qrels
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "bm25_dl19_top100.jsonl" in b)
    top = tmp_path_factory.mktemp("dl19")
    (top / "shared").symlink_to(SHARED_DATA.parent, target_is_directory=True)
    (top / "clone").mkdir()
    subprocess.run([sys.executable, "-c", block], cwd=top / "clone", check=True, timeout=120)
    return top / "clone" / "corpus.jsonl"


@needs_data
def test_the_documented_corpus_holds_each_passage_of_the_bm25_hits_once(corpus):
    records = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    hits = [h for line in (DL19 / "bm25_dl19_top100.jsonl").read_text(encoding="utf-8").splitlines()
            for h in json.loads(line)["hits"]]
    assert len(records) == len({r["_id"] for r in records}) == 4297  # as docs/benchmarks.md says
    assert {r["_id"]: r["text"] for r in records} == {h["docid"]: h["content"] for h in hits}


def run_pairs(path: Path) -> list[tuple[str, str, int, float]]:
    return [(q, d, int(r), float(s)) for q, _, d, r, s, _ in (line.split() for line in path.read_text().splitlines())]


def ndcg(out: str) -> tuple[float, float]:
    found = re.search(r"nDCG@10 \(ir-measures, 43 judged queries\): input(?: top \d+)? ([0-9.]+) -> reranked ([0-9.]+)",
                      out)
    assert found, out
    return float(found.group(1)), float(found.group(2))


@needs_data
def test_simulated_full_depth_keeps_every_pair_and_beats_bm25(corpus, tmp_path, capsys):
    out = tmp_path / "reranked.run"
    code = main(["rerank-run", "--run", str(RUN), "--queries", str(TOPICS), "--corpus", str(corpus), "--out", str(out),
                 "--qrels", str(QRELS), "--comparator", "simulated", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    written = run_pairs(out)
    assert {(q, d) for q, d, _, _ in written} == {(q, d) for q, d, _, _ in run_pairs(RUN)} and len(written) == 4300
    by_query: dict[str, list[tuple[int, float]]] = {}
    for q, _, rank, score in written:
        by_query.setdefault(q, []).append((rank, score))
    for rows in by_query.values():
        assert [r for r, _ in rows] == list(range(1, len(rows) + 1))
        assert all(a > b for (_, a), (_, b) in zip(rows, rows[1:]))
    assert f"read 4300 lines (43 queries) from {RUN}" in captured.out
    assert f"wrote 4300 lines (43 queries) to {out}" in captured.out
    assert "noise calibrated" in captured.out
    before, after = ndcg(captured.out)
    assert before == pytest.approx(0.5058, abs=1e-4)  # BM25, as trec_eval reports it
    assert after > before + 0.05


@needs_data
def test_depth_cuts_each_query_to_its_top_n_and_progress_shows(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the bar is drawn on a terminal only
    out = tmp_path / "top10.run"
    assert main(["rerank-run", "--run", str(RUN), "--queries", str(TOPICS), "--corpus", str(corpus), "--out", str(out),
                 "--qrels", str(QRELS), "--comparator", "simulated", "--depth", "10", "--ranker", "allpairs",
                 "--budget", "45", "--tag", "sim10"]) == 0
    captured = capsys.readouterr()
    top10 = {(q, d) for q, d, r, _ in run_pairs(RUN) if r <= 10}
    assert {(q, d) for q, d, _, _ in run_pairs(out)} == top10 and len(top10) == 430
    assert all(line.endswith(" sim10") for line in out.read_text().splitlines())
    assert "reranking 430 (depth 10)" in captured.out and "wrote 430 lines" in captured.out
    before, after = ndcg(captured.out)
    assert "input top 10" in captured.out and after > before
    assert "43/43" in captured.err  # the tqdm bar over queries


@pytest.mark.slow
@needs_data
def test_bundled_model_on_two_queries(corpus, tmp_path, capsys):
    pytest.importorskip("torch", reason='pip install "activeprp[hf]"')
    run = tmp_path / "two.run"
    qids = list(dict.fromkeys(q for q, _, _, _ in run_pairs(RUN)))[:2]
    run.write_text("".join(line + "\n" for line in RUN.read_text().splitlines() if line.split()[0] in qids))
    out = tmp_path / "out.run"
    assert main(["rerank-run", "--run", str(run), "--queries", str(TOPICS), "--corpus", str(corpus), "--out", str(out),
                 "--qrels", str(QRELS), "--depth", "4", "--budget", "6", "--passage-tokens", "32",
                 "--no-progress"]) == 0
    assert sorted(r for _, _, r, _ in run_pairs(out)) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert {(q, d) for q, d, _, _ in run_pairs(out)} == {(q, d) for q, d, r, _ in run_pairs(run) if r <= 4}
    printed = capsys.readouterr().out
    assert "LLM calls:" in printed and "(ir-measures, 2 judged queries): input top 4" in printed  # not all 43
    assert "judge (all queries): answers=" in printed and "soft_rate=1.0" in printed  # the bundled model: P(A)


@pytest.fixture
def files(tmp_path):
    """Small valid inputs (BOM, CRLF and blank lines included); a test overwrites one to make it bad."""
    paths = {
        "run": tmp_path / "run.txt", "queries": tmp_path / "queries.tsv", "corpus": tmp_path / "corpus.jsonl",
        "qrels": tmp_path / "qrels.txt",
    }
    paths["run"].write_bytes(b"\xef\xbb\xbfq1 Q0 d1 1 3.0 bm25\r\n\nq1 Q0 d2 2 2.0 bm25\nq2 Q0 d3 1 1.0 bm25\n")
    paths["queries"].write_text("q1\tfirst query\nq2\tsecond query\n")
    paths["corpus"].write_text("\n".join(json.dumps({"_id": f"d{i}", "text": f"passage {i}"}) for i in (1, 2, 3)))
    paths["qrels"].write_text("q1 0 d2 2\nq2 0 d3 1\n")
    return paths


def cli_args(files, out, *extra):
    return ["rerank-run", "--run", str(files["run"]), "--queries", str(files["queries"]), "--corpus",
            str(files["corpus"]), "--out", str(out), "--comparator", "simulated", "--qrels", str(files["qrels"]),
            "--no-progress", *extra]


def test_small_valid_files_with_bom_rerank(files, tmp_path, capsys):
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    out = tmp_path / "out.run"
    assert main(cli_args(files, out)) == 0
    lines = out.read_text().splitlines()
    assert sorted(line.split()[2] for line in lines[:2]) == ["d1", "d2"] and lines[2] == "q2 Q0 d3 1 1 activeprp"
    assert [line.split()[3:] for line in lines[:2]] == [["1", "2", "activeprp"], ["2", "1", "activeprp"]]
    assert "read 3 lines (2 queries)" in capsys.readouterr().out


def test_out_dash_writes_the_run_to_stdout_and_the_notes_to_stderr(files, tmp_path, capsys, monkeypatch):
    """``--out -`` wrote a file named ``-``."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    monkeypatch.chdir(tmp_path)
    reference = tmp_path / "out.run"
    assert main(cli_args(files, reference)) == 0
    capsys.readouterr()
    assert main(cli_args(files, "-")) == 0
    captured = capsys.readouterr()
    assert captured.out == reference.read_text() and not (tmp_path / "-").exists()
    assert "read 3 lines (2 queries)" in captured.err and "wrote 3 lines (2 queries) to stdout" in captured.err


def test_out_through_a_symlink_writes_its_target_and_keeps_the_link(files, tmp_path, capsys):
    """The run replaced the symlink with a file, and the file it pointed to kept its old content."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    (tmp_path / "runs").mkdir()
    target, link = tmp_path / "runs" / "latest.run", tmp_path / "latest.run"
    target.write_text("old\n")
    link.symlink_to(target)
    assert main(cli_args(files, link)) == 0
    assert link.is_symlink() and target.read_text().startswith("q1 Q0 ")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["latest.run"]  # no temporary file left


def run_command(args, **kw) -> subprocess.CompletedProcess:
    """``python -m activeprp_cli ARGS`` in a process of its own (for what the shell gives it: fds, redirections)."""
    return subprocess.run([sys.executable, "-m", "activeprp_cli", *map(str, args)], cwd=ROOT, timeout=120, **kw)


needs_dev_fd = pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="no /dev/fd here")


@needs_dev_fd
def test_out_dev_stdout_or_dev_fd_writes_into_the_open_file(files, tmp_path):
    """``--out /dev/stdout | cat`` and ``--out >(gzip > run.gz)`` (bash passes ``/dev/fd/63``) ended in a
    FileNotFoundError traceback (the temporary file went to ``/proc/PID/fd/.pipe:[N]...``), and ``--out /dev/stdout
    >> acc.txt`` replaced acc.txt by a new file holding only the run. Now the lines go into the open file: a pipe
    gets them, an appended file keeps what it held, and the notes go to stderr as with ``--out -``."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    reference = tmp_path / "reference.run"
    assert main(cli_args(files, reference)) == 0
    expected = reference.read_text()

    piped = run_command(cli_args(files, "/dev/stdout"), capture_output=True, text=True)
    assert (piped.returncode, piped.stdout) == (0, expected) and "Traceback" not in piped.stderr
    assert "wrote 3 lines (2 queries) to /dev/stdout" in piped.stderr

    acc = tmp_path / "acc.txt"
    acc.write_text("PREVIOUS CONTENT\n")
    with open(acc, "a") as appended:
        assert run_command(cli_args(files, "/dev/stdout"), stdout=appended, stderr=subprocess.DEVNULL).returncode == 0
    assert acc.read_text() == "PREVIOUS CONTENT\n" + expected

    reader, writer = os.pipe()
    with os.fdopen(reader) as lines:
        proc = subprocess.Popen([sys.executable, "-m", "activeprp_cli", *cli_args(files, f"/dev/fd/{writer}")],
                                cwd=ROOT, pass_fds=[writer], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        os.close(writer)
        got = lines.read()
        assert (proc.wait(timeout=120), got) == (0, expected), proc.stderr.read()
        proc.stderr.close()


@needs_dev_fd
def test_out_naming_a_closed_or_read_only_fd_is_one_line_exit_2(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "build_comparator", lambda *a: pytest.fail("a comparator was built"))
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    reader, writer = os.pipe()
    os.close(writer)
    try:
        for fd in (writer, reader):
            assert main(cli_args(files, f"/dev/fd/{fd}")) == 2
            assert capsys.readouterr().err == (f"activeprp: error: /dev/fd/{fd}: file descriptor {fd} is not open "
                                               "for writing\n")
    finally:
        os.close(reader)


BAD_INPUTS = [
    ("run", "q1 Q0 d1 1 3.0\n", "{run}:1: expected 6 columns (qid Q0 docid rank score tag), got 5"),
    ("run", "q1 Q0 d1 1 3.0 t\nq9 Q0 d2 1 2.0 t\n", "{run}:2: qid q9 has no query in {queries}"),
    ("run", "q1 Q0 d1 1 3.0 t\nq1 Q0 d7 2 2.0 t\n",
     "{run}:2: docid d7 is not in {corpus} (1 run line(s) lack a passage)"),
    ("run", "q1 Q0 d1 1 3.0 t\nq1 Q0 d1 2 2.0 t\n", "{run}:2: docid d1 appears twice for qid q1 (first at line 1)"),
    ("queries", "q1\tfirst\n\n{\"_id\": \"q2\"}\n", "{queries}:3: expected qid<TAB>text"),
    ("corpus", '{"_id": "d1", "text": "a"}\nnot json\n', "{corpus}:2: not JSON (Expecting value at column 1)"),
    ("corpus", '{"_id": "d1", "text": "a"}\n[1]\n',
     "{corpus}:2: not a JSON object but an array (JSONL wants one JSON object per line; from a JSON array: jq -c "
     "'.[]' FILE)"),
    ("corpus", '{"_id": "d1", "text": "a"}\n{"_id": "d2"}\n', "{corpus}:2: no text field (text / contents)"),
    ("corpus", b'{"_id": "d1", "text": "caf\xe9"}\n', "{corpus}:1: not UTF-8 (byte 0xe9 at column 27)"),
    ("qrels", "q1 0 d2\n", "{qrels}:1: expected 4 columns (qid iteration docid grade), got 3"),
]


@pytest.mark.parametrize(("which", "content", "message"), BAD_INPUTS)
def test_bad_input_is_one_line_exit_2_and_no_comparator(files, tmp_path, capsys, monkeypatch, which, content,
                                                        message):
    monkeypatch.setattr(cli, "build_comparator", lambda *a: pytest.fail("a comparator was built"))
    path = files[which]
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    out = tmp_path / "out.run"
    assert main(cli_args(files, out)) == 2
    err = capsys.readouterr().err
    assert err == "activeprp: error: " + message.format(**files) + "\n"
    assert not out.exists()


@pytest.mark.parametrize(("change", "message"), [
    (lambda f, t: f.update(run=t), "{run}: is a directory, not a file"),
    (lambda f, t: f.update(queries=t / "missing.tsv"), "{queries}: no such file"),
    (lambda f, t: f.update(out=t), "{out}: is a directory, not a file"),
    (lambda f, t: f.update(out=t / "no" / "out.run"), "{out}: no such directory '{parent}'"),
    (lambda f, t: f.pop("qrels"), "--comparator simulated needs --qrels QRELS (its graded labels)"),
])
def test_bad_paths_are_one_line_exit_2(files, tmp_path, capsys, monkeypatch, change, message):
    monkeypatch.setattr(cli, "build_comparator", lambda *a: pytest.fail("a comparator was built"))
    files["out"] = tmp_path / "out.run"
    change(files, tmp_path)
    args = ["rerank-run", "--run", str(files["run"]), "--queries", str(files["queries"]), "--corpus",
            str(files["corpus"]), "--out", str(files["out"]), "--comparator", "simulated", "--no-progress"]
    if "qrels" in files:
        pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # needed by --qrels
        args += ["--qrels", str(files["qrels"])]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == "activeprp: error: " + message.format(**files, parent=files["out"].parent) + "\n"


@pytest.mark.parametrize("flag", ["run", "queries", "corpus", "qrels"])
@pytest.mark.parametrize("how", ["same name", "symlink", "hard link"])
def test_out_naming_an_input_is_one_line_exit_2_and_the_input_is_kept(files, tmp_path, capsys, monkeypatch, flag,
                                                                       how):
    """``--out`` = ``--qrels`` replaced the qrels with the run (exit 0); ``--out`` = ``--run`` cut the run."""
    monkeypatch.setattr(cli, "build_comparator", lambda *a: pytest.fail("a comparator was built"))
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    before = files[flag].read_bytes()
    out = files[flag]
    if how != "same name":
        out = tmp_path / "other.name"
        (out.symlink_to if how == "symlink" else out.hardlink_to)(files[flag])
    assert main(cli_args(files, out)) == 2
    assert capsys.readouterr().err == (f"activeprp: error: --out {out} is the --{flag} file {files[flag]}: the run "
                                       "would overwrite it\n")
    assert files[flag].read_bytes() == before


def test_out_is_checked_before_the_inputs_are_read(files, tmp_path, capsys, monkeypatch):
    """A typo in --out's directory came only after the whole corpus was read (seconds to minutes on a large one)."""
    monkeypatch.setattr(cli, "read_run_candidates", lambda *a: pytest.fail("the inputs were read first"))
    out = tmp_path / "no" / "out.run"
    assert main(cli_args(files, out)) == 2
    assert capsys.readouterr().err == f"activeprp: error: {out}: no such directory '{out.parent}'\n"


def test_qrels_without_ir_measures_names_the_eval_extra(files, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ir_measures", None)  # as if not installed
    assert main(cli_args(files, tmp_path / "out.run")) == 2
    assert capsys.readouterr().err == ('activeprp: error: --qrels needs ir_measures: install it with '
                                       'pip install "activeprp[eval]"\n')


@pytest.mark.parametrize("flag, value, message", [
    ("--depth", "0", "--depth: expected an integer >= 1, got 0"),
    ("--tag", "my tag", "--tag: a TREC run tag must be a non-empty string without whitespace, got 'my tag'"),
    ("--ray-gpus", "-1", "--ray-gpus: expected a finite number of GPUs >= 0, got '-1'"),
])
def test_flags_out_of_range_are_usage_errors(files, tmp_path, capsys, flag, value, message):
    out = tmp_path / "out.run"
    with pytest.raises(SystemExit) as exit_:
        main(cli_args(files, out, flag, value))
    assert exit_.value.code == 2 and message in capsys.readouterr().err and not out.exists()


def test_queries_of_one_text_with_different_qrels_are_a_one_line_error(files, tmp_path, capsys):
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    files["queries"].write_text("q1\tsame text\nq2\tsame text\n")
    assert main(cli_args(files, tmp_path / "out.run")) == 2
    err = capsys.readouterr().err
    assert err == ("activeprp: error: queries q1 and q2 have the same text but different qrels: the simulated judge "
                   "finds a query's labels by its text\n")
    assert not (tmp_path / "out.run").exists()


def test_ray_without_the_ray_integration_is_a_one_line_error(files, tmp_path, capsys, monkeypatch):
    """--ray finds Ray through the ``activeprp.runners`` entry points only (the core imports no integration)."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    seen = []
    monkeypatch.setattr(cli, "entry_points", lambda **select: seen.append(select) or [])
    assert main(cli_args(files, tmp_path / "out.run", "--ray")) == 2
    assert capsys.readouterr().err == ('activeprp: error: rerank-run --ray needs the Ray integration: pip install '
                                       '"activeprp[ray]"\n')
    assert seen == [{"group": "activeprp.runners", "name": "ray"}] and not (tmp_path / "out.run").exists()


def stand_in_ray(monkeypatch) -> list[dict]:
    """A stand-in Ray runner behind the ``activeprp.runners`` entry point: no Ray starts; it keeps the keyword
    arguments of each call and returns each query in its input order."""
    seen = []

    def runner(records, factory, **kw):
        seen.append(kw)
        return [{"qid": r["qid"], "order": list(range(len(r["candidates"]))), "calls": 0, "error": None,
                 "failure": None} for r in records]

    class EntryPoint:
        def load(self):
            return runner

    monkeypatch.setattr(cli, "entry_points", lambda **select: [EntryPoint()])
    return seen


@pytest.mark.parametrize(("given", "address"), [([], None), (["none"], None), (["NONE"], None), (["local"], None),
                                               (["10.0.0.1:6379"], "10.0.0.1:6379"),
                                               (["ray://head:10001"], "ray://head:10001")])
def test_ray_none_or_no_address_starts_a_local_ray(files, tmp_path, capsys, monkeypatch, given, address):
    """``--ray``, ``--ray none`` (as the help says) and ``--ray local`` ask the Ray runner for a local Ray (address
    None); any other word is the cluster's address. A stand-in runner records the address: no Ray starts."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    seen = stand_in_ray(monkeypatch)
    assert main(cli_args(files, tmp_path / "out.run", "--ray", *given)) == 0
    assert [kw["address"] for kw in seen] == [address] and (tmp_path / "out.run").is_file()


def test_ray_draws_its_progress_bars_only_on_a_terminal(files, tmp_path, capsys, monkeypatch):
    """``--ray`` hands Ray Data the same rule as the local bar (``progress_wanted``): it got ``not --no-progress``,
    so a redirected stderr got Ray's bars."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    pytest.importorskip("tqdm")
    seen = stand_in_ray(monkeypatch)
    argv = [a for a in cli_args(files, tmp_path / "out.run", "--ray") if a != "--no-progress"]
    assert main(argv) == 0
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(argv) == 0 and [kw["progress"] for kw in seen] == [False, True]


def test_a_bad_hf_model_is_the_same_one_line_error_with_a_local_ray_and_ray_never_starts(files, tmp_path, capsys,
                                                                                          monkeypatch):
    """With a Ray on this machine the actors load the model from here, so a bad ``--model`` is checked before Ray
    starts (the model's config, no weights) and worded as without ``--ray``: one line, exit 2 (it was a Ray
    traceback of ~170 lines, exit 1). A stand-in runner records whether Ray was asked."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    pytest.importorskip("transformers", reason='pip install "activeprp[hf]"')
    seen = stand_in_ray(monkeypatch)
    bad = ["--comparator", "hf", "--model", str(tmp_path / "no-such-model")]
    errors = []
    for ray in ([], ["--ray"], ["--ray", "local"]):
        assert main([*cli_args(files, tmp_path / "out.run", *ray), *bad]) == 2
        errors.append(capsys.readouterr().err)
    assert errors[0].startswith("activeprp: error: cannot build the hf comparator: ") and errors[0].count("\n") == 1
    assert errors[1] == errors[2] == errors[0] and not seen and not (tmp_path / "out.run").exists()
    # on a cluster the actors may have a model this machine lacks: the options are checked here, the model there
    assert main([*cli_args(files, tmp_path / "out.run", "--ray", "10.0.0.1:6379"), "--comparator", "hf"]) == 2
    assert capsys.readouterr().err == "activeprp: error: --comparator hf needs --model PATH\n" and not seen
    assert main([*cli_args(files, tmp_path / "out.run", "--ray", "10.0.0.1:6379"), *bad]) == 0 and len(seen) == 1


def test_ray_with_an_empty_address_is_a_usage_error(files, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(cli_args(files, tmp_path / "out.run", "--ray", ""))
    assert exit_.value.code == 2 and "argument --ray: expected HOST:PORT" in capsys.readouterr().err


# ---- many queries at once: rerank_many / arerank_many behind the command --------------------------------------

@needs_data
def test_simulated_dl19_output_equals_a_loop_of_rerank(corpus, tmp_path, capsys):
    """rerank-run (rerank_many over all queries) writes the same run as reranking each query alone."""
    from activeprp_cli.trecfiles import read_qrels, read_run_candidates, write_run
    from activeprp_core import SimulatedComparator, rerank
    from activeprp_core.comparators.simulated import CALIBRATED_PARAMS

    out, loop = tmp_path / "many.run", tmp_path / "loop.run"
    assert main(["rerank-run", "--run", str(RUN), "--queries", str(TOPICS), "--corpus", str(corpus), "--out", str(out),
                 "--qrels", str(QRELS), "--comparator", "simulated", "--no-progress", "--max-active", "7"]) == 0
    _, requests = read_run_candidates(RUN, TOPICS, corpus, None)
    judge = SimulatedComparator.from_qrels(read_qrels(QRELS), {q: text for q, text, _ in requests}, **CALIBRATED_PARAMS)
    write_run(loop, ((q, [c[i].id for i in rerank(text, c, comparator=judge, budget=100, top_k=10).order])
                     for q, text, c in requests), tag="activeprp")
    assert out.read_bytes() == loop.read_bytes()


class Recorder:
    """A simulated judge for the small ``files``: records the queries of each call; fails as told."""

    def __init__(self, fail_for=None, error=None):
        from activeprp_core import SimulatedComparator

        self.inner = SimulatedComparator({"d1": 1, "d2": 2, "d3": 0, "d4": 3})
        self.fail_for, self.error, self.calls = fail_for, error, []

    def compare(self, query, pairs):
        self.calls.append(query)
        if self.error is not None and self.fail_for in (None, query):
            raise self.error
        return self.inner.compare(query, pairs)


@pytest.fixture
def three_queries(files):
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    files["run"].write_text("q1 Q0 d1 1 3 t\nq1 Q0 d2 2 2 t\nq2 Q0 d3 1 1 t\nq2 Q0 d4 2 0 t\nq3 Q0 d1 1 1 t\n"
                            "q3 Q0 d4 2 0 t\n")
    files["queries"].write_text("q1\tfirst query\nq2\tsecond query\nq3\tthird query\n")
    files["corpus"].write_text("\n".join(json.dumps({"_id": f"d{i}", "text": f"passage {i}"}) for i in range(1, 5)))
    return files


def use(monkeypatch, judge):
    monkeypatch.setattr(cli, "comparator_factory", lambda *a: lambda: judge)


def test_a_failing_query_is_reported_the_others_written_and_exit_1(three_queries, tmp_path, capsys, monkeypatch):
    from activeprp_core import ComparatorRequestError

    use(monkeypatch, Recorder("second query", ComparatorRequestError("prompt too long", status_code=400)))
    out = tmp_path / "out.run"
    assert main(cli_args(three_queries, out)) == 1
    captured = capsys.readouterr()
    assert "activeprp: query q2 failed: ComparatorRequestError: prompt too long (HTTP 400)\n" in captured.err
    assert captured.err.endswith(f"activeprp: error: 1 of 3 queries failed (q2); {out} holds the other 2\n")
    assert sorted({line.split()[0] for line in out.read_text().splitlines()}) == ["q1", "q3"]
    assert "wrote 4 lines (2 queries)" in captured.out
    # both figures over q1 alone (q2, judged, failed; q3 has no judgments): not the input's mean over q1 and q2
    assert "nDCG@10 (ir-measures, 1 judged queries; 1 failed left out of both): input 0.6309 -> reranked 1.0000\n" \
        in captured.out


def test_when_every_query_fails_an_existing_out_is_left_as_it_was(three_queries, tmp_path, capsys, monkeypatch):
    """With every query failed (below the circuit breaker, or with it off), a run from before was replaced by an
    empty file, and the error line said OUT "holds the other 0"."""
    from activeprp_core import ComparatorRequestError

    use(monkeypatch, Recorder(None, ComparatorRequestError("prompt too long", status_code=400)))
    out = tmp_path / "out.run"
    out.write_text("q1 Q0 d1 1 1 before\n")
    assert main(cli_args(three_queries, out, "--max-consecutive-failures", "none")) == 1
    assert out.read_text() == "q1 Q0 d1 1 1 before\n" and not list(tmp_path.glob(".out.run.*"))
    captured = capsys.readouterr()
    assert captured.err.endswith(f"activeprp: error: 3 of 3 queries failed (q1, q2, q3); nothing was written to "
                                 f"{out}\n")
    assert f"wrote nothing ({out} left as it was) in " in captured.out


def test_with_on_failure_prior_a_failing_query_is_written_in_input_order(three_queries, tmp_path, capsys,
                                                                          monkeypatch):
    use(monkeypatch, Recorder("second query", RuntimeError("bug in a comparator")))
    out = tmp_path / "out.run"
    assert main(cli_args(three_queries, out, "--on-failure", "prior")) == 0
    captured = capsys.readouterr()
    assert "activeprp: query q2 failed: RuntimeError: bug in a comparator\n" in captured.err
    assert [line.split()[2] for line in out.read_text().splitlines() if line.startswith("q2 ")] == ["d3", "d4"]
    assert "wrote 6 lines (3 queries)" in captured.out and "1 failed queries were written in their input order" in \
        captured.out
    assert "nDCG@10 (ir-measures, 2 judged queries): input 0.8155 -> reranked 1.0000\n" in captured.out


class Interrupting:
    """A judge whose first call is interrupted by Ctrl-C."""

    def compare(self, query, pairs):
        raise KeyboardInterrupt


def test_ctrl_c_is_one_line_exit_130_and_no_output(three_queries, tmp_path, capsys, monkeypatch):
    use(monkeypatch, Interrupting())
    out = tmp_path / "out.run"
    assert main(cli_args(three_queries, out)) == 130
    assert capsys.readouterr().err == "activeprp: error: interrupted\n"
    assert not out.exists() and not list(tmp_path.glob(".out.run.*"))


def test_sigterm_leaves_no_temporary_file(three_queries, tmp_path):
    """SIGTERM (a timeout, a batch scheduler) while OUT's temporary file is open: it is removed, as for Ctrl-C,
    and the exit status is 143 (128 + SIGTERM)."""
    import subprocess
    import sys

    script = """if True:
        import os, signal, sys
        from activeprp_cli import main
        from activeprp_cli import rerank_run as cli

        class Terminated:
            def compare(self, query, pairs):
                os.kill(os.getpid(), signal.SIGTERM)
                return [0.5] * len(pairs)

        cli.comparator_factory = lambda *a: Terminated
        sys.exit(main(sys.argv[1:]))
    """
    out = tmp_path / "out.run"
    proc = subprocess.run([sys.executable, "-c", script, *cli_args(three_queries, out)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 143 and "Traceback" not in proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.run.*"))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_full_device_as_out_is_one_line_exit_1(three_queries, capsys):
    """A write error on OUT (ENOSPC: /dev/full) ended in a traceback."""
    assert main(cli_args(three_queries, "/dev/full")) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1] == (
        "activeprp: error: /dev/full: cannot write (No space left on device) with 1 of 3 queries done (1 LLM calls); "
        "no lines went out")  # it said "the lines before it went out": there were none


@needs_dev_fd
def test_a_write_error_on_a_file_or_on_stdout_is_one_line_exit_1_and_keeps_the_old_out(three_queries, tmp_path):
    """A file too large (RLIMIT_FSIZE, standing for a full disk or a quota) ended in a 29-line traceback; so did a
    full stdout with ``--out -``. Now one line says so, with how far the queries had gone; the old OUT is kept."""
    resource = pytest.importorskip("resource")

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))  # the run is 6 lines, ~150 bytes

    out = tmp_path / "out.run"
    out.write_text("old\n")
    proc = run_command(cli_args(three_queries, out), capture_output=True, text=True, preexec_fn=small_files)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"activeprp: error: {out}: cannot write (File too large) with 3 of 3 queries done (3 LLM calls), whose lines "
        f"are lost; {out} is as it was"]
    assert out.read_text() == "old\n" and not list(tmp_path.glob(".out.run.*"))
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            proc = run_command(cli_args(three_queries, "-"), stdout=full, stderr=subprocess.PIPE, text=True)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
        assert proc.stderr.splitlines()[-1] == (
            "activeprp: error: stdout: cannot write (No space left on device) with 1 of 3 queries done (1 LLM "
            "calls); no lines went out")


NOTES_FULL_AFTER = """
import errno, sys
from activeprp_cli import main

class Full:  # stdout refusing the notes from the one that starts with sys.argv[1]
    def __init__(self, inner):
        self.inner, self.full = inner, False
    def write(self, text):
        self.full |= text.startswith(sys.argv[1])
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.inner.write(text)
    def __getattr__(self, name):
        return getattr(self.inner, name)

sys.stdout = Full(sys.stdout)
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("first", ["read", "wrote"])
def test_notes_on_a_full_stdout_are_one_line_exit_1(three_queries, tmp_path, first):
    """With OUT a file and stdout full, the first note (``read N lines ...``) ended in a traceback. Now one line
    says so, and what went to OUT: nothing before the queries were reranked, else the run's lines."""
    out = tmp_path / "out.run"
    proc = subprocess.run([sys.executable, "-c", NOTES_FULL_AFTER, first, *cli_args(three_queries, out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    what = "no query was reranked" if first == "read" else f"wrote 6 lines (3 queries) to {out}"
    assert proc.stderr.splitlines() == [
        f"activeprp: error: stdout: cannot write the notes (No space left on device); {what}"]
    assert out.exists() == (first == "wrote")


def test_a_dead_endpoint_stops_with_exit_1_and_no_output(three_queries, tmp_path, capsys, monkeypatch):
    from activeprp_core import ComparatorAuthError

    judge = Recorder(None, ComparatorAuthError("invalid key", status_code=401))
    use(monkeypatch, judge)
    out = tmp_path / "out.run"
    assert main(cli_args(three_queries, out)) == 1
    assert capsys.readouterr().err.endswith("activeprp: error: ComparatorAuthError: invalid key (HTTP 401)\n")
    assert not out.exists() and len(judge.calls) == 1  # stopped at the first call


def test_max_active_sets_how_many_queries_share_a_call(three_queries, tmp_path, monkeypatch):
    from activeprp_core import Comparator

    class Batches(Comparator):  # a comparator that batches across queries (like a local model)
        max_batch_size = 8

        def __init__(self):
            self.inner, self.calls = Recorder(), []

        def compare(self, query, pairs):
            raise AssertionError("judge_batch is the entry")

        def judge_batch(self, items, *, guard=None):
            self.calls.append(len({q for q, _, _ in items}))
            return [p for q, a, b in items for p in self.inner.compare(q, [(a, b)])]

    for max_active, most in (("1", 1), ("3", 3)):
        judge = Batches()
        use(monkeypatch, judge)
        assert main(cli_args(three_queries, tmp_path / "out.run", "--max-active", max_active)) == 0
        assert max(judge.calls) == most


def test_openai_goes_through_arerank_many_with_max_concurrency_across_queries(three_queries, tmp_path, monkeypatch,
                                                                              capsys):
    import asyncio

    from activeprp_core import Comparator, SimulatedComparator

    class Endpoint(Comparator):
        def __init__(self):
            self.inner, self.inflight, self.most, self.queries = SimulatedComparator({"d1": 1, "d2": 2}), 0, 0, set()

        def compare(self, query, pairs):
            raise AssertionError("the sync path was used")

        async def acompare(self, query, pairs):
            self.inflight += len(pairs)
            self.most = max(self.most, self.inflight)
            self.queries.add(query)
            await asyncio.sleep(0.01)
            self.inflight -= len(pairs)
            return self.inner.compare(query, pairs)

    judge = Endpoint()
    use(monkeypatch, judge)
    out = tmp_path / "out.run"
    assert main(cli_args(three_queries, out, "--comparator", "openai", "--model", "m", "--max-concurrency", "2")) == 0
    assert judge.most == 2 and len(judge.queries) == 3  # calls of different queries in flight together, capped


class AsyncEndpoint:
    """An ``openai`` stand-in: answers each query's calls (async only) after ``on_call(query)``."""

    def __init__(self, on_call=lambda query: None):
        from activeprp_core import SimulatedComparator

        self.inner, self.on_call, self.queries = SimulatedComparator({"d1": 1, "d2": 2, "d4": 3}), on_call, []

    def compare(self, query, pairs):
        raise AssertionError("the sync path was used")

    async def acompare(self, query, pairs):
        import asyncio

        self.queries.append(query)
        self.on_call(query)
        await asyncio.sleep(0)
        return self.inner.compare(query, pairs)


OPENAI = ("--comparator", "openai", "--model", "m", "--max-active", "1")


def test_openai_writes_each_query_as_it_finishes(three_queries, capsys, monkeypatch):
    """With ``--comparator openai`` all of ``arerank_many`` was collected before the first line was written, so
    ``--out -`` showed nothing until the last query was done; now q1's and q2's lines are out before q3 is asked."""
    seen = []
    judge = AsyncEndpoint(lambda query: seen.append(capsys.readouterr().out) if query == "third query" else None)
    use(monkeypatch, judge)
    assert main(cli_args(three_queries, "-", *OPENAI)) == 0
    out = "".join(seen) + capsys.readouterr().out
    assert sorted({line.split()[0] for line in out.splitlines()}) == ["q1", "q2", "q3"]
    assert seen and {line.split()[0] for line in seen[0].splitlines()} == {"q1", "q2"}


def test_openai_stops_asking_after_a_write_error_and_ctrl_c_keeps_no_output(three_queries, tmp_path, capsys,
                                                                           monkeypatch):
    """A write error on OUT (``/dev/full``) after the first query: the queries left are not asked (their calls
    would be paid for nothing). Ctrl-C during a call: one line, exit 130, no OUT, no temporary file."""
    if Path("/dev/full").exists():
        judge = AsyncEndpoint()
        use(monkeypatch, judge)
        assert main(cli_args(three_queries, "/dev/full", *OPENAI)) == 1
        assert "cannot write (No space left on device) with 1 of 3 queries done" in capsys.readouterr().err
        assert judge.queries == ["first query"]

    def interrupt(query):
        if query == "second query":
            raise KeyboardInterrupt

    use(monkeypatch, AsyncEndpoint(interrupt))
    out = tmp_path / "out.run"
    assert main(cli_args(three_queries, out, *OPENAI)) == 130
    assert capsys.readouterr().err == "activeprp: error: interrupted\n"
    assert not out.exists() and not list(tmp_path.glob(".out.run.*"))


def test_without_tqdm_no_bar_is_shown(three_queries, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tqdm" else real(name, *a))
    args = [a for a in cli_args(three_queries, tmp_path / "out.run") if a != "--no-progress"]
    assert main(args) == 0
    assert capsys.readouterr().err == ""


def test_redirected_stderr_gets_no_bar_frames(three_queries, tmp_path, capsys, monkeypatch):
    """Without ``--no-progress``, stderr redirected to a file or a pipe (not a terminal, as captured here) got the
    tqdm bar's ``\\r`` frames; now it gets none, and a terminal still gets the bar."""
    args = [a for a in cli_args(three_queries, tmp_path / "out.run") if a != "--no-progress"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "queries" not in err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(args) == 0
    assert "3/3" in capsys.readouterr().err


def test_a_rank_column_of_floats_or_words_is_read_as_trec_eval_reads_it(files, tmp_path, capsys):
    """``rank '1.0' is not an integer`` stopped the command though the rank column is documented as not used;
    trec_eval and ir-measures take any token there. The run is now reranked, every row kept."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    files["run"].write_text("q1 Q0 d1 1.0 3.0 bm25\nq1 Q0 d2 2.0 2.0 bm25\nq2 Q0 d3 - 1.0 bm25\n")
    out = tmp_path / "out.run"
    assert main(cli_args(files, out)) == 0
    assert sorted(line.split()[:3] for line in out.read_text().splitlines()) == [
        ["q1", "Q0", "d1"], ["q1", "Q0", "d2"], ["q2", "Q0", "d3"]]
    assert "wrote 3 lines (2 queries)" in capsys.readouterr().out


def test_a_run_with_its_rank_and_score_columns_swapped_is_refused(files, tmp_path, capsys):
    """``qid Q0 docid SCORE RANK tag`` was read with the ranks as scores: the first stage reversed, and ``--depth``
    reranked the worst documents, exit 0. Now one line says the columns look swapped, exit 2, and OUT is not made."""
    files["run"].write_text("q1 Q0 d1 14.25 1 bm25\nq1 Q0 d2 11.75 2 bm25\nq2 Q0 d3 9.25 1 bm25\n")
    out = tmp_path / "out.run"
    assert main(cli_args(files, out, "--depth", "1")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run.txt:1: rank '14.25' is not an integer but score '1' is" in err
    assert "columns look swapped" in err and not out.exists()


def test_the_first_stage_is_the_order_trec_eval_evaluates(files, tmp_path, capsys):
    """A run whose rank column disagrees with its scores (fused: every rank 1; or ranks against the scores) was
    taken in rank order (ties in file order), so ``--depth`` kept, and the "input" nDCG@10 scored, another first
    stage than the one trec_eval and ir-measures evaluate on the same file. Every document and its data stay."""
    ir_measures = pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    files["run"].write_text("q1 Q0 d1 1 1.0 fused\nq1 Q0 d2 1 3.0 fused\nq1 Q0 d3 1 2.0 fused\n"
                            "q2 Q0 d4 1 0.5 bm25\nq2 Q0 d5 2 9.0 bm25\nq2 Q0 d6 3 9.0 bm25\n")
    files["queries"].write_text("q1\tfirst query\nq2\tsecond query\n")
    files["corpus"].write_text("\n".join(json.dumps({"_id": f"d{i}", "text": f"passage {i}"}) for i in range(1, 7)))
    files["qrels"].write_text("q1 0 d2 1\nq2 0 d5 2\nq2 0 d4 1\n")
    out = tmp_path / "top1.run"
    assert main(cli_args(files, out, "--depth", "1")) == 0
    assert [line.split()[:3] for line in out.read_text().splitlines()] == [["q1", "Q0", "d2"], ["q2", "Q0", "d6"]]
    printed = capsys.readouterr().out
    assert "note: the rank column of 1 queries (e.g. q2) disagrees with their scores" in printed
    assert main(cli_args(files, tmp_path / "all.run")) == 0
    printed = capsys.readouterr().out
    assert "read 6 lines (2 queries)" in printed and "wrote 6 lines (2 queries)" in printed
    evaluated = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], ir_measures.read_trec_qrels(str(files["qrels"])),
                                           ir_measures.read_trec_run(str(files["run"])))[ir_measures.nDCG @ 10]
    found = re.search(r"\): input ([0-9.]+) ->", printed)
    assert found and float(found.group(1)) == pytest.approx(evaluated, abs=1e-4), printed


def test_the_run_is_the_same_whatever_max_active_with_a_soft_judge(tmp_path, monkeypatch):
    """Each query reads only its own answers (``carry_judge=False``, as with ``--ray``): with a soft judge, whose
    answers the confidence gate reads, ``--max-active`` (how many queries are in progress at once) bounds memory
    and does not change the run. Before, queries in progress together read each other's answers."""
    from activeprp_core import SimulatedComparator

    with (tmp_path / "run.txt").open("w") as run, (tmp_path / "queries.tsv").open("w") as queries, \
            (tmp_path / "corpus.tsv").open("w") as corpus:
        for q in range(8):
            queries.write(f"q{q}\tquery {q}\n")
            for r in range(20):
                run.write(f"q{q} Q0 q{q}d{r} {r + 1} {100 - r} bm25\n")
                corpus.write(f"q{q}d{r}\tpassage {r} of query {q}\n")
    judge = SimulatedComparator({}, doc_noise=0.5, pair_noise=0.8, position_bias=0.4, hard=False)
    use(monkeypatch, judge)
    outs = []
    for active in ("1", "8"):
        outs.append(tmp_path / f"out{active}.run")
        assert main(["rerank-run", "--run", str(tmp_path / "run.txt"), "--queries", str(tmp_path / "queries.tsv"),
                     "--corpus", str(tmp_path / "corpus.tsv"), "--out", str(outs[-1]), "--comparator", "hf",
                     "--model", "patched", "--budget", "40", "--no-progress", "--max-active", active]) == 0
    first, second = (p.read_text().splitlines() for p in outs)
    assert len(first) == 160 and first == second


def test_the_judge_factory_names_a_local_model_directory_by_its_absolute_path(tmp_path, monkeypatch):
    """``--ray`` pickles the factory to actors that may run in another directory (or machine): an ``hf`` model given
    as a relative directory is resolved where the command runs; a name that is no directory (a model id), and the
    other comparators' ``--model`` (an endpoint's model name), are kept as given; the parsed arguments are not
    changed."""
    import argparse
    import pickle

    (tmp_path / "models" / "flan").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    for kind, model, expected in (("hf", "models/flan", str(tmp_path / "models" / "flan")),
                                  ("hf", "google/flan-t5-xl", "google/flan-t5-xl"),
                                  ("openai", "models/flan", "models/flan")):
        args = argparse.Namespace(comparator=kind, model=model)
        shipped = pickle.loads(pickle.dumps(cli.comparator_factory(args, [], None)))
        assert shipped.args[0].model == expected and args.model == model


def test_qrels_that_judge_none_of_the_queries_are_a_one_line_error_before_any_call(files, tmp_path, capsys,
                                                                                    monkeypatch):
    """It reranked, then printed ``input nan -> reranked nan``: LLM calls spent on an evaluation that could not
    happen (and, for the simulated judge, a judge without any label)."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    monkeypatch.setattr(cli, "build_comparator", lambda *a: pytest.fail("a comparator was built"))
    files["qrels"].write_text("q7 0 d2 2\n")
    out = tmp_path / "out.run"
    assert main(cli_args(files, out)) == 2
    assert capsys.readouterr().err == (f"activeprp: error: --qrels {files['qrels']} judges none of the 2 queries of "
                                       f"--run {files['run']} (e.g. q1): the qrels of another collection?\n")
    assert not out.exists()


@pytest.mark.parametrize(("command", "says", "not_says"), [
    ("rerank-run", "simulated: judges by the graded labels of --qrels", "'label' field"),
    ("demo", "simulated: judges by the bundled queries' graded labels", "'label' field"),
    ("rerank", "simulated: reads each candidate's 'label' field", "--qrels"),
    ("serve", "simulated: a judge without a model and without labels", "'label' field"),
])
def test_the_help_of_comparator_simulated_says_what_each_command_does(capsys, command, says, not_says):
    """rerank-run's help said its simulated judge reads each candidate's 'label' field (rerank's); it reads --qrels.
    serve's said so too; its documents carry no labels (every pair's second passage wins)."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    simulated = text[text.index("simulated: "):text.index("(default: bundled)")]
    assert says in simulated and not_says not in simulated


def test_the_help_says_the_cap_and_the_breaker_are_shared_by_the_queries(capsys):
    """``--max-concurrency`` and ``--max-consecutive-failures`` read as per-query settings beside ``--budget`` ("most
    LLM calls per query"): the help said "most LLM calls in flight". ``rerank_many`` holds one guard for all
    queries (6 queries at max_concurrency=3 had at most 3 calls in flight together); with --ray each actor has its
    own cap, and each batch of rows (one ``rerank_many``) its own shared breaker."""
    with pytest.raises(SystemExit):
        main(["rerank-run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("--max-concurrency MAX_CONCURRENCY most LLM calls in flight across all queries (with --ray: per actor) "
            "(none = the comparator's own; default none)") in text
    assert ("--max-consecutive-failures MAX_CONSECUTIVE_FAILURES calls in a row that may fail before a query's "
            "circuit breaker stops it; as many beyond one query's stop the calls of every query (with --ray: per "
            "batch of rows; with a comparator that batches queries, hf and bundled, a merged call's failures all count "
            "there)") in text


@pytest.mark.parametrize("flag", [["--ray-actors", "2"], ["--ray-gpus", "0.5"]])
def test_a_ray_flag_without_ray_is_refused(files, tmp_path, capsys, flag):
    """``--ray-actors`` and ``--ray-gpus`` without ``--ray`` were accepted and did nothing (the run went through
    rerank_many in this process). Now one line naming the flag and what it needs (exit 2); with ``--ray`` they
    pass the check."""
    from activeprp_cli import build_parser

    out = tmp_path / "out.run"
    assert main(cli_args(files, out, *flag)) == 2
    assert capsys.readouterr().err == (f"activeprp: error: {flag[0]} needs --ray: without it nothing runs on "
                                       "Ray\n")
    assert not out.exists()
    cli.check_flags(build_parser().parse_args(cli_args(files, out, "--ray", *flag)))


class FakeRay:
    """A stand-in ``ray`` module for ``activeprp_integrations.ray`` (no Ray starts): it records ``ray.init``'s
    keyword arguments and ``shutdown``, reports ``gpus`` GPUs on a loopback node, and its dataset fails the test if
    it is consumed."""

    def __init__(self, gpus: float = 0) -> None:
        import types

        self.inits: list[dict] = []
        self.shutdowns, self.gpus = 0, gpus
        self.data = types.ModuleType("ray.data")
        self.data.from_items = lambda records: self.Dataset()
        self.data.ActorPoolStrategy = lambda size: size
        self.data.dataset = types.SimpleNamespace(MaterializedDataset=type("MaterializedDataset", (), {}))
        self.util = types.SimpleNamespace(get_node_ip_address=lambda: "127.0.0.1")  # connect() checks loopback

    class Dataset:
        def __init__(self) -> None:
            import types

            self.context = types.SimpleNamespace()

        def columns(self, fetch_if_missing=True):
            return None  # not known without running it, as for a read_json dataset

        def map_batches(self, *args, **kwargs):
            return self

        def select_columns(self, columns):
            return self

        def iter_rows(self):
            raise AssertionError("the dataset ran (on a real Ray: waits for resources that never come)")

    def is_initialized(self) -> bool:
        return bool(self.inits) and self.shutdowns < len(self.inits)

    def init(self, **kwargs) -> None:
        self.inits.append(kwargs)

    def cluster_resources(self) -> dict:
        return {"CPU": 2.0} | ({"GPU": float(self.gpus)} if self.gpus else {})

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture
def fake_ray(monkeypatch):
    """``FakeRay`` as ``ray`` behind the real Ray runner (``activeprp_integrations.ray.rerank_records`` as the
    ``activeprp.runners`` entry point ``ray``); ``RAY_ADDRESS`` names a port where nothing listens."""
    from activeprp_integrations import ray as adapter

    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setitem(sys.modules, "ray.data", fake.data)
    monkeypatch.setenv(adapter.LOOPBACK_ENV, "0")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")

    class EntryPoint:
        def load(self):
            return adapter.rerank_records

    monkeypatch.setattr(cli, "entry_points", lambda **select: [EntryPoint()])
    return fake


def test_a_local_ray_is_a_new_one_whatever_ray_address_says(fake_ray):
    """``connect()`` promises a new Ray on 127.0.0.1; a bare ``ray.init()`` attaches to ``$RAY_ADDRESS`` or to a
    cluster ``ray start`` left here (it sent the run there, or hung on a stale address). Ray's ``"local"`` does not."""
    from activeprp_integrations.ray import connect

    assert connect(num_cpus=2) is True
    assert fake_ray.inits == [{"address": "local", "num_cpus": 2, "include_dashboard": False}]


def test_ray_at_an_address_where_nothing_listens_is_a_one_line_error(fake_ray, files, tmp_path, capsys):
    """``ray.init`` retried such an address for minutes (killed after 7); a TCP probe fails at once."""
    import socket

    with socket.socket() as closed:  # bound, never listening: a connection is refused
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        assert main(cli_args(files, tmp_path / "out.run", "--ray", address)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"activeprp: error: no Ray cluster at {address}: ConnectionRefusedError") and \
        err.count("\n") == 1
    assert not fake_ray.inits and not (tmp_path / "out.run").exists()


def test_ray_auto_with_a_stale_ray_address_is_a_one_line_error(fake_ray, files, tmp_path, capsys):
    """``ray.init(address="auto")`` goes to ``$RAY_ADDRESS`` (here a port where nothing listens) and retried it for
    minutes (killed after 60 s); the address is probed first, as ``--ray HOST:PORT`` is."""
    assert main(cli_args(files, tmp_path / "out.run", "--ray", "auto")) == 2
    err = capsys.readouterr().err
    assert err.startswith("activeprp: error: no Ray cluster at 127.0.0.1:1 (RAY_ADDRESS, which address 'auto' "
                          "reads): ConnectionRefusedError") and err.count("\n") == 1, err
    assert not fake_ray.inits and not (tmp_path / "out.run").exists()


def test_ray_auto_without_ray_address_is_left_to_ray(fake_ray, monkeypatch):
    """Without ``RAY_ADDRESS``, ``"auto"`` is a cluster Ray finds on this machine: nothing to probe."""
    from activeprp_integrations.ray import connect

    monkeypatch.delenv("RAY_ADDRESS")
    assert connect("auto") is True and fake_ray.inits == [{"address": "auto"}]


def test_ray_client_without_grpcio_is_a_one_line_error_naming_the_extra(fake_ray, files, tmp_path, capsys,
                                                                        monkeypatch):
    """``ray://`` needs ``ray[client]`` (grpcio), which ``activeprp[ray]`` does not install: Ray's ValueError was a
    36-line traceback, exit 1."""
    monkeypatch.setitem(sys.modules, "grpc", None)  # as if not installed
    assert main(cli_args(files, tmp_path / "out.run", "--ray", "ray://127.0.0.1:10001")) == 2
    assert capsys.readouterr().err == ('activeprp: error: Ray Client (address ray://127.0.0.1:10001) needs grpcio, '
                                       'which activeprp[ray] does not install: pip install "ray[client]"\n')
    assert not fake_ray.inits


def test_more_gpus_than_the_local_ray_has_is_a_one_line_error_not_a_hang(fake_ray, files, tmp_path, capsys):
    """The local Ray started for the command has no GPU: an actor asking for one never starts (Ray Data waited
    forever); the command knows the Ray's resources, so it says so and stops the Ray."""
    assert main(cli_args(files, tmp_path / "out.run", "--ray", "--ray-gpus", "1")) == 2
    assert capsys.readouterr().err == ("activeprp: error: num_gpus 1 per actor (--ray-gpus), but the local Ray started "
                                       "for this run has 0 GPUs: use fewer, or --ray ADDRESS of a cluster with "
                                       "GPUs\n")
    assert [kw["address"] for kw in fake_ray.inits] == ["local"] and fake_ray.shutdowns == 1
    assert not (tmp_path / "out.run").exists()
