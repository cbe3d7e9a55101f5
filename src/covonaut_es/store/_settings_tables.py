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

    def write(self, settings: Mapping[str, str]) -> None:
        """Record settings unless some are recorded already (the first opener wins)."""
        raise NotImplementedError


class MemorySettings(SettingsTable):
    """Settings kept in a dictionary (an in-memory store's)."""

    def __init__(self, settings: dict[str, str]) -> None:
        self._settings = settings

    def read(self) -> dict[str, str]:
        return dict(self._settings)

    def write(self, settings: Mapping[str, str]) -> None:
        for name, value in settings.items():
            self._settings.setdefault(name, value)


class SQLSettings(SettingsTable):
    """Settings in a table of a database.

    Args:
        datastore: The database's eventsourcing datastore.
        qualified_name: The table's name, as SQL names it there.
        placeholder: The driver's parameter placeholder.
        exists: Whether the table exists, asked through a cursor.
    """

    def __init__(
        self,
        datastore: Any,
        qualified_name: str,
        placeholder: str,
        exists: Callable[[Any], bool],
    ) -> None:
        self._datastore = datastore
        self._name = qualified_name
        self._placeholder = placeholder
        self._exists = exists

    def read(self) -> dict[str, str]:
        with self._datastore.transaction(commit=False) as cursor:
            if not self._exists(cursor):
                return {}
            cursor.execute(f"SELECT name, value FROM {self._name}")
            rows = cursor.fetchall()
        return {column(row, 0, "name"): column(row, 1, "value") for row in rows}

    def write(self, settings: Mapping[str, str]) -> None:
        p = self._placeholder
        with self._datastore.transaction(commit=True) as cursor:
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {self._name} "
                "(name TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            for name, value in settings.items():
                cursor.execute(
                    f"INSERT INTO {self._name} (name, value) VALUES ({p}, {p}) "
                    "ON CONFLICT (name) DO NOTHING",
                    (name, value),
                )


def column(row: Any, index: int, name: str) -> Any:
    """A row's column, from a mapping row (PostgreSQL's) or a sequence (SQLite's)."""
    return row[name] if isinstance(row, Mapping) else row[index]
