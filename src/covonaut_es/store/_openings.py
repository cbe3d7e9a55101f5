"""The record each of several threads' streams opens with, read in one statement
(ADR 0076).

A thread begun afresh opens its stream at version 1 with the event that names it (a
fork's stream opens later, at its parent's version after, with an event the reviewer
queue follows anyway). The queue reads these records only for the threads it is about
to list, so that naming them costs the reviews, not every thread's first event in the
log: a lookup by the primary key of each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from covonaut_es.store._rows import checked_records

OPENING_VERSION = 1
"""The version a stream's first event holds (eventsourcing's initial version)."""

STREAMS_PER_STATEMENT = 400
"""Streams asked for in one statement (SQLite allows 999 parameters before 3.32)."""


class Openings(NamedTuple):
    """What a read of some streams' openings found.

    Attributes:
        records: The records read, each checked and named by its domain stream id, in no
            set order.
        passed_over: How many rows did not pass the check every back end puts a row
            through (:func:`~covonaut_es.store._rows.checked_records`): they are left
            out, and their streams read as if they did not hold them.
    """

    records: list[StoredEvent]
    passed_over: int


def openings_sql(table: str, streams: str, topics: str, no_topic: str) -> str:
    """The statement reading, from ``table``, the rows at version 1 of the streams given
    by the parameter list or array ``streams`` whose topic ``topics`` gives, or names no
    event type (``no_topic``: the back end's condition; such a row is passed over, and
    counted): each row's stored stream id, version, topic and payload, in no set order."""
    return (
        f"SELECT originator_id, originator_version, topic, state FROM {table} "
        f"WHERE originator_id {streams} AND originator_version = {OPENING_VERSION} "
        f"AND (topic {topics} OR {no_topic})"
    )


def in_chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    """``items`` cut into runs of at most :data:`STREAMS_PER_STATEMENT`."""
    for start in range(0, len(items), STREAMS_PER_STATEMENT):
        yield items[start : start + STREAMS_PER_STATEMENT]


def opening_records(
    rows: Iterable[tuple[Any, ...]], domain_of: Mapping[Any, UUID], *, state: Callable[[Any], Any]
) -> Openings:
    """The :class:`Openings` of the rows :func:`openings_sql` selected, each named by the
    domain id ``domain_of`` gives its stored id, and checked row by row.

    Args:
        rows: The selected rows.
        domain_of: The domain stream id of each stored id asked for.
        state: Makes a payload column's value the record's (the driver's own type);
            raises ``TypeError`` or ``ValueError`` for a value that is no payload.
    """
    records: list[StoredEvent] = []
    passed_over = 0
    for stored, version, topic, payload in rows:
        try:
            record = StoredEvent(
                originator_id=domain_of[stored],
                originator_version=version,
                topic=topic,
                state=state(payload),
            )
            records += checked_records([record], reading="the opening records of threads")
        except (TypeError, ValueError):  # StoredRowError is a ValueError
            passed_over += 1
    return Openings(records, passed_over)
