"""A store damaged below its rows is never taken for a database that will answer again:
whatever pages of a SQLite file are overwritten, what reading its log, its threads or its
review queue raises is a failure no follower waits out (``passes_when_answered``), so
``reviews --follow`` and a worker end on it instead of warning for ever (helper-231: a
damaged file read as a plain ``StoreUnavailableError``, the type of an outage)."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import ReviewQueue, Store, open_store
from covonaut_es.errors import CovonautError, StoreUnavailableError
from covonaut_es.store._write_errors import passes_when_answered
from inbox_support import paused

_PAGE = 4096


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with three threads paused on reviews, its log checkpointed into the file."""
    path = tmp_path_factory.mktemp("template") / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        for n in range(3):
            paused(store, f"t{n}", [], [])
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def _queue(store: Store) -> Any:
    queue = ReviewQueue(store.url, view_url="memory://")
    try:
        with queue.follow() as runner:
            queue.wait_until_current(store, timeout=10, runner=runner)
        return queue.pending()
    finally:
        queue.close()


_READS: dict[str, Callable[[Store], Any]] = {
    "the log": lambda store: list(store.thread_ids()),
    "the threads": lambda store: store.list_threads(),
    "a thread": lambda store: store.load("t1"),
    "the review queue": _queue,
}


_DAMAGES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""A page's damage each example: a store's file copied and overwritten, then read."""


@_DAMAGES
@given(
    read=st.sampled_from(sorted(_READS)),
    first=st.integers(1, 40),
    pages=st.integers(1, 40),
    fill=st.sampled_from([b"\xff", b"\x00", b"\x0d"]),
)
@example(read="the review queue", first=1, pages=40, fill=b"\xff")  # helper-231's damage
def test_what_a_damaged_file_raises_is_never_waited_out(
    template: Path, tmp_path: Path, read: str, first: int, pages: int, fill: bytes
) -> None:
    """Pages ``first`` on (the first, SQLite's header, kept), ``pages`` of them, filled
    with ``fill``: the read succeeds, or raises a typed error no follower waits out."""
    path = tmp_path / f"{read.replace(' ', '-')}-{first}-{pages}-{fill.hex()}.db"
    shutil.copyfile(template, path)
    size = path.stat().st_size
    start = min(first * _PAGE, size - 1)
    with path.open("r+b") as file:
        file.seek(start)
        file.write(fill * min(pages * _PAGE, size - start))
    try:
        with open_store(f"sqlite:///{path}") as store:
            _READS[read](store)
    except StoreUnavailableError as exc:
        assert not passes_when_answered(exc), exc
    except CovonautError:
        pass  # damage read as damage: a row, a record, not a store (never an outage)


def _tables(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return sorted(name for (name,) in rows)


@_DAMAGES
@given(read=st.sampled_from(sorted(_READS)), data=st.data())
def test_what_a_table_dropped_under_an_open_store_raises_is_never_waited_out(
    template: Path, tmp_path: Path, read: str, data: st.DataObject
) -> None:
    """One of the store's tables dropped by another connection while the store is open
    (its tables made): the read succeeds, or raises a typed error no follower waits out
    (SQLite's "no such table" read as an outage that passes)."""
    path = tmp_path / f"{read.replace(' ', '-')}.db"
    shutil.copyfile(template, path)
    table = data.draw(st.sampled_from(_tables(path)), label="table")
    with open_store(f"sqlite:///{path}") as store:
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute(f'DROP TABLE "{table}"')
        try:
            _READS[read](store)
        except StoreUnavailableError as exc:
            assert not passes_when_answered(exc), exc
        except CovonautError:
            pass  # read as damage: a row, a record (never an outage)
