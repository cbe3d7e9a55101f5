"""The ``covonaut-es`` program: its parser, made of every command module's subcommands,
and :func:`main`, which runs the one chosen and turns a usage error into exit status 2.

Each command module declares its subcommands in one ``add_*_commands(subcommands)``
function (see :mod:`covonaut_es.cli._command`); adding a module is adding that function
to :data:`_COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

from eventsourcing.persistence import PersistenceError

from covonaut_es import _logs
from covonaut_es._text import printable
from covonaut_es.cli._command import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    OUT_OF_SPACE,
    Command,
    CommandParser,
    OutputClosedError,
    Subcommands,
    UsageError,
)
from covonaut_es.cli._forks import add_fork_commands
from covonaut_es.cli._migrate import add_migrate_command
from covonaut_es.cli._names import name_threads
from covonaut_es.cli._pauses import add_pause_commands
from covonaut_es.cli._reviews import add_review_commands
from covonaut_es.cli._serve import add_serve_command
from covonaut_es.cli._threads import add_thread_commands
from covonaut_es.cli._tokens import add_token_commands
from covonaut_es.cli._transfer import add_transfer_commands
from covonaut_es.cli._workers import add_worker_commands
from covonaut_es.errors import CovonautError

_COMMAND_GROUPS: tuple[Callable[[Subcommands], None], ...] = (
    add_thread_commands,
    add_review_commands,
    add_pause_commands,
    add_fork_commands,
    add_transfer_commands,
    add_migrate_command,
    add_token_commands,
    add_serve_command,
    add_worker_commands,
)
"""Each command module's declaration, in the order ``--help`` lists them."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``covonaut-es`` command.

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` by default.

    Returns:
        The exit status: 0 for success, 1 when the command found problems (a failed
        check or verification), 2 when it could not run (bad arguments or input, a
        store that cannot be opened or read, output that found no room), 130 when
        interrupted (Ctrl-C), 143 when asked to stop (``SIGTERM``) and 141 when stdout
        was closed by its reader.
    """
    # What reaches stderr with no handler set up, another library's records included.
    _logs.escape_handlers(logging.lastResort)
    try:
        args = build_parser().parse_args(argv)
    except BrokenPipeError:  # --help or --version into a closed pipe
        return _stdout_closed()
    except KeyboardInterrupt:  # Ctrl-C while the commands' modules load: no traceback
        return EXIT_INTERRUPTED
    except OSError as exc:  # --help or --version finding no room
        if exc.errno not in OUT_OF_SPACE:
            raise
        return _no_room(None, exc)
    command: Command = args.command
    try:
        with _terminated_as_an_exception():
            status = command(args)
        sys.stdout.flush()  # here, where a failure is reported, not at exit
    except _Terminated:
        return EXIT_TERMINATED
    except (UsageError, CovonautError) as exc:
        return _report(args, str(exc))
    except PersistenceError as exc:  # not (wholly) a store, or a disk that failed a write
        msg = (
            f"the store's database failed: {exc}; expected a covonaut-es store, readable and "
            "on a disk with room to write (a failed write is rolled back)"
        )
        return _report(args, msg)
    except KeyboardInterrupt:  # Ctrl-C, e.g. ending ``reviews --follow``: no traceback
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:  # the reader went away (``| head``): stop quietly
        if isinstance(exc, OutputClosedError):  # output that had to arrive whole
            _report(args, str(exc))
        return _stdout_closed()
    except OSError as exc:
        if exc.errno not in OUT_OF_SPACE:
            raise
        return _no_room(args, exc)
    return status


def _no_room(args: argparse.Namespace | None, exc: OSError) -> int:
    """Report output that found no room (a full disk, quota or file size limit): on
    stdout (a shell's redirection), which names no file, or on a file the command had
    no reason to expect it on; what to do depends on whether the command recorded its
    change before."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    what = "the output" if exc.filename is None else repr(exc.filename)
    if args is not None and args.recorded:
        advice = (
            "the store recorded the command's change before, and it stands: only its "
            "output was lost (threads, show or history shows the change; running the "
            "command again would be refused, or repeat it)"
        )
    else:
        advice = (
            "what was written is incomplete: make room, or write it elsewhere, and run "
            "the command again"
        )
    return _report(args, f"cannot write {what}: {exc.strerror}; {advice}")


class _Terminated(BaseException):
    """``SIGTERM`` arrived: raised where the command stands, so that its clean-ups run
    (an import's unfinished file removed, an export's temporary one)."""


@contextlib.contextmanager
def _terminated_as_an_exception() -> Iterator[None]:
    """Within the block, ``SIGTERM`` raises :class:`_Terminated` in the main thread,
    where the signal's default would end the process at once; a command that handles
    it itself (``worker``, ``serve``) puts its own handler in place meanwhile."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stdout_closed() -> int:
    """Stop quietly once stdout's reader went away: exit status 141."""
    # Python flushes stdout again at exit, which would fail once more: point it at
    # devnull (the recipe of the signal module's documentation).
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _report(args: argparse.Namespace | None, message: str) -> int:
    """Print ``message`` as one line on stderr, its control characters neutralised;
    prefixed with the command's name (the program's before ``args`` were read)."""
    one_line = " ".join(part.strip() for part in message.splitlines())
    if args is None:
        print(f"covonaut-es: {printable(one_line)}", file=sys.stderr)
    else:
        print(f"{args.error_prefix}: {printable(name_threads(one_line, args))}", file=sys.stderr)
    return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = CommandParser(prog="covonaut-es", description="Tools for covonaut-es thread stores.")
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
