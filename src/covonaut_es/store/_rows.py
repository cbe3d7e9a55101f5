"""The check every back end's recorders put each stored row through (ADR 0028).

A row written around the library (or damaged) may hold anything its column's type
allows, and on SQLite anything at all: a NULL payload or topic, a version that is text
or past any integer, an id that is no UUID. eventsourcing builds its records from rows
as they come, so such a value reached the mapper, the audit and the commands as a raw
``ValueError``, ``TypeError`` or ``AttributeError``. The back ends' recorders check each
row here as they read it, and a bad one is a :class:`~covonaut_es.errors.StoredRowError`
naming the stream, the position and the column.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.persistence import ApplicationRecorder, Notification, StoredEvent

from covonaut_es._arguments import LAST_POSITION
from covonaut_es.errors import StoredRowError

LAST_VERSION = LAST_POSITION
"""The highest version any back end can store (SQLite's INTEGER, PostgreSQL's BIGINT):
a read up to a higher one asks for no more than a read up to this, and the drivers
refuse the number itself."""

R = TypeVar("R", bound=StoredEvent)
N = TypeVar("N", bound=Notification)


def _damaged(where: str, column: str, value: object, expected: str) -> StoredRowError:
    return StoredRowError(
        f"{where}: its {column} is {shown(value)}, expected {expected}; the row was "
        "written around the library or is damaged: restore it from a backup or an export"
    )


def checked_id(value: Any, *, kept: type[bytes | str] | None = None) -> UUID:
    """A stored stream id (hex text, 16 bytes, or a UUID already) as a UUID; parsed once
    per id, as a restore reads hundreds of rows of one stream. ``kept``: the only type
    the row's table keeps ids as (ADR 0074), if one.

    Raises:
        StoredRowError: It is no UUID, or not kept as ``kept``.
    """
    if isinstance(value, UUID):
        return value
    if type(value) not in (str, bytes) or (kept is not None and type(value) is not kept):
        # Checked before the cache, which cannot hash a list (a column retyped to an array).
        raise _not_an_id(value, kept)
    try:
        return _parsed_id(value)
    except ValueError:
        raise _not_an_id(value, kept) from None


@functools.lru_cache(maxsize=1024)
def _parsed_id(value: str | bytes) -> UUID:
    return UUID(bytes=value) if isinstance(value, bytes) else UUID(value)


def _not_an_id(value: object, kept: type[bytes | str] | None) -> StoredRowError:
    expected = "a UUID" if kept is None else f"a UUID kept as {kept.__name__}"
    return _damaged("a stored row", "originator_id", value, expected)


def checked_position(value: Any) -> int | None:
    """The newest position of the log as its table gives it (None while it is empty).

    Raises:
        StoredRowError: It is no position (the notification ids' column retyped).
    """
    if value is not None and (type(value) is not int or value < 1):
        raise _damaged("the store's log", "newest notification_id", value, "a position from 1")
    return value


class CheckedLog(ApplicationRecorder):
    """An application recorder (named after this class in the bases) whose reads of the
    log check each row, and start at the log's first row when they read from its
    beginning (:func:`log_start`)."""

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
        topicless: bool = False,
    ) -> Sequence[Notification]:
        """As the recorder's, each row checked (:func:`checked_log`); ``topicless``: a
        read of some topics also reads, and so refuses, the rows that hold no topic
        (:func:`log_sql`)."""
        inner: Any = super()
        found: Sequence[Notification] = inner.select_notifications(
            log_start(start, inclusive=inclusive_of_start),
            limit,
            stop,
            topics,
            inclusive_of_start=inclusive_of_start,
            topicless=topicless,
        )
        return checked_log(found)

    events_table_name: str  # set by the back end's recorder

    def max_notification_id(self) -> int | None:
        """As the recorder's (None while the log is empty), the position checked
        (:func:`checked_position`), and refused when it is past the highest after which
        the back end numbers a new event (:meth:`log_end`): events written from then on
        would be numbered before it, and a follower whose position reached the newest
        would pass over them without a word (ADR 0113).

        Raises:
            StoredRowError: It is no position, or one past that highest.
        """
        found, highest = self.log_end()
        newest = checked_position(found)
        if newest is not None and highest is not None and newest > highest:
            msg = (
                f"the newest row of the store's log ({self.events_table_name!r}) is at "
                f"notification_id {newest}, past {highest}, the highest after which new "
                "events are numbered (the last its sequence issued on PostgreSQL): events "
                "written from now on would be numbered before it, and whoever follows the "
                "log would pass over them; the row was written around the library or is "
                "damaged: give it back its position, or restore the store from a backup"
            )
            raise StoredRowError(msg)
        return newest

    def log_end(self) -> tuple[Any, int | None]:
        """The newest position of the log as its table gives it (unchecked), and the
        highest after which the back end numbers a new event (None when it cannot
        tell). SQLite gives a new row the rowid past the newest, but past 2**63-1 it has
        none, and picks free ones at random."""
        inner: Any = super()
        return inner.max_notification_id(), LAST_VERSION - 1


def log_start(start: int | None, *, inclusive: bool) -> int | None:
    """Where a read of the log from ``start`` begins: at its first row (None) when the
    read is from its beginning, whatever that row's position, so that a row a writer
    gave a position before 1 is refused by :func:`checked_log`, not passed over."""
    if start is not None and (start > 1 or (start == 1 and not inclusive)):
        return start
    return None


def log_sql(
    table: str,
    position: str,
    *,
    start: str | None,
    stop: str | None,
    topics: str | None,
    no_topic: str | None,
    limit: str,
    inclusive_of_start: bool,
) -> str:
    """The statement reading the log ``table`` in the order of its ``position`` column,
    given the placeholders of its parameters: ``start`` and ``stop`` (each None when the
    read has no such bound), ``topics`` (the condition ``topic`` meets: None reads every
    topic) and ``limit``. Each row is its position, stream id, version, topic and payload.

    Given ``no_topic`` (the back end's condition on a topic that names no event type:
    NULL, empty, or no text at all), a read of some topics also reads such rows, so that
    :func:`checked_log` refuses them rather than the filter passing over them: for a
    read that lists every thread of some kind (a thread whose first event a writer
    stripped of its topic would otherwise drop out of ``thread_ids`` without a word).
    """
    conditions = []
    if start is not None:
        conditions.append(f"{position} {'>=' if inclusive_of_start else '>'} {start}")
    if stop is not None:
        conditions.append(f"{position} <= {stop}")
    if topics is not None:
        conditions.append(f"(topic {topics} OR {no_topic})" if no_topic else f"topic {topics}")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return (
        f"SELECT {position}, originator_id, originator_version, topic, state FROM {table}"
        f"{where} ORDER BY {position} LIMIT {limit}"
    )


def checked_log(notifications: Sequence[N]) -> Sequence[N]:
    """``notifications``, each checked as :func:`checked_records` checks a record and to
    hold a position in the log.

    Raises:
        StoredRowError: A notification holds a value of the wrong type.
    """
    for notification in notifications:
        if type(notification.id) is not int or notification.id < 1:
            where = f"a stored row of stream {shown(notification.originator_id)} (the store's log)"
            raise _damaged(where, "notification_id", notification.id, "a position from 1")
    return checked_records(notifications)


def checked_records(
    records: Sequence[R], *, reading: str = "the store's log", lowest: int = 0
) -> Sequence[R]:
    """``records``, each checked to hold a version in range (from ``lowest``: 1 for a
    thread's events, whose stream begins there), a topic and a payload
    (:func:`row_damage`).

    Raises:
        StoredRowError: A record holds a value of the wrong type.
    """
    for record in records:  # one pass: a restore reads every row of a thread through it
        if isinstance(record.state, str):  # typed bytes, stored anything: read again as bytes
            again = [_as_bytes(r) for r in records]
            return checked_records(again, reading=reading, lowest=lowest)
        damage = row_damage(record, lowest=lowest)
        if damage is not None:
            column, value, expected = damage
            where = (
                f"a stored row of stream {record.originator_id} ({reading})"
                if column == "originator_version"
                else f"stored row {record.originator_version} of stream {record.originator_id}"
            )
            raise _damaged(where, column, value, expected)
    return records


def row_damage(record: StoredEvent, *, lowest: int = 0) -> tuple[str, object, str] | None:
    """The column of a stored record (an event's, or a snapshot's) that holds a value of
    the wrong type, that value and what the column should hold; None when every column
    holds what it should: a version from ``lowest``, a topic, a payload's bytes."""
    version, topic, state = record.originator_version, record.topic, record.state
    # eventsourcing's recorders take any version from 0 (its contract tests write 0).
    if type(version) is not int or not lowest <= version <= LAST_VERSION:
        return "originator_version", version, f"an integer from {lowest}"
    if type(topic) is not str or not topic:
        return "topic", topic, "the name of an event type"
    if type(state) is not bytes:
        return "state", state, "the payload's bytes"
    return None


def shown(value: object) -> str:
    """``value`` as an error message shows a stored value: its repr, cut to 40
    characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _as_bytes(record: R) -> R:
    """``record``, with a payload SQLite hands back as text (its bytes rewritten by an SQL
    function, say) as the UTF-8 bytes it holds: the chain then tells whether they are
    the event's."""
    state: object = record.state
    if not isinstance(state, str):
        return record
    return dataclasses.replace(record, state=state.encode("utf-8", "surrogateescape"))


@contextlib.contextmanager
def building_records(reading: str = "the store's log") -> Iterator[None]:
    """Around eventsourcing's building of records from rows (its PostgreSQL recorders
    convert a payload with ``bytes()``, which a NULL payload fails): a row it cannot
    convert is a :class:`~covonaut_es.errors.StoredRowError`.

    Raises:
        StoredRowError: A row of ``reading`` holds a value of the wrong type.
    """
    try:
        yield
    except (TypeError, ValueError) as exc:
        msg = (
            f"a stored row of {reading} holds a value of the wrong type ({exc}); the row "
            "was written around the library or is damaged: restore it from a backup or "
            "an export"
        )
        raise StoredRowError(msg) from exc


def checked_head(
    originator_id: Any, version: Any, chain: Any, *, kept: type[bytes | str] | None = None
) -> tuple[UUID, tuple[int, str]]:
    """A row of the head table, checked (``kept``: as :func:`checked_id`).

    Raises:
        StoredRowError: It holds a value of the wrong type.
    """
    stream = checked_id(originator_id, kept=kept)
    anchored = checked_anchored_version(stream, version)
    if type(chain) is not str:
        raise _damaged(_anchor_of(stream), "chain", chain, "a chain hash")
    return stream, (anchored, chain)


def checked_anchored_version(stream: object, version: Any) -> int:
    """The version a head anchor of ``stream`` holds, checked: read by every save of the
    stream as by its reads, where a writer around the library may have left text, a
    blob, a real or a number past any version.

    Raises:
        StoredRowError: Naming the stream and the column ``version``.
    """
    if type(version) is not int or not 0 <= version <= LAST_VERSION:
        raise _damaged(_anchor_of(stream), "version", version, "a version")
    return version


def _anchor_of(stream: object) -> str:
    return f"the head anchor of stream {stream}"


def checked_lease_token(table: str, stream: object, token: Any) -> int:
    """The token a run lease of ``stream`` holds in the lease table ``table``, checked:
    only an integer from 1 (the first lease's) fences a save, where ``int()`` read text
    as an error, a real 1.5 as lease 1, and a blob as nothing at all.

    Raises:
        StoredRowError: Naming the table, the stream and the column ``token``.
    """
    if type(token) is not int or not 1 <= token <= LAST_VERSION:
        raise _damaged(_lease_of(table, stream), "token", token, "a lease token from 1")
    return token


def next_lease_token(table: str, stream: object, stored: int | None) -> int:
    """The token of a new run lease of ``stream``, after the checked ``stored`` (None:
    ``stream`` has had no lease).

    Raises:
        StoredRowError: ``stored`` is the highest integer the table holds; no token
            follows it.
    """
    if stored is None:
        return 1
    if stored == LAST_VERSION:
        expected = f"a lease token below {LAST_VERSION}"
        raise _damaged(_lease_of(table, stream), "token", stored, expected)
    return stored + 1


def _lease_of(table: str, stream: object) -> str:
    return f"the run lease of stream {stream} (table {table!r})"
