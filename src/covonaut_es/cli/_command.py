"""What every subcommand shares: its exit statuses, the usage error, and how it is
declared.

A command module declares each of its subcommands with :func:`add_command` and returns
an exit status from it; :mod:`covonaut_es.cli._app` runs the one chosen and reports a
:class:`UsageError` (or any :class:`~covonaut_es.errors.CovonautError`) on stderr with
:data:`EXIT_USAGE`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

EXIT_OK = 0
EXIT_FAILURES = 1
"""The command ran and found problems (``replay --verify``, ``migrate --check``)."""
EXIT_USAGE = 2
"""The command could not run: bad arguments, a store that cannot be opened or read."""
EXIT_INTERRUPTED = 130
"""Interrupted by Ctrl-C (128 + SIGINT, as a shell reports it); nothing is printed."""
EXIT_BROKEN_PIPE = 141
"""The reader of stdout went away (``| head``): 128 + SIGPIPE, as a shell reports a
program the signal ended; nothing is printed."""

Command = Callable[[argparse.Namespace], int]
Subcommands = Any  # argparse's _SubParsersAction, which it does not export


class UsageError(Exception):
    """Bad input: reported on stderr, exit status 2."""


def add_command(
    subcommands: Subcommands,
    name: str,
    command: Command,
    *,
    help_: str,
    description: str | None = None,
    name_in_errors: bool = True,
) -> argparse.ArgumentParser:
    """Declare the subcommand ``name``, run by ``command``; returns its parser for its
    own arguments.

    Its errors read ``covonaut-es NAME: ...``, or ``covonaut-es: ...`` without
    ``name_in_errors``.
    """
    parser: argparse.ArgumentParser = subcommands.add_parser(
        name, help=help_, description=help_ if description is None else description
    )
    prefix = f"covonaut-es {name}" if name_in_errors else "covonaut-es"
    parser.set_defaults(command=command, error_prefix=prefix)
    return parser
