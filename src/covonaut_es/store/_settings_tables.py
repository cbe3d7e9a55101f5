"""Where a store records the options it was created with (see :mod:`._settings`): a
small table beside its events, or a dictionary of an in-memory store. Each back end
hands out its own (:meth:`~covonaut_es.store._backend.Backend.settings_table`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SETTINGS_TABLE = "covonaut_settings"


class SettingsTable:
    """The settings of one store: name and value pairs."""

    def read(self) -> dict[str, str]:
        """The settings recorded, or none."""
        raise NotImplementedError

    def get(self, name: str) -> str | None:
        """The value recorded under ``name``, if any."""
        return self.read().get(name)

    def write(self, settings: Mapping[str, str]) -> None:
        """Record settings unless some are recorded already (the first opener wins)."""
        raise NotImplementedError


class MemorySettings(SettingsTable):
    """Settings kept in a dictionary (an in-memory store's); the tables other than the
    settings' own keep their names under a prefix of theirs in the same dictionary."""

    def __init__(self, settings: dict[str, str], table: str = SETTINGS_TABLE) -> None:
        self._settings = settings
        self._prefix = "" if table == SETTINGS_TABLE else f"{table}:"

    def read(self) -> dict[str, str]:
        n = len(self._prefix)
        if not n:
            return {k: v for k, v in self._settings.items() if ":" not in k}
        return {k[n:]: v for k, v in self._settings.items() if k.startswith(self._prefix)}

    def get(self, name: str) -> str | None:
        return self._settings.get(self._prefix + name)

    def write(self, settings: Mapping[str, str]) -> None:
        for name, value in settings.items():
            self._settings.setdefault(self._prefix + name, value)


class SQLSettings(SettingsTable):
    """Settings in a table of a database.

    Args:
        datastore: The database's eventsourcing datastore.
        qualified_name: The table's name, as SQL names it there.
        placeholder: The driver's parameter placeholder.
        exists: Whether the table exists, asked through a cursor.
        retried: Wraps a function to call it again when its statements fail as the
            back end retries its log's (PostgreSQL: on a session the server ended); by
            default, called once.
    """

    def __init__(
        self,
        datastore: Any,
        qualified_name: str,
        placeholder: str,
        exists: Callable[[Any], bool],
        retried: Callable[[Callable[[], Any]], Callable[[], Any]] = lambda call: call,
    ) -> None:
        self._datastore = datastore
        self._name = qualified_name
        self._placeholder = placeholder
        self._exists = exists
        self._retried = retried

    def read(self) -> dict[str, str]:
        found: dict[str, str] = self._retried(self._read)()
        return found

    def _read(self) -> dict[str, str]:
        with self._datastore.transaction(commit=False) as cursor:
            if not self._exists(cursor):
                return {}
            cursor.execute(f"SELECT name, value FROM {self._name}")
            rows = cursor.fetchall()
        return {column(row, 0, "name"): column(row, 1, "value") for row in rows}

    def get(self, name: str) -> str | None:
        found: str | None = self._retried(lambda: self._get(name))()
        return found

    def _get(self, name: str) -> str | None:
        with self._datastore.transaction(commit=False) as cursor:
            if not self._exists(cursor):
                return None
            cursor.execute(
                f"SELECT value FROM {self._name} WHERE name = {self._placeholder}", (name,)
            )
            row = cursor.fetchone()
        return None if row is None else str(column(row, 0, "value"))

    def write(self, settings: Mapping[str, str]) -> None:
        # Written again whole after a session ended: its rows are kept if present.
        self._retried(lambda: self._write(settings))()

    def _write(self, settings: Mapping[str, str]) -> None:
        p = self._placeholder
        # Asked first: on PostgreSQL, DDL, even DDL that would change nothing, needs
        # the table's owner (ADR 0117).
        with self._datastore.transaction(commit=False) as cursor:
            made = self._exists(cursor)
        # Two transactions, each opened by its write: in SQLite, a transaction whose
        # first statement only reads (CREATE TABLE IF NOT EXISTS on a table that exists)
        # fails with "database is locked" at its first write if another process wrote
        # meanwhile, where one opened by a write waits for the lock.
        if not made:
            with self._datastore.transaction(commit=True) as cursor:
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._name} "
                    "(name TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
        with self._datastore.transaction(commit=True) as cursor:
            for name, value in settings.items():
                cursor.execute(
                    f"INSERT INTO {self._name} (name, value) VALUES ({p}, {p}) "
                    "ON CONFLICT (name) DO NOTHING",
                    (name, value),
                )


def column(row: Any, index: int, name: str) -> Any:
    """A row's column, from a mapping row (PostgreSQL's) or a sequence (SQLite's)."""
    return row[name] if isinstance(row, Mapping) else row[index]
