"""The ``covonaut-es`` program: its parser, made of every command module's subcommands,
and :func:`main`, which runs the one chosen and turns a usage error into exit status 2.

Each command module declares its subcommands in one ``add_*_commands(subcommands)``
function (see :mod:`covonaut_es.cli._command`); adding a module is adding that function
to :data:`_COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Sequence

from covonaut_es.cli._command import EXIT_USAGE, Command, Subcommands, UsageError
from covonaut_es.cli._forks import add_fork_commands
from covonaut_es.cli._migrate import add_migrate_command
from covonaut_es.cli._names import name_threads
from covonaut_es.cli._reviews import add_review_commands
from covonaut_es.cli._threads import add_thread_commands
from covonaut_es.cli._tokens import add_token_commands
from covonaut_es.cli._transfer import add_transfer_commands
from covonaut_es.errors import CovonautError

_COMMAND_GROUPS: tuple[Callable[[Subcommands], None], ...] = (
    add_thread_commands,
    add_review_commands,
    add_fork_commands,
    add_transfer_commands,
    add_migrate_command,
    add_token_commands,
)
"""Each command module's declaration, in the order ``--help`` lists them."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``covonaut-es`` command.

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` by default.

    Returns:
        The exit status: 0 for success, 1 when the command found problems (a failed
        check or verification), 2 when it could not run (bad arguments or input, a
        store that cannot be opened or read).
    """
    args = build_parser().parse_args(argv)
    command: Command = args.command
    try:
        return command(args)
    except (UsageError, CovonautError) as exc:
        one_line = " ".join(part.strip() for part in str(exc).splitlines())
        print(f"{args.error_prefix}: {name_threads(one_line, args)}", file=sys.stderr)
        return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="covonaut-es", description="Tools for covonaut-es thread stores."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for add_commands in _COMMAND_GROUPS:
        add_commands(subcommands)
    return parser


def _version() -> str:
    """The installed package's version."""
    try:
        return importlib.metadata.version("covonaut-es")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: no package metadata)"
