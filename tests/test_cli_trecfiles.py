"""Strict readers and the writer of ``activeprp_cli.trecfiles``: every bad input names FILE:LINE."""

from __future__ import annotations

import errno
import json
import math
import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activeprp_cli import InputError
from activeprp_cli.trecfiles import (
    iter_lines,
    json_type,
    rank_disagreements,
    read_corpus,
    read_qrels,
    read_queries,
    read_run,
    read_run_candidates,
    write_run,
)


def write(tmp_path, name: str, data: str | bytes):
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


RUN = "q1 Q0 d1 1 3.0 bm25\nq1 Q0 d2 2 2.0 bm25\nq2 Q0 d3 1 9.5 bm25\n"


@pytest.mark.parametrize(("text", "line", "reason"), [
    ("q1 Q0 d1 1 3.0\n", 1, "expected 6 columns (qid Q0 docid rank score tag), got 5"),
    ("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t x\n", 2, "expected 6 columns (qid Q0 docid rank score tag), got 7"),
    ("q1 Q0 d1 1 high t\n", 1, "score 'high' is not a finite number"),
    ("q1 Q0 d1 1 nan t\n", 1, "score 'nan' is not a finite number"),
    # qid Q0 docid SCORE RANK tag: the ranks were read as scores, so the first stage was reversed
    ("q1 Q0 d1 1 3 t\nq1 Q0 d2 13.50 2 t\n", 2, "rank '13.50' is not an integer but score '2' is: the rank and "
                                                "score columns look swapped (expected qid Q0 docid rank score tag)"),
    ("q1 Q0 d1 1 3 t\nq2 Q0 d1 1 3 t\nq1 Q0 d1 2 2 t\n", 3, "docid d1 appears twice for qid q1 (first at line 1)"),
])
def test_run_lines_are_checked(tmp_path, text, line, reason):
    path = write(tmp_path, "run.txt", text)
    with pytest.raises(InputError) as err:
        read_run(path)
    assert str(err.value).startswith(f"{path}:{line}: {reason}")


@pytest.mark.parametrize(("reader", "text", "reason"), [
    (read_run, "q1 Q0 d\u00a01 1 2.0 bm25\n", "expected 6 columns (qid Q0 docid rank score tag), got 7: the U+00A0 "
     "(NO-BREAK SPACE) at column 8 separates columns as a space does (as in ir-measures)"),
    (read_qrels, "q1 0 d\u20031 1\n", "expected 4 columns (qid iteration docid grade), got 5: the U+2003 (EM SPACE) "
     "at column 7 separates columns as a space does (as in ir-measures)"),
])
def test_a_non_ascii_space_that_splits_a_column_is_named(tmp_path, reader, text, reason):
    """"got 7" of a line that shows 6 columns did not say why. ir-measures splits at the no-break space too (and
    refuses the line), so it stays an error, one that names the character."""
    path = write(tmp_path, "f.txt", text)
    with pytest.raises(InputError) as err:
        reader(path)
    assert str(err.value) == f"{path}:1: {reason}"
    ir_measures = pytest.importorskip("ir_measures")
    with pytest.raises(ValueError, match="too many values to unpack"):
        list((ir_measures.read_trec_run if reader is read_run else ir_measures.read_trec_qrels)(str(path)))


def test_run_sorted_by_rank_with_bom_and_blank_lines(tmp_path):
    path = write(tmp_path, "run.txt", b"\xef\xbb\xbfq1 Q0 d2 2 2.0 t\r\n\n  \nq1 Q0 d1 1 3.0 t\r\nq0 Q0 d9 1 1 t\n")
    run = read_run(path)
    assert list(run) == ["q1", "q0"]  # file order of qids
    assert [(r.docid, r.rank, r.score, r.line) for r in run["q1"]] == [("d1", 1, 3.0, 4), ("d2", 2, 2.0, 1)]


