"""Moving threads between stores: ``export`` one thread's events as JSON Lines, ending
with a trailer that counts them, and ``import`` such a file, each thread in one
transaction after its hash chain and the trailer check."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

from covonaut_es._text import printable
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.cli._command import (
    EXIT_OK,
    OutputClosedError,
    Subcommands,
    UsageError,
    add_command,
)
from covonaut_es.cli._json import emit_records
from covonaut_es.cli._options import (
    add_store_command,
    add_store_options,
    application_spec,
    open_from,
    store_url,
)
from covonaut_es.cli._output import with_progress, write_whole
from covonaut_es.cli._output_file import write_output
from covonaut_es.errors import StoreUnavailableError
from covonaut_es.store._settings import SQLITE_JOURNALS
from covonaut_es.store._urls import SQLITE_PATH, persistence_env


def add_transfer_commands(subcommands: Subcommands) -> None:
    """Declare ``export`` and ``import``."""
    parser = add_command(
        subcommands, "export", export, help_="write a thread's events as JSON Lines"
    )
    add_store_options(parser)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("thread")
    parser.add_argument("--output", "-o", metavar="FILE", help="default: standard output")
    parser.add_argument(
        "--without-ancestors",
        dest="with_ancestors",
        action="store_false",
        help="of a fork, write only its own events (by default its ancestors' events up to "
        "where it branched come first, so that the export imports alone)",
    )
    parser = add_store_command(
        subcommands, "import", import_, help_="read threads exported as JSON Lines"
    )
    parser.add_argument("input", nargs="?", metavar="FILE", help="default: standard input")
    parser.add_argument(
        "--allow-unchained",
        action="store_true",
        help="accept events without a chain hash, as exports of threads written before "
        "tamper evidence have (only from a source you trust: such lines prove nothing)",
    )
    parser.add_argument(
        "--allow-untrailed",
        action="store_true",
        help="accept an export that ends without a trailer, as exports written before "
        "trailers have (an export cut short between two lines then imports undetected)",
    )


def export(args: argparse.Namespace) -> int:
    """``export THREAD``: one event per line."""
    if args.json:
        msg = "export writes JSON Lines already and has no --json: drop the option"
        raise UsageError(msg)
    if args.output == "":  # not read as none given: the export would go to the terminal
        msg = "--output needs the path of a file to write, not an empty one"
        raise UsageError(msg)
    with open_from(args) as store:
        total = store.state_at(args.thread).version
        written = export_thread(store, args.thread, with_ancestors=args.with_ancestors)
        lines = list(with_progress(written, total))
    text = "".join(line + "\n" for line in lines)
    events = len(lines) - 1  # the last line is the trailer
    if args.output is not None:
        write_output(args.output, text)
        noun = "event" if events == 1 else "events"
        said = f"exported {events} {noun} of {args.thread!r} to {args.output}"
        print(printable(said), file=sys.stderr)
        return EXIT_OK
    try:
        write_whole(text)
    except BrokenPipeError as exc:
        msg = (
            f"standard output closed before the export of {args.thread!r} was written whole: "
            "what its reader got is incomplete (import refuses it); export again with "
            "--output FILE, or into a reader that reads to the end"
        )
        raise OutputClosedError(msg) from exc
    return EXIT_OK


def import_(args: argparse.Namespace) -> int:
    """``import [FILE]``: all threads of the file, each in one transaction."""
    lines = _read_lines(args.input)
    if not any(line.strip() for line in lines):
        msg = f"nothing to import: {args.input or 'standard input'} holds no events"
        raise UsageError(msg)
    with _staged(args) as staged, open_from(staged, create=True, records=True) as store:
        imported = import_threads(
            store,
            with_progress(lines, len(lines)),
            allow_unchained=args.allow_unchained,
            allow_untrailed=args.allow_untrailed,
        )
    args.recorded = staged.recorded  # noted on the options the store was opened with
    records = [{"thread_id": thread_id} for thread_id in imported]
    emit_records(args, records, lambda r: {"imported": r["thread_id"]}, ["imported"])
    return EXIT_OK


@contextlib.contextmanager
def _staged(args: argparse.Namespace) -> Iterator[argparse.Namespace]:
    """The options an import opens its store with. Into a SQLite file that does not
    exist yet, they name a new hidden file beside it, put at the file's path once the
    import succeeded and the store is closed, and only if no other process made a file
    there meanwhile: a failed import leaves no store behind, and never removes one
    that another process made, or filled, while it ran."""
    path = None if application_spec(args) is not None else _new_sqlite_file(args)
    if path is None:
        yield args
        return
    # A name of its own length, whatever the path's (a long name with more after it
    # would pass the file system's limit).
    staged = path.with_name(f".covonaut-import-{secrets.token_hex(4)}")
    query = urlsplit(store_url(args)).query  # the same options (a mode, say)
    url = f"sqlite:///{quote(str(staged))}" + (f"?{query}" if query else "")
    try:
        yield argparse.Namespace(**{**vars(args), "store": url})
        _put_in_place(staged, path)
    finally:
        for leftover in (staged, *(Path(f"{staged}{end}") for end in SQLITE_JOURNALS)):
            with contextlib.suppress(OSError):  # never over the error the import raised
                leftover.unlink()


def _new_sqlite_file(args: argparse.Namespace) -> Path | None:
    """The absolute path of the SQLite file the options name, if there is none yet."""
    path = persistence_env(store_url(args)).get(SQLITE_PATH)
    if path is None or os.path.lexists(path):
        return None
    return Path(path).absolute()


def _put_in_place(staged: Path, path: Path) -> None:
    """Give the closed store ``staged`` the name ``path``, unless a file took it.

    Raises:
        UsageError: Another process made a file at ``path`` meanwhile.
        StoreUnavailableError: The store was not closed whole.
    """
    if Path(f"{staged}-wal").exists():
        # Closed, the store left its log checkpointed and removed: a log still there
        # would hold what a link of the file alone leaves behind.
        msg = f"the new store {path} was not closed whole (its write-ahead log is left)"
        raise StoreUnavailableError(msg)
    try:
        os.link(staged, path)  # never over a file: fails if one took the name
        staged.unlink()  # at once: a store of two names is refused until one goes
    except FileExistsError:
        msg = (
            f"{path} was made by another process while this import ran: nothing was "
            "imported into it, and it was left as it is; run the import again to import "
            "into that store"
        )
        raise UsageError(msg) from None


def _read_lines(path: str | None) -> list[str]:
    """The lines of the export at ``path`` (standard input without one), without the
    byte order mark some editors and Windows shells put before UTF-8 text."""
    try:
        if path is None:
            lines = sys.stdin.readlines()
        else:
            with open(path, encoding="utf-8") as file:
                lines = file.readlines()
    except OSError as exc:
        msg = f"cannot read {path!r}: {exc.strerror or exc}; expected an export's JSON Lines file"
        raise UsageError(msg) from exc
    except UnicodeDecodeError as exc:
        source = "standard input" if path is None else repr(path)
        msg = f"{source} is not UTF-8 text ({exc.reason}); expected an export's JSON Lines"
        raise UsageError(msg) from exc
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    return lines
