"""The ``covonaut-es`` command line (also ``python -m covonaut_es``).

Each subcommand has two functions: ``_add_<name>`` declares its arguments on the
subcommand parser, and ``<name>(args)`` runs it and returns the exit status. Adding a
subcommand is adding such a pair and one line in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from eventsourcing.persistence import PersistenceError

from covonaut_es.audit import check_store, format_report
from covonaut_es.errors import CovonautError
from covonaut_es.store import FileStateStore, open_store

STORE_ENV = "COVONAUT_ES_STORE"
"""The environment variable every command reads the store's URL from."""

EXIT_OK = 0
EXIT_FAILURES = 1
EXIT_USAGE = 2

Subcommands = Any  # argparse's _SubParsersAction, which it does not export


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``covonaut-es`` command.

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` by default.

    Returns:
        The exit status: 0 for success, 1 when the check found failures, 2 when the
        command could not run (bad arguments, unreachable store).
    """
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.command
    return command(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="covonaut-es", description="Tools for covonaut-es thread stores."
    )
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    from covonaut_es.cli._commands import add_thread_commands  # it imports this module

    add_thread_commands(subcommands)
    _add_migrate(subcommands)
    return parser


# migrate ------------------------------------------------------------------------------


def _add_migrate(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "migrate",
        help="check that everything in a store upgrades to this version's schemas",
        description=(
            "Read every event, snapshot and named state in a store, upgrade each in memory "
            "as a read would, and report counts per type and schema version and every "
            "record that does not upgrade. Stored data is never rewritten: upcasting "
            "happens on read, so checking is the only mode."
        ),
    )
    parser.add_argument(
        "--check",
        "--dry-run",
        dest="check",
        action="store_true",
        required=True,
        help="read and upgrade in memory only; nothing is ever written",
    )
    parser.add_argument(
        "--store",
        default=os.environ.get(STORE_ENV),
        metavar="URL",
        help=f"sqlite:///path or postgresql://... (default: ${STORE_ENV})",
    )
    parser.add_argument(
        "--states", type=Path, metavar="DIR", help="also check a directory of named states"
    )
    parser.add_argument(
        "--cipher-key-env",
        metavar="VAR",
        help="the environment variable holding the store's cipher key",
    )
    parser.add_argument(
        "--compressed", action="store_true", help="the store was opened with compress=True"
    )
    parser.set_defaults(command=migrate)


def migrate(args: argparse.Namespace) -> int:
    """``migrate --check``: exit 0 only if every record upgrades."""
    cipher_key = None
    if args.cipher_key_env:
        cipher_key = os.environ.get(args.cipher_key_env)
        if not cipher_key:
            return _usage_error(f"the environment variable {args.cipher_key_env} is not set")
    if not args.store:
        return _usage_error(f"no store: pass --store URL or set ${STORE_ENV}")
    if args.states is not None and not args.states.is_dir():
        return _usage_error(f"--states {str(args.states)!r} is not a directory")
    try:
        store = open_store(
            args.store, cipher_key=cipher_key, compress=args.compressed, create_tables=False
        )
    except CovonautError as exc:
        return _usage_error(str(exc))
    progress = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    try:
        with store:
            states = None if args.states is None else FileStateStore(args.states)
            report = check_store(store, state_files=states, progress=progress)
    except (CovonautError, PersistenceError) as exc:
        return _usage_error(f"cannot read store {store.url}: {exc}")
    finally:
        if progress is not None:
            progress.close()
    for line in format_report(report, source=store.url):
        print(line)
    return EXIT_OK if report.ok else EXIT_FAILURES


# Shared ---------------------------------------------------------------------------------


def _usage_error(message: str) -> int:
    print(f"covonaut-es: {message}", file=sys.stderr)
    return EXIT_USAGE


class ProgressBar:
    """A progress bar redrawn in place on a terminal, at most ten times a second."""

    WIDTH = 30

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._drawn_at: float | None = None

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._drawn_at is not None and now - self._drawn_at < 0.1 and done < total:
            return
        filled = self.WIDTH if not total else min(self.WIDTH, self.WIDTH * done // total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self._stream.write(f"\r[{bar}] {done} of about {total} records")
        self._stream.flush()
        self._drawn_at = now

    def close(self) -> None:
        if self._drawn_at is not None:
            self._stream.write("\n")
            self._stream.flush()