def test_any_rank_token_is_accepted_as_trec_eval_and_ir_measures_ignore_it(tmp_path):
    """A rank of ``1.0`` was fatal (``rank '1.0' is not an integer``) though the column is not used; trec_eval and
    ir-measures read any token there. It is kept as a number where it is one (None else), and a rank that is no
    number contradicts nothing in ``rank_disagreements``."""
    path = write(tmp_path, "run.txt", "q1 Q0 d1 1.0 3.0 t\nq1 Q0 d2 x 4.0 t\nq1 Q0 d3 3 1.5 t\nq2 Q0 d4 - 2 t\n"
                                      "q2 Q0 d5 2.5 1.5 t\n")
    run = read_run(path)
    assert [(r.docid, r.rank) for r in run["q1"]] == [("d2", None), ("d1", 1.0), ("d3", 3)]
    assert [(r.docid, r.rank) for r in run["q2"]] == [("d4", None), ("d5", 2.5)]
    assert rank_disagreements(run) == []
    ir_measures = pytest.importorskip("ir_measures")
    assert {(d.query_id, d.doc_id) for d in ir_measures.read_trec_run(str(path))} == {
        (q, r.docid) for q, rows in run.items() for r in rows}


#: a fused run (every rank 1), a run with ranks 0 and a score tie, a run whose ranks contradict its scores, and
#: one whose ranks agree; the docids are not in score order in the file, and "é" > "z" as in trec_eval's strcmp
ORDER_RUN = ("f Q0 a 1 1.0 fused\nf Q0 b 1 3.0 fused\nf Q0 c 1 2.0 fused\n"
             "t Q0 d 0 5 x\nt Q0 e 0 5 x\nt Q0 g 0 9 x\nt Q0 \u00e9 0 5 x\nt Q0 z 0 5 x\n"
             "r Q0 h 1 1.5 x\nr Q0 i 2 2.5 x\nr Q0 j 3 0.5 x\n"
             "ok Q0 k 2 2 x\nok Q0 l 1 4 x\n")


def test_run_rows_follow_the_scores_as_trec_eval_and_ir_measures_read_them(tmp_path):
    """The rank column does not order a query's rows: trec_eval orders them by score, ties by docid descending, and
    so do ir-measures' measures. Before, rows were sorted by rank (ties in file order): a fused run's (every rank 1)
    first stage was its file order, not the one evaluated."""
    path = write(tmp_path, "run.txt", ORDER_RUN)
    run = read_run(path)
    order = {q: [r.docid for r in rows] for q, rows in run.items()}
    assert order == {"f": ["b", "c", "a"], "t": ["g", "\u00e9", "z", "e", "d"], "r": ["i", "h", "j"], "ok": ["l", "k"]}
    assert [(r.docid, r.rank, r.score, r.line) for r in run["r"]] == [("i", 2, 2.5, 10), ("h", 1, 1.5, 9),
                                                                   ("j", 3, 0.5, 11)]  # every row, as written
    assert rank_disagreements(run) == ["r"]  # equal ranks (f, t) contradict nothing
    ir_measures = pytest.importorskip("ir_measures")
    for qid, docids in order.items():  # the evaluator's position of each docid: 1 / RR with it the only relevant one
        for position, docid in enumerate(docids, 1):
            rr = ir_measures.calc_aggregate([ir_measures.RR], {qid: {docid: 1}}, ir_measures.read_trec_run(str(path)))
            assert 1 / rr[ir_measures.RR] == pytest.approx(position), (qid, docid)


def evaluated_order(path) -> list[str]:
    """The order ir-measures (pytrec_eval, trec_eval's C code) evaluates the one query of the run at ``path``: each
    docid's position is 1 / RR of a copy of the query in which it is the only relevant document."""
    ir_measures = pytest.importorskip("ir_measures")
    docs = list(ir_measures.read_trec_run(str(path)))
    run = [d._replace(query_id=f"{d.query_id}#{i}") for i in range(len(docs)) for d in docs]
    qrels = [ir_measures.Qrel(f"{d.query_id}#{i}", d.doc_id, 1) for i, d in enumerate(docs)]
    position = {docs[int(m.query_id.rpartition("#")[2])].doc_id: round(1 / m.value)
                for m in ir_measures.iter_calc([ir_measures.RR], qrels, run)}
    return sorted(position, key=position.__getitem__)


