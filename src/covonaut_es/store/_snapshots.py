"""Snapshot retention: each thread keeps its newest snapshot only (ADR 0014).

A snapshot is a cache of the state its events make, so an older one is only bytes on
disk once a newer one is stored: the state at a version below the kept snapshot is
rebuilt from the thread's events, in proportion to that version. eventsourcing never
removes a snapshot and its recorders have no call for it, so on the two database back
ends the older ones are deleted in SQL when a new one is stored: on SQLite in the same
transaction, before the insert, so that the new one reuses their pages instead of
growing the file; on PostgreSQL just after it (a reader in between finds either), then
the table is vacuumed so that the next one reuses their space. The in-memory store
keeps them all (its data dies with the process).
"""

from __future__ import annotations

import sys

from eventsourcing.sqlite import SQLiteAggregateRecorder

from covonaut_es.domain import ThreadSnapshot
from covonaut_es.store._snapshot_cache import SnapshotCache


def replace_snapshot(snapshots: SnapshotCache, snapshot: ThreadSnapshot) -> None:
    """Store ``snapshot`` and delete its thread's older snapshots, in one transaction.

    Raises:
        IntegrityError: The thread already has a snapshot at that version.
    """
    recorder = snapshots.recorder
    record = snapshots.stored(snapshot)  # sealed (ADR 0030)
    thread, version = snapshot.originator_id, snapshot.originator_version
    if isinstance(recorder, SQLiteAggregateRecorder):
        with recorder.datastore.transaction(commit=True) as c:
            c.execute(
                f"DELETE FROM {recorder.events_table_name} "
                "WHERE originator_id = ? AND originator_version < ?",
                (thread.hex, version),
            )
            recorder._insert_events(c, [record])
        return
    snapshots.put([snapshot])  # sealed as well
    module = sys.modules.get("eventsourcing.postgres")  # loaded if the store is PostgreSQL
    if module is not None and isinstance(recorder, module.PostgresAggregateRecorder):
        table = f'"{recorder.datastore.schema}"."{recorder.events_table_name}"'
        with recorder.datastore.transaction(commit=True) as curs:
            curs.execute(
                f"DELETE FROM {table} WHERE originator_id = %s AND originator_version < %s",
                (thread, version),
            )
        # eventsourcing's tables are created with autovacuum all but off, so the deleted
        # snapshots' space would never be reused: free it now (outside a transaction).
        with recorder.datastore.get_connection() as conn:
            conn.execute(f"VACUUM {table}")
