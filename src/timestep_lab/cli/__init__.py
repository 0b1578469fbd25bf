"""Command line: ``python -m timestep_lab <command> ...`` -- paths in, paths out, nothing else.

This entry builds the parser from the registry (:data:`timestep_lab.cli.common.COMMANDS`, filled
by importing the command modules below), dispatches, and is the one place that turns every
expected failure into one ``error: ...`` line naming the key, option or file, and exit status 2
(:data:`EXPECTED_ERRORS`: a bad option, config or input, a missing or corrupted file) or 3 (a
diverged run); they never show a traceback. Anything else is a bug and keeps its traceback. A
new command is a function registered with ``@command`` in one of the command modules; the logic
stays in the library. Command modules never import this entry.
"""

from __future__ import annotations

import argparse
import logging
import sys

from timestep_lab.artifacts.io import ArtifactError, check_writable
from timestep_lab.cli.allocator import keep_freed_memory
from timestep_lab.cli.common import COMMANDS, OUTPUT_OPTIONS, setup_torch
from timestep_lab.config import ConfigError
from timestep_lab.cost.usage import usage_line
from timestep_lab.errors import InputError, NonFiniteLossError

# Registration order is the order of the commands in --help (pipeline order), so keep it unsorted.
# isort: off
from timestep_lab.cli import data, train, generate, evaluate, analyses, sampled, tables, report, estimate, rehearse, stages  # noqa: F401
# isort: on

__all__ = ["main", "run_command", "COMMANDS", "build_parser", "EXPECTED_ERRORS"]

#: what a user's input can cause, reported as one ``error:`` line and exit status 2: a config
#: value (``ConfigError``), a file (``ArtifactError``, its ``DataError``), a value a library
#: function cannot use (``InputError``), an option (argparse's usage errors, below)
EXPECTED_ERRORS = (ConfigError, ArtifactError, InputError)


class _UsageError(Exception):
    """argparse's complaint about the command line (it would print the usage and exit)."""


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors become one ``error:`` line through :func:`main`."""

    def error(self, message: str):
        raise _UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m timestep_lab", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    try:
        for name in OUTPUT_OPTIONS:  # a bad --out fails now, not after the work
            if getattr(args, name, None) is not None:
                check_writable(getattr(args, name), folder=name == "out" and args._out_folder)
        keep_freed_memory()  # reused buffers instead of fresh zeroed pages: ~20% of a job's CPU (cli/allocator.py)
        if hasattr(args, "threads"):  # the command takes runtime_args: apply --threads before it imports torch work
            setup_torch(args)
        return int(args._run(args) or 0)
    except EXPECTED_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:  # e.g. an array header that claims terabytes: a damaged input, or too big a job
        print(f"error: {args.command}: out of memory (an input may be damaged, or too large for this machine)",
              file=sys.stderr)
        return 2
    except NonFiniteLossError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def run_command(argv: list[str] | None = None, *, start: str | None = None) -> int:
    """:func:`main`, then the usage line on success (:mod:`timestep_lab.cost.usage`; ``start``: how
    the process started, when not as ``python -m timestep_lab`` starts one, named by whoever
    started it): what ``python -m timestep_lab`` runs."""
    status = main(argv)
    if status == 0:
        print(usage_line(start=start), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