def test_run_scores_are_compared_as_trec_eval_keeps_them_32_bit_floats(tmp_path):
    """trec_eval (and pytrec_eval, which ir-measures uses) keeps a score as a C float: 1.00000001 and 1.0 tie
    there, and the tie goes to the larger docid. read_run compared 64-bit floats, so the first stage, ``--depth``'s
    cut and the printed input nDCG were of another order than the one ir-measures evaluates."""
    path = write(tmp_path, "run.txt", "q Q0 a 1 1.00000001 t\nq Q0 b 2 1.0 t\nq Q0 c 3 0.5 t\n"
                                      "q Q0 d 4 1e-300 t\nq Q0 e 5 0 t\nq Q0 f 6 1e39 t\nq Q0 g 7 1e40 t\n")
    order = [r.docid for r in read_run(path)["q"]]
    assert order == ["g", "f", "b", "a", "c", "e", "d"]  # 1e39 and 1e40 are both inf as floats
    assert order == evaluated_order(path)


SCORES_32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", "B", "z", "\u00e9", "\U0001f600"]), SCORES_32,
                               st.integers(0, 3), st.booleans()),
                     min_size=1, max_size=7, unique_by=lambda row: row[0]))
def test_run_order_is_the_one_ir_measures_evaluates_for_scores_that_tie_only_at_32_bits(tmp_path, rows):
    """Scores a few 64-bit steps from a 32-bit float (the same float to trec_eval), written as repr writes them."""
    lines = []
    for docid, score, steps, up in rows:
        for _ in range(steps):
            score = math.nextafter(score, math.inf if up else -math.inf)
        lines.append(f"q Q0 {docid} 1 {score!r} t\n")
    path = write(tmp_path, "run.txt", "".join(lines))
    assert [r.docid for r in read_run(path)["q"]] == evaluated_order(path)


@pytest.mark.parametrize(("data", "reason"), [
    (b"q1 Q0 d1 1 3.0 t\nq1 Q0 d\xff 2 2.0 t\n", ":2: not UTF-8 (byte 0xff at column 8)"),
    (b"", ": no run lines"),
    (b"\n\n", ": no run lines"),
])
def test_run_file_level_errors(tmp_path, data, reason):
    path = write(tmp_path, "run.txt", data)
    with pytest.raises(InputError) as err:
        read_run(path)
    assert str(err.value) == f"{path}{reason}"


def test_missing_file_and_directory(tmp_path):
    # a caller's mistake: a ValueError (InputError: the CLI's exit code 2) that names the path as given
    with pytest.raises(ValueError) as missing:
        read_run(tmp_path / "nope.txt")
    with pytest.raises(ValueError) as directory:
        read_queries(tmp_path)
    assert type(missing.value) is type(directory.value) is InputError
    assert (str(missing.value), str(directory.value)) == (f"{tmp_path / 'nope.txt'}: no such file",
                                                         f"{tmp_path}: is a directory, not a file")


def test_a_gzip_file_is_named_as_one_with_how_to_decompress_it(tmp_path):
    """A gzip input said ``FILE:1: not UTF-8 (byte 0x8b at column 2)``; gzip is not read, and the message now says
    that the file looks gzip-compressed and how to decompress it (the line readers and ``read_json`` alike)."""
    import gzip

    from activeprp_cli.trecfiles import read_json

    path = write(tmp_path, "run.txt.gz", gzip.compress(RUN.encode()))
    wanted = f"{path}: looks gzip-compressed, which is not read: decompress it first (gunzip -k {path})"
    for reader in (read_run, read_json, read_corpus):
        with pytest.raises(InputError) as err:
            reader(path)
        assert str(err.value) == wanted


