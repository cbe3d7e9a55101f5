"""The one mapping of a database's refusal of a store's statement to a typed error
(ADR 0103): a save, a fork, a side table's write or read, a view's tracked change."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from eventsourcing.persistence import (
    ConnectionUnavailableError,
    InterfaceError,
    OperationalError,
)

from covonaut_es.errors import ReadOnlyStoreError, StoreLockedError, StoreUnavailableError


@contextlib.contextmanager
def database_errors_typed(where: str, unsaved: str) -> Iterator[None]:
    """Raise a typed error for a database's failure of a statement in the block.

    Args:
        where: What the statement ran on, as the message names it (the store's
            redacted URL, or a table of it).
        unsaved: What did not happen, as the message says it ("thread 't' was not
            saved").

    Raises:
        StoreLockedError: Another connection held the write lock for longer than the
            store waits.
        ReadOnlyStoreError: The database's file cannot be written.
        StoreUnavailableError: Any other failure (a full disk, an I/O error, a
            connection lost): the transaction was rolled back.
    """
    try:
        yield
    except ConnectionUnavailableError:
        raise  # a wait for this process's own writer, not the database's failure
    except (OperationalError, InterfaceError) as exc:
        if StoreLockedError.said_by(exc):
            msg = f"{where} is locked by another writer: {unsaved}; try again shortly"
            raise StoreLockedError(msg) from exc
        if "readonly" in str(exc):
            msg = (
                f"{where} is read-only: {unsaved}; make the file writable, or open it "
                "without ?mode=ro"
            )
            raise ReadOnlyStoreError(msg) from exc
        msg = (
            f"{where} failed ({exc}): {unsaved}; try again once the database answers "
            "(a full disk once it has room)"
        )
        raise StoreUnavailableError(msg) from exc
