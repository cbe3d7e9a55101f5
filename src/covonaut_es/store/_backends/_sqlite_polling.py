"""A SQLite application recorder that projections can subscribe to, by polling.

eventsourcing 9.5.6's SQLite recorder has no subscriptions (SQLite cannot notify other
connections, let alone other processes). This one wakes its subscription's reader every
``POLL_INTERVAL`` seconds; the reader then selects new notifications exactly as the
listen/notify subscriptions of the other back ends do.

``_has_been_notified`` of eventsourcing's subscription is a private name, checked
against eventsourcing 9.5.6.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from eventsourcing.persistence import ApplicationRecorder, ListenNotifySubscription, Subscription
from eventsourcing.sqlite import SQLiteApplicationRecorder

from covonaut_es.store._backend import POLL_INTERVAL


class PollingSubscription(ListenNotifySubscription[SQLiteApplicationRecorder]):
    """Reads new notifications whenever a timer, not the database, says so."""

    def __init__(
        self, recorder: SQLiteApplicationRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        # Before the base starts its reader, which stops the subscription when it fails.
        self._stopped = threading.Event()
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._ticker = threading.Thread(target=self._tick, name="sqlite-poll", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stopped.wait(POLL_INTERVAL):
            self._has_been_notified.set()

    def stop(self) -> None:
        self._stopped.set()
        super().stop()

    def __exit__(self, *args: object, **kwargs: object) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self._ticker.join()


class PollingSQLiteApplicationRecorder(SQLiteApplicationRecorder):
    """The stock SQLite application recorder, plus a polling ``subscribe``."""

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return PollingSubscription(self, gt=gt, topics=topics)
