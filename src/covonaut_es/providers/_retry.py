"""Retrying model provider calls: which failures are transient, and how long to wait.

Shared by every provider adapter. An adapter turns its SDK's errors into the typed
errors of :mod:`covonaut_es.errors` (with :func:`error_for_status`) and wraps each API
call in :func:`call_with_retry`; the SDKs' own retries are switched off, so this policy
is the only one.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import attrs

from covonaut_es import _logs
from covonaut_es._arguments import check_number, check_whole, validated
from covonaut_es.errors import (
    ProviderConnectionError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
)

logger = _logs.logger("covonaut_es")

T = TypeVar("T")

TRANSIENT_ERRORS = (ProviderRateLimitError, ProviderServerError, ProviderConnectionError)
"""The errors worth another attempt; anything else is raised at once."""


def _at_least(least: float) -> Any:
    """An attrs validator: the setting is a finite number of at least ``least``."""
    return validated(lambda name, value: check_number(name, value, least=least))


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How a provider adapter retries rate limits, server errors and connection errors.

    The wait before retry ``n`` grows as ``initial_delay * multiplier ** (n - 1)``, capped
    at ``max_delay``, with jitter: a random point between half and all of that, so that
    clients that failed together do not retry together. A ``retry-after`` the API sent
    replaces the computed wait; one longer than ``max_delay`` is not waited for: the
    error is raised at once.

    Each setting that is not what it takes raises ``ConfigurationError`` naming it.

    Attributes:
        max_attempts: Calls in all, the first included; 1 means never retry.
        initial_delay: Seconds before the first retry, before jitter.
        max_delay: The longest wait in seconds, and the longest ``retry-after`` honoured.
        multiplier: Growth of the wait from one retry to the next.
    """

    max_attempts: int = attrs.field(
        default=4, validator=validated(lambda name, value: check_whole(name, value, least=1))
    )
    initial_delay: float = attrs.field(default=0.5, validator=_at_least(0))
    max_delay: float = attrs.field(default=8.0, validator=_at_least(0))
    multiplier: float = attrs.field(default=2.0, validator=_at_least(1))

    def delay(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first), jittered.

        Args:
            retry: Which retry this is, from 1.
            rand: A source of floats in [0, 1); tests pass a fixed one.
        """
        ceiling = min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1))
        return ceiling / 2 + rand() * ceiling / 2


def call_with_retry(
    call: Callable[[], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``call`` until it returns, retrying the transient provider errors.

    Args:
        call: Makes one attempt; raises the typed errors of :mod:`covonaut_es.errors`.
        policy: How often and how long to wait.
        sleep: Waits the given seconds; tests inject a recorder.

    Raises:
        ProviderError: The last attempt's error, or the first one that is not transient.
    """
    attempt = 1
    while True:
        try:
            return call()
        except TRANSIENT_ERRORS as exc:
            if attempt >= policy.max_attempts:
                exc.add_note(f"gave up after {attempt} attempt(s) (RetryPolicy.max_attempts)")
                raise
            wait = policy.delay(attempt)
            if exc.retry_after is not None:
                if exc.retry_after > policy.max_delay:
                    exc.add_note(
                        f"not retried: the API asked to wait {exc.retry_after:g} s, longer "
                        f"than RetryPolicy.max_delay={policy.max_delay:g} s"
                    )
                    raise
                wait = exc.retry_after
            logger.warning(
                "model provider call failed (%s), attempt %d of %d; retrying in %.2f s",
                exc,
                attempt,
                policy.max_attempts,
                wait,
            )
            sleep(wait)
            attempt += 1


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait an API asked for: ``retry-after-ms``, else ``retry-after`` in seconds
    or as an HTTP date; None if absent or unreadable."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(float(milliseconds) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def error_for_status(
    vendor: str,
    status_code: int,
    detail: str,
    headers: Mapping[str, str] | None = None,
) -> ProviderRateLimitError | ProviderServerError | ProviderRequestError:
    """The typed error for an HTTP error answer from a provider's API.

    429 is a rate limit, 5xx (and the non-standard 529 "overloaded") a server error;
    every other status is a request error, which is never retried.

    Args:
        vendor: The API's name for the message, e.g. ``"OpenAI"``.
        status_code: The HTTP status.
        detail: The API's own explanation.
        headers: The answer's headers, read for ``retry-after``.
    """
    retry_after = retry_after_seconds(headers) if headers is not None else None
    prefix = f"the {vendor} API answered HTTP {status_code}: {detail}"
    if status_code == 429:
        msg = f"{prefix}; the API is rate limiting this key: slow down or ask for more quota"
        return ProviderRateLimitError(msg, status_code=status_code, retry_after=retry_after)
    if status_code >= 500:
        msg = f"{prefix}; the API failed on its side: try again later"
        return ProviderServerError(msg, status_code=status_code, retry_after=retry_after)
    msg = f"{prefix}; the request was rejected: check the API key, the model name and the request"
    return ProviderRequestError(msg, status_code=status_code, retry_after=retry_after)


def connection_error(vendor: str, detail: str) -> ProviderConnectionError:
    """The typed error for an API that could not be reached or did not answer in time."""
    msg = (
        f"the {vendor} API could not be reached: {detail}; "
        "check base_url, the network and the timeout"
    )
    return ProviderConnectionError(msg)
