"""Strict readers and a writer for the IR file formats: TREC runs and qrels, queries and corpora.

Formats (blank lines are skipped; line numbers are the file's own; a UTF-8 BOM is accepted; anything else that
is not UTF-8 is an error, a gzip-compressed file named as one):

- run: ``qid Q0 docid rank score tag``, six whitespace-separated columns, finite score; each query's rows are
  taken in trec_eval's order (score as a 32-bit float descending, ties by docid descending), not by the rank
  column, so that the first stage is the order that trec_eval and ir-measures evaluate; the rank may be any
  token (``1``, ``1.0``, ``-``), as both ignore it;
- qrels: ``qid iteration docid grade``, four columns, integer grade (in both, Unicode whitespace separates
  columns, as ir-measures splits them);
- queries: TSV ``qid<TAB>text``, or JSONL ``{"_id" | "qid": ..., "text": ...}``;
- corpus: TSV ``docid<TAB>text``, or JSONL ``{"_id" | "docid" | "id": ..., "text" | "contents": ..., "title"?}``
  (the passage is ``"title text"`` when a non-empty title is given; a title is a string or null).

A file whose name ends in ``.jsonl`` or ``.json`` is read as JSONL, any other as TSV. Every bad input raises
``activeprp_core.errors.InputError`` (a ``ValueError``) whose message starts with ``FILE:LINE: `` (or ``FILE: ``
for a file-level problem). Nothing here needs the evaluation extra: metrics live in ``activeprp_cli.metrics``.

Why not ``ir_measures.read_trec_run``/``read_trec_qrels``: they raise a bare unpacking error without the line,
keep a BOM inside the first qid, and decode whole chunks, so they cannot say which line is wrong; and the run
reader yields rows in file order (each ir-measures provider sorts them itself). The library is used where it is
strong, for the measures.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import stat
import struct
import sys
import tempfile
import unicodedata
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple, TextIO

from activeprp_core.comparators.prompts import model_text
from activeprp_core.errors import InputError
from activeprp_core.types import Candidate

STDOUT = "-"
"""The path that names stdout (``write_run``; ``rerank-run --out -``)."""

QUERY_ID_KEYS, DOC_ID_KEYS, DOC_TEXT_KEYS = ("_id", "qid"), ("_id", "docid", "id"), ("text", "contents")


class RunRow(NamedTuple):
    """One line of a TREC run: ``docid``, its ``rank`` (the column as an int, or a float such as ``1.0``; None when
    it is no number: trec_eval and ir-measures ignore it), its ``score`` and the file ``line`` (1-based)."""

    docid: str
    rank: int | float | None
    score: float
    line: int


Run = dict[str, list[RunRow]]  # {qid: rows in trec_eval's order, see read_run}
Qrels = dict[str, dict[str, int]]  # {qid: {docid: grade}}


_JSON_TYPES = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
               list: "an array", dict: "an object"}


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for messages ("null", "an array", ...)."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _open(path: str | Path):
    if str(path) == "-":
        return contextlib.nullcontext(sys.stdin.buffer)  # read, never closed
    return open(path, "rb")  # noqa: SIM115 - closed by the caller; binary so that a decoding error names its line


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, text without its line end)`` for each non-blank line of a UTF-8 file (``-`` = stdin),
    streamed. Lines end at ``\\n`` only (other Unicode line breaks stay inside their line, as JSONL says).

    Raises:
        InputError: a missing file, a directory, an unreadable file, a gzip-compressed file (not read: the message
            says how to decompress it), or bytes that are not UTF-8 (with the line).
    """
    try:
        f = _open(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    with f as lines:
        for n, raw in enumerate(lines, 1):
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                if n == 1:
                    _refuse_gzip(path, raw)
                raise InputError(f"{path}:{n}: not UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})"
                                 ) from None
            if line.strip():
                yield n, line


GZIP_MAGIC = b"\x1f\x8b"


def _refuse_gzip(path: str | Path, data: bytes) -> None:
    """Raise ``InputError`` when ``data``, the start of ``path``, is gzip's: its bytes are no UTF-8, but "not UTF-8"
    would not say why. Gzip is not read: decompressing first keeps one text path for every reader."""
    if data.startswith(GZIP_MAGIC):
        how = "pipe it through zcat" if str(path) == "-" else f"gunzip -k {shlex.quote(str(path))}"
        raise InputError(f"{path}: looks gzip-compressed, which is not read: decompress it first ({how})")


def _jsonl_hint(line: str) -> str:
    """What to tell of a JSONL line that a JSON array or a pretty-printed JSON file would start with."""
    start = line.lstrip()[:1]
    if start == "[":
        return " (JSONL wants one JSON object per line; from a JSON array: jq -c '.[]' FILE)"
    if start == "{" and not line.rstrip().endswith("}"):
        return " (JSONL wants each JSON object on one line: jq -c . FILE)"
    return ""


def _is_jsonl(path: str | Path) -> bool:
    return str(path).lower().endswith((".jsonl", ".json"))


def _no_constant(name: str) -> float:
    """``json.loads``' ``parse_constant``: Python's parser takes ``NaN`` and ``Infinity``, which JSON does not
    have (a line of them is refused, so that no output made of the line, e.g. ``rerank --json``'s ``document``,
    carries one)."""
    raise ValueError(f"{name} is not a JSON number: write a finite number or null")


def _json_object(path: str | Path, n: int, line: str) -> dict:
    try:
        obj = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{n}: not JSON ({err.msg} at column {err.colno}){_jsonl_hint(line)}") from None
    except ValueError as err:  # e.g. an integer too long to convert
        raise InputError(f"{path}:{n}: not JSON ({err})") from None
    if not isinstance(obj, dict):
        raise InputError(f"{path}:{n}: not a JSON object but {json_type(obj)}"
                         f"{_jsonl_hint(line) or ' (JSONL wants one JSON object per line)'}")
    return obj


def read_json(path: str | Path) -> object:
    """The JSON value that is the whole of the UTF-8 file ``path`` (a BOM is accepted, as by the line readers).

    Raises:
        OSError: the file cannot be read (left to the caller, which knows what a missing file means there).
        InputError: the file is not UTF-8 text (a gzip-compressed one is named so) or not JSON (``FILE: reason``).
    """
    data = Path(path).read_bytes()
    try:
        return json.loads(data.decode("utf-8").removeprefix("\ufeff"))
    except UnicodeDecodeError as err:
        _refuse_gzip(path, data)
        raise InputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except ValueError as err:
        raise InputError(f"{path}: not JSON ({err})") from None


def iter_json_objects(path: str | Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a JSONL file (``-`` = stdin), streamed.

    Raises:
        InputError: as ``iter_lines``, or a line that is not JSON or not a JSON object (``FILE:LINE: reason``).
    """
    for n, line in iter_lines(path):
        yield n, _json_object(path, n, line)


def field(path: str | Path, n: int, obj: dict, keys: Sequence[str], what: str, *, allow_int: bool
          ) -> tuple[str, str]:
    """``(key, value)`` of the first of ``keys`` present in the JSON object of line ``n``: a string, or with
    ``allow_int`` an integer turned into one (ids).

    Raises:
        InputError: none of ``keys`` present, or a value of another type (``FILE:LINE: reason``).
    """
    key = next((k for k in keys if k in obj), None)
    if key is None:
        raise InputError(f"{path}:{n}: no {what} field ({' / '.join(keys)})")
    value = obj[key]
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        wanted = "a string or an integer" if allow_int else "a string"
        raise InputError(f"{path}:{n}: {key!r} must be {wanted}, not {json_type(value)}")
    return key, value


def _keyed_text(path: str | Path, n: int, line: str, id_keys: Sequence[str], text_keys: Sequence[str],
                what: str) -> tuple[str, str, dict | None]:
    """``(id, text, the JSON object or None)`` of one line of a queries or corpus file (``what``: qid/docid)."""
    if _is_jsonl(path):
        obj = _json_object(path, n, line)
        return (field(path, n, obj, id_keys, what, allow_int=True)[1],
                model_text(field(path, n, obj, text_keys, "text", allow_int=False)[1]), obj)
    key, tab, text = line.partition("\t")
    if not tab or not key.strip():
        raise InputError(f"{path}:{n}: expected {what}<TAB>text")
    return key.strip(), text.strip(), None


def _check_once(first_lines: dict[str, int], key: str, path: str | Path, n: int, what: str) -> None:
    first = first_lines.setdefault(key, n)
    if first != n:
        raise InputError(f"{path}:{n}: {what} {key} appears twice (first at line {first})")


def _columns(path: str | Path, n: int, line: str, names: str) -> list[str]:
    """The whitespace-separated columns of line ``n``, as many as ``names`` has. Whitespace is Unicode's, as
    ir-measures splits (trec_eval splits at ASCII only): a no-break space inside a docid makes one column more there
    too, and the message names it, as the line shows no such separator."""
    cols, wanted = line.split(), len(names.split())
    if len(cols) != wanted:
        odd = next(((i, c) for i, c in enumerate(line, 1) if c.isspace() and c not in " \t"), None)
        why = "" if odd is None else (f": the U+{ord(odd[1]):04X} ({unicodedata.name(odd[1], 'a control character')}) "
                                      f"at column {odd[0]} separates columns as a space does (as in ir-measures)")
        raise InputError(f"{path}:{n}: expected {wanted} columns ({names}), got {len(cols)}{why}")
    return cols


def trec_eval_key(row: RunRow) -> tuple[float, str]:
    """The sort key, with ``reverse=True``, of trec_eval's order of one query's rows: score descending, ties by
    docid descending (trec_eval's ``comp_sim_docno``; ir-measures' pytrec_eval measures read a run the same way).
    The score is compared as trec_eval keeps it, a C ``float`` (``float32``): scores that differ only beyond its
    precision (``1.00000001`` and ``1.0``) tie there. Python compares str by code point, which orders UTF-8 text
    as ``strcmp`` orders its bytes."""
    return _float32(row.score), row.docid


def _float32(value: float) -> float:
    """``value`` rounded to the nearest 32-bit float as C's ``(float)`` cast does, out of range to +-inf."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # struct refuses what the cast makes infinite
        return math.copysign(math.inf, value)


def read_run(path: str | Path) -> Run:
    """A TREC run file: ``{qid: [RunRow, ...]}``, qids in file order, each query's rows in trec_eval's order
    (``trec_eval_key``: score as a 32-bit float descending, ties by docid descending); the rank column is kept in
    each row (``RunRow.rank``) but does not order them, and any token is accepted there, as trec_eval and
    ir-measures ignore it (see ``rank_disagreements``). A rank that is a number with a fraction (``14.25``) beside
    an integer score is refused, though: the columns were swapped, and the ranks would be read as scores, in
    reverse.

    Raises:
        InputError: a line without six columns, a score that is not a finite number, a non-integer rank beside an
            integer score (the columns swapped), a docid twice within one query, an empty file, or any
            ``iter_lines`` error.
    """
    run: Run = {}
    seen: dict[tuple[str, str], int] = {}
    for n, line in iter_lines(path):
        qid, _, docid, rank, score, _ = _columns(path, n, line, "qid Q0 docid rank score tag")
        rank_n = _rank(rank)
        try:
            score_f = float(score)
        except ValueError:
            score_f = math.nan
        if not math.isfinite(score_f):
            raise InputError(f"{path}:{n}: score {score!r} is not a finite number")
        if isinstance(rank_n, float) and not rank_n.is_integer() and score_f.is_integer():
            raise InputError(f"{path}:{n}: rank {rank!r} is not an integer but score {score!r} is: the rank and score "
                             "columns look swapped (expected qid Q0 docid rank score tag)")
        first = seen.setdefault((qid, docid), n)
        if first != n:
            raise InputError(f"{path}:{n}: docid {docid} appears twice for qid {qid} (first at line {first})")
        run.setdefault(qid, []).append(RunRow(docid, rank_n, score_f, n))
    if not run:
        raise InputError(f"{path}: no run lines")
    for rows in run.values():
        rows.sort(key=trec_eval_key, reverse=True)
    return run


def rank_disagreements(run: Run) -> list[str]:
    """The qids (file order) of ``run`` (from ``read_run``) whose rank column contradicts the order its rows are
    taken in: a row ranked after (a larger rank than) a row it comes before. Equal ranks (all 0 or 1, as some
    tools write) contradict nothing, nor does a rank that is no number (None)."""
    return [qid for qid, rows in run.items()
            if any(a.rank is not None and b.rank is not None and a.rank > b.rank for a, b in zip(rows, rows[1:]))]


def _rank(text: str) -> int | float | None:
    """A run's rank column as ``RunRow.rank`` keeps it: an int, else a finite float, else None."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def read_qrels(path: str | Path) -> Qrels:
    """TREC qrels ``qid iteration docid grade``: ``{qid: {docid: grade}}`` (grades as written, negatives kept).

    Raises:
        InputError: a line without four columns, a non-integer grade, a (qid, docid) judged twice with different
            grades (an identical repeat is accepted), an empty file, or any ``iter_lines`` error.
    """
    qrels: Qrels = {}
    for n, line in iter_lines(path):
        qid, _, docid, grade = _columns(path, n, line, "qid iteration docid grade")
        try:
            grade_i = int(grade)
        except ValueError:
            raise InputError(f"{path}:{n}: grade {grade!r} is not an integer") from None
        judged = qrels.setdefault(qid, {})
        if judged.setdefault(docid, grade_i) != grade_i:
            raise InputError(f"{path}:{n}: docid {docid} is judged twice for qid {qid} with different grades "
                             f"({judged[docid]} and {grade_i})")
    if not qrels:
        raise InputError(f"{path}: no qrels lines")
    return qrels


def read_queries(path: str | Path) -> dict[str, str]:
    """Queries ``{qid: text}`` from TSV (``qid<TAB>text``) or JSONL (``_id``/``qid`` and ``text``), file order.

    Raises:
        InputError: a TSV line without a tab, a JSONL line that is not a JSON object or lacks a field, a
            non-string text, an empty text, a qid twice, or any ``iter_lines`` error.
    """
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for n, line in iter_lines(path):
        qid, text, _ = _keyed_text(path, n, line, QUERY_ID_KEYS, ("text",), "qid")
        if not text.strip():
            raise InputError(f"{path}:{n}: query {qid} has an empty text")
        _check_once(lines, qid, path, n, "qid")
        queries[qid] = text.strip()
    return queries


def read_corpus(path: str | Path, wanted: Iterable[str] | None = None) -> dict[str, str]:
    """Passages ``{docid: text}`` from JSONL (``_id``/``docid``/``id``, ``text``/``contents``, optional ``title``)
    or TSV (``docid<TAB>text``), streamed: with ``wanted``, only those docids are kept in memory (every line is
    still checked). Docids of ``wanted`` that the corpus lacks are simply absent from the result.

    Raises:
        InputError: a malformed line (see ``read_queries``), a title neither a string nor null, a kept docid
            twice, or any ``iter_lines`` error.
    """
    keep = None if wanted is None else set(wanted)
    passages: dict[str, str] = {}
    lines: dict[str, int] = {}
    for n, line in iter_lines(path):
        docid, text, obj = _keyed_text(path, n, line, DOC_ID_KEYS, DOC_TEXT_KEYS, "docid")
        if obj is not None:
            title = obj.get("title")
            if title is not None and not isinstance(title, str):
                raise InputError(f"{path}:{n}: 'title' must be a string or null, not {json_type(title)}")
            text = f"{model_text(title or '')} {text}".strip()
        if keep is None or docid in keep:
            _check_once(lines, docid, path, n, "docid")
            passages[docid] = text
    return passages


def read_run_candidates(run_path: str | Path, queries_path: str | Path, corpus: str | Path | Mapping[str, str],
                        depth: int | None = None) -> tuple[Run, list[tuple[str, str, list[Candidate]]]]:
    """Everything a reranking of a run needs, checked before any LLM call: the run (all its lines), and per qid
    (run order) ``(qid, query text, candidates)`` where the candidates are the first ``depth`` rows in
    ``read_run``'s order (trec_eval's: by score; all when None), with their passage text. ``corpus`` is a corpus
    file (only the passages of these rows are kept in memory) or a ready ``{docid: text}`` mapping.

    Raises:
        InputError: any reader error; ``RUN:LINE`` of the first row of a qid that has no query, or of the first
            row whose docid the corpus lacks; ValueError: depth < 1.
    """
    if depth is not None and depth < 1:
        raise ValueError(f"depth must be >= 1 or None, got {depth}")
    run = read_run(run_path)
    queries = read_queries(queries_path)
    for qid, rows in run.items():
        if qid not in queries:
            first = min(r.line for r in rows)
            raise InputError(f"{run_path}:{first}: qid {qid} has no query in {queries_path}")
    kept = {qid: rows[:depth] for qid, rows in run.items()}
    wanted = (r.docid for rows in kept.values() for r in rows)
    passages = corpus if isinstance(corpus, Mapping) else read_corpus(corpus, wanted)
    missing = [(r.line, r.docid) for rows in kept.values() for r in rows if r.docid not in passages]
    if missing:
        line, docid = min(missing)
        source = "the corpus" if isinstance(corpus, Mapping) else corpus
        raise InputError(f"{run_path}:{line}: docid {docid} is not in {source} "
                         f"({len(missing)} run line(s) lack a passage)")
    return run, [(qid, queries[qid], [Candidate(r.docid, passages[r.docid]) for r in rows])
                 for qid, rows in kept.items()]


def named_fd(path: str | Path) -> int | None:
    """The file descriptor of this process that ``path`` names, itself or through symlinks (``/dev/stdout`` ->
    ``/proc/self/fd/1``, ``/dev/fd/N``, bash's ``>(cmd)``), else None. Such a name must not be resolved and
    replaced like a file's: for a pipe it resolves to ``pipe:[N]``, which exists nowhere, and for a file opened by
    ``>>`` to that file, whose earlier content a new file would drop."""
    fd_dirs = {os.path.realpath(d) for d in ("/dev/fd", "/proc/self/fd")}  # /proc/PID/fd of this process
    link = os.path.abspath(path)
    for _ in range(40):  # the most symlinks Linux follows in one path
        folder, name = os.path.split(link)
        if name.isdigit() and os.path.realpath(folder) in fd_dirs:
            return int(name)
        try:
            link = os.path.join(folder, os.readlink(link))
        except OSError:  # not a symlink, or one this process may not read (another's /proc/PID/fd)
            return None
    return None


def is_stdout(path: str | Path) -> bool:
    """Whether ``path`` names stdout: ``"-"`` (``STDOUT``), or a name of file descriptor 1 (``named_fd``)."""
    return str(path) == STDOUT or named_fd(path) == 1


class RunWriteError(OSError):
    """``write_run`` could not write its lines (disk full, quota, file too large, a device refusing them):
    ``filename`` is the path given, ``strerror`` says why. ``in_place``: the lines went into an open stream
    (stdout, a FIFO, a device, a file descriptor), which keeps those that got through; otherwise the file at
    ``filename`` was left as it was (its temporary file removed). ``lines``: the lines written before the write
    that failed (into a stream: flushed, so they went out), None when not known."""

    def __init__(self, error: OSError, path: str | Path, in_place: bool, lines: int | None = None) -> None:
        super().__init__(error.errno, error.strerror, str(path))
        self.in_place, self.lines = in_place, lines

    def __reduce__(self):
        # OSError's would call __init__ with its args (errno, strerror, filename): not this signature
        return type(self), (OSError(self.errno, self.strerror), self.filename, self.in_place), self.__dict__


@contextlib.contextmanager
def writing(path: str | Path, in_place: bool, lines: int | None = None) -> Iterator[None]:
    """Within the block, an ``OSError`` is a ``RunWriteError`` for ``path`` (``lines`` written before it); not
    ``BrokenPipeError``: the reader went away, which the command line ends quietly (exit status 141)."""
    try:
        yield
    except (BrokenPipeError, RunWriteError):
        raise
    except OSError as error:
        raise RunWriteError(error, path, in_place, lines) from error


def write_run(path: str | Path, ranked: Iterable[tuple[str, Sequence[str]]], tag: str = "activeprp", *,
              write_empty: bool = True) -> int:
    """Write a TREC run: for each ``(qid, docids best first)``, lines ``qid Q0 docid rank score tag`` with rank
    1..n and score n..1 (strictly decreasing, so trec_eval's sort by score keeps the order). ``ranked`` is
    consumed lazily; the file appears (atomically replacing ``path``, or the file a symlink there points to) only
    when it is exhausted. ``path`` ``"-"`` (``STDOUT``), a FIFO or a device gets the lines as they come instead, and
    so does a path naming one of this process's open files (``named_fd``: ``/dev/stdout``, ``/dev/fd/N``): it is
    written through that file descriptor, as a shell's ``>>`` or ``>`` opened it, never reopened or replaced.
    With ``write_empty=False``, a ``ranked`` that gives no line leaves ``path`` as it was (no file made or
    replaced). The lines are UTF-8 whatever the target, stdout too (its bytes, not its encoding). Returns the number
    of lines written. What ``ranked`` raises propagates as it is.

    A refusal (the ValueError / TypeError below) leaves a file at ``path`` as it was. A ``ranked`` that is a
    collection (a list, a tuple) is checked whole before anything is written, so a refusal writes nothing to a
    stream either; an iterator is checked query by query as it comes, so that a stream gets each query's lines as
    it comes, and keeps those of the queries before a refused one.

    Raises:
        ValueError: an empty or whitespace-containing qid, docid or tag; a docid twice within a query; a qid
            twice.
        TypeError: a str or bytes where a query's sequence of docids is expected.
        RunWriteError: an ``OSError`` while writing (the directory of ``path`` missing or not writable, the disk
            full, ...); the file at ``path`` is then left as it was.
    """
    check_token("tag", tag)
    pairs: Iterable[tuple[str, Sequence[str]]] = _checked(ranked)
    if isinstance(ranked, Collection):  # all at hand: refused before a line goes out, to a stream too
        pairs = list(pairs)
    if is_stdout(path):
        return _write_lines(_Utf8Stdout.of(sys.stdout), pairs, tag, path, in_place=True)
    fd = named_fd(path)
    real = Path(os.path.realpath(path))  # through a symlink, as a shell's > does: the link stays
    if fd is None and not (real.exists() and not real.is_file()):
        return _replace(path, real, pairs, tag, write_empty)
    with writing(path, in_place=True):
        # /dev/fd/N, /dev/stderr, bash's >(cmd): the open file, at its offset and with its flags; else a FIFO or a
        # device (/dev/null), written into, never replaced
        f = (os.fdopen(os.dup(fd), "w", encoding="utf-8", newline="\n") if fd is not None else
             open(real, "w", encoding="utf-8", newline="\n"))  # noqa: SIM115 - closed below
    lines = 0
    try:
        with _closing(f, path, in_place=True):
            lines = _write_lines(f, pairs, tag, path, in_place=True)
    except RunWriteError as error:  # closing it failed, every line written (and flushed)
        error.lines = lines if error.lines is None else error.lines
        raise
    return lines


@contextlib.contextmanager
def _closing(f: TextIO, path: str | Path, in_place: bool) -> Iterator[None]:
    """``f`` closed on the way out. After an error its close must not raise another: the flush of the lines still
    buffered would fail again, with a plain ``OSError`` in place of the ``RunWriteError``."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            f.close()
        raise
    with writing(path, in_place):
        f.close()


def _replace(path: str | Path, real: Path, ranked: Iterable[tuple[str, Sequence[str]]], tag: str,
             write_empty: bool) -> int:
    """``write_run`` of a regular file (or none yet) at ``real``: a temporary file beside it, renamed over it."""
    with writing(path, in_place=False):
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    try:
        f = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        with _closing(f, path, in_place=False):
            with writing(path, in_place=False):  # mkstemp's file is 0600; the run gets the mode of the one it replaces
                os.chmod(tmp, _file_mode(real))
            written = _write_lines(f, ranked, tag, path, in_place=False)
        if not written and not write_empty:
            os.unlink(tmp)
            return 0
        with writing(path, in_place=False):
            os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return written


def _checked(ranked: Iterable[tuple[str, Sequence[str]]]) -> Iterator[tuple[str, Sequence[str]]]:
    """``ranked``'s pairs, each checked as it comes (``write_run``'s ValueError / TypeError)."""
    qids = set()
    for qid, docids in ranked:
        check_token("qid", qid)
        if qid in qids:  # its lines would read back interleaved with the first's (both ranked n..1)
            raise ValueError(f"qid {qid} is given twice: give each query's docids in one (qid, docids) pair")
        qids.add(qid)
        if isinstance(docids, (str, bytes)):  # each character would be a docid
            raise TypeError(f"qid {qid}: the docids must be a sequence of str, got a {type(docids).__name__} "
                            f"{docids!r}: pass [{docids!r}] for one docid")
        if len(set(docids)) != len(docids):
            raise ValueError(f"qid {qid}: the ranked docids contain duplicates")
        for docid in docids:
            check_token("docid", docid)
        yield qid, docids


class _Utf8Stdout:
    """The lines of a run written to stdout as UTF-8 bytes, as to a file, whatever stdout's encoding (the locale's,
    ``PYTHONIOENCODING``'s: ASCII failed on a non-ASCII docid, Latin-1 wrote a run its own reader refuses); never
    closes stdout."""

    def __init__(self, buffer: BinaryIO) -> None:
        self.buffer = buffer

    @classmethod
    def of(cls, stream: TextIO) -> _Utf8Stdout | TextIO:
        """A writer of ``stream``'s bytes after flushing its text; ``stream`` itself when it has no bytes under it
        (an ``io.StringIO``)."""
        buffer = getattr(stream, "buffer", None)
        if buffer is None:
            return stream
        stream.flush()
        return cls(buffer)

    def writelines(self, lines: Iterable[str]) -> None:
        self.buffer.write("".join(lines).encode("utf-8"))

    def flush(self) -> None:
        self.buffer.flush()


def _write_lines(f: TextIO | _Utf8Stdout, ranked: Iterable[tuple[str, Sequence[str]]], tag: str, path: str | Path, *,
                 in_place: bool) -> int:
    """Write the lines of ``ranked`` (checked pairs, ``_checked``) to ``f`` and flush it (``in_place``: after each
    query, so that a reader of a stream gets each query's lines as it comes); ``OSError`` of the writes, not of
    ``ranked``, become ``RunWriteError`` (``writing``)."""
    written = 0
    for qid, docids in ranked:
        with writing(path, in_place, written):
            f.writelines(f"{qid} Q0 {docid} {rank} {len(docids) - rank + 1} {tag}\n"
                         for rank, docid in enumerate(docids, 1))
            if in_place:
                f.flush()
        written += len(docids)
    with writing(path, in_place, written):
        f.flush()
    return written


def _file_mode(path: Path) -> int:
    """The permission bits a file written to ``path`` gets: those of the file there now, else what ``open`` gives a
    new file (0666 less the process's umask)."""
    with contextlib.suppress(FileNotFoundError):
        return stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0)  # read back at once: there is no other way to read it
    os.umask(umask)
    return 0o666 & ~umask


def check_token(name: str, value: str) -> None:
    """Raises ValueError unless ``value`` can be a column of a TREC run (``name``: qid, docid, tag): a non-empty
    str without whitespace."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(f"a TREC run {name} must be a non-empty string without whitespace, got {value!r}")


__all__ = ["STDOUT", "Qrels", "Run", "RunRow", "RunWriteError", "check_token", "is_stdout", "iter_lines",
           "named_fd", "rank_disagreements", "read_corpus", "read_json", "read_qrels", "read_queries", "read_run",
           "read_run_candidates", "trec_eval_key", "write_run", "writing"]
