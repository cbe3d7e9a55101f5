"""What the commands print: ``--json`` or an aligned table on stdout, and a progress bar
on stderr when it is a terminal.

Scripts read stdout, so nothing but the result goes there; the progress bar is drawn only
on a terminal, so a redirected stderr never gets one.
"""

from __future__ import annotations

import argparse
import select
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO, TypeVar

import msgspec

from covonaut_es._text import json_printable, printable

T = TypeVar("T")


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Declare ``--json`` on a subcommand whose output :func:`emit` prints."""
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def check_reader_present() -> None:
    """Raise BrokenPipeError once the reader of stdout is gone, before anything is
    written to it: a command that prints only on change (``reviews --follow``) would
    otherwise notice only at its next print, which may never come.

    A pipe or socket whose reader closed polls as an error or a hang-up; a terminal
    or a file never does. Where ``poll`` is missing (Windows) the check finds nothing.
    """
    if not hasattr(select, "poll"):
        return
    try:
        fileno = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a stream without one
        return
    poller = select.poll()
    poller.register(fileno, select.POLLOUT)
    if any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0)):
        raise BrokenPipeError(f"the reader of standard output (fd {fileno}) is gone")


def write_whole(text: str) -> None:
    """Write ``text`` to stdout, all of it, or raise BrokenPipeError.

    A text stream drops what a short write left over: when the reader of a pipe goes
    away in the middle of one large write, the write returns the bytes the pipe took,
    Python's text layer ignores the count, and the program exits 0 having written a
    fraction. Writing the bytes until none are left makes the next write fail instead.
    """
    binary = getattr(sys.stdout, "buffer", None)
    if binary is None:  # a stream without bytes underneath (a test's StringIO)
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    left = memoryview(text.encode())
    while left:
        left = left[binary.write(left) :]
    binary.flush()


def print_json(value: object) -> None:
    """Print a value as one line of JSON (structs, lists, dicts, dates: msgspec's rules),
    its format, control and line-separating characters escaped (:func:`json_printable`)."""
    print(json_printable(msgspec.json.encode(value).decode()))


def emit_value(args: argparse.Namespace, value: T, lines: Callable[[T], Iterable[str]]) -> None:
    """Print one value as JSON (``--json``) or as the lines ``lines`` makes of it."""
    if args.json:
        print_json(value)
        return
    for line in lines(value):
        print(printable(line))


def emit(args: argparse.Namespace, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Print rows as JSON (``--json``) or as an aligned table (a None value is an empty
    cell)."""
    if args.json:
        print_json(rows)
        return
    texts = [[printable(_cell(row.get(column))) for column in columns] for row in rows]
    widths = [max([len(c), *(len(t[i]) for t in texts)]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for text in texts:
        print("  ".join(t.ljust(w) for t, w in zip(text, widths, strict=True)).rstrip())


def _cell(value: object) -> str:
    """A table cell: nothing for a value JSON gives as null."""
    return "" if value is None else str(value)


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


@contextmanager
def terminal_progress() -> Iterator[ProgressBar | None]:
    """A progress bar on stderr if it is a terminal (else None), ended on exit."""
    progress = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    try:
        yield progress
    finally:
        if progress is not None:
            progress.close()


def with_progress(items: Iterable[T], total: int) -> Iterator[T]:
    """Yield the items, counting them on a :func:`terminal_progress` bar."""
    with terminal_progress() as progress:
        for done, item in enumerate(items, start=1):
            if progress is not None:
                progress(done, total)
            yield item
