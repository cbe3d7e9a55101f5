"""The service's guard of the clocks that judge review deadlines (ADR 0119).

A process whose clock runs ahead of the database's would expire reviews early, and one
behind would set their deadlines late; :class:`ClockGuard` compares the two clocks
before a command judges or sets a deadline, and logs a skew past ``CLOCK_SKEW_BOUND``
as an error at most once a :data:`SKEW_LOG_INTERVAL`.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from covonaut_es import _logs
from covonaut_es._clock import CLOCK_SKEW_BOUND, ahead, skew
from covonaut_es.domain import ReviewRequest
from covonaut_es.errors import ClockOutOfStepError
from covonaut_es.store import Store

logger = _logs.logger("covonaut_es.service")

SKEW_LOG_INTERVAL = 60.0
"""Seconds between the errors a service logs of its clock running ahead of the
database's (``expire_reviews``, ``note_deadlines_near``)."""


class ClockGuard:
    """Compares a process's clock with the database's of ``store`` for the commands
    that judge or set a review's deadline.

    Args:
        store: The store whose database's clock is the reference.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._skew_logged = -SKEW_LOG_INTERVAL

    def review_time(self, now: datetime) -> datetime:
        """The time a review a runner asks for at ``now`` (its clock's reading) counts
        its deadline from: ``now``, or the database's time when ``now`` is more than
        ``CLOCK_SKEW_BOUND`` off it either way, logged as an error (ADR 0119). A
        deadline set by a clock a day behind would be past by the database's already,
        and the first sweep by a clock in step would expire the review; one set by a
        clock ahead would let the review outlive its wait."""
        database_now = self._store.database_now()
        off = skew(now, database_now)
        if off is None or database_now is None:
            return now
        if self._skew_to_log():
            logger.error(
                "asking for a review: this process's clock reads %s, %.0f s %s the "
                "database's (more than %.0f s): its deadline counts from the database's "
                "time, %s; set the clock in step (NTP)",
                now.isoformat(),
                abs(off.total_seconds()),
                "ahead of" if off > timedelta(0) else "behind",
                CLOCK_SKEW_BOUND.total_seconds(),
                database_now.isoformat(),
            )
        return database_now

    def _skew_to_log(self) -> bool:
        """Whether to log a clock's skew now: at most once a :data:`SKEW_LOG_INTERVAL`,
        since a worker asks at every poll, and a run at every review it asks for."""
        if time.monotonic() < self._skew_logged + SKEW_LOG_INTERVAL:
            return False
        self._skew_logged = time.monotonic()
        return True

    def runs_ahead(self, now: datetime, doing: str, outcome: str) -> bool:
        """Whether ``now`` runs more than ``CLOCK_SKEW_BOUND`` ahead of the database's
        clock, so that no deadline may be judged by it (ADR 0119); if so, the skew is
        logged as an error, at most once a :data:`SKEW_LOG_INTERVAL` (a worker asks at
        every poll)."""
        off = self._skew(now)
        if off is None:
            return False
        if self._skew_to_log():
            logger.error(
                "%s: this process's clock reads %s, %.0f s ahead of the database's (more "
                "than %.0f s): %s; set the clock in step (NTP) so that reviews expire at "
                "their deadlines",
                doing,
                now.isoformat(),
                off.total_seconds(),
                CLOCK_SKEW_BOUND.total_seconds(),
                outcome,
            )
        return True

    def refuse_if_ahead(self, now: datetime, request: ReviewRequest, thread_id: str) -> None:
        """Refuse a decision on a review that ``now`` finds expired when that is only
        because the clock runs ahead of the database's (ADR 0119).

        Raises:
            ClockOutOfStepError: It does; naming the skew. The review is still pending.
        """
        off = self._skew(now)
        if off is None:
            return
        assert request.deadline is not None
        msg = (
            f"review {request.review_id!r} of thread {thread_id!r} is still pending: its "
            f"deadline {request.deadline.isoformat()} has passed only by this process's "
            f"clock, which reads {now.isoformat()}, {off.total_seconds():.0f} s ahead of "
            f"the database's (more than {CLOCK_SKEW_BOUND.total_seconds():.0f} s); nothing "
            "was recorded: set the clock in step (NTP), or decide through a process whose "
            "clock is"
        )
        raise ClockOutOfStepError(msg)

    def _skew(self, now: datetime) -> timedelta | None:
        """How far ``now`` runs ahead of the database's clock past ``CLOCK_SKEW_BOUND``:
        the one check of a clock that judges deadlines."""
        return ahead(now, self._store.database_now())
