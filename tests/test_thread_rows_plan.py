"""A load's statement reads a thread's rows by lookups of the stream's index, never by
a scan of the whole stream: what keeps a restore at T=1000 from reading every one of
the thread's thousands of index entries (ADR 0055, ADR 0084)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from covonaut_es import open_store
from covonaut_es.store._backends.sqlite import NO_VERSION
from covonaut_es.store._thread_rows import thread_rows_sql
from support import converse


def test_every_branch_of_a_loads_statement_looks_up_versions_in_the_streams_index(
    tmp_path: Path,
) -> None:
    """SQLite plans each part of the statement (the events from the newest snapshot, the
    snapshot, the rows at no version) as a search of the index by stream and version."""
    path = tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        converse(store, "a")
    statement = thread_rows_sql("stored_snapshots", "stored_events", ":stream", ":lte", NO_VERSION)
    with sqlite3.connect(path) as conn:
        plan = [
            row[3]
            for row in conn.execute("EXPLAIN QUERY PLAN " + statement, {"stream": b"", "lte": 1})
        ]
    searches = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert len(searches) >= 2 + len(NO_VERSION), plan
    assert all(step.startswith("SEARCH") and "originator_version" in step for step in searches), (
        plan
    )
