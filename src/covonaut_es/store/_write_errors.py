"""The one mapping of a database's refusal of a store's statement to a typed error
(ADR 0103): a save, a fork, a side table's write or read, a view's tracked change."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence

from eventsourcing.persistence import (
    ConnectionUnavailableError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
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
            connection lost, a statement the database refused, a constraint or trigger
            added to a table refusing a row): the transaction was rolled back. A
            conflict (:func:`is_conflict`) stays an ``IntegrityError``, the caller's
            to tell.
    """
    try:
        yield
    except ConnectionUnavailableError:
        raise  # a wait for this process's own writer, not the database's failure
    except IntegrityError as exc:
        if is_conflict(exc):
            raise
        msg = (
            f"{where} refused a row of the store's ({exc}): {unsaved}; a constraint, "
            "index or trigger added to its tables around the library refuses it: remove it"
        )
        raise StoreUnavailableError(msg) from exc
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
    except (ProgrammingError, DataError, NotSupportedError, InternalError) as exc:
        msg = (
            f"{where} refused the store's statement ({exc}): {unsaved}; its tables were "
            "changed around the library (a rule, a trigger, a column): restore them"
        )
        raise StoreUnavailableError(msg) from exc


_UNIQUE_POSTGRESQL = "23505"  # unique_violation
_KEYS_POSTGRESQL = ("_pkey", "_notification_id_idx")
"""How the names of the unique constraints the store's PostgreSQL tables are made with
end: their primary keys, and eventsourcing's index of the log's notification ids."""


def is_conflict(exc: IntegrityError) -> bool:
    """Whether a refused write met a row another writer stored first: a key of the
    store's own already taken (a stream's version, a snapshot's, a tracked position),
    which the library raised itself or the database found in a key it was made with.
    Any other refusal of a row (a unique index, CHECK or NOT NULL constraint or foreign
    key added to a table, a trigger's ``RAISE``) is no conflict: writing again would
    meet it again."""
    cause: BaseException | None = exc
    seen: set[int] = set()  # a chain raised "from" itself would else be walked for ever
    while isinstance(cause, PersistenceError) and id(cause) not in seen:
        seen.add(id(cause))
        cause = cause.__cause__  # eventsourcing wraps the driver's error
    if cause is None or isinstance(cause, PersistenceError):
        return True  # raised by the library (a stream that was to be new) or a recorder
    if isinstance(cause, sqlite3.Error):
        # Every unique key the store's SQLite tables are made with is a primary key; an
        # index added to a table fails as SQLITE_CONSTRAINT_UNIQUE.
        return getattr(cause, "sqlite_errorname", None) == "SQLITE_CONSTRAINT_PRIMARYKEY"
    if getattr(cause, "sqlstate", None) != _UNIQUE_POSTGRESQL:
        return False
    constraint = getattr(getattr(cause, "diag", None), "constraint_name", None)
    if constraint is None:
        return True  # the store's insert function's own refusal of a stream now taken
    return isinstance(constraint, str) and constraint.endswith(_KEYS_POSTGRESQL)


def require_stored(table: str, stored: int, given: int, ids: Sequence[int] = ()) -> None:
    """Refuse a write whose statement did not store exactly the rows it was given.

    Raised inside the write's transaction, so that it is rolled back whole: a trigger
    or rule that drops an insert (or changes its row) would else let a save report
    success with nothing stored (ADR 0109).

    Args:
        table: The table the statement wrote.
        stored: The rows the database says the statement stored.
        given: The rows the statement was given.
        ids: The notification ids the statement returned, if it writes the log: each
            must be positive and distinct.

    Raises:
        StoreUnavailableError: Another number of rows was stored, or an id is not
            positive or repeats another.
    """
    if ids and (any(i < 1 for i in ids) or len(set(ids)) < len(ids)):
        raise not_stored(table, f"ids {sorted(ids)}", given)
    if stored != given:
        raise not_stored(table, f"{stored} rows", given)


def not_stored(table: str, found: str, given: int) -> StoreUnavailableError:
    """The error of a write whose ``table`` stored ``found`` for ``given`` rows."""
    msg = (
        f"table {table!r} stored {found} for the {given} rows a write gave it (a trigger "
        "or rule on the table drops or changes its inserts): nothing was saved; remove "
        "what intercepts the table's inserts"
    )
    return StoreUnavailableError(msg)
