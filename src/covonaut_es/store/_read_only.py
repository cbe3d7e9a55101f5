"""The one check every write of a store opened read-only meets first, and every use of
a closed store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from eventsourcing.persistence import ConnectionPoolClosedError, InterfaceError, OperationalError

from covonaut_es.errors import ReadOnlyStoreError, StoreClosedError, StoreUnavailableError
from covonaut_es.store._write_errors import database_error

T = TypeVar("T")

_UNREACHED = (ConnectionPoolClosedError, OperationalError, InterfaceError, StoreUnavailableError)
"""What a back end raises when its pool or connection was closed under a call."""


class WriteGuard:
    """Refuses writes to a store opened read-only (``?mode=ro``), and any use of a
    closed one.

    Args:
        url: The store's redacted URL, for messages.
        read_only: Whether the store was opened read-only.

    Attributes:
        closed: Whether the store was closed.
    """

    def __init__(self, url: str, *, read_only: bool) -> None:
        self.url = url
        self.read_only = read_only
        self.closed = False

    def refuse_if_closed(self) -> None:
        """Refuse any use of a closed store: its methods ask here, and so does every
        write of a part of it (its submissions, its log's positions) kept past close.

        Raises:
            StoreClosedError: The store was closed.
        """
        if self.closed:
            raise StoreClosedError(f"store {self.url} is closed")

    def refuse_under(self, error: Exception, call: str) -> None:
        """Raise the store's typed error for ``error``, which the call named ``call``
        raised: StoreClosedError, from it, if it is the back end's failure to reach its
        database and the store was closed while the call ran (eventsourcing's
        ``ConnectionPoolClosedError`` on SQLite, its ``OperationalError`` on
        PostgreSQL); the database's failure typed (:func:`database_error`) if no layer
        under the call typed it (a damaged file read by a listing, say). Returns for any
        other error (a conflict, a damaged row: the call's own), for the caller to raise.

        Raises:
            StoreClosedError: The store was closed.
            CovonautError: The database failed the call.
        """
        if (
            self.closed
            and isinstance(error, _UNREACHED)
            and not isinstance(error, StoreClosedError)
        ):
            raise StoreClosedError(f"store {self.url} is closed") from error
        typed = database_error(error, f"store {self.url}", f"{call} did not complete")
        if typed is not None:
            raise typed from error

    def while_open(self, items: Iterator[T]) -> Iterator[T]:
        """``items`` (a listing read as it goes), each refused once the store is closed.

        Raises:
            StoreClosedError: The store was closed.
        """
        try:
            for item in items:
                self.refuse_if_closed()
                yield item
        except Exception as exc:
            self.refuse_under(exc, "the listing")
            raise

    def refuse_if_read_only(self, refused: str) -> None:
        """Refuse a write before anything is done, on a store opened read-only: every
        write (a save, a lease, a fork, a named state, a submission) asks here first.

        Raises:
            StoreClosedError: The store was closed.
            ReadOnlyStoreError: The store was opened read-only.
        """
        self.refuse_if_closed()
        if self.read_only:
            msg = (
                f"{self.url} was opened read-only: {refused}, and nothing was written; "
                "open it without ?mode=ro to change it"
            )
            raise ReadOnlyStoreError(msg)
