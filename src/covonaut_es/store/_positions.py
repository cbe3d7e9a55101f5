"""Positions in the store's log that its consumers keep.

A consumer that acts once on each record of the log (the review notices a worker sends)
keeps how far it got in eventsourcing's tracking recorder, in the store's own database
and under the consumer's name: started again, it goes on from there, and never acts
again on what it recorded as done.
"""

from __future__ import annotations

import threading
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import (
    OperationalError,
    ProgrammingError,
    Tracking,
    TrackingRecorder,
)

from covonaut_es._arguments import check_name, check_position
from covonaut_es.store._read_only import WriteGuard


class LogPositions:
    """Read and record how far a named consumer of the store's log got: the one place
    that checks a consumer's name and position, for the store's methods and its log's."""

    def __init__(self, app: Application[UUID], guard: WriteGuard) -> None:
        self._app = app
        self._guard = guard
        self._tracking: TrackingRecorder | None = None
        self._lock = threading.Lock()

    def log_position(self, consumer: str) -> int:
        """See :meth:`covonaut_es.Store.log_position`."""
        check_name("consumer", consumer)
        try:
            return self._tracking_recorder().max_tracking_id(consumer) or 0
        except (OperationalError, ProgrammingError) as exc:
            # A store opened read-only creates no table: without one, nothing was
            # recorded. Any other failure of the read is the caller's to see.
            if self._guard.read_only and _no_table(exc):
                return 0
            raise

    def record_log_position(self, consumer: str, position: int) -> None:
        """See :meth:`covonaut_es.Store.record_log_position`."""
        check_name("consumer", consumer)
        check_position("position", position)
        self._guard.refuse_if_read_only(f"the log position of {consumer!r} was not recorded")
        self._tracking_recorder().insert_tracking(Tracking(consumer, position))

    def _tracking_recorder(self) -> TrackingRecorder:
        with self._lock:
            if self._tracking is None:
                # The back end's own tracking recorder, in the store's database: a table
                # eventsourcing creates and migrates, keyed by the consumer's name.
                self._tracking = self._app.factory.tracking_recorder()
            return self._tracking


def _no_table(exc: Exception) -> bool:
    """Whether ``exc`` says the table read does not exist (SQLite's message, or
    PostgreSQL's SQLSTATE 42P01, undefined_table, on the driver's error it wraps)."""
    return "no such table" in str(exc) or getattr(exc.__cause__, "sqlstate", None) == "42P01"