@pytest.mark.parametrize(("text", "reason"), [
    ('[{"_id": "q1", "text": "a"}, {"_id": "q2", "text": "b"}]\n',
     "1: not a JSON object but an array (JSONL wants one JSON object per line; from a JSON array: jq -c '.[]' FILE)"),
    ('[\n  {"_id": "q1", "text": "a"}\n]\n', "1: not JSON (Expecting value at column 2) (JSONL wants one JSON "
                                              "object per line; from a JSON array: jq -c '.[]' FILE)"),
    ('{\n  "_id": "q1",\n  "text": "a"\n}\n', "1: not JSON (Expecting property name enclosed in double quotes at "
                                             "column 2) (JSONL wants each JSON object on one line: jq -c . FILE)"),
    ('"q1 a"\n', "1: not a JSON object but a string (JSONL wants one JSON object per line)"),
])
def test_json_where_jsonl_is_wanted_says_jsonl_is_wanted(tmp_path, text, reason):
    """A JSON array given where JSONL is wanted said ``not a JSON object but an array`` and a pretty-printed file
    ``not JSON (...)``, neither saying that one object per line is wanted."""
    path = write(tmp_path, "queries.jsonl", text)
    with pytest.raises(InputError) as err:
        read_queries(path)
    assert str(err.value) == f"{path}:{reason}"


def test_iter_lines_numbers_are_the_files(tmp_path):
    path = write(tmp_path, "x.tsv", "\n\na\n \nb\n")
    assert list(iter_lines(path)) == [(3, "a"), (5, "b")]


@pytest.mark.parametrize(("name", "text", "line", "reason"), [
    ("q.tsv", "q1\tfine\nq2 no tab\n", 2, "expected qid<TAB>text"),
    ("q.tsv", "q1\tfine\n\nq1\tagain\n", 3, "qid q1 appears twice (first at line 1)"),
    ("q.tsv", "q1\t  \n", 1, "query q1 has an empty text"),
    ("q.jsonl", '{"_id": "q1", "text": "a"}\n\n{"_id": "q2", "text": "b"\n', 3, "not JSON"),
    ("q.jsonl", '["q1", "a"]\n', 1, "not a JSON object but an array"),
    ("q.jsonl", '{"id": "q1", "text": "a"}\n', 1, "no qid field (_id / qid)"),
    ("q.jsonl", '{"qid": "q1"}\n', 1, "no text field (text)"),
    ("q.jsonl", '{"qid": "q1", "text": null}\n', 1, "'text' must be a string, not null"),
    ("q.jsonl", '{"qid": ["q1"], "text": "a"}\n', 1, "'qid' must be a string or an integer, not an array"),
])
def test_queries_lines_are_checked(tmp_path, name, text, line, reason):
    path = write(tmp_path, name, text)
    with pytest.raises(InputError) as err:
        read_queries(path)
    assert str(err.value).startswith(f"{path}:{line}: {reason}")


def test_queries_tsv_and_jsonl(tmp_path):
    tsv = write(tmp_path, "topics.txt", "\ufeff19335\tanthropological definition of environment \n")
    assert read_queries(tsv) == {"19335": "anthropological definition of environment"}
    jsonl = write(tmp_path, "queries.jsonl", '{"_id": 7, "text": "a b", "metadata": {}}\n{"qid": "x", "text": "c"}\n')
    assert read_queries(jsonl) == {"7": "a b", "x": "c"}


def test_corpus_keeps_only_wanted_passages_but_checks_every_line(tmp_path):
    rows = [{"_id": "d1", "title": "T", "text": "one"}, {"docid": "d2", "contents": "two"}, {"id": 3, "text": "three"}]
    path = write(tmp_path, "corpus.jsonl", "\n".join(map(json.dumps, rows)) + "\n")
    assert read_corpus(path, {"d1", "3", "absent"}) == {"d1": "T one", "3": "three"}
    assert read_corpus(path) == {"d1": "T one", "d2": "two", "3": "three"}
    bad = write(tmp_path, "bad.jsonl", json.dumps(rows[0]) + "\n{oops\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:2: not JSON"):
        read_corpus(bad, {"d1"})  # line 2 is not wanted, still checked
    dup = write(tmp_path, "dup.tsv", "d1\tx\nd2\ty\nd1\tz\n")
    with pytest.raises(InputError, match=r"dup\.tsv:3: docid d1 appears twice \(first at line 1\)"):
        read_corpus(dup, {"d1"})
    assert read_corpus(dup, {"d2"}) == {"d2": "y"}  # duplicates of unwanted docids cost no memory
    title = write(tmp_path, "t.jsonl", '{"_id": "d1", "title": 5, "text": "x"}\n')
    with pytest.raises(InputError, match=r"t\.jsonl:1: 'title' must be a string or null, not a number"):
        read_corpus(title)


