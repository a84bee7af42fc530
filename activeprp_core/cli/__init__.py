"""The ``activeprp`` command line: one sub-command per module of this package.

Each sub-command module exposes ``add_parser(subparsers)``, which registers its parser and sets
``func(args) -> int`` as the handler. Errors end in one line on stderr, never a traceback:
``activeprp: error: <reason>`` with exit code 2 for bad input (argparse's own convention, ``InputError``) and
1 for a failure while running (an ``ActivePRPError``, e.g. a dead endpoint).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from ..errors import InputError

__all__ = ["InputError", "build_parser", "fail", "main", "printable"]

SUBCOMMANDS = ("rerank", "rerank_run", "demo", "bench")  # module names (rerank_run registers rerank-run)


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str, stream=None) -> str:
    """``text`` safe to print on a terminal: control characters (ANSI escape sequences included), bidi overrides
    and lone surrogates become Python escapes (``\\x1b``, ``\\u202e``, ``\\ud800``); characters the output
    encoding (of ``stream``, default stdout) lacks become ``\\u`` escapes."""
    text = _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding)


def fail(message: str, code: int) -> int:
    """Print ``activeprp: error: <message>`` (made ``printable``) on stderr and return ``code`` (the exit status)."""
    print(f"activeprp: error: {printable(message, sys.stderr)}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="activeprp", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            continue
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``activeprp`` command; returns the exit status (0 ok, 1 runtime failure, 2 bad input)."""
    from ..errors import ActivePRPError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InputError as err:
        return fail(str(err), 2)
    except ActivePRPError as err:
        return fail(f"{type(err).__name__}: {err}", 1)


if __name__ == "__main__":
    sys.exit(main())
