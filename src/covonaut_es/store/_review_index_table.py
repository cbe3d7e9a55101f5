"""The table of the review index a store keeps beside its log (ADR 0078): keys as text,
rows as bytes, and one row more, under :data:`TRACKING`, holding the log position the
rows were made to; :mod:`covonaut_es.store._review_index` says what they hold."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from covonaut_es.store._side_tables import SQLSideTable

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


class SQLReviewIndex(SQLSideTable, ReviewIndexTable):
    """The review index in a SQL database (:class:`SQLSideTable`'s arguments; its
    ``stored`` is unused), its tracking row made with it."""

    def _made(self) -> None:
        p = self._p
        with self._writing() as cursor:  # a transaction opened by a write (SQLite)
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
        self.make()
        p = self._p

        # Retried whole: a first try that committed unanswered leaves the position
        # moved, and the second finds it so (False), as when another process moved it.
        def write() -> bool:
            with self._writing() as cursor:
                if not self._moved(cursor, "review", TRACKING, before, after):
                    return False
                for row in rows:
                    cursor.execute(
                        f"INSERT INTO {self._table} (review, position, state) "
                        f"VALUES ({p}, {p}, {p}) ON CONFLICT DO NOTHING",
                        row,
                    )
            return True

        return self._run(write, f"its rows to log position {after} were not written")

    def clear(self) -> None:
        self.make()

        def write() -> None:
            with self._writing() as cursor:
                cursor.execute(f"DELETE FROM {self._table}")
                cursor.execute(
                    f"INSERT INTO {self._table} (review, position, state) VALUES "
                    f"({self._p}, 0, {self._p}) ON CONFLICT (review, position) DO NOTHING",
                    (TRACKING, b""),
                )

        self._run(write, "it was not cleared")
