"""The table of the review index a store keeps beside its log (ADR 0078): keys as text,
rows as bytes, and one row more, under :data:`TRACKING`, holding the log position the
rows were made to; :mod:`covonaut_es.store._review_index` says what they hold."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from covonaut_es.store._side_tables import SQLTrackedTable

TRACKING = ""
"""The key of the row that holds the index's log position."""


class ReviewIndexTable(ABC):
    """A back end's table of the review index: keys as text, rows as bytes."""

    @abstractmethod
    def position(self) -> Any:
        """The log position the rows were made to (as the tracking row holds it, to be
        checked); None without one, or with several."""

    @abstractmethod
    def rows(self, key: str) -> list[tuple[Any, bytes]]:
        """Each ``(position, row)`` under ``key``, in position order."""

    @abstractmethod
    def advance(self, before: int, after: int, rows: Sequence[tuple[str, int, bytes]]) -> bool:
        """Add ``(key, position, row)`` rows and move the position from ``before`` to
        ``after``, in one transaction; nothing (False) if the position is not
        ``before``: another process moved it."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every row and go back to position 0."""


class SQLReviewIndex(SQLTrackedTable, ReviewIndexTable):
    """The review index in a SQL database (:class:`SQLSideTable`'s arguments; its
    ``stored`` is unused), its tracking row made with it."""

    def _tracking_key(self) -> tuple[str, Any]:
        return "review", TRACKING

    def _add_tracking_row(self, cursor: Any) -> None:
        p = self._p
        cursor.execute(
            f"INSERT INTO {self._table} (review, position, state) SELECT {p}, 0, {p} "
            f"WHERE NOT EXISTS (SELECT 1 FROM {self._table} WHERE review = {p}) "
            "ON CONFLICT (review, position) DO NOTHING",  # another process made it first
            (TRACKING, b"", TRACKING),
        )

    def position(self) -> Any:
        (found,) = self._select(
            f"SELECT position FROM {self._table} WHERE review = {self._p}", (TRACKING,)
        )
        return found[0][0] if len(found) == 1 else None

    def rows(self, key: str) -> list[tuple[Any, bytes]]:
        (found,) = self._select(
            f"SELECT position, state FROM {self._table} WHERE review = {self._p} ORDER BY position",
            (key,),
        )
        return [(position, state) for position, state in found]

    def advance(self, before: int, after: int, rows: Sequence[tuple[str, int, bytes]]) -> bool:
        p = self._p
        insert = (
            f"INSERT INTO {self._table} (review, position, state) "
            f"VALUES ({p}, {p}, {p}) ON CONFLICT DO NOTHING"
        )
        return self._advance(before, after, [(insert, row) for row in rows])
