"""The CLI's error convention: one printable line on stderr, exit 2 for bad input, 1 for runtime failures."""

from __future__ import annotations

from activeprp_cli import main


def test_error_lines_escape_control_characters(tmp_path, capsys):
    bad = tmp_path / "evil\x1b[31m.run"
    code = main(["rerank-run", "--run", str(bad), "--queries", str(bad), "--corpus", str(bad), "--out",
                 str(tmp_path / "out.run"), "--comparator", "simulated", "--qrels", str(bad), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "\x1b" not in err and "evil\\x1b[31m.run: no such file" in err and err.count("\n") == 1
