"""The retry policy shared by the provider adapters."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from covonaut_es import RetryPolicy
from covonaut_es.errors import (
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
)
from covonaut_es.providers._retry import call_with_retry, error_for_status, retry_after_seconds


def failing(*errors: ProviderError, result: str = "ok") -> tuple[Callable[[], str], list[int]]:
    """A call that raises ``errors`` one per attempt, then returns ``result``."""
    pending = list(errors)
    attempts: list[int] = []

    def call() -> str:
        attempts.append(len(attempts) + 1)
        if pending:
            raise pending.pop(0)
        return result

    return call, attempts


def test_delay_grows_exponentially_up_to_max_delay() -> None:
    """Without jitter the ceiling doubles from initial_delay and stops at max_delay."""
    policy = RetryPolicy(initial_delay=0.5, max_delay=3.0, multiplier=2.0)
    assert [policy.delay(n, rand=lambda: 1.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_delay_is_jittered_between_half_and_all() -> None:
    """Jitter keeps every wait between half the ceiling and the ceiling."""
    policy = RetryPolicy()
    assert policy.delay(2, rand=lambda: 0.0) == 0.5
    assert all(0.5 <= policy.delay(2) <= 1.0 for _ in range(100))


def test_policy_rejects_nonsense() -> None:
    """A policy needs at least one attempt and a multiplier of at least 1."""
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="multiplier"):
        RetryPolicy(multiplier=0.5)


@pytest.mark.parametrize(
    "error",
    [
        ProviderRateLimitError("slow down", status_code=429),
        ProviderServerError("oops", status_code=500),
        ProviderConnectionError("unreachable"),
    ],
)
def test_transient_errors_are_retried(error: ProviderError) -> None:
    """Rate limits, server errors and connection errors are retried until success."""
    sleeps: list[float] = []
    call, attempts = failing(error, error)
    assert call_with_retry(call, RetryPolicy(), sleep=sleeps.append) == "ok"
    assert attempts == [1, 2, 3]
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5
    assert 0.5 <= sleeps[1] <= 1.0


@pytest.mark.parametrize(
    "error", [ProviderRequestError("bad", status_code=400), ProviderError("other")]
)
def test_other_errors_are_not_retried(error: ProviderError) -> None:
    """Request errors and untyped provider errors are raised at the first attempt."""
    sleeps: list[float] = []
    call, attempts = failing(error)
    with pytest.raises(type(error)):
        call_with_retry(call, RetryPolicy(), sleep=sleeps.append)
    assert attempts == [1]
    assert sleeps == []


def test_gives_up_after_max_attempts() -> None:
    """The last attempt's error is raised, with a note saying the policy gave up."""
    error = ProviderServerError("oops", status_code=503)
    call, attempts = failing(error, error, error)
    with pytest.raises(ProviderServerError) as caught:
        call_with_retry(call, RetryPolicy(max_attempts=2), sleep=lambda _: None)
    assert attempts == [1, 2]
    assert "gave up after 2 attempt(s)" in "".join(caught.value.__notes__)


def test_retry_after_replaces_the_backoff() -> None:
    """A retry-after within max_delay is waited exactly."""
    sleeps: list[float] = []
    call, _ = failing(ProviderRateLimitError("slow", status_code=429, retry_after=3.0))
    call_with_retry(call, RetryPolicy(), sleep=sleeps.append)
    assert sleeps == [3.0]


def test_retry_after_past_max_delay_is_raised_at_once() -> None:
    """A retry-after longer than max_delay is not waited for: the error is raised."""
    call, attempts = failing(ProviderRateLimitError("slow", status_code=429, retry_after=60.0))
    with pytest.raises(ProviderRateLimitError) as caught:
        call_with_retry(call, RetryPolicy(max_delay=8.0), sleep=lambda _: None)
    assert attempts == [1]
    assert "longer than RetryPolicy.max_delay=8 s" in "".join(caught.value.__notes__)


def test_retry_after_header_forms() -> None:
    """retry-after-ms wins; retry-after may be seconds or an HTTP date."""
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "soon"}) is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_seconds({"retry-after": later}) or 0) <= 30


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, ProviderRequestError),
        (401, ProviderRequestError),
        (404, ProviderRequestError),
        (429, ProviderRateLimitError),
        (500, ProviderServerError),
        (503, ProviderServerError),
        (529, ProviderServerError),
    ],
)
def test_status_codes_map_to_typed_errors(status: int, kind: type[ProviderError]) -> None:
    """429 is a rate limit, 5xx a server error, any other status a request error."""
    error = error_for_status("Vendor", status, "detail", {"retry-after": "1"})
    assert type(error) is kind
    assert isinstance(error, RuntimeError)
    assert error.status_code == status
    assert f"HTTP {status}: detail" in str(error)
