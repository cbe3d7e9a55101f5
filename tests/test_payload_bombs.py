"""Stored payloads a writer of the database planted to make a reader build millions of
objects from a few bytes (a zstd frame of empty msgpack arrays or JSON brackets): a
load, the history and verify give what they give without them, or a typed error, and
never build more than a bounded number of objects, whatever the payload holds.

A payload that says it is of today's schema version but does not decode as today's type
is refused with the typed decoder's error, never decoded untyped; one of an older version
is decoded untyped (for its upcasters) only up to :data:`MOST_UNTYPED_CONTAINERS` arrays
and objects (JSON), or :data:`MOST_UNTYPED_SNAPSHOT` bytes (msgpack)."""

from __future__ import annotations

import sqlite3
import tracemalloc
from contextlib import closing
from pathlib import Path

import msgspec
import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import open_store
from covonaut_es.domain import AgentThread
from covonaut_es.errors import SerializationError
from covonaut_es.store._snapshot_seals import SEALED
from support import append_raw_event, snapshotted_thread

PEAK_LIMIT = 100 * 1024 * 1024
"""The most memory a reader may take for one planted payload here (the fixed bounds the
module's docstring names, not the payload's)."""

_VERSIONS = {
    "today's": AgentThread.class_version,
    "older": 1,
    "none": None,
}


def _packed_bomb(version: int | None, count: int, fill: bytes) -> bytes:
    """A msgpack snapshot envelope whose state holds ``count`` items of ``fill``."""
    items = b"\xdd" + count.to_bytes(4, "big") + fill * count
    state = b"\x81\xa8messages" + items  # {"messages": [...]}
    if version is None:
        return b"\x81\xa5state" + state
    return b"\x82\xa2_v" + msgspec.msgpack.encode(version) + b"\xa5state" + state


def _json_bomb(version: int | None, count: int, fill: bytes) -> bytes:
    head = b"{" if version is None else b'{"_v":' + str(version).encode() + b","
    return head + b'"x":[' + b",".join([fill] * count) + b"]}"


def _peak(call: object) -> tuple[int, object]:
    tracemalloc.start()
    try:
        try:
            found: object = call()  # type: ignore[operator]
        except SerializationError as exc:
            found = exc
        return tracemalloc.get_traced_memory()[1], found
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bombs") / "threads.db"
    with open_store(f"sqlite:///{path}", compress="zstd") as store:
        snapshotted_thread(store, "long")
    return path


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    target=st.sampled_from(("snapshot", "event")),
    version=st.sampled_from(sorted(_VERSIONS)),
    count=st.sampled_from((300_000, 1_200_000)),  # under and over the bounds
    fill=st.sampled_from(("arrays", "objects", "nulls", "quotes")),
)
# Found by CI: the pattern that counts brackets kept state for each escape of a string.
@example(target="event", version="none", count=1_200_000, fill="quotes")
def test_a_planted_payload_never_makes_a_reader_build_what_it_holds(
    made: Path,
    tmp_path_factory: pytest.TempPathFactory,
    target: str,
    version: str,
    count: int,
    fill: str,
) -> None:
    path = tmp_path_factory.mktemp("bomb") / "threads.db"
    path.write_bytes(made.read_bytes())
    stamp = _VERSIONS[version]
    with open_store(f"sqlite:///{path}") as store:
        if target == "snapshot":
            packed = {"arrays": b"\x90", "objects": b"\x80"}.get(fill, b"\xc0")
            frame = zstandard.ZstdCompressor(level=19, write_checksum=True).compress(
                _packed_bomb(stamp, count, packed)
            )
            with closing(sqlite3.connect(path)) as conn, conn:
                (state,) = conn.execute("SELECT state FROM stored_snapshots").fetchone()
                start = len(SEALED) + 4
                seal = bytes(state[: start + int.from_bytes(state[len(SEALED) : start], "little")])
                conn.execute("UPDATE stored_snapshots SET state = ?", (seal + frame,))
        else:
            if fill == "quotes":  # a string never closed, of escaped quotes
                payload = b'{"x":"' + b'\\"' * count
            else:
                text = {"arrays": b"[]", "objects": b"{}", "nulls": b"null"}[fill]
                payload = _json_bomb(stamp, count, text)
            append_raw_event(store, "long", AgentThread.Labelled.TOPIC, payload)
    with open_store(f"sqlite:///{path}") as store:
        for read in (
            lambda: store.load("long"),
            lambda: store.history("long"),
            lambda: store.verify("long"),
        ):
            peak, found = _peak(read)
            assert peak < PEAK_LIMIT, (peak, type(found).__name__)
