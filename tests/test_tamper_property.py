"""Property: one changed, removed or reordered stored record never goes unnoticed.

A thread is written once to a SQLite file; each example copies the file, changes one
record behind the library's back, and reopens it. Either ``verify`` reports a finding,
or loading the thread raises a typed error; loading never returns another state
silently.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import CovonautError, Store, ThreadState, open_store
from support import converse

THREAD = "audited"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ThreadState, int]:
    """A store holding one finished thread, its state, and its number of events."""
    db = tmp_path_factory.mktemp("template") / "threads.db"
    with open_store(f"sqlite:///{db}") as store:
        converse(store, THREAD)
        state = store.state_at(THREAD)
    return db, state, state.version


def changed_byte(blob: bytes, index: int, value: int) -> bytes:
    position = index % len(blob)
    replacement = value if value != blob[position] else (value + 1) % 256
    return blob[:position] + bytes([replacement]) + blob[position + 1 :]


def tamper(db: Path, kind: str, version: int, other: int, index: int, value: int) -> None:
    """Change one thing about the stored events, as a hostile database writer would."""
    with sqlite3.connect(db) as conn:
        if kind == "change":
            (state,) = conn.execute(
                "SELECT state FROM stored_events WHERE originator_version = ?", (version,)
            ).fetchone()
            conn.execute(
                "UPDATE stored_events SET state = ? WHERE originator_version = ?",
                (changed_byte(state, index, value), version),
            )
        elif kind == "remove":
            conn.execute("DELETE FROM stored_events WHERE originator_version = ?", (version,))
        else:  # reorder: swap the payloads of two versions
            rows = dict(
                conn.execute(
                    "SELECT originator_version, state FROM stored_events "
                    "WHERE originator_version IN (?, ?)",
                    (version, other),
                ).fetchall()
            )
            for target, source in ((version, other), (other, version)):
                conn.execute(
                    "UPDATE stored_events SET state = ? WHERE originator_version = ?",
                    (rows[source], target),
                )


def noticed(store: Store, original: ThreadState) -> bool:
    """Whether the change is reported by verify or refused when the thread is loaded;
    fails the test if a different state loads silently."""
    try:
        if not store.verify(THREAD).ok:
            return True
        loaded = store.state_at(THREAD)
    except CovonautError:
        return True
    assert loaded == original, "a tampered store loaded another state without a finding"
    return False


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(["change", "remove", "reorder"]),
    version=st.integers(min_value=1, max_value=10_000),
    offset=st.integers(min_value=1, max_value=10_000),
    index=st.integers(min_value=0, max_value=100_000),
    value=st.integers(min_value=0, max_value=255),
)
def test_a_single_tampered_record_is_reported_or_refused(
    template: tuple[Path, ThreadState, int],
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    version: int,
    offset: int,
    index: int,
    value: int,
) -> None:
    """Any one changed, removed or reordered stored event makes verify report it or
    loading raise a typed error; loading never gives another state silently."""
    source, original, events = template
    db = tmp_path_factory.mktemp("tampered") / "threads.db"
    shutil.copy(source, db)
    first = (version - 1) % events + 1
    second = (first - 1 + offset % (events - 1) + 1) % events + 1
    tamper(db, kind, first, second, index, value)
    with open_store(f"sqlite:///{db}") as store:
        assert noticed(store, original)
