"""The ``activeprp`` command line: one sub-command per module of this package.

Each sub-command module exposes ``add_parser(subparsers)``, which registers its parser and sets
``func(args) -> int`` as the handler.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = ("rerank", "demo", "bench")


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
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
