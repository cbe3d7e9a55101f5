"""A save on PostgreSQL reads the lease and event rows it checks by their keys, however
many threads the store holds: its cost follows its own thread, not the store's size.

The store's insert function checks each fenced stream's lease and that each new stream
has no events yet. Written as a join of the call's JSON rows with those tables, the
planner took the JSON for a hundred rows and scanned the whole lease table at every save,
so creating threads slowed down as the store grew (3.6 ms a thread at the start of a run
of 10,000 threads, 8.6 ms at its end). The test fills the tables with other threads' rows,
has the planner know their sizes, saves threads as a run does (more than five times in a
session, so that PostgreSQL may settle on a generic plan), and counts the scans the
database server reports once the store's sessions ended.
"""

from __future__ import annotations

import time
from contextlib import closing

import psycopg
import pytest

from covonaut_es import open_store
from support import conversation

pytestmark = pytest.mark.postgres

CHECKED = ("covonaut_events", "covonaut_events_leases")


def _scans(url: str) -> dict[str, tuple[int, int]]:
    """Sequential and index scans of the checked tables, as the server last counted them."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname, seq_scan, coalesce(idx_scan, 0) FROM pg_stat_user_tables "
            "WHERE relname = ANY(%s)",
            (list(CHECKED),),
        ).fetchall()
    return {name: (seq, idx) for name, seq, idx in rows}


def _counted(url: str, before: dict[str, tuple[int, int]], saves: int) -> dict[str, int]:
    """The sequential scans of each checked table since ``before``, once the server has
    counted at least ``saves`` index scans of the lease table (a session's counts reach
    the server when it ends, a moment after the client closed it)."""
    deadline = time.monotonic() + 30
    while True:
        now = _scans(url)
        lease_reads = now["covonaut_events_leases"][1] - before["covonaut_events_leases"][1]
        if lease_reads >= saves or time.monotonic() > deadline:
            assert lease_reads >= saves, f"the server counted {lease_reads} lease reads"
            return {name: now[name][0] - before[name][0] for name in CHECKED}
        time.sleep(0.1)


@pytest.mark.parametrize("others", [3_000, 30_000])
def test_a_save_reads_the_leases_and_events_it_checks_by_key(
    postgres_database: str, others: int
) -> None:
    url = postgres_database
    with closing(open_store(url)) as store:
        conversation(store, "first", 1)  # the tables, and one lease
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO covonaut_events_leases SELECT gen_random_uuid(), 1 "
            "FROM generate_series(1, %s)",
            (others,),
        )
        # Rows of streams no thread reads: a save of another stream looks only at its own.
        conn.execute(
            "INSERT INTO covonaut_events (originator_id, originator_version, topic, state) "
            "SELECT gen_random_uuid(), 1, 'other', '\\x00'::bytea FROM generate_series(1, %s)",
            (others,),
        )
        conn.execute("ANALYZE covonaut_events_leases")
        conn.execute("ANALYZE covonaut_events")
    before = _scans(url)
    threads = 4
    with closing(open_store(url)) as store:
        for number in range(threads):
            conversation(store, f"thread-{number}", 2)
    # Each run saves its thread several times, each save fenced by the run's lease.
    scanned = _counted(url, before, saves=threads * 3)
    assert scanned == dict.fromkeys(CHECKED, 0)
