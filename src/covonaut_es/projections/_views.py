"""The reviewer queue's materialized view: what every back end's view shares.

Each view is an eventsourcing tracking recorder: it applies a processed event's queue
changes and records the event's position in one transaction, so a projection that is
killed and restarted continues exactly where it stopped (exactly-once effect). Listing
the queue is one query on an index.

A store without a cipher key has its queue in plain columns (:class:`PlainRows`); an
encrypted store's queue is sealed (:class:`SealedRows`, :mod:`._sealing`). Each layout
has tables and a tracking position of its own, so it is built from zero beside what an
earlier version left (the tables before pauses had a kind, ``covonaut_review_queue`` and
``covonaut_sealed_queue``, or a plain queue of a store encrypted later), which it never
reads or rewrites.

Each back end's view is a module of its own (:mod:`._views_memory`, :mod:`._views_sqlite`,
:mod:`._views_postgres`), chosen by the name of the store's back end (its port,
:mod:`covonaut_es.store._backend`). The views extend eventsourcing's tracking recorders
through :mod:`covonaut_es.store._tracking`, which keeps what that takes of
eventsourcing's private parts in the store's back ends.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, ClassVar

import msgspec
from eventsourcing.persistence import Tracking, TrackingRecorder

from covonaut_es import _logs
from covonaut_es.domain import PauseKind, thread_aggregate_id
from covonaut_es.errors import ConfigurationError
from covonaut_es.projections._items import (
    ItemAdded,
    ItemRemoved,
    PendingReview,
    QueueChange,
    ThreadCleared,
    ThreadGivenUp,
    ThreadNamed,
)
from covonaut_es.projections._paging import (
    EVERY_ITEM,
    MAX_PAGE_SIZE,
    QueueFilter,
    QueueKey,
    QueuePage,
    checked_limit,
    decode_cursor,
    encode_cursor,
)
from covonaut_es.projections._sealing import QueueSealer
from covonaut_es.store._tracking import TrackedSQL

_COLUMNS = (
    "thread_id, item_id, kind, review_id, tool_name, digest, reason, data, requested_at, "
    "branch_parent"
)
CREATE_STATEMENTS = (
    "CREATE TABLE IF NOT EXISTS covonaut_pauses ("
    "thread_id TEXT NOT NULL, item_id TEXT NOT NULL, kind TEXT NOT NULL, review_id TEXT, "
    "tool_name TEXT NOT NULL, digest TEXT, reason TEXT NOT NULL, data TEXT NOT NULL, "
    "requested_at TEXT NOT NULL, branch_parent TEXT, PRIMARY KEY (thread_id, item_id))",
    "CREATE INDEX IF NOT EXISTS covonaut_pauses_by_time "
    "ON covonaut_pauses (requested_at, thread_id, item_id)",
    "CREATE INDEX IF NOT EXISTS covonaut_pauses_by_review ON covonaut_pauses (review_id)",
    "CREATE TABLE IF NOT EXISTS covonaut_queue_threads ("
    "aggregate_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS covonaut_queue_given_up (aggregate_id TEXT PRIMARY KEY)",
)
# Written with %s placeholders; the SQLite view swaps them for ?.
_UPSERT_ITEM = (
    f"INSERT INTO covonaut_pauses ({_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (thread_id, item_id) DO UPDATE SET kind = excluded.kind, "
    "review_id = excluded.review_id, tool_name = excluded.tool_name, "
    "digest = excluded.digest, reason = excluded.reason, data = excluded.data, "
    "requested_at = excluded.requested_at, branch_parent = excluded.branch_parent"
)
SELECT_PENDING = f"SELECT {_COLUMNS} FROM covonaut_pauses ORDER BY requested_at, thread_id, item_id"
TRACKING_SUFFIX = "+pauses"
"""Appended to the application name in the plain view's tracking rows, so that it
starts from position zero beside the queue an earlier version kept."""

# The sealed layout of an encrypted store: {blob} is the back end's bytes type.
SEALED_CREATE_STATEMENTS = (
    "CREATE TABLE IF NOT EXISTS covonaut_sealed_pauses ("
    "thread_key TEXT NOT NULL, item_key TEXT NOT NULL, requested_at TEXT NOT NULL, "
    "item {blob} NOT NULL, PRIMARY KEY (thread_key, item_key))",
    "CREATE INDEX IF NOT EXISTS covonaut_sealed_pauses_by_time "
    "ON covonaut_sealed_pauses (requested_at, thread_key, item_key)",
    "CREATE INDEX IF NOT EXISTS covonaut_sealed_pauses_by_item "
    "ON covonaut_sealed_pauses (item_key)",
    "CREATE TABLE IF NOT EXISTS covonaut_sealed_queue_threads ("
    "aggregate_id TEXT PRIMARY KEY, thread_id {blob} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS covonaut_sealed_queue_given_up (aggregate_id TEXT PRIMARY KEY)",
)
SEALED_TRACKING_SUFFIX = "+sealed_pauses"
"""Appended to the application name in the sealed view's tracking rows, so that it
starts from position zero beside a plain queue of the same database."""


log = _logs.logger(__name__)

_DAMAGED = (ValueError, TypeError, KeyError)
"""What reading a row a writer damaged raises: its text, JSON or seal does not read
(msgspec's and the cipher's errors are ValueErrors), or a column holds another type."""

_IDS_PER_QUERY = 400
"""Aggregate ids looked up in one query (SQLite allows 999 parameters before 3.32)."""

ESCAPED = "\x01"
"""Starts a text column that holds JSON text instead of the value itself (see
:meth:`PlainRows.text`)."""


class PlainRows:
    """The queue's rows and statements when the store is not encrypted."""

    name_thread = (
        "INSERT INTO covonaut_queue_threads (aggregate_id, thread_id) VALUES (%s, %s) "
        "ON CONFLICT (aggregate_id) DO NOTHING"
    )
    upsert_item = _UPSERT_ITEM
    remove_item = "DELETE FROM covonaut_pauses WHERE thread_id = %s AND item_id = %s"
    clear_thread = "DELETE FROM covonaut_pauses WHERE thread_id = %s"
    forget_thread = "DELETE FROM covonaut_queue_threads WHERE aggregate_id = %s"
    give_up = (
        "INSERT INTO covonaut_queue_given_up (aggregate_id) VALUES (%s) "
        "ON CONFLICT (aggregate_id) DO NOTHING"
    )
    select_pending = SELECT_PENDING
    select_thread_ids = (
        "SELECT aggregate_id, thread_id FROM covonaut_queue_threads WHERE aggregate_id IN ({})"
    )
    select_given_up = "SELECT aggregate_id FROM covonaut_queue_given_up WHERE aggregate_id IN ({})"
    select_items = f"SELECT {_COLUMNS} FROM covonaut_pauses"
    key_columns = ("requested_at", "thread_id", "item_id")
    select_review = (
        f"SELECT {_COLUMNS} FROM covonaut_pauses WHERE review_id = %s "
        "ORDER BY requested_at, thread_id, item_id"
    )

    def review_key(self, review_id: str) -> tuple[Any, ...]:
        """The parameters that find a review's rows."""
        return (self.text(review_id),)

    def where(self, only: QueueFilter) -> tuple[list[str], list[Any]]:
        """The conditions (and their parameters) that select what ``only`` lists, as far
        as the columns can tell."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("thread_id", only.thread_id),
            ("tool_name", only.tool_name),
            ("kind", None if only.kind is None else only.kind.value),
        ):
            if value is not None:
                clauses.append(f"{column} = %s")
                params.append(self.text(value))
        return clauses, params

    def sort_key(self, row: Any) -> QueueKey:
        """Where the row sorts, as its index holds it."""
        first, second, third = self.key_columns
        return QueueKey(row[first], row[second], row[third])

    @staticmethod
    def text(value: str) -> str:
        """What a text column holds for ``value``: the value itself, so the table reads
        plainly, unless a back end could not hold it (PostgreSQL's text holds no NUL) or
        it could be taken for an escaped value; then :data:`ESCAPED` and its JSON text,
        which holds neither."""
        if "\x00" not in value and not value.startswith(ESCAPED):
            return value
        return ESCAPED + msgspec.json.encode(value).decode()

    @staticmethod
    def untext(column: str) -> str:
        """The value a text column holds (the inverse of :meth:`text`)."""
        if not column.startswith(ESCAPED):
            return column
        value: str = msgspec.json.decode(column.removeprefix(ESCAPED), type=str)
        return value

    def column(self, value: str | None) -> str | None:
        """:meth:`text` of a column that may be NULL."""
        return None if value is None else self.text(value)

    def value(self, column: str | None) -> str | None:
        """:meth:`untext` of a column that may be NULL."""
        return None if column is None else self.untext(column)

    def key(self, value: str) -> str:
        """What stands for a thread or item id in the indexed columns."""
        return self.text(value)

    def thread_row(self, aggregate_id: str, thread_id: str) -> tuple[Any, ...]:
        return (aggregate_id, self.key(thread_id))

    def aggregate(self, aggregate_id: str) -> tuple[str, ...]:
        """The parameters that find a thread's row by its aggregate id."""
        return (aggregate_id,)

    def given_up_row(self, aggregate_id: str) -> tuple[str]:
        """The row that keeps a thread as given up."""
        return (aggregate_id,)

    def item_row(self, item: PendingReview) -> tuple[Any, ...]:
        column, text = self.column, self.text
        return (
            text(item.thread_id),
            text(item.item_id),
            item.kind.value,
            column(item.review_id),
            text(item.tool_name),
            column(item.digest),
            text(item.reason),
            msgspec.json.encode(item.data).decode(),  # JSON text escapes NUL itself
            item.requested_at.isoformat(),
            column(item.branch_parent),
        )

    def item(self, row: Any) -> PendingReview:
        value, untext = self.value, self.untext
        return PendingReview(
            thread_id=self.thread_id(row),
            item_id=untext(row["item_id"]),
            kind=PauseKind(row["kind"]),
            review_id=value(row["review_id"]),
            tool_name=untext(row["tool_name"]),
            digest=value(row["digest"]),
            reason=untext(row["reason"]),
            data=msgspec.json.decode(row["data"]),
            requested_at=datetime.fromisoformat(row["requested_at"]),
            branch_parent=value(row["branch_parent"]),
        )

    def thread_id(self, row: Any) -> str:
        return self.untext(row["thread_id"])

    def read_item(self, row: Any) -> PendingReview | None:
        """The item ``row`` holds; None, after a warning, for a row a writer damaged,
        or moved to another thread's or item's keys: one bad row never stops a reader
        of the queue, nor lists an item where it is not."""
        try:
            return self.item(row)
        except _DAMAGED as exc:
            _pass_over("an item", exc)
            return None

    def named(self, row: Any, aggregate_id: str) -> str | None:
        """The thread id ``row`` names for ``aggregate_id``; None, after a warning, when
        it does not read, or names a thread whose aggregate id is another (a row moved
        to another aggregate's): the queue then asks the store, as for a thread it
        never named."""
        try:
            thread_id = self.thread_id(row)
            if thread_aggregate_id(thread_id).hex == aggregate_id:
                return thread_id
            msg = "the thread id it names is another aggregate's"
            raise ValueError(msg)
        except _DAMAGED as exc:
            _pass_over("a thread's name", exc)
            return None


def _pass_over(what: str, error: Exception) -> None:
    # Named by the error's class alone: its text may quote what the row holds.
    log.warning(
        "review queue: passing over %s in the view that does not read (%s); rebuild the "
        "view from the log (a view URL of its own) if it stays",
        what,
        type(error).__name__,
    )


class SealedRows(PlainRows):
    """The queue's rows of an encrypted store: each item encrypted whole, thread ids
    encrypted, and the ids rows are found by kept as keyed digests."""

    name_thread = (
        "INSERT INTO covonaut_sealed_queue_threads (aggregate_id, thread_id) VALUES (%s, %s) "
        "ON CONFLICT (aggregate_id) DO NOTHING"
    )
    upsert_item = (
        "INSERT INTO covonaut_sealed_pauses (thread_key, item_key, requested_at, item) "
        "VALUES (%s, %s, %s, %s) ON CONFLICT (thread_key, item_key) DO UPDATE SET "
        "requested_at = excluded.requested_at, item = excluded.item"
    )
    remove_item = "DELETE FROM covonaut_sealed_pauses WHERE thread_key = %s AND item_key = %s"
    clear_thread = "DELETE FROM covonaut_sealed_pauses WHERE thread_key = %s"
    forget_thread = "DELETE FROM covonaut_sealed_queue_threads WHERE aggregate_id IN (%s, %s)"
    give_up = (
        "INSERT INTO covonaut_sealed_queue_given_up (aggregate_id) VALUES (%s) "
        "ON CONFLICT (aggregate_id) DO NOTHING"
    )
    select_pending = (
        "SELECT thread_key, item_key, item FROM covonaut_sealed_pauses "
        "ORDER BY requested_at, thread_key, item_key"
    )
    select_thread_ids = (
        "SELECT aggregate_id, thread_id FROM covonaut_sealed_queue_threads "
        "WHERE aggregate_id IN ({})"
    )
    select_given_up = (
        "SELECT aggregate_id FROM covonaut_sealed_queue_given_up WHERE aggregate_id IN ({})"
    )
    select_items = "SELECT thread_key, item_key, requested_at, item FROM covonaut_sealed_pauses"
    key_columns = ("requested_at", "thread_key", "item_key")
    select_review = (
        "SELECT thread_key, item_key, item FROM covonaut_sealed_pauses WHERE item_key = %s "
        "ORDER BY requested_at, thread_key, item_key"
    )

    def review_key(self, review_id: str) -> tuple[Any, ...]:
        return (self.key(review_id),)

    def where(self, only: QueueFilter) -> tuple[list[str], list[Any]]:
        # Only the thread is a column; the tool and the kind are sealed in the item.
        if only.thread_id is None:
            return [], []
        return ["thread_key = %s"], [self.key(only.thread_id)]

    def __init__(self, sealer: QueueSealer) -> None:
        self._sealer = sealer

    def key(self, value: str) -> str:
        return self._sealer.digest(value)

    def thread_row(self, aggregate_id: str, thread_id: str) -> tuple[Any, ...]:
        return (self.key(aggregate_id), self._sealer.seal(thread_id.encode()))

    def aggregate(self, aggregate_id: str) -> tuple[str, ...]:
        """Its keyed digest (a thread's aggregate id is an unkeyed hash of its thread
        id), or the id itself, as a view written before digests holds it."""
        return (self.key(aggregate_id), aggregate_id)

    def given_up_row(self, aggregate_id: str) -> tuple[str]:
        return (self.key(aggregate_id),)

    def item_row(self, item: PendingReview) -> tuple[Any, ...]:
        sealed = self._sealer.seal(msgspec.json.encode(item))
        return (
            self.key(item.thread_id),
            self.key(item.item_id),
            item.requested_at.isoformat(),
            sealed,
        )

    def item(self, row: Any) -> PendingReview:
        item = msgspec.json.decode(self._sealer.open(row["item"]), type=PendingReview)
        if (self.key(item.thread_id), self.key(item.item_id)) != (
            row["thread_key"],
            row["item_key"],
        ):
            msg = "the sealed item names another thread or item than its row's keys"
            raise ValueError(msg)
        return item

    def thread_id(self, row: Any) -> str:
        return self._sealer.open(row["thread_id"]).decode()


PLAIN_ROWS = PlainRows()


class ReviewQueueView(TrackingRecorder, ABC):
    """The reviewer queue as a table, whatever the back end."""

    @abstractmethod
    def apply(self, changes: Sequence[QueueChange], tracking: Tracking) -> None:
        """Make the changes and record the tracking position, atomically: the changes
        of every event up to ``tracking``'s, when the projection applies a batch."""

    @abstractmethod
    def pending(self) -> tuple[PendingReview, ...]:
        """Every pending item, oldest first."""

    def thread_id_of(self, aggregate_id: str) -> str | None:
        """The thread id of an aggregate id the view named and keeps (None: it did not
        name it, or keeps it as given up)."""
        return self.thread_ids_of((aggregate_id,)).get(aggregate_id)

    @abstractmethod
    def thread_ids_of(self, aggregate_ids: Collection[str]) -> dict[str, str | None]:
        """The thread ids of those aggregate ids the view has named, None for those it
        keeps as given up (for a batch of events: one query, not one per event)."""

    @abstractmethod
    def threads_with_review(self, review_id: str) -> tuple[str, ...]:
        """The threads where the review is pending, oldest request first: one lookup
        on the view's index of review ids."""

    @abstractmethod
    def items_after(
        self, key: QueueKey | None, limit: int, only: QueueFilter, newest_first: bool
    ) -> list[tuple[QueueKey, PendingReview | None]]:
        """At most ``limit`` items past ``key`` (None: from the start) in the view's
        order (or its reverse), with their keys; those ``only`` lists, as far as the
        view's index can tell (the caller checks the rest). A row that does not read
        is None, so that the caller pages on past it."""

    def page(
        self,
        *,
        after: str | None = None,
        limit: int = MAX_PAGE_SIZE,
        only: QueueFilter = EVERY_ITEM,
        newest_first: bool = False,
        where: Callable[[PendingReview], bool] | None = None,
    ) -> QueuePage:
        """One page of the items ``only`` lists (and ``where`` is true of), oldest first
        (or newest first), after the cursor of the previous page: read by key from the
        view's index.

        Raises:
            InvalidPageRequestError: The cursor or the limit is not one the queue serves.
        """
        limit = checked_limit(limit)
        key = None if after is None else decode_cursor(after)
        found: list[tuple[QueueKey, PendingReview]] = []
        while len(found) <= limit:
            chunk = self.items_after(key, limit + 1, only, newest_first)
            found.extend(
                (at, item)
                for at, item in chunk
                if item is not None and only.matches(item) and (where is None or where(item))
            )
            if len(chunk) <= limit:
                break
            key = chunk[-1][0]
        shown = found[:limit]
        more = len(found) > limit
        return QueuePage(
            tuple(item for _, item in shown), encode_cursor(shown[-1][0]) if more else None
        )


def statements(
    changes: Iterable[QueueChange], rows: PlainRows
) -> Iterable[tuple[str, tuple[Any, ...]]]:
    for change in changes:
        match change:
            case ThreadNamed(aggregate_id, thread_id):
                yield rows.name_thread, rows.thread_row(aggregate_id, thread_id)
            case ItemAdded(item):
                yield rows.upsert_item, rows.item_row(item)
            case ItemRemoved(thread_id, item_id):
                yield rows.remove_item, (rows.key(thread_id), rows.key(item_id))
            case ThreadCleared(thread_id):
                yield rows.clear_thread, (rows.key(thread_id),)
            case ThreadGivenUp(aggregate_id, thread_id):
                if thread_id is not None:
                    yield rows.clear_thread, (rows.key(thread_id),)
                yield rows.forget_thread, rows.aggregate(aggregate_id)
                yield rows.give_up, rows.given_up_row(aggregate_id)


def _in_order(items: Iterable[PendingReview]) -> tuple[PendingReview, ...]:
    return tuple(sorted(items, key=lambda i: (i.requested_at, i.thread_id, i.item_id)))


class SQLReviewQueueView(TrackedSQL, ReviewQueueView):
    """The queue's statements run through an eventsourcing SQL datastore (the concrete
    views list this class before their SQL tracking recorder, so that its methods come
    first)."""

    PLACEHOLDER: ClassVar[str]
    """The driver's parameter marker, replacing the ``%s`` of the statements."""

    def _sql(self, statement: str) -> str:
        return statement.replace("%s", self.PLACEHOLDER)

    def rows(self) -> PlainRows:
        """How changes become rows and rows items."""
        return PLAIN_ROWS

    def apply(self, changes: Sequence[QueueChange], tracking: Tracking) -> None:
        rows = self.rows()
        with self.tracked(tracking) as cursor:
            for statement, params in statements(changes, rows):
                cursor.execute(self._sql(statement), params)

    def pending(self) -> tuple[PendingReview, ...]:
        rows = self.rows()
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(self._sql(rows.select_pending))
            items = [rows.read_item(row) for row in cursor.fetchall()]
        return _in_order(item for item in items if item is not None)

    def thread_ids_of(self, aggregate_ids: Collection[str]) -> dict[str, str | None]:
        rows = self.rows()
        wanted = list(aggregate_ids)
        found: dict[str, str | None] = {}
        for start in range(0, len(wanted), _IDS_PER_QUERY):
            # what the column holds (a keyed digest in a sealed view) -> the aggregate id
            keys = {k: a for a in wanted[start : start + _IDS_PER_QUERY] for k in rows.aggregate(a)}
            marks = ", ".join(["%s"] * len(keys))
            with self.datastore.transaction(commit=False) as cursor:
                cursor.execute(self._sql(rows.select_thread_ids.format(marks)), tuple(keys))
                for row in cursor.fetchall():
                    aggregate_id = keys[row["aggregate_id"]]
                    thread_id = rows.named(row, aggregate_id)
                    if thread_id is not None:
                        found.setdefault(aggregate_id, thread_id)
                cursor.execute(self._sql(rows.select_given_up.format(marks)), tuple(keys))
                found.update(dict.fromkeys(keys[row["aggregate_id"]] for row in cursor.fetchall()))
        return found

    def threads_with_review(self, review_id: str) -> tuple[str, ...]:
        rows = self.rows()
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(self._sql(rows.select_review), rows.review_key(review_id))
            items = [rows.read_item(row) for row in cursor.fetchall()]
        return tuple(
            dict.fromkeys(i.thread_id for i in items if i is not None and i.review_id == review_id)
        )

    def items_after(
        self, key: QueueKey | None, limit: int, only: QueueFilter, newest_first: bool
    ) -> list[tuple[QueueKey, PendingReview | None]]:
        rows = self.rows()
        clauses, params = rows.where(only)
        if key is not None:  # a row value: the index on the key columns finds it
            columns = ", ".join(rows.key_columns)
            clauses.append(f"({columns}) {'<' if newest_first else '>'} (%s, %s, %s)")
            params.extend((key.requested_at, key.thread_key, key.item_key))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        order = ", ".join(c + (" DESC" if newest_first else "") for c in rows.key_columns)
        statement = f"{rows.select_items}{where} ORDER BY {order} LIMIT %s"
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(self._sql(statement), (*params, limit))
            return [(rows.sort_key(row), rows.read_item(row)) for row in cursor.fetchall()]

    TRACKING_SUFFIX: ClassVar[str] = TRACKING_SUFFIX
    """Names this layout's tracking rows apart from other layouts' in one database."""

    def tracked_name(self, application_name: str) -> str:
        return application_name + self.TRACKING_SUFFIX


class SealedReviewQueueView(SQLReviewQueueView):
    """The queue of an encrypted store, in tables of its own (``covonaut_sealed_queue``
    and ``covonaut_sealed_queue_threads``) with a tracking position of its own; it
    needs the store's key (:meth:`seal_with`) before it is used."""

    BLOB: ClassVar[str]
    """The back end's type for bytes."""

    _sealed_rows: SealedRows | None = None

    def seal_with(self, sealer: QueueSealer) -> None:
        """Use ``sealer`` (made from the store's cipher key) for every row."""
        self._sealed_rows = SealedRows(sealer)

    def rows(self) -> PlainRows:
        if self._sealed_rows is None:
            msg = (
                f"{type(self).__name__} keeps the queue of an encrypted store: give it the "
                "store's key with seal_with() first (ReviewQueue(..., cipher_key=...) does)"
            )
            raise ConfigurationError(msg)
        return self._sealed_rows

    TRACKING_SUFFIX = SEALED_TRACKING_SUFFIX

    @classmethod
    def sealed_create_statements(cls) -> list[str]:
        return [statement.format(blob=cls.BLOB) for statement in SEALED_CREATE_STATEMENTS]


VIEW_TOPICS: dict[str, str] = {
    "memory": "covonaut_es.projections._views_memory:MemoryReviewQueueView",
    "sqlite": "covonaut_es.projections._views_sqlite:SQLiteReviewQueueView",
    "postgres": "covonaut_es.projections._views_postgres:PostgresReviewQueueView",
}
"""The view class for each back end (by its port's name), as topics: PostgreSQL's needs
psycopg."""

SEALED_VIEW_TOPICS: dict[str, str] = {
    **VIEW_TOPICS,
    "sqlite": "covonaut_es.projections._views_sqlite:SealedSQLiteReviewQueueView",
    "postgres": ("covonaut_es.projections._views_postgres:SealedPostgresReviewQueueView"),
}
"""The view classes for an encrypted store: its queue in memory stays in this process,
as the store's decrypted threads do; in a database it is sealed."""
