"""A notifier that posts each review notice to a URL, signed, with bounded retries.

The body is the notice's JSON. ``Idempotency-Key`` carries the notice's key (the same
on every attempt), ``X-Covonaut-Timestamp`` the Unix time of the attempt and
``X-Covonaut-Signature`` ``sha256=`` and the hex HMAC-SHA256, under the shared secret,
of ``<timestamp>.<body>``: a receiver recomputes it, compares in constant time and
refuses old timestamps. The standard library's HTTP client is enough for one POST.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

import msgspec

from covonaut_es import _logs
from covonaut_es.errors import ConfigurationError, NoticeDeliveryError
from covonaut_es.providers import RetryPolicy
from covonaut_es.workers._notices import ReviewNotice

logger = _logs.logger("covonaut_es.workers")

SIGNATURE_HEADER = "X-Covonaut-Signature"
TIMESTAMP_HEADER = "X-Covonaut-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"

_RETRIED_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The value of the signature header for a body sent at ``timestamp``."""
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirect would take the signed notice to a URL nobody configured: it is
    # answered as a refusal instead.
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class WebhookNotifier:
    """Posts review notices as signed JSON to one URL (a :class:`ReviewNotifier`).

    A 2xx answer delivers the notice; a redirect is not followed. A connection error,
    a timeout, or an answer of 408, 425, 429 or 5xx is retried with the policy's
    backoff; after its last attempt, or on any other answer,
    :class:`~covonaut_es.errors.NoticeDeliveryError` is raised and the sender tries
    the notice again later.

    Args:
        url: An ``http`` or ``https`` URL.
        secret: The shared key of the signature; at least 16 bytes.
        retry: Attempts and waits per delivery.
        timeout: Seconds for one attempt.
        sleep: Waits between attempts; tests may pass their own.
    """

    def __init__(
        self,
        url: str,
        secret: str | bytes,
        *,
        retry: RetryPolicy | None = None,
        timeout: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = f"a webhook URL must be http:// or https:// with a host, got {parts.scheme!r}"
            raise ConfigurationError(msg)
        key = secret.encode() if isinstance(secret, str) else secret
        if len(key) < 16:
            msg = f"a webhook secret must be at least 16 bytes, got {len(key)}"
            raise ConfigurationError(msg)
        self.url = url
        # Shown in logs and errors: no path, query or credentials, which may hold secrets.
        self.shown = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"
        self._secret = key
        self.retry = retry or RetryPolicy(max_attempts=5)
        self.timeout = timeout
        self._sleep = sleep

    def __call__(self, notice: ReviewNotice) -> None:
        """Post the notice, retrying as the policy says.

        Raises:
            NoticeDeliveryError: It was not delivered.
        """
        body = msgspec.json.encode(notice.to_json())
        for attempt in range(1, self.retry.max_attempts + 1):
            problem, retried = self._post(notice, body)
            if problem is None:
                return
            if not retried or attempt == self.retry.max_attempts:
                msg = (
                    f"review notice {notice.idempotency_key} ({notice.kind} of review "
                    f"{notice.review_id}) was not delivered to {self.shown} after "
                    f"{attempt} attempt(s): {problem}; it is sent again later"
                )
                raise NoticeDeliveryError(msg)
            wait = self.retry.delay(attempt)
            logger.warning(
                "review notice to %s failed (%s), attempt %d of %d; retrying in %.2f s",
                self.shown,
                problem,
                attempt,
                self.retry.max_attempts,
                wait,
            )
            self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, notice: ReviewNotice, body: bytes) -> tuple[str | None, bool]:
        """One attempt: None if delivered, else what went wrong and whether to retry."""
        timestamp = str(int(time.time()))
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                IDEMPOTENCY_HEADER: notice.idempotency_key,
                TIMESTAMP_HEADER: timestamp,
                SIGNATURE_HEADER: signature(self._secret, timestamp, body),
            },
        )
        try:
            with _OPENER.open(request, timeout=self.timeout) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            exc.close()
            return f"HTTP {exc.code}", exc.code in _RETRIED_STATUSES
        except (OSError, urllib.error.URLError) as exc:
            return f"{type(exc).__name__}: {exc}", True
        return None, False
