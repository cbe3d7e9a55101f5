"""What every subcommand shares: its exit statuses, the usage error, and how it is
declared.

A command module declares each of its subcommands with :func:`add_command` and returns
an exit status from it; :mod:`covonaut_es.cli._app` runs the one chosen and reports a
:class:`UsageError` (or any :class:`~covonaut_es.errors.CovonautError`) on stderr with
:data:`EXIT_USAGE`.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import errno
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from covonaut_es._text import printable

EXIT_OK = 0
EXIT_FAILURES = 1
"""The command ran and found problems (``replay --verify``, ``migrate --check``)."""
EXIT_USAGE = 2
"""The command could not run: bad arguments, a store that cannot be opened or read."""
EXIT_INTERRUPTED = 130
"""Interrupted by Ctrl-C (128 + SIGINT, as a shell reports it); nothing is printed."""
EXIT_TERMINATED = 143
"""Asked to stop (``SIGTERM``: ``timeout``, ``docker stop``, systemd): 128 + SIGTERM,
once the command's clean-ups ran."""
EXIT_BROKEN_PIPE = 141
"""The reader of stdout went away (``| head``): 128 + SIGPIPE, as a shell reports a
program the signal ended; nothing is printed, unless the output had to arrive whole
(:class:`OutputClosedError`)."""

Command = Callable[[argparse.Namespace], int]
Subcommands = Any  # argparse's _SubParsersAction, which it does not export


class StopAsked:
    """Whether a stop signal asked a long-running command (``worker``, ``serve``) to end
    gracefully, noted from the command's start and passed on to what runs once it is
    made (:meth:`goes_to`): one that came while the command started stops it as soon
    as it runs. A second signal forces the stop, for a step that hangs (a start that
    waits on a database, a tool that never returns): as the command says, or through
    the handler the process had before (Ctrl-C's ``KeyboardInterrupt``, exit 130;
    SIGTERM's, exit 143)."""

    def __init__(self, previous: Mapping[signal.Signals, Any]) -> None:
        self._previous = previous
        self._asked = False
        self._stop: Callable[[], None] | None = None
        self._force: Callable[[int], None] = self._as_before

    def __call__(self, signum: int, frame: object = None) -> None:
        if self._asked:
            self._force(signum)
            return
        self._asked = True
        if self._stop is not None:
            self._stop()

    def goes_to(
        self, stop: Callable[[], None], *, force: Callable[[int], None] | None = None
    ) -> None:
        """From now on ``stop`` is called when a stop is asked, at once if one was, and
        ``force`` (given the signal's number) when another signal comes after it; by
        default that goes to the handler the process had before."""
        self._stop = stop
        if force is not None:
            self._force = force
        if self._asked:
            stop()

    def _as_before(self, signum: int) -> None:
        _put_back(self._previous)
        signal.raise_signal(signum)


def _put_back(handlers: Mapping[signal.Signals, Any]) -> None:
    """Set the signals' ``handlers`` again, as ``signal.getsignal`` gave them (None: one
    not set from Python, whose default is put back)."""
    for signum, handler in handlers.items():
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)


@contextlib.contextmanager
def stopping_gracefully() -> Iterator[StopAsked]:
    """Make SIGTERM and SIGINT ask the command to end gracefully (exit 0) for the block,
    through the :class:`StopAsked` it gives; the handlers they had before are put back
    after it (``main`` may run in a longer process). The first signal's handler raises
    nothing: an exception from a signal handler that lands in a callback (an import's,
    a finalizer's) is printed and dropped, and the signal with it. Only the main thread
    may set a handler: run in another thread, the block leaves the signals to the
    process's own handlers."""
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    asked = StopAsked(previous)
    if threading.current_thread() is not threading.main_thread():
        yield asked
        return
    for signum in previous:
        signal.signal(signum, asked)
    try:
        yield asked
    finally:
        _put_back(previous)


class UsageError(Exception):
    """Bad input: reported on stderr, exit status 2."""


OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
"""The errors of a write that found no room: a full disk, a file size limit, a quota."""


class OutputClosedError(BrokenPipeError):
    """Standard output closed before a command whose output must arrive whole wrote it
    all (``export | head``): its message is reported on stderr, exit status 141."""


