"""The default clock: the one place the library reads the time for its callers; and the
check that a caller's clock gives times that compare with the stored ones."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from covonaut_es._arguments import check_callable
from covonaut_es.errors import ConfigurationError

CLOCK_MARGIN = timedelta(days=200 * 366)
"""How far from the ends of ``datetime``'s range a clock's reading must be: a deadline
is at most a century after the time it is set at (``MAX_REVIEW_DEADLINE``), so a
reading nearer either end would overflow the arithmetic of a deadline."""

EARLIEST = datetime.min.replace(tzinfo=UTC) + CLOCK_MARGIN
"""The earliest reading a clock may give."""

LATEST = datetime.max.replace(tzinfo=UTC) - CLOCK_MARGIN
"""The latest reading a clock may give."""


CLOCK_SKEW_BOUND = timedelta(seconds=30)
"""How far a process's clock may be off the database's, either way, before it judges no
deadline and sets none by its own reading (ADR 0119)."""


def skew(now: datetime, database_now: datetime | None) -> timedelta | None:
    """How far ``now`` is off the database's clock, ahead (positive) or behind, past
    :data:`CLOCK_SKEW_BOUND`; None when it is not (or the database has no clock of its
    own)."""
    if database_now is None or abs(now - database_now) <= CLOCK_SKEW_BOUND:
        return None
    return now - database_now


def ahead(now: datetime, database_now: datetime | None) -> timedelta | None:
    """How far ``now`` runs ahead of the database's clock past :data:`CLOCK_SKEW_BOUND`;
    None when it does not (or the database has no clock of its own)."""
    off = skew(now, database_now)
    return off if off is not None and off > timedelta(0) else None


def utc_now() -> datetime:
    """The current time in UTC: the default of every ``clock`` option."""
    return datetime.now(UTC)


class AwareClock:
    """A caller's clock whose every reading is checked to be a timezone-aware datetime
    between :data:`EARLIEST` and :data:`LATEST`: a naive one cannot be compared with the
    deadlines and times a store holds, and one nearer the ends of ``datetime``'s range
    would overflow the deadlines set from it.

    Args:
        clock: The clock to read.

    Raises:
        ConfigurationError: ``clock`` cannot be called (None failed only once read).
    """

    __slots__ = ("clock",)
    clock: Callable[[], datetime]

    def __init__(self, clock: Callable[[], datetime]) -> None:
        check_callable("clock", clock)
        self.clock = clock.clock if isinstance(clock, AwareClock) else clock

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AwareClock) and other.clock == self.clock

    def __hash__(self) -> int:
        return hash(self.clock)

    def __repr__(self) -> str:
        return f"AwareClock({self.clock!r})"

    def __call__(self) -> datetime:
        """The clock's time.

        Raises:
            ConfigurationError: It is not a timezone-aware datetime, or one outside
                :data:`EARLIEST` to :data:`LATEST`; naming the clock.
        """
        name = getattr(self.clock, "__qualname__", type(self.clock).__qualname__)
        return checked_time(self.clock(), f"the clock {name} returned")


def checked_time(now: object, what: str) -> datetime:
    """``now``, checked to be a time an event may carry: a timezone-aware datetime
    from :data:`EARLIEST` to :data:`LATEST` (the rule of every clock, and of every
    ``now`` a caller gives a command).

    Args:
        now: The time.
        what: What gave it, for the message (``"the clock f returned"``).

    Raises:
        ConfigurationError: It is not a timezone-aware datetime, or one outside
            :data:`EARLIEST` to :data:`LATEST`.
    """
    if not isinstance(now, datetime) or now.utcoffset() is None:
        expected = "a timezone-aware datetime, e.g. datetime.now(UTC)"
    elif not EARLIEST <= now <= LATEST:
        expected = (
            f"a time from {EARLIEST.isoformat()} to {LATEST.isoformat()} (a deadline "
            "set from one nearer the ends of datetime's range would overflow)"
        )
    else:
        return now
    msg = f"{what} {now!r}: expected {expected}"
    raise ConfigurationError(msg)
