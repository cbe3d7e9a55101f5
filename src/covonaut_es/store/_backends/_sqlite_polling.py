"""A SQLite application recorder that projections can subscribe to, by polling.

eventsourcing 9.5.6's SQLite recorder has no subscriptions (SQLite cannot notify other
connections, let alone other processes). This one's subscription selects the
notifications after the last one it gave in the thread that reads it, a page at a time,
and once it has read them all, looks again every ``POLL_INTERVAL`` seconds.

eventsourcing's listen/notify subscriptions select in a thread of their own instead,
while the reader maps and processes what they selected: on SQLite, whose module takes
the interpreter's lock again after each row, the two threads then wait on each other
(a queue catching up on a log took twice as long as reading and processing it in turn).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from eventsourcing.persistence import ApplicationRecorder, Notification, Subscription
from eventsourcing.sqlite import SQLiteApplicationRecorder

from covonaut_es.store._backend import POLL_INTERVAL


class PollingSubscription(Subscription[SQLiteApplicationRecorder]):
    """The notifications after ``gt`` (of ``topics``, if any), read page by page as they
    are taken; at the end of the log, taking the next waits for it to grow."""

    page_size = 500
    """The most notifications one select reads (as eventsourcing's subscriptions)."""

    def __init__(
        self, recorder: SQLiteApplicationRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._selects = recorder.select_notifications
        self._wanted = tuple(topics)
        self._after = gt or 0
        self._page: Sequence[Notification] = ()
        self._taken = 0
        self._stopped = threading.Event()

    def buffered(self) -> bool:
        """Whether the next notification is read already, so taking it cannot block."""
        return self._taken < len(self._page) and not self._stopped.is_set()

    def __next__(self) -> Notification:
        while not self.buffered():
            if self._stopped.is_set():
                raise StopIteration
            page = self._selects(
                start=self._after,
                limit=self.page_size,
                topics=self._wanted,
                inclusive_of_start=False,
            )
            if page:
                self._page, self._taken, self._after = page, 0, page[-1].id
            else:
                self._stopped.wait(POLL_INTERVAL)
        self._taken += 1
        return self._page[self._taken - 1]

    def stop(self) -> None:
        super().stop()
        self._stopped.set()


class PollingSQLiteApplicationRecorder(SQLiteApplicationRecorder):
    """The stock SQLite application recorder, plus a polling ``subscribe``."""

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return PollingSubscription(self, gt=gt, topics=topics)