@pytest.mark.parametrize("title", [0, False, [], {}, 1, True, ["T"], 1.5])
def test_corpus_refuses_every_title_that_is_neither_a_string_nor_null(tmp_path, title):
    """A falsy title (0, false, [], {}) was dropped in silence while a truthy one (1, true) was refused."""
    path = write(tmp_path, "c.jsonl", json.dumps({"_id": "d1", "title": title, "text": "x"}) + "\n")
    with pytest.raises(InputError) as err:
        read_corpus(path)
    assert str(err.value) == f"{path}:1: 'title' must be a string or null, not {json_type(title)}"


def test_corpus_title_null_or_missing_is_no_title_and_its_lone_surrogates_are_cleaned_as_the_texts(tmp_path):
    rows = [{"_id": "d1", "title": None, "text": "x"}, {"_id": "d2", "text": "y"},
            {"_id": "d3", "title": "", "text": "z"}, {"_id": "d4", "title": "T\ud83d", "text": "w\udc00"}]
    path = write(tmp_path, "c.jsonl", "\n".join(map(json.dumps, rows)) + "\n")
    assert read_corpus(path) == {"d1": "x", "d2": "y", "d3": "z", "d4": "T\ufffd w\ufffd"}


def test_qrels(tmp_path):
    path = write(tmp_path, "qrels.txt", "q1 0 d1 2\n\nq1 0 d2 -1\nq1 0 d1 2\n")
    assert read_qrels(path) == {"q1": {"d1": 2, "d2": -1}}  # an identical repeat is accepted
    for text, reason in [("q1 0 d1\n", ":1: expected 4 columns"), ("q1 0 d1 high\n", ":1: grade 'high' is not"),
                         ("q1 0 d1 1\nq1 0 d1 2\n", ":2: docid d1 is judged twice for qid q1 with different")]:
        bad = write(tmp_path, "bad_qrels.txt", text)
        with pytest.raises(InputError) as err:
            read_qrels(bad)
        assert str(err.value).startswith(f"{bad}{reason}")


def test_run_candidates_checks_queries_and_corpus_and_cuts_depth(tmp_path):
    run = write(tmp_path, "run.txt", "q1 Q0 d2 2 2.0 t\nq1 Q0 d1 1 3.0 t\nq2 Q0 d3 1 9.5 t\nq2 Q0 d4 2 9 t\n")
    queries = write(tmp_path, "q.tsv", "q1\tfirst\nq2\tsecond\nq3\tunused\n")
    corpus = write(tmp_path, "c.tsv", "d1\tone\nd2\ttwo\nd3\tthree\nd5\tfive\n")
    _, requests = read_run_candidates(run, queries, corpus, depth=1)
    assert [(q, text, [(c.id, c.text) for c in cands]) for q, text, cands in requests] == [
        ("q1", "first", [("d1", "one")]), ("q2", "second", [("d3", "three")])]
    with pytest.raises(InputError) as err:
        read_run_candidates(run, queries, corpus)  # d4 is needed at full depth
    assert str(err.value) == f"{run}:4: docid d4 is not in {corpus} (1 run line(s) lack a passage)"
    short = write(tmp_path, "short.tsv", "q1\tfirst\n")
    with pytest.raises(InputError) as err:
        read_run_candidates(run, short, corpus, depth=1)
    assert str(err.value) == f"{run}:3: qid q2 has no query in {short}"
    with pytest.raises(ValueError, match="depth"):
        read_run_candidates(run, queries, corpus, depth=0)


