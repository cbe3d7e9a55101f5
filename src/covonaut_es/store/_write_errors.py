"""The one mapping of a database's refusal of a store's statement to a typed error
(ADR 0103): a save, a fork, a side table's write or read, a view's tracked change."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Iterator, Sequence

from eventsourcing.persistence import (
    ConnectionUnavailableError,
    PersistenceError,
)

from covonaut_es.errors import (
    CovonautError,
    ReadOnlyStoreError,
    StoreDamagedError,
    StoredRowError,
    StoreLockedError,
    StorePrivilegeError,
    StoreUnavailableError,
)


@contextlib.contextmanager
def database_errors_typed(where: str, unsaved: str) -> Iterator[None]:
    """Raise a typed error for a database's failure of a statement in the block: an
    error of eventsourcing's persistence module, or of psycopg's where a statement is
    sent without eventsourcing (run leases, the worker registry).

    Args:
        where: What the statement ran on, as the message names it (the store's
            redacted URL, or a table of it).
        unsaved: What did not happen, as the message says it ("thread 't' was not
            saved").

    Raises:
        ReadOnlyStoreError: The database's file cannot be written (by this user: it
            was not opened with ``?mode=ro``), or PostgreSQL's session is read-only
            (SQLSTATE 25006: ``default_transaction_read_only``, a standby).
        StorePrivilegeError: The database's role lacks a privilege the statement
            needed, or a row-level security policy refused its row (SQLSTATE 42501).
        StoreLockedError: Another connection held the write lock for longer than the
            store waits.
        StoredRowError: PostgreSQL's log already holds the notification id its
            sequence gave a new event (the sequence set back, ADR 0113).
        StoreDamagedError: A damaged SQLite file, or tables changed around the
            library (a constraint, index or trigger added refusing a row, a rule, a
            column): trying again meets it again.
        StoreUnavailableError: Any other failure (a full disk, an I/O error, a
            connection lost, a statement the database refused): the transaction was
            rolled back. A conflict (:func:`is_conflict`) stays an ``IntegrityError``,
            the caller's to tell.
    """
    try:
        yield
    except Exception as exc:
        typed = database_error(exc, where, unsaved)
        if typed is None:
            raise
        raise typed from exc


_READ_ONLY = "25006"  # read_only_sql_transaction
_DAMAGED_SQLITE = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})
NO_PRIVILEGE = "42501"  # insufficient_privilege, a row-level security policy's refusal too
_CHANGED = frozenset({"ProgrammingError", "DataError", "NotSupportedError", "InternalError"})


def database_error(exc: BaseException, where: str, unsaved: str) -> CovonautError | None:
    """The typed error of a database's failure ``exc`` (see
    :func:`database_errors_typed`, whose arguments ``where`` and ``unsaved`` are); None
    for a conflict and what is no database's failure. Told by the SQLSTATE of the
    driver's error where it gives one, else by the error's class as PEP 249 names it
    (eventsourcing's and psycopg's alike)."""
    kind = _kind(exc)
    if kind is None or (kind == "IntegrityError" and is_conflict(exc)):
        return None
    if isinstance(exc, ConnectionUnavailableError):
        # Another thread's save held this process's writer, waiting for the file's lock
        # as long as a save waits: to the caller, the lock it waited for.
        msg = f"{where} is locked by another writer: {unsaved}; try again shortly"
        return StoreLockedError(msg)
    refused = refusal(exc, where, unsaved)
    if refused is not None:
        return refused
    if kind == "IntegrityError" and _numbered_twice(exc):
        msg = (
            f"{where} numbered a new event where the log holds a row already "
            f"({_detail(exc)}): {unsaved}; the log's sequence numbers new events behind "
            "rows already stored (it was set back, or a row moved past where it numbers "
            "them): set it past the log's largest notification_id, or restore the store "
            "from a backup"
        )
        return StoredRowError(msg)
    if kind == "IntegrityError":
        msg = (
            f"{where} refused a row of the store's ({exc}): {unsaved}; a constraint, "
            "index or trigger added to its tables around the library refuses it: remove it"
        )
        return StoreDamagedError(msg)
    if kind in _CHANGED or _schema_gone(exc):
        msg = (
            f"{where} refused the store's statement ({exc}): {unsaved}; its tables were "
            "changed around the library (a rule, a trigger, a column): restore them"
        )
        return StoreDamagedError(msg)
    if StoreLockedError.said_by(exc):
        msg = f"{where} is locked by another writer: {unsaved}; try again shortly"
        return StoreLockedError(msg)
    if getattr(_driver_error(exc), "sqlite_errorname", None) in _DAMAGED_SQLITE:
        msg = (
            f"{where} is damaged ({exc}): {unsaved}; restore the file from a backup "
            "(`sqlite3 FILE 'PRAGMA integrity_check'` names what is damaged)"
        )
        return StoreDamagedError(msg)
    if "readonly" in str(exc):
        # Opened without ?mode=ro: a store opened with it refuses each write before
        # (WriteGuard), and a view kept there is never written.
        msg = (
            f"{where} is read-only: {unsaved}; make the file and its directory writable "
            "(SQLite keeps its journal beside the file), or add ?mode=ro to the URL to read it"
        )
        return ReadOnlyStoreError(msg)
    msg = (
        f"{where} failed ({exc}): {unsaved}; try again once the database answers "
        "(a full disk once it has room)"
    )
    return StoreUnavailableError(msg)


def refusal(exc: BaseException, where: str, unsaved: str) -> CovonautError | None:
    """The typed error of PostgreSQL's refusal ``exc`` of a statement by the session
    or the role it runs as, told by its SQLSTATE (arguments as
    :func:`database_errors_typed`'s); None for any other error.

    Raises nothing: returns a ReadOnlyStoreError for a read-only session (a standby,
    ``default_transaction_read_only``), a StorePrivilegeError for a role lacking a
    privilege or a row refused by a row-level security policy.
    """
    state = sqlstate(exc)
    if state not in (_READ_ONLY, NO_PRIVILEGE):
        return None
    driver = _driver_error(exc)
    # The primary message names the table (or the statement): a statement run by a
    # function adds its SQL, many lines of it.
    said = getattr(getattr(driver, "diag", None), "message_primary", None) or str(exc)
    if state == _READ_ONLY:
        msg = (
            f"{where} refused the store's statement: the session is read-only ({said}): "
            f"{unsaved}; connect to a server that takes writes (not a standby), or unset "
            "default_transaction_read_only for the role"
        )
        return ReadOnlyStoreError(msg)
    msg = (
        f"{where} refused the store's statement: the database role lacks a privilege "
        f"it needs ({said}): {unsaved}; grant the role the privileges docs/operations.md "
        "lists, and let no row-level security policy refuse the store's rows"
    )
    return StorePrivilegeError(msg)


_KINDS = frozenset(
    {"IntegrityError", "OperationalError", "InterfaceError", *_CHANGED, "DatabaseError"}
)
"""The PEP 249 classes told apart; ``DatabaseError`` is what is none of the others (a
damaged file), which the search in the class's order reaches last."""


_SCHEMA_GONE = ("no such table:", "no such column:")
"""How SQLite says a statement named a table or column that is not there (it has no code
of its own for it); PostgreSQL's SQLSTATE makes such an error a ``ProgrammingError``."""


def _schema_gone(exc: BaseException) -> bool:
    """Whether SQLite refused a statement of the store's for a table or column that is not
    there: one dropped or changed around the library, since the store made them."""
    driver = _driver_error(exc)
    return isinstance(driver, sqlite3.Error) and str(driver).startswith(_SCHEMA_GONE)


def _kind(exc: BaseException) -> str | None:
    """The PEP 249 class of a database's error ``exc`` (``"OperationalError"``, ...):
    an error of eventsourcing's persistence module, of ``sqlite3`` (the store's own
    reads of a SQLite file), or of psycopg's, which is raised only once psycopg is
    imported; None for any other exception."""
    psycopg = sys.modules.get("psycopg")
    if not isinstance(exc, PersistenceError | sqlite3.Error) and not (
        psycopg is not None and isinstance(exc, psycopg.Error)
    ):
        return None
    return next((k.__name__ for k in type(exc).__mro__ if k.__name__ in _KINDS), None)


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of the driver's error a failure ``exc`` holds, under the errors
    that wrapped it (eventsourcing's, the library's), or None where none gives one."""
    cause: BaseException | None = exc
    seen: set[int] = set()  # a chain raised "from" itself would else be walked for ever
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        state = getattr(cause, "sqlstate", None)
        if isinstance(state, str):
            return state
        cause = cause.__cause__
    return None


def _driver_error(exc: BaseException) -> BaseException | None:
    """The driver's error that eventsourcing's ``exc`` wraps (``exc`` itself if it is
    the driver's), or None if the library or a recorder raised it."""
    cause: BaseException | None = exc
    seen: set[int] = set()  # a chain raised "from" itself would else be walked for ever
    while isinstance(cause, PersistenceError) and id(cause) not in seen:
        seen.add(id(cause))
        cause = cause.__cause__  # eventsourcing wraps the driver's error
    return None if isinstance(cause, PersistenceError) else cause


_UNIQUE_POSTGRESQL = "23505"  # unique_violation
_KEY_POSTGRESQL = "_pkey"
"""How the names of the primary keys the store's PostgreSQL tables are made with end."""

_NUMBERED_POSTGRESQL = "_notification_id_idx"
"""How the name of eventsourcing's unique index of the log's notification ids ends: no
two writers meet in it, since its sequence numbers each row once; a row already there
is one the sequence was set back behind, or moved past where it numbers (ADR 0113)."""


def passes_when_answered(error: BaseException) -> bool:
    """Whether ``error`` is a database's failure that passes once it answers again (a
    failover, a restart, a session it ended, its write lock held too long): what a
    follower of the log waits out, then reads again. Its other kinds stay: a damaged
    store (:class:`~covonaut_es.errors.StoreDamagedError`), a SQLite file replaced (a
    follower would go on following the old file), a store closed."""
    return type(error) in (StoreUnavailableError, StoreLockedError)


def is_conflict(exc: BaseException) -> bool:
    """Whether a refused write met a row another writer stored first: a key of the
    store's own already taken (a stream's version, a snapshot's, a tracked position),
    which the library raised itself or the database found in a key it was made with.
    Any other refusal of a row (a unique index, CHECK or NOT NULL constraint or foreign
    key added to a table, a trigger's ``RAISE``) is no conflict: writing again would
    meet it again."""
    cause = _driver_error(exc)
    if cause is None:
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
    return isinstance(constraint, str) and constraint.endswith(_KEY_POSTGRESQL)


def _numbered_twice(exc: BaseException) -> bool:
    """Whether PostgreSQL refused a row of the log for a notification id already held."""
    driver = _driver_error(exc)
    constraint = getattr(getattr(driver, "diag", None), "constraint_name", None)
    return sqlstate(exc) == _UNIQUE_POSTGRESQL and str(constraint).endswith(_NUMBERED_POSTGRESQL)


def _detail(exc: BaseException) -> str:
    """The driver's detail of a refusal ("Key (notification_id)=(2) already exists."),
    or its message."""
    driver = _driver_error(exc)
    detail = getattr(getattr(driver, "diag", None), "message_detail", None)
    return str(detail or exc).strip()


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
        StoreDamagedError: Another number of rows was stored, or an id is not
            positive or repeats another.
    """
    if ids and (any(i < 1 for i in ids) or len(set(ids)) < len(ids)):
        raise not_stored(table, f"ids {sorted(ids)}", given)
    if stored != given:
        raise not_stored(table, f"{stored} rows", given)


def not_stored(table: str, found: str, given: int) -> StoreDamagedError:
    """The error of a write whose ``table`` stored ``found`` for ``given`` rows."""
    msg = (
        f"table {table!r} stored {found} for the {given} rows a write gave it (a trigger "
        "or rule on the table drops or changes its inserts): nothing was saved; remove "
        "what intercepts the table's inserts"
    )
    return StoreDamagedError(msg)
