"""The default clock: the one place the library reads the time for its callers; and the
check that a caller's clock gives times that compare with the stored ones."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from covonaut_es._arguments import check_callable
from covonaut_es.errors import ConfigurationError


def utc_now() -> datetime:
    """The current time in UTC: the default of every ``clock`` option."""
    return datetime.now(UTC)


class AwareClock:
    """A caller's clock whose every reading is checked to be a timezone-aware datetime:
    a naive one cannot be compared with the deadlines and times a store holds.

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
            ConfigurationError: It is not a timezone-aware datetime; naming the clock.
        """
        now = self.clock()
        if not isinstance(now, datetime) or now.utcoffset() is None:
            name = getattr(self.clock, "__qualname__", type(self.clock).__qualname__)
            msg = (
                f"the clock {name} returned {now!r}: expected a timezone-aware datetime, "
                "e.g. datetime.now(UTC)"
            )
            raise ConfigurationError(msg)
        return now
