"""The table of threads with work outstanding, which workers keep up to date from the
log and a starting worker reads instead of folding the whole log (ADR 0054).

A row holds what a worker's fold says of one thread (:class:`~._ready.ReadyThreads`,
without the worker's own parking) and its pending reviews' deadlines
(:class:`~._deadlines.ReviewDeadlines`); a thread at rest with no deadline pending has
no row. :func:`catch_up` folds the log's events after the table's position into the
rows they touch, a batch per transaction, so a worker starts in time proportional to
the outstanding threads and the events written since the table's last update.

The rows only choose what a worker looks at: a step decides from the thread itself,
under its lease, and a sweep from the thread's own reviews by the clock. A row that
cannot be read makes the table again from the whole log; one altered to read well makes
a worker look at a thread in vain, or pass over one until its next event.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec

from covonaut_es import _logs
from covonaut_es.store import Store
from covonaut_es.workers._deadlines import DEADLINE_TRACKED, ReviewDeadlines
from covonaut_es.workers._ready import TRACKED, ReadyThreads, Summary, stream_of
from covonaut_es.workers._recall import recalling

logger = _logs.logger("covonaut_es.workers")

FOLLOWED = tuple(dict.fromkeys((*TRACKED, *DEADLINE_TRACKED)))
"""The event types a worker follows in the log."""

READY_TYPES, DEADLINE_TYPES = frozenset(TRACKED), frozenset(DEADLINE_TRACKED)

BATCH = 2_000
"""The most events one update of the table folds (one transaction)."""


class _Ready(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    thread_id: str | None
    status: str
    paused_on: list[str]
    reviewed_calls: dict[str, str]
    retry_asked: bool
    inputs: int
    taken: int = 0  # absent from rows written before it was kept


_Deadline = Annotated[datetime, msgspec.Meta(tz=True)]
"""A deadline as a row holds it: a naive one cannot be read, so the table is made again."""


class _Row(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    ready: _Ready | None = None
    waiting: tuple[str, dict[str, tuple[_Deadline, bool]]] | None = None


_DECODER = msgspec.msgpack.Decoder(_Row)


def fold(ready: ReadyThreads, deadlines: ReviewDeadlines, event: Any) -> None:
    """Fold one followed event into a worker's summaries and deadlines."""
    if type(event) in READY_TYPES:
        ready.apply(event)
    if type(event) in DEADLINE_TYPES:
        deadlines.apply(event)


def events(store: Store, notifications: Iterable[Any], worker: str) -> Iterable[tuple[int, Any]]:
    """Each notification's position and event, passing over (with a warning) one that
    cannot be read."""
    for notification, event in _logs.passing_over(
        logger,
        notifications,
        store.log.mapper.to_domain_event,
        reader=f"worker {worker}",
        then="whether its thread is ready is not read from it",
    ):
        yield notification.id, event


def restore(rows: dict[UUID, bytes], ready: ReadyThreads, deadlines: ReviewDeadlines) -> bool:
    """Keep the threads of these rows; False when one cannot be read (nothing kept)."""
    try:
        decoded = [(stream, _DECODER.decode(row)) for stream, row in rows.items()]
    except msgspec.DecodeError:
        return False
    for stream, row in decoded:
        if row.ready is not None:
            kept = row.ready
            summary = Summary(
                thread_id=kept.thread_id,
                status=kept.status,
                paused_on=set(kept.paused_on),
                reviewed_calls=kept.reviewed_calls,
                retry_asked=kept.retry_asked,
                inputs=kept.inputs,
                taken=kept.taken,
            )
            ready.restore(stream, summary)
        if row.waiting is not None:
            deadlines.restore(stream, *row.waiting)
    return True


def _row(stream: UUID, ready: ReadyThreads, deadlines: ReviewDeadlines) -> bytes | None:
    summary, waiting = ready.kept(stream), deadlines.kept(stream)
    if summary is None and waiting is None:
        return None
    kept = None
    if summary is not None:
        kept = _Ready(
            summary.thread_id,
            summary.status,
            sorted(summary.paused_on),
            summary.reviewed_calls,
            summary.retry_asked,
            summary.inputs,
            summary.taken,
        )
    return msgspec.msgpack.encode(_Row(kept, waiting))


def catch_up(store: Store, worker: str) -> None:
    """Fold the log's followed events after the table's position into its rows, until
    the table reaches the log's end (another worker's update counts as this one's); the
    position passes the events no worker follows too
    (:meth:`~covonaut_es.store.log.StoredRecords.next_batch`)."""
    table = store.outstanding_threads
    assert table is not None
    while True:
        before, end = table.position(), store.log.end()
        if before is None or before > end:
            table.clear()  # spoiled: a position beyond the log would hide new events
            before = 0
        found, after = store.log.next_batch(*FOLLOWED, after=before, end=end, limit=BATCH)
        if after == before:
            return
        read = [event for _, event in events(store, found, worker) if event is not None]
        streams = {stream_of(event) for event in read}
        rows = table.rows(streams)
        ready, deadlines = ReadyThreads(lambda _: None, recalling(store)), ReviewDeadlines()
        if rows is None or not restore(rows, ready, deadlines):
            table.clear()  # a row spoiled by another writer: made again from the log
            continue
        for event in read:
            fold(ready, deadlines, event)
        changes = {}
        for stream in streams:  # a thread at rest that had no row needs no removal
            row = _row(stream, ready, deadlines)
            if row is not None or stream in rows:
                changes[stream] = row
        if table.advance(before, after, changes) and after >= end:
            return
