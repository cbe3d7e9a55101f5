"""The default clock: the one place the library reads the time for its callers."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """The current time in UTC: the default of every ``clock`` option."""
    return datetime.now(UTC)
