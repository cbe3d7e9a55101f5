"""The trailer an export ends with, and the check that an import's lines agree with it.

The last line of an export counts the events of each thread it holds and names the
chain hash each thread's lines end at, then the events in all. A file cut short (at a
line or inside one), or missing a thread's last lines, no longer ends with a trailer
that agrees with its lines, so the import refuses it instead of writing a history that
looks like a run that crashed. The trailer is not a seal: whoever edits the lines can
edit it too. It detects loss, not forgery (ADR 0031).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

from covonaut_es._text import json_printable
from covonaut_es.errors import IncompleteExportError
from covonaut_es.store._chain import CHAIN_FIELD, UNCHAINED

TRAILER_FORMAT: Final = "covonaut-es export 1"
"""The trailer's first field, which tells it from an event line and names its format."""

ALLOW_UNTRAILED_HINT = (
    "if it is an export written before exports had trailers (covonaut-es 0.1), and you "
    "accept that an export cut short cannot then be told from a whole one, import it "
    "with allow_untrailed=True (the CLI's --allow-untrailed)"
)


class ThreadTotal(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the trailer says of one thread: its events in the export and the chain hash
    its last event carries (empty for a thread written before tamper evidence)."""

    thread_id: str
    events: int
    head: str


class ExportTrailer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The last line of an export."""

    trailer: Literal["covonaut-es export 1"]
    threads: tuple[ThreadTotal, ...]
    events: int


class Tally:
    """The totals of an export's event lines, in the order their threads first come."""

    def __init__(self) -> None:
        self._threads: dict[str, tuple[int, str]] = {}

    def add(self, thread_id: str, payload: Mapping[str, Any]) -> None:
        """Count one event line of ``thread_id``."""
        events, _ = self._threads.get(thread_id, (0, UNCHAINED))
        self._threads[thread_id] = (events + 1, str(payload.get(CHAIN_FIELD, UNCHAINED)))

    def trailer(self) -> ExportTrailer:
        """The trailer these lines end with."""
        threads = tuple(ThreadTotal(t, events, head) for t, (events, head) in self._threads.items())
        return ExportTrailer(TRAILER_FORMAT, threads, sum(t.events for t in threads))

    def trailer_line(self) -> str:
        """The trailer as the export's last line (without its newline)."""
        return json_printable(msgspec.json.encode(self.trailer()).decode())

    def check(self, trailer: ExportTrailer, number: int) -> None:
        """Check the lines counted against the ``trailer`` read at line ``number``.

        Raises:
            IncompleteExportError: The trailer names other threads, counts other events
                or ends a thread at another chain hash than the lines do.
        """
        found = self.trailer()
        where = f"line {number} (the export's trailer)"
        listed = [t.thread_id for t in trailer.threads]
        held = [t.thread_id for t in found.threads]
        if listed != held:
            msg = f"{where} lists threads {listed}, but the lines hold threads {held}"
            raise IncompleteExportError(_refused(msg))
        for said, seen in zip(trailer.threads, found.threads, strict=True):
            if said.events != seen.events:
                msg = (
                    f"{where} counts {said.events} events of thread {said.thread_id!r}, "
                    f"but the lines hold {seen.events}"
                )
                raise IncompleteExportError(_refused(msg))
            if said.head != seen.head:
                msg = (
                    f"{where} ends thread {said.thread_id!r} at chain hash {said.head!r}, "
                    f"but its lines end at {seen.head!r}"
                )
                raise IncompleteExportError(_refused(msg))
        if trailer.events != found.events:
            msg = f"{where} totals {trailer.events} events, but the lines hold {found.events}"
            raise IncompleteExportError(_refused(msg))


def read_trailer(line: str) -> ExportTrailer | None:
    """The trailer ``line`` holds, or None when it holds something else."""
    try:
        return msgspec.json.decode(line, type=ExportTrailer)
    except (msgspec.DecodeError, RecursionError):
        return None


def missing_trailer(number: int) -> IncompleteExportError:
    """The error for an export whose last line, ``number``, is an event, not a trailer."""
    msg = (
        f"the export ends at line {number} without a trailer: it was cut short, or lost "
        f"its last lines (nothing was written); {ALLOW_UNTRAILED_HINT}"
    )
    return IncompleteExportError(msg)


def _refused(problem: str) -> str:
    return f"{problem}: the export was cut short or altered; nothing was written"
