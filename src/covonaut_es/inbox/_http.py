"""What the pages and the JSON API share: the inbox's parts, bounded request bodies,
the verification of a reviewer's credential, and the HTTP status of each error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.templating import Jinja2Templates

from covonaut_es.errors import (
    CovonautError,
    InvalidThreadIdError,
    ReviewerNotVerifiedError,
    ReviewNotFoundError,
    StaleReviewError,
    ThreadConflictError,
    ThreadNotFoundError,
    ThreadStateError,
)
from covonaut_es.inbox._desk import AmbiguousReviewError, ReviewDesk
from covonaut_es.inbox._sessions import SESSION_COOKIE, Session, Sessions

T = TypeVar("T")

MAX_BODY_BYTES = 64 * 1024
"""The largest request body accepted: a decision with edited arguments fits easily."""

MAX_TEXT_CHARS = 10_000
"""The longest comment, reason or answer accepted."""


class HttpError(Exception):
    """A request refused with a status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen
class Inbox:
    """The parts every route uses.

    Attributes:
        desk: Reads the queue and the store, records decisions.
        sessions: The signed-in reviewers.
        templates: The pages' Jinja2 templates (autoescaped).
        allowed_origins: Origins besides the inbox's own whose forms may post to it.
        page_size: Reviews per inbox page.
        wait_seconds: How long a live-update request waits for a change.
    """

    desk: ReviewDesk
    sessions: Sessions
    templates: Jinja2Templates
    allowed_origins: frozenset[str]
    page_size: int
    wait_seconds: float


_STATUSES: tuple[tuple[type[Exception], int], ...] = (
    (ReviewerNotVerifiedError, 401),
    (StaleReviewError, 409),
    (AmbiguousReviewError, 400),
    (ReviewNotFoundError, 404),
    (ThreadNotFoundError, 404),
    (InvalidThreadIdError, 404),
    (ThreadConflictError, 409),
    (ThreadStateError, 409),
)


def status_of(exc: Exception) -> int:
    """The HTTP status of an error a route lets through (500 for the unexpected)."""
    if isinstance(exc, HttpError):
        return exc.status
    for error_class, status in _STATUSES:
        if isinstance(exc, error_class):
            return status
    return 400 if isinstance(exc, CovonautError) else 500


async def blocking(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (the store, the queue, a verifier) in a worker thread."""
    return await run_in_threadpool(function, *args, **kwargs)


async def read_body(request: Request) -> bytes:
    """The request's body, at most :data:`MAX_BODY_BYTES`; it must say its length."""
    length = request.headers.get("content-length", "")
    if not length.isdigit():
        raise HttpError(411, "a request body needs a Content-Length header")
    if int(length) > MAX_BODY_BYTES:
        raise HttpError(413, f"the request body exceeds {MAX_BODY_BYTES} bytes")
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise HttpError(413, f"the request body exceeds {MAX_BODY_BYTES} bytes")
    return body


def checked_text(value: object, name: str, *, required: bool = False) -> str:
    """A comment, reason or answer from a request, checked for type and length."""
    if not isinstance(value, str):
        raise HttpError(400, f"{name} must be a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise HttpError(400, f"{name} exceeds {MAX_TEXT_CHARS} characters")
    if required and not value.strip():
        raise HttpError(400, f"{name} must not be empty")
    return value


async def verify(inbox: Inbox, credential: str) -> str:
    """The reviewer id the verifier establishes from ``credential``.

    Raises:
        ReviewerNotVerifiedError: It does not verify.
    """
    reviewer = await blocking(inbox.desk.verifier.verify, credential)
    if not isinstance(reviewer, str) or not reviewer:
        msg = "the reviewer verifier returned no reviewer id"
        raise ReviewerNotVerifiedError(msg)
    return reviewer


async def signed_in(inbox: Inbox, request: Request) -> Session | None:
    """The request's session, if its credential still verifies (else it is ended)."""
    session = inbox.sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is None:
        return None
    try:
        await verify(inbox, session.credential)
    except ReviewerNotVerifiedError:
        inbox.sessions.close(session.session_id)
        return None
    return session
