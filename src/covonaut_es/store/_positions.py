"""Positions in the store's log that its consumers keep: the store's side.

Mixed into :class:`~covonaut_es.Store`. A consumer that acts once on each record of the
log (the review notices a worker sends) keeps how far it got in eventsourcing's tracking
recorder, in the store's own database and under the consumer's name: started again, it
goes on from there, and never acts again on what it recorded as done.
"""

from __future__ import annotations

import threading
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Tracking, TrackingRecorder


class LogPositions:
    """Read and record how far a named consumer of the store's log got."""

    _app: Application[UUID]
    _tracking: TrackingRecorder | None = None
    _tracking_lock = threading.Lock()

    def log_position(self, consumer: str) -> int:
        """The last log position ``consumer`` recorded as done (0 before any)."""
        return self._tracking_recorder().max_tracking_id(consumer) or 0

    def record_log_position(self, consumer: str, position: int) -> None:
        """Record that ``consumer`` is done with the log up to ``position``.

        Raises:
            IntegrityError: The position was recorded already (another process of the
                same consumer got there first).
        """
        self._tracking_recorder().insert_tracking(Tracking(consumer, position))

    def _tracking_recorder(self) -> TrackingRecorder:
        with self._tracking_lock:
            if self._tracking is None:
                # The back end's own tracking recorder, in the store's database: a table
                # eventsourcing creates and migrates, keyed by the consumer's name.
                self._tracking = self._app.factory.tracking_recorder()
            return self._tracking
