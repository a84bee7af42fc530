"""The CLI's error convention: one printable line on stderr, exit 2 for bad input, 1 for runtime failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from activeprp_cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_error_lines_escape_control_characters(tmp_path, capsys):
    bad = tmp_path / "evil\x1b[31m.run"
    code = main(["rerank-run", "--run", str(bad), "--queries", str(bad), "--corpus", str(bad), "--out",
                 str(tmp_path / "out.run"), "--comparator", "simulated", "--qrels", str(bad), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "\x1b" not in err and "evil\\x1b[31m.run: no such file" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", [["demo", "--comparator", "simulated", "--no-progress", "--queries", "2"],
                                     ["rerank", "--query", "q", "--candidates", "-", "--comparator", "simulated"]])
def test_a_closed_stdout_ends_quietly_with_status_141(command):
    """``activeprp ... | head -1``: the reader is gone before the command prints (its end of the pipe closed
    first), so every write fails; the command exits with 141 (128 + SIGPIPE, as a shell shows for `seq 1e6 | head
    -1`) and nothing on stderr, no BrokenPipeError traceback."""
    cands = "".join(json.dumps({"id": f"d{i}", "text": f"passage {i}", "label": i % 3}) + "\n" for i in range(5))
    proc = subprocess.Popen([sys.executable, "-m", "activeprp_cli", *command], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.close()
    _, err = proc.communicate(cands.encode(), timeout=120)
    assert proc.returncode == 141 and err == b""
