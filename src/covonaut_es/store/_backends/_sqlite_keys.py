"""How a SQLite store's tables key their streams (ADR 0074).

A store created since ADR 0074 keeps each stream id as its 16 bytes: its tables declare
``originator_id BLOB`` and refuse any other value, so a version that keys streams as
hex cannot write a second stream beside a thread's. One created before, or by an
application on eventsourcing's own module (whose tables are eventsourcing's), keeps the
32 hex digits eventsourcing writes, under ``originator_id TEXT``. Every row of the events
table and of its key index holds the id, so the bytes save 32 of them per event.

The declared type of a recorder's own table says which its store uses, and the tables
the back end makes later for that store (head anchors, lease tokens) take the same, so
old and new stores are read alike and nothing on disk is rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal
from uuid import UUID

KeyType = Literal["BLOB", "TEXT"]
"""The declared type of a table's ``originator_id``: 16 bytes, or 32 hex digits."""

NEW_TABLES: KeyType = "BLOB"
"""How the tables of a new store opened with the library's own module key streams."""

StreamKey = Callable[[UUID], "bytes | str"]
"""A stream id as a store's tables keep it."""


def declared_key_type(cursor: Any, table: str, *, absent: KeyType) -> KeyType:
    """How ``table`` keys its streams: as it declares; ``absent`` for a table not made
    yet (how it will be made); 32 hex digits for any type but ``BLOB``."""
    cursor.execute(f"PRAGMA table_info({table})")
    declared = {row[1]: str(row[2]).upper() for row in cursor.fetchall()}
    if not declared:
        return absent
    return "BLOB" if declared.get("originator_id") == "BLOB" else "TEXT"


def key_column(key_type: KeyType) -> str:
    """The declaration of ``originator_id`` in a table keying streams by ``key_type``."""
    if key_type == "TEXT":
        return "originator_id TEXT"
    return (
        "originator_id BLOB CHECK (typeof(originator_id) = 'blob' AND length(originator_id) = 16)"
    )


def declaring(statement: str, key_type: KeyType) -> str:
    """eventsourcing's ``statement`` making a table, with ``originator_id`` keying
    streams by ``key_type`` (eventsourcing 9.5.6 declares it TEXT)."""
    return statement.replace("originator_id TEXT", key_column(key_type))


def _stream_bytes(stream: UUID) -> bytes:
    return stream.bytes


def _stream_hex(stream: UUID) -> str:
    return stream.hex


def stream_key(key_type: KeyType) -> StreamKey:
    """The key of a stream in tables of ``key_type``."""
    return _stream_bytes if key_type == "BLOB" else _stream_hex
