"""The threads that hold a review, read from the log's review requests and forks, and
the index of them a store keeps beside its log, so that finding a review's threads is a
lookup by key rather than a read of every review the log holds (ADR 0078).

A review is held by the thread that asked for it (its ``ReviewRequested``) and by each
fork that inherited it while it was pending (its ``Forked`` names the review among its
pauses), in the order the log recorded them: :func:`entries` reads those facts from one
event and :func:`holders` folds them, for the log read whole and for the index alike.

The index holds a row per entry: under a key of the review id (its uuid5, stored as the
store keeps stream ids, so an encrypted store's keys reveal no review), at the event's
log position, its thread and parent thread ids encoded, and sealed with the store's
cipher. One row more, under the empty key, holds the log position the rows were made
to. A lookup brings the index up to the log's end, reading only the review requests and
forks written since, then reads the review's rows. The index only chooses: the store
keeps its answer only where each thread it names holds the review, and reads the log
otherwise (:meth:`covonaut_es.Store.threads_with_review`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.application import Application

from covonaut_es import _logs
from covonaut_es.domain import AgentThread, PauseKind
from covonaut_es.store._records import StoredRecords
from covonaut_es.store._review_index_table import ReviewIndexTable
from covonaut_es.store._side_tables import opened_row, sealed_row
from covonaut_es.store._stream_ids import stored_stream

logger = _logs.logger("covonaut_es.store")

HOLDING = (AgentThread.ReviewRequested, AgentThread.Forked)
"""The events that make a thread hold a review."""

BATCH = 2_000
"""The most events one update of the index reads (one transaction)."""

_NAMESPACE = UUID("5f0c2a4e-8d1b-4c55-9a57-2b6f0d3e9c11")
"""The namespace of a review id's uuid5, the key its rows are stored under."""


class Entry(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A thread that holds a review: the one that asked for it (``parent`` None), or a
    fork of ``parent`` that inherited it."""

    thread_id: str
    parent: str | None = None


def entries(event: Any) -> list[tuple[str, Entry]]:
    """Each review id ``event`` (one of :data:`HOLDING`) makes its thread hold, with the
    entry saying so."""
    if isinstance(event, AgentThread.ReviewRequested):
        return [(event.request.review_id, Entry(event.request.thread_id))]
    return [
        (pause.data["review_id"], Entry(event.thread_id, event.parent_thread_id))
        for pause in event.interrupts
        if pause.kind is PauseKind.REVIEW
        and isinstance(pause.data, dict)
        and isinstance(pause.data.get("review_id"), str)
    ]


def holders(found: Iterable[Entry]) -> tuple[str, ...]:
    """The threads that hold a review, from its entries in log order: a fork holds it
    only if its parent did when it branched."""
    held: list[str] = []
    for entry in found:
        if entry.parent is None or entry.parent in held:
            held.append(entry.thread_id)
    return tuple(dict.fromkeys(held))


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Entry)


class ReviewIndex:
    """The store's review index, rows sealed with its cipher.

    Args:
        app: The store's application.
        table: Its back end's table.
    """

    def __init__(self, app: Application[UUID], table: ReviewIndexTable) -> None:
        self._app = app
        self._table = table

    def holders(self, review_id: str, records: StoredRecords) -> tuple[str, ...] | None:
        """The threads that hold the review, in log order, once the index is brought up
        to the log's end; None when a row cannot be read (the index is made again from
        the whole log at the next lookup)."""
        try:
            key = self._key(review_id)
        except UnicodeEncodeError:  # a lone surrogate: no stored review id holds one
            return ()
        self._catch_up(records)
        found = []
        for position, sealed in self._table.rows(key):
            entry = self._opened(sealed)
            if entry is None or type(position) is not int:
                self._table.clear()
                return None
            found.append(entry)
        return holders(found)

    def _catch_up(self, records: StoredRecords) -> None:
        """Add the entries of the review requests and forks after the index's position,
        a batch per transaction, until it reaches the log's end (another process's
        update counts as this one's); the position passes the events of other types
        too (:meth:`StoredRecords.next_batch`)."""
        mapper = self._app.mapper
        while True:
            before, end = self._table.position(), records.log_position()
            if type(before) is not int or not 0 <= before <= end:
                self._table.clear()  # spoiled: a position beyond the log would hide events
                before = 0
            batch, after = records.next_batch(*HOLDING, after=before, end=end, limit=BATCH)
            if after == before:
                return
            rows = []
            for notification, event in _logs.passing_over(
                logger,
                batch,
                mapper.to_domain_event,
                reader="the review index",
                then="the reviews it names are not found through the index",
            ):
                for review_id, entry in entries(event) if event is not None else ():
                    rows.append((self._key(review_id), notification.id, self._sealed(entry)))
            if self._table.advance(before, after, rows) and after >= end:
                return

    def _key(self, review_id: str) -> str:
        return stored_stream(self._app.recorder, uuid.uuid5(_NAMESPACE, review_id)).hex

    def _sealed(self, entry: Entry) -> bytes:
        return sealed_row(self._app.mapper.cipher, _ENCODER.encode(entry))

    def _opened(self, sealed: Any) -> Entry | None:
        return opened_row(self._app.mapper.cipher, sealed, _DECODER.decode)
