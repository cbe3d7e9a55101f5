"""Which ready threads a worker steps next (ADR 0050).

:class:`Candidates` keeps what the worker itself knows beside the log's fold: the
threads it is stepping, and those another runner held when it tried. Choosing costs
the threads passed over (those two kinds), never the number of ready threads, so a
worker drains R ready threads in time proportional to R.
"""

from __future__ import annotations

from uuid import UUID

from covonaut_es.workers._ready import ReadyThreads
from covonaut_es.workers._step import Action

BUSY_RETRY = 1.0
"""Seconds before a worker looks again at a thread another runner held: if that runner
died, the thread is taken over then."""

FAILED_RETRY = 30.0
"""Seconds before a worker steps again a thread whose step raised: one that recorded
its failure (a failed run) is decided by that event, but a failure nothing could record
(a full disk, a store that failed) leaves the thread as it was, ready, with no event to
come that would wake it."""


class Candidates:
    """The ready threads a worker may step next, oldest ready first.

    Args:
        ready: The worker's fold of the log.
    """

    def __init__(self, ready: ReadyThreads) -> None:
        self._ready = ready
        self.running: dict[UUID, int] = {}  # stream -> its last event when its step started
        # Threads another runner held, or whose step failed: looked at again after a
        # while, or at their next event.
        self._busy: dict[UUID, tuple[float, int]] = {}

    def next(self, count: int, now: float, *, once: bool) -> list[UUID]:
        """Up to ``count`` ready threads that this worker is not stepping and that no
        other runner is known to hold (with ``once``, one found busy waits for its next
        event; otherwise also until :data:`BUSY_RETRY` passed)."""
        # A busy thread's next event makes it a candidate again, and forgets it here.
        self._busy = {
            stream: busy
            for stream, busy in self._busy.items()
            if self._ready.seen(stream) == busy[1]
        }
        found: list[UUID] = []
        for stream in self._ready.ready:
            if len(found) >= count:
                break
            if stream in self.running:
                continue
            busy = self._busy.get(stream)
            if busy is not None and (once or now < busy[0]):
                continue
            found.append(stream)
        return found

    def started(self, stream: UUID) -> None:
        """The worker started a step of the thread."""
        self.running[stream] = self._ready.seen(stream)

    def finished(self, stream: UUID, action: Action | None, now: float) -> None:
        """The step of a thread ended with ``action`` (None: another runner held it)."""
        seen = self.running.pop(stream)
        self._busy.pop(stream, None)
        if action is None:
            self._busy[stream] = (now + BUSY_RETRY, seen)
        elif action is Action.FAILED:
            self._busy[stream] = (now + FAILED_RETRY, seen)
        elif action is Action.NOTHING:
            self._ready.park(stream, seen)
