"""The ``activeprp`` command line: one sub-command per module of this package.

Each sub-command module exposes ``add_parser(subparsers)``, which registers its parser and sets
``func(args) -> int`` as the handler. The core's own commands are the modules named in ``SUBCOMMANDS``; other
packages add theirs through the ``activeprp.commands`` entry-point group (name = the command, value = the module),
so the core never imports them (``activeprp serve`` from ``activeprp_integrations``, ``activeprp bench`` from
``activeprp_bench``). A plugin whose module or dependencies are not installed is left out of the parser, and no
plugin is imported for a core command (``activeprp rerank ...`` loads no other package). Errors end in one line
on stderr, never a traceback: ``activeprp: error: <reason>`` with exit code 2 for bad input (argparse's own
convention, ``InputError``) and 1 for a failure while running (an ``ActivePRPError``, e.g. a dead endpoint).
When the reader of stdout goes away (``activeprp ... | head``), the command ends quietly with exit code 141
(128 + SIGPIPE, what a shell shows for a command a closed pipe stopped); Ctrl-C ends it with
``activeprp: error: interrupted`` and exit code 130 (128 + SIGINT).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import signal
import sys
from importlib.metadata import PackageNotFoundError, entry_points, version

from activeprp_core.errors import InputError

__all__ = ["InputError", "build_parser", "discard_stdout", "encodable", "fail", "main", "package_version", "printable",
           "progress_wanted", "require_extra"]

SUBCOMMANDS = ("rerank", "rerank_run", "demo")  # module names (rerank_run registers rerank-run)
COMMAND_GROUP = "activeprp.commands"


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str, stream=None) -> str:
    """``text`` safe to print on a terminal: control characters (ANSI escape sequences included), bidi overrides
    and lone surrogates become Python escapes (``\\x1b``, ``\\u202e``, ``\\ud800``); characters the output
    encoding (of ``stream``, default stdout) lacks become ``\\u`` escapes."""
    return encodable(_UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text), stream)


def encodable(text: str, stream=None) -> str:
    """``text`` with the characters the output encoding of ``stream`` (default stdout) lacks as ``\\u`` escapes
    (``±`` is ``\\xb1`` under an ASCII locale), its lines and everything else as they are: a report printed, whose
    file holds the UTF-8."""
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding)


def fail(message: str, code: int) -> int:
    """Print ``activeprp: error: <message>`` (made ``printable``) on stderr and return ``code`` (the exit status)."""
    print(f"activeprp: error: {printable(message, sys.stderr)}", file=sys.stderr)
    return code


def require_extra(what: str, extra: str, *modules: str) -> None:
    """Raise ``InputError`` (one line, exit 2) saying ``extra`` installs ``modules`` when one is missing: checked
    before a command does any work, so that it does not fail at its end."""
    from activeprp_core.comparators.remote import require

    try:
        require(what, extra, *modules)
    except ImportError as err:
        raise InputError(str(err)) from None


def progress_wanted(no_progress: bool) -> bool:
    """Whether a command shows its tqdm bar over queries on stderr: not ``--no-progress``, tqdm installed, and
    stderr a terminal. Redirected to a file or a pipe, a bar's frames would land there as ``\\r`` garbage, so none is
    drawn (tqdm's own ``disable=None`` rule, taken here because the bar of ``rerank-run`` is the core's, which
    library callers, in notebooks too, ask for explicitly)."""
    return not no_progress and importlib.util.find_spec("tqdm") is not None and sys.stderr.isatty()


def package_version() -> str:
    """The installed ``activeprp`` distribution's version; ``unknown`` when run from a source tree that is not
    installed."""
    try:
        return version("activeprp")
    except PackageNotFoundError:
        return "unknown"


#: the users' summary in ``activeprp --help`` (plain text; the module docstring is the developers')
_DESCRIPTION = ("Rerank what a retriever returned with a pairwise LLM judge (\"which passage answers the query "
                "better, A or B?\"), under a budget of LLM calls and rounds per query. Run 'activeprp COMMAND "
                "--help' for the options of a command.")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``activeprp`` parser: the core's commands, plus the plugins' unless ``command`` is a core one."""
    parser = argparse.ArgumentParser(prog="activeprp", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    core = command in {n.replace("_", "-") for n in SUBCOMMANDS}
    plugins = set() if core else {ep.value for ep in entry_points(group=COMMAND_GROUP)}
    for name in dict.fromkeys([f"{__name__}.{n}" for n in SUBCOMMANDS] + sorted(plugins)):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if name in plugins or err.name == name:
                continue  # not installed here, or a plugin's optional dependencies are missing
            raise
        module.add_parser(subparsers)
    return parser


CLOSED_STDOUT = 141
"""The exit status when stdout's reader went away: 128 + SIGPIPE, as for a command the signal stopped."""


def discard_stdout() -> None:
    """Point stdout at devnull after a write to it failed, so that the flush of what is still buffered, at exit,
    cannot fail again with a message of its own (Python's "Note on SIGPIPE")."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stdout_closed() -> int:
    discard_stdout()
    return CLOSED_STDOUT


def main(argv: list[str] | None = None) -> int:
    """Run one ``activeprp`` command; returns the exit status (0 ok, 1 runtime failure, 2 bad input, 130 Ctrl-C,
    ``CLOSED_STDOUT`` when stdout's reader went away)."""
    from activeprp_core.errors import ActivePRPError

    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # output still buffered fails here, not at exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        return fail("interrupted", 128 + signal.SIGINT)
    except InputError as err:
        return fail(str(err), 2)
    except ActivePRPError as err:
        return fail(f"{type(err).__name__}: {err}", 1)


if __name__ == "__main__":
    sys.exit(main())