_OPTION_WITHOUT_VALUE = re.compile(r"argument (-[^/:\s]+)[^:]*: expected one argument")
"""argparse's error for an option whose value looked like an option; names the option."""


# argparse's private names and its English error texts this module relies on
# (_print_message, _option_string_actions, _negative_number_matcher, "expected one
# argument"), checked on CPython 3.11.7, 3.12.1 and 3.13.0.
class CommandParser(argparse.ArgumentParser):
    """The parser of the program and (argparse makes them of its class) of each
    subcommand: its usage errors name the subcommand and also say when a word that
    begins with ``-`` was read as an option; help and the version into a closed stdout
    raise :class:`BrokenPipeError`, as any command's output does.

    A thread id, a call id or a fork's id may begin with ``-``, and so may a reason or an
    answer; argparse takes such a word for an option and then reports a missing
    argument or an unrecognized one, which does not tell the operator why. The error
    names the word and the two forms that reach it: an id after ``--`` at the end of the
    line, an option's value as ``OPTION=VALUE``.
    """

    _words: Sequence[str] = ()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but words no parser took are reported by the subcommand's
        parser, whose errors name it (``covonaut-es threads: error: ...``), not by the
        program's."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser: argparse.ArgumentParser = getattr(parsed, "subcommand_parser", self)
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _print_message(self, message: str, file: Any = None) -> None:  # a text stream
        # argparse passes over a failed write of help or the version and exits 0; a
        # stdout its reader closed ends these as it ends every command (141).
        if message:
            stream = file or sys.stderr
            stream.write(message)
            stream.flush()

    def error(self, message: str) -> NoReturn:
        taken = self._taken_for_options(message)
        if taken:
            shown = " and ".join(repr(word) for word in taken)
            were = "was read as an option" if len(taken) == 1 else "were read as options"
            option = _OPTION_WITHOUT_VALUE.match(message)
            close = self._option_like(taken[0])
            if close is not None:
                how = f"no option is named so: did you mean {close}?"
            elif option:
                words = list(self._words)
                given = option[1] in words and words.index(option[1]) + 1 < len(words)
                value = words[words.index(option[1]) + 1] if given else taken[0]
                how = f"write it as {option[1]}={value}"
            else:
                how = (
                    f"write an id that begins with '-' after '--' at the end of the line "
                    f"(`... -- {taken[-1]}`), and an option's value as OPTION={taken[0]}"
                )
            message = f"{message} ({shown} {were}: {how})"
        # argparse quotes the words it refused, and the advice repeats one as given: a
        # word may hold an escape sequence (an id a script took from a thread).
        super().error(printable(message))

    def _option_like(self, word: str) -> str | None:
        """This parser's long option that ``word`` (``--name``, or ``--name=value``) is
        most likely a typo of, if one is close."""
        if not word.startswith("--"):
            return None
        options = [name for name in self._option_string_actions if name.startswith("--")]
        close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.75)
        return close[0] if close else None

    def _taken_for_options(self, message: str) -> list[str]:
        """The words before ``--`` that begin with ``-`` and name no option of this
        parser (nor, for the program's parser, any it reports as unrecognized)."""
        unrecognized = "unrecognized arguments: "
        if message.startswith(unrecognized):
            words: Sequence[str] = message.removeprefix(unrecognized).split(" ")
        else:
            words = self._words
            if "--" in words:
                words = words[: list(words).index("--")]
        known = self._option_string_actions
        return [
            word
            for word in words
            if word.startswith("-")
            and len(word) > 1
            and word != "--"
            and word.split("=", 1)[0] not in known
            and not self._negative_number_matcher.match(word)
        ]


def add_command(
    subcommands: Subcommands,
    name: str,
    command: Command,
    *,
    help_: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Declare the subcommand ``name``, run by ``command``; returns its parser for its
    own arguments. Its errors, argparse's and the command's, read
    ``covonaut-es NAME: ...``."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        name, help=help_, description=help_ if description is None else description
    )
    # prog is the words that reach it: "covonaut-es token issue" for a nested one.
    # ``recorded``: whether the command's store took a change (see open_from), which
    # tells a failure after it (output that found no room) from one before.
    parser.set_defaults(
        command=command, error_prefix=parser.prog, subcommand_parser=parser, recorded=False
    )
    return parser
