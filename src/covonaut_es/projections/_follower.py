"""The runner keeping a reviewer queue current, started again when it stopped on an
error: how a reader that runs for long (the inbox, ``covonaut-es reviews --follow``)
follows the store through a database's restart, failover or idle timeout."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from eventsourcing.projection import BaseProjectionRunner

from covonaut_es import _logs
from covonaut_es._text import exception_line
from covonaut_es.projections._queue import ReviewQueue

log = _logs.logger(__name__)

RESTART_SECONDS = 5.0
"""How long after its runner stopped on an error a follower starts a new one."""


class QueueFollower:
    """The runner keeping a reviewer queue current, started again when it stopped on
    an error: a database session that ended (a failover, a server's restart, an idle
    timeout) stops eventsourcing's runner for good, and a queue that is never followed
    again would leave the inbox answering 503, and ``reviews --follow`` ended, until a
    person started them again.

    Args:
        queue: The queue to follow, its view kept across runners (the next takes up
            where the last stopped).
        clock: Seconds, monotonic.
        restarts: Whether a new runner is started after an error that stopped one (or
            failed to start one): every error unless told; after any other,
            :meth:`stopped` raises it and the follower stops for good.

    Attributes:
        restart_seconds: How long after its runner stopped a new one is started
            (:data:`RESTART_SECONDS` when the follower was made).
    """

    def __init__(
        self,
        queue: ReviewQueue,
        *,
        clock: Callable[[], float] = time.monotonic,
        restarts: Callable[[Exception], bool] = lambda error: True,
    ) -> None:
        self._queue = queue
        self._clock = clock
        self._restarts = restarts
        self._lock = threading.Lock()
        self._running: ExitStack | None = None
        self._runner: BaseProjectionRunner[Any] | None = None
        self._stopped: Exception | None = None  # what stopped the runner, once seen
        self._stopped_at = 0.0
        self._ended = False  # stopped for good: never started again
        self.restart_seconds = RESTART_SECONDS

    @property
    def runner(self) -> BaseProjectionRunner[Any] | None:
        """The runner following the store now; None while none could be started."""
        return self._runner

    def start(self) -> None:
        """Start a runner following the queue's store.

        Raises:
            CovonautError: As :meth:`ReviewQueue.follow`, its first read of the store.
        """
        running = ExitStack()
        self._runner = running.enter_context(self._queue.follow())
        self._running, self._stopped = running, None

    def stop(self) -> None:
        """Stop the runner, if one runs, for good: a restart under way when it is
        asked (by a request, as the server shuts down) is waited for, and none follows."""
        with self._lock:
            self._ended = True
            self._stop_runner()

    def _stop_runner(self) -> None:
        running, self._running, self._runner = self._running, None, None
        if running is not None:
            with contextlib.suppress(Exception):  # its error, told before, or none
                running.close()

    def stopped(self) -> Exception | None:
        """What stopped the runner, while it is stopped on an error (kept once seen,
        since the runner gives its error only once); once :attr:`restart_seconds`
        passed since it was seen, a new runner is started first.

        Raises:
            Exception: What stopped the runner, or failed to start the next, when
                ``restarts`` refuses it; the follower is stopped for good.
        """
        with self._lock:
            runner = self._runner
            if self._stopped is None and runner is not None and runner.is_interrupted.is_set():
                try:
                    runner.run_forever(timeout=0)  # raises what stopped it, if anything did
                except Exception as exc:
                    self._seen_stop(exc)
            due = self._clock() - self._stopped_at >= self.restart_seconds
            if self._stopped is not None and due and not self._ended:
                self._stop_runner()
                try:
                    self.start()
                    log.info("the reviewer queue follows the store again")
                except Exception as exc:
                    self._seen_stop(exc)
            return self._stopped

    def stopped_on(self, error: Exception) -> None:
        """Note that reading the queue failed on ``error`` (its database's session
        ended, say) while the runner seemed to run: it is started again as when it
        stopped on an error (see :meth:`stopped`)."""
        with self._lock:
            if self._stopped is None:
                self._seen_stop(error)

    def _seen_stop(self, error: Exception) -> None:
        if not self._restarts(error):
            self._ended = True
            self._stop_runner()
            raise error
        self._stopped, self._stopped_at = error, self._clock()
        log.warning(
            "the reviewer queue stopped following the store (%s); it starts again in %g s",
            exception_line(error),
            self.restart_seconds,
        )
