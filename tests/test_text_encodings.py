"""Text that is not plain space-separated ASCII, end to end: the remote judges' passage cut for scripts written
without spaces, and UTF-8 wherever the command line and serve read or write text, whatever the locale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from activeprp_core.comparators.prompts import CUT_RUN_CHARS, cut_words
from tests.conftest import SHARED_DATA, needs_data

ROOT = Path(__file__).resolve().parents[1]
ASCII_LOCALE = {"LC_ALL": "C", "PYTHONUTF8": "0"}
"""Python's own encodings are then ASCII: stdout's, argv's decoding, ``open``'s default (``LC_ALL=C`` alone would
turn on UTF-8 mode)."""


def run_cli(args, env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    """``python -m activeprp_cli ARGS`` under ``env`` (on top of this one's, less its own locale settings)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONIOENCODING", "PYTHONUTF8"))}
    argv = [a if isinstance(a, bytes) else str(a) for a in args]  # bytes: as the shell would pass them
    return subprocess.run([sys.executable, "-m", "activeprp_cli", *argv], cwd=ROOT, env={**base, **env},
                          capture_output=True, timeout=120, **kw)


ZH = "北京是中华人民共和国的首都，也是全国的政治中心和文化中心。"
TEXTS_WITHOUT_SPACES = {
    "zh": ZH * 40,
    "ja": "東京は日本の首都であり、ひらがなとカタカナも使われる。" * 40,
    "th": "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย" * 40,
    "lo": "ວຽງຈັນເປັນນະຄອນຫຼວງຂອງປະເທດລາວ" * 40,
    "km": "ភ្នំពេញគឺជារាជធានីនៃកម្ពុជា" * 40,
    "my": "ရန်ကုန်မြို့သည်မြန်မာနိုင်ငံ၏အကြီးဆုံးမြို့ဖြစ်သည်" * 40,
    "base64": "QUJD" * 2000,
    "url": "https://example.com/" + "a/b-c_d" * 1000,
}


def word_cut(text: str, n: int) -> str:
    """The cut by whitespace-separated words alone (the rule before scripts without spaces counted)."""
    words = text.split()
    return text if len(words) <= n else " ".join(words[:n])


@pytest.mark.parametrize("name", sorted(TEXTS_WITHOUT_SPACES))
def test_text_without_spaces_is_cut_to_a_prefix_of_bounded_length(name):
    """A text without spaces was one "word", never cut: a Chinese or Thai passage reached a remote judge whole,
    whatever ``max_passage_words`` or serve's ``max_tokens_per_doc`` said."""
    text = TEXTS_WITHOUT_SPACES[name]
    cut = cut_words(text, 50)
    assert text.startswith(cut) and 0 < len(cut) <= 50 * CUT_RUN_CHARS
    if name not in ("base64", "url"):
        assert len(cut) == 50  # one unit per character
    assert cut_words(text, 10**6) == text


@pytest.mark.parametrize("text", ["hello world", "北京市", "a"])
def test_no_units_kept_is_the_empty_text(text):
    """``cut_words(text, 0)`` gave the first unit ("hello"), where the word cut before gave "" (review s69f #5)."""
    assert cut_words(text, 0) == ""


def test_mixed_text_counts_words_and_characters_and_keeps_its_spaces():
    assert cut_words("I live in 北京市 now", 5) == "I live in 北京"
    assert cut_words("北京 天津  上海", 3) == "北京 天"
    assert cut_words("a\t\tb  c d", 3) == "a b c"  # whitespace runs made one space, as before
    run = "x" * (2 * CUT_RUN_CHARS + 5)
    assert cut_words(run + " y", 2) == run[: 2 * CUT_RUN_CHARS] and cut_words(run + " y", 3) == run


@given(st.lists(st.text(st.characters(codec="ascii", exclude_characters=" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"),
                        min_size=1, max_size=CUT_RUN_CHARS), max_size=30),
       st.lists(st.sampled_from([" ", "  ", "\n", "\t", "\u00a0", "\u3000"]), min_size=31, max_size=31),
       st.integers(1, 35))
def test_space_separated_text_is_cut_exactly_as_by_words(words, spaces, n):
    text = "".join(s + w for s, w in zip(spaces, words))
    assert cut_words(text, n) == word_cut(text, n)


@needs_data
def test_the_shipped_collections_passages_are_cut_as_by_words():
    """Committed prompts must not change: every DL19/DL20 BM25 passage and NovelEval passage gets the same cut
    (the whole check, at 260 sizes and on SciFact and Cranfield too: /work/helpers/unifix_scratch/cut_identity.py)."""
    texts = [h["content"] for name in ("trec-dl-2019/bm25_dl19_top100.jsonl", "trec-dl-2020/bm25_dl20_top100.jsonl")
             for line in (SHARED_DATA / name).read_text(encoding="utf-8").splitlines()
             for h in json.loads(line)["hits"]]
    texts += [line.split("\t", 1)[1] for line in
              (SHARED_DATA / "noveleval" / "corpus.tsv").read_text(encoding="utf-8").splitlines()]
    assert len(texts) > 9000
    for n in (20, 48, 64, 128, 200):
        assert [cut_words(t, n) for t in texts] == [word_cut(t, n) for t in texts]


def test_the_openai_judge_cuts_chinese_passages():
    pytest.importorskip("openai")
    from activeprp_core.comparators import OpenAIChatComparator

    judge = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k", max_passage_words=12)
    prompt = judge.messages("首都", ZH * 50, ZH * 50)[-1]["content"]
    assert f'Passage A: "{ZH[:12]}"' in prompt and len(prompt) < 400


def test_serve_s_max_tokens_per_doc_cuts_chinese_documents():
    """The 413 for a prompt too long for the judge advises ``max_tokens_per_doc``: it now shortens such text."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from activeprp_integrations.serve import create_app
    from tests._serve_helpers import WordJudge

    seen: list[str] = []

    class Recording(WordJudge):
        def compare(self, query, pairs):
            seen.extend(t for a, b in pairs for t in (a.text, b.text))
            return super().compare(query, pairs)

    docs = [ZH * 100, "上海" + ZH * 100, "กรุงเทพมหานคร" * 200]
    body = {"query": "首都", "documents": docs, "max_tokens_per_doc": 5, "return_documents": True}
    with TestClient(create_app(Recording(), budget=30, max_rounds=6)) as client:
        answer = client.post("/v1/rerank", json=body)
    assert answer.status_code == 200 and seen
    assert {r["index"]: r["document"]["text"] for r in answer.json()["results"]} == dict(enumerate(docs))
    assert set(seen) <= {ZH[:5], "上海" + ZH[:3], docs[2][:5]}


@pytest.fixture
def non_ascii_run(tmp_path):
    """A TREC run, queries, corpus and qrels whose docids are not ASCII (nor all in cp1252), as UTF-8 files."""
    files = {"run": "q1 Q0 d\u00e9 1 3 bm25\nq1 Q0 \u6587\U0001f600 2 2 bm25\nq1 Q0 d3 3 1 bm25\n",
             "queries": "q1\tfirst query\n", "corpus": "d\u00e9\ta\n\u6587\U0001f600\tb\nd3\tc\n",
             "qrels": "q1 0 d3 1\n"}
    for name, text in files.items():
        (tmp_path / name).write_bytes(text.encode("utf-8"))
    return tmp_path


def rerank_run_args(d: Path, out) -> list:
    return ["rerank-run", "--run", d / "run", "--queries", d / "queries", "--corpus", d / "corpus", "--qrels",
            d / "qrels", "--comparator", "simulated", "--no-progress", "--out", out]


@pytest.mark.parametrize("out", ["-", "/dev/stdout"])
@pytest.mark.parametrize("env", [ASCII_LOCALE, {"PYTHONIOENCODING": "latin-1"}, {"PYTHONIOENCODING": "cp1252"}])
def test_a_run_written_to_stdout_is_utf8_whatever_its_encoding(non_ascii_run, env, out):
    """``--out -`` wrote in stdout's encoding: ASCII or cp1252 (a Windows pipe) ended in a UnicodeEncodeError
    traceback, Latin-1 wrote a run that ``rerank-run --run`` then refused as not UTF-8. Now the bytes are those of
    ``--out FILE``."""
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    if out == "/dev/stdout" and not Path("/dev/fd").is_dir():
        pytest.skip("no /dev/fd here")
    reference = non_ascii_run / "reference.run"
    assert run_cli(rerank_run_args(non_ascii_run, reference), env).returncode == 0
    piped = run_cli(rerank_run_args(non_ascii_run, out), env)
    assert (piped.returncode, piped.stdout) == (0, reference.read_bytes()), piped.stderr
    assert "\u6587\U0001f600".encode() in piped.stdout


PACKAGES = ("activeprp_core", "activeprp_cli", "activeprp_bench", "activeprp_integrations")
OPENERS = {"open", "gzip.open", "lzma.open", "bz2.open", "io.open", "os.fdopen", "codecs.open"}


def _unspecified_encodings(path: Path) -> list[str]:
    """The calls in ``path`` that read or write text in the locale's encoding: ``read_text``/``write_text``, and
    ``open`` (builtin, gzip's, lzma's ..., a ``Path``'s with a constant mode) in a text mode, without ``encoding=``.
    A call passing ``**kwargs`` is taken on trust. (ruff's PLW1514 is a preview rule, and misses ``Path`` values.)"""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        keywords = {k.arg for k in node.keywords}
        if "encoding" in keywords or None in keywords:
            continue
        func = ast.unparse(node.func)
        name = func.rsplit(".", 1)[-1]
        if name in ("read_text", "write_text"):
            found.append(f"{path.name}:{node.lineno}: {func}")
            continue
        if func in OPENERS:
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                 None)
        elif name == "open" and node.args and isinstance(node.args[0], ast.Constant):  # Path(...).open("w")
            mode = node.args[0]
        else:
            continue
        if mode is None or not isinstance(mode, ast.Constant) or "b" not in str(mode.value):
            found.append(f"{path.name}:{node.lineno}: {func}")
    return found


def test_the_package_reads_and_writes_text_files_as_utf8():
    """``activeprp bench`` wrote tables.md (``±``, ``↑``) and overhead.md (``µs``) in the locale's encoding: under an
    ASCII locale the grid ended in a UnicodeEncodeError traceback and left an empty tables.md; Windows' cp1252 has no
    arrows. Every text file the package opens now names its encoding."""
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 50
    assert [hit for p in files for hit in _unspecified_encodings(p)] == []


@needs_data
def test_bench_grid_under_an_ascii_locale_writes_utf8_tables_and_prints_them_escaped(tmp_path):
    """The grid ended in a UnicodeEncodeError traceback after its rows, with an empty tables.md."""
    for module in ("numpy", "ir_measures", "bm25s", "matplotlib", "pyarrow"):
        pytest.importorskip(module, reason='pip install "activeprp[bench]"')
    out = tmp_path / "grid"
    done = run_cli(["bench", "grid", "--data", SHARED_DATA, "--collections", "noveleval", "--rankers", "mohajer",
                    "--budgets", "20", "--seeds", "1", "--no-progress", "--out", out], ASCII_LOCALE)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr[-2000:]
    assert "±" in (out / "tables.md").read_text(encoding="utf-8")
    assert b"\\xb1" in done.stdout  # the same table on stdout, ± escaped: this stdout has no ±


def test_a_non_ascii_query_under_an_ascii_locale_is_the_text_typed(tmp_path):
    """Under ``LC_ALL=C PYTHONUTF8=0`` Python hands each byte of a Chinese ``--query`` over as a lone surrogate;
    the judge got U+FFFD characters and ``--json`` printed ``"\\udce4..."``. Bytes that are not UTF-8 are refused."""
    candidates = tmp_path / "c.jsonl"
    candidates.write_text('{"id": "a", "text": "北京是首都", "label": 1}\n{"id": "b", "text": "上海", "label": 0}\n',
                          encoding="utf-8")
    args = ["rerank", "--candidates", candidates, "--comparator", "simulated", "--json", "--query"]
    done = run_cli([*args, "中国的首都是哪里"], ASCII_LOCALE)
    assert done.returncode == 0 and json.loads(done.stdout)["query"] == "中国的首都是哪里"
    latin1 = run_cli([*args[:-1], b"--query", b"caf\xe9"], ASCII_LOCALE)
    assert latin1.returncode == 2 and b"argument --query: not UTF-8 (byte 0xe9 at byte 4)" in latin1.stderr


def test_argv_text_decodes_escaped_bytes_as_utf8_and_leaves_other_text():
    import argparse

    from activeprp_cli.rerank import argv_text

    assert argv_text("\udce9\udca6\udc96\udce9\udc83\udcbd") == "首都"  # its UTF-8 bytes, escaped
    assert argv_text("plain 首都") == "plain 首都" and argv_text("\ud800 x") == "\ud800 x"
    with pytest.raises(argparse.ArgumentTypeError, match="not UTF-8"):
        argv_text("caf\udce9")


def test_a_non_ascii_run_tag_under_an_ascii_locale_is_written_as_typed(non_ascii_run):
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    done = run_cli([*rerank_run_args(non_ascii_run, "-"), "--tag", "标签"], ASCII_LOCALE)
    assert done.returncode == 0 and done.stdout.decode("utf-8").splitlines()[0].endswith(" 标签"), done.stderr


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "latin-1"])
def test_serve_refuses_a_body_that_is_not_utf8(encoding):
    """docs/serve.md says a body not UTF-8 gets 400, and RFC 8259 requires UTF-8 of JSON between systems; Python's
    json.loads took UTF-16 and UTF-32 too (200). A UTF-8 body with a BOM is still taken."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from activeprp_integrations.serve import create_app
    from tests._serve_helpers import WordJudge

    text = json.dumps({"query": "café", "documents": ["café au lait", "thé"]}, ensure_ascii=False)
    headers = {"content-type": "application/json"}
    with TestClient(create_app(WordJudge(), budget=30, max_rounds=6)) as client:
        refused = client.post("/v2/rerank", content=text.encode(encoding), headers=headers)
        ascii_only = client.post("/v2/rerank", content=json.dumps(json.loads(text)).encode(encoding), headers=headers)
        taken = client.post("/v2/rerank", content=text.encode("utf-8-sig"), headers=headers)
    assert refused.status_code == 400 and refused.json()["type"] == "invalid_request", refused.text
    assert ascii_only.status_code == (200 if encoding == "latin-1" else 400), ascii_only.text  # ASCII is UTF-8
    assert taken.status_code == 200


def test_serve_refuses_a_document_whose_keys_differ_only_in_lone_surrogates():
    """Such keys all became ``k\\ufffd`` in the returned object, which then lost all but one of them (4 keys in, 2
    out) though the docs call the documents returned the whole ones sent."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from activeprp_integrations.serve import create_app
    from tests._serve_helpers import WordJudge

    colliding = b'{"text": "t", "k\\ud800": 1, "k\\udc00": 2, "k\\ufffd": 3}'
    nested = b'{"text": "t", "meta": {"a\\ud800": 1, "a\\udbff": 2}}'
    distinct = b'{"text": "t", "k\\ud800": 1, "j\\udc00": 2}'
    with TestClient(create_app(WordJudge(), budget=30, max_rounds=6)) as client:
        def post(document):
            body = b'{"query": "q", "return_documents": true, "documents": [' + document + b', "u"]}'
            return client.post("/v1/rerank", content=body, headers={"content-type": "application/json"})

        refused, refused_nested, taken = post(colliding), post(nested), post(distinct)
    assert refused.status_code == 400 and "differ only in lone surrogates" in refused.json()["message"]
    assert refused_nested.status_code == 400
    assert taken.status_code == 200
    assert {"text": "t", "k\ufffd": 1, "j\ufffd": 2} in [r["document"] for r in taken.json()["results"]]