def test_write_run_round_trips_and_keeps_order_under_trec_sorting(tmp_path):
    out = tmp_path / "out.run"
    ranked = [("q1", ["d3", "d1", "d2"]), ("q2", ["d9"])]
    assert write_run(out, iter(ranked), tag="mine") == 4
    assert out.read_text().splitlines()[0] == "q1 Q0 d3 1 3 mine"
    run = read_run(out)
    assert {q: [r.docid for r in rows] for q, rows in run.items()} == dict(ranked)
    assert all(a.score > b.score for rows in run.values() for a, b in zip(rows, rows[1:]))
    ir_measures = pytest.importorskip("ir_measures")
    by_score = {}
    for doc in ir_measures.read_trec_run(str(out)):
        by_score.setdefault(doc.query_id, []).append((-doc.score, doc.doc_id))
    assert {q: [d for _, d in sorted(v)] for q, v in by_score.items()} == dict(ranked)


def test_write_run_gives_a_new_file_the_umask_mode_and_keeps_the_mode_it_replaces(tmp_path):
    import os
    import stat

    out, umask = tmp_path / "out.run", os.umask(0o022)
    try:
        write_run(out, [("q1", ["d1"])])
        first = stat.S_IMODE(out.stat().st_mode)
        out.chmod(0o640)
        write_run(out, [("q1", ["d2"])])
    finally:
        os.umask(umask)
    assert (first, stat.S_IMODE(out.stat().st_mode)) == (0o644, 0o640) and "d2" in out.read_text()


def test_write_run_refuses_bad_tokens_and_leaves_no_file(tmp_path):
    out = tmp_path / "out.run"
    for ranked, tag in [([("q 1", ["d1"])], "t"), ([("q1", ["d1", "d1"])], "t"), ([("q1", [""])], "t"),
                        ([("q1", ["d1"])], "my tag")]:
        with pytest.raises(ValueError):
            write_run(out, ranked, tag=tag)
        assert list(tmp_path.iterdir()) == []


def test_write_run_refuses_a_qid_given_twice_and_leaves_the_file_as_it_was(tmp_path):
    """Two pairs of one qid were both written ranked n..1: read back interleaved (c, a, d, b), or refused when a
    docid was in both."""
    out = write(tmp_path, "out.run", "old\n")
    for second in (["c", "d"], ["a", "d"]):
        with pytest.raises(ValueError, match=r"^qid q1 is given twice"):
            write_run(out, [("q1", ["a", "b"]), ("q2", ["x"]), ("q1", second)])
        assert out.read_text() == "old\n" and list(tmp_path.iterdir()) == [out]


def test_write_run_refuses_a_str_for_the_docids_as_the_core_does(tmp_path):
    """("q1", "d7") was written as two docids, d and 7."""
    out = tmp_path / "out.run"
    for docids in ("d7", b"d7"):
        with pytest.raises(TypeError, match=r"^qid q1: the docids must be a sequence of str, got a (str|bytes) "):
            write_run(out, [("q1", docids)])
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad, error", [(("q1", ["c"]), ValueError), (("q3", "d7"), TypeError)])
def test_write_run_to_a_stream_checks_a_list_whole_before_writing(bad, error):
    """To a stream (here a pipe as ``/dev/fd/N``), the queries before a refused one (a qid twice, a str of docids)
    had gone out already; a list is now checked whole first, so a refusal writes nothing. An iterator is still
    written query by query as it comes, so a stream keeps the queries before a refused one (documented)."""
    for ranked, kept in [([("q1", ["a", "b"]), ("q2", ["x"]), bad], b""),
                         (iter([("q1", ["a", "b"]), ("q2", ["x"]), bad]),
                          b"q1 Q0 a 1 2 t\nq1 Q0 b 2 1 t\nq2 Q0 x 1 1 t\n")]:
        read, write = os.pipe()
        try:
            with pytest.raises(error):
                write_run(f"/dev/fd/{write}", ranked, tag="t")
        finally:
            os.close(write)
            with os.fdopen(read, "rb") as pipe:
                assert pipe.read() == kept


def test_write_run_with_write_empty_false_leaves_the_file_as_it_was_when_nothing_comes(tmp_path):
    out = tmp_path / "out.run"
    assert write_run(out, iter([]), write_empty=False) == 0
    assert list(tmp_path.iterdir()) == []
    out.write_text("before\n")
    assert write_run(out, iter([]), write_empty=False) == 0
    assert out.read_text() == "before\n" and list(tmp_path.iterdir()) == [out]
    assert write_run(out, iter([]), write_empty=True) == 0 and out.read_text() == ""


def test_write_run_raises_run_write_error_for_the_writes_only(tmp_path):
    """An OSError of the writes (a full disk) is a RunWriteError naming the path; one that ``ranked`` raises (a
    comparator's ConnectionError) propagates as it is, and the file is left as it was either way."""
    from activeprp_cli.trecfiles import RunWriteError

    def failing():
        yield "q1", ["d1"]
        raise ConnectionError("the judge went away")

    out = tmp_path / "out.run"
    out.write_text("before\n")
    with pytest.raises(ConnectionError):
        write_run(out, failing())
    assert out.read_text() == "before\n" and list(tmp_path.iterdir()) == [out]
    if os.path.exists("/dev/full"):
        with pytest.raises(RunWriteError) as raised:
            write_run("/dev/full", [("q1", ["d1"])])
        assert (raised.value.filename, raised.value.strerror, raised.value.in_place, raised.value.lines) == (
            "/dev/full", os.strerror(errno.ENOSPC), True, 0)


def test_a_run_write_error_on_a_stream_counts_the_lines_that_went_out():
    """``rerank-run`` said "the lines before it went out" when none had: the error now counts them."""
    import io

    from activeprp_cli.trecfiles import RunWriteError, _write_lines

    class FullAfterTwoLines(io.StringIO):
        def flush(self):
            if self.getvalue().count("\n") > 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(RunWriteError) as raised:
        _write_lines(FullAfterTwoLines(), [("q1", ["a", "b"]), ("q2", ["c"])], "t", "-", in_place=True)
    assert (raised.value.lines, raised.value.in_place) == (2, True)


def test_a_run_write_error_pickles_and_copies_with_what_it_carries():
    """Its ``__init__`` takes (error, path, in_place), not OSError's args: pickle and copy raised."""
    import copy
    import pickle

    from activeprp_cli.trecfiles import RunWriteError

    error = RunWriteError(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "out.run", True)
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(again) is RunWriteError and str(again) == str(error)
        assert (again.errno, again.strerror, again.filename, again.in_place) == (
            errno.ENOSPC, os.strerror(errno.ENOSPC), "out.run", True)


def test_a_stream_out_gets_each_query_as_it_comes(tmp_path):
    """A FIFO (as stdout, a device, ``/dev/fd/N``) got the lines in blocks of 8 KiB, so a reader saw nothing of a
    small run until its end; now each query's lines are flushed as soon as they are written."""
    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    arrived = []

    def ranked():
        yield "q1", ["d1", "d2"]
        try:
            arrived.append(os.read(reader, 4096))
        except BlockingIOError:  # nothing there yet
            arrived.append(b"")
        yield "q2", ["d3"]

    try:
        assert write_run(fifo, ranked()) == 3
        assert arrived == [b"q1 Q0 d1 1 2 activeprp\nq1 Q0 d2 2 1 activeprp\n"]
        assert os.read(reader, 4096) == b"q2 Q0 d3 1 1 activeprp\n"
    finally:
        os.close(reader)


def test_a_fifo_out_is_written_into_not_replaced(tmp_path):
    """Through a symlink (or given directly), a FIFO or a device such as /dev/null was replaced by a regular file
    (as root, /dev/null itself)."""
    fifo, link = tmp_path / "run.fifo", tmp_path / "run.link"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    for out in (fifo, link):
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so that the writer's open does not wait
        try:
            assert write_run(out, [("q1", ["d1", "d2"])]) == 2
            assert os.read(reader, 4096) == b"q1 Q0 d1 1 2 activeprp\nq1 Q0 d2 2 1 activeprp\n"
        finally:
            os.close(reader)
        assert stat.S_ISFIFO(os.stat(fifo).st_mode) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.fifo", "run.link"]  # no temporary file left
