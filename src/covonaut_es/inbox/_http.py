"""What the pages and the JSON API share: the inbox's parts, bounded request bodies and
forms, the reviewer a request's credential verifies as, routes whose ids may hold any
character, and the HTTP status and message of each error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote_to_bytes

import attrs
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.templating import Jinja2Templates
from starlette.types import Scope

from covonaut_es._request_bodies import RequestBodyRefusedError, bounded_body
from covonaut_es.errors import (
    AmbiguousReviewError,
    ClockOutOfStepError,
    CovonautError,
    IdentityProviderUnavailableError,
    InvalidDecisionError,
    InvalidThreadIdError,
    ReadOnlyStoreError,
    ReviewerNotPermittedError,
    ReviewerNotVerifiedError,
    ReviewNotFoundError,
    StaleReviewError,
    StoreUnavailableError,
    ThreadBusyError,
    ThreadConflictError,
    ThreadNotFoundError,
    ThreadStateError,
)
from covonaut_es.inbox._desk import ReviewDesk
from covonaut_es.inbox._sessions import SESSION_COOKIE, Session, Sessions
from covonaut_es.service import Reviewer, shown_message

T = TypeVar("T")

MAX_BODY_BYTES = 64 * 1024
"""The largest request body accepted: a decision with edited arguments fits easily."""


class HttpError(Exception):
    """A request refused with a status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen
class Inbox:
    """The parts every route uses.

    Attributes:
        desk: Reads the queue and the store, records what reviewers do.
        sessions: The signed-in reviewers.
        templates: The pages' Jinja2 templates (autoescaped).
        allowed_origins: Origins besides the inbox's own whose forms may post to it.
        page_size: Pauses per inbox page.
        wait_seconds: How long a live-update request waits for a change.
    """

    desk: ReviewDesk
    sessions: Sessions
    templates: Jinja2Templates
    allowed_origins: frozenset[str]
    page_size: int
    wait_seconds: float


@attrs.frozen
class SignedIn:
    """A request's session, and the reviewer its credential verified as for this
    request: the one verification every command of the request uses.

    Attributes:
        session: The session.
        reviewer: Who acts.
    """

    session: Session
    reviewer: Reviewer


_STATUSES: tuple[tuple[type[Exception], int], ...] = (
    (IdentityProviderUnavailableError, 503),  # before its base: the token is not at fault
    (ReadOnlyStoreError, 503),  # the store takes no writes now: the request is not at fault
    (StoreUnavailableError, 503),  # its database is down, or its file was replaced
    (ClockOutOfStepError, 503),  # the server's clock is out of step; the review still waits
    (ReviewerNotVerifiedError, 401),
    (ReviewerNotPermittedError, 403),
    (InvalidDecisionError, 400),
    (StaleReviewError, 409),
    (AmbiguousReviewError, 400),  # before its base: the review exists, name its thread
    (ReviewNotFoundError, 404),
    (ThreadNotFoundError, 404),
    (InvalidThreadIdError, 404),
    (ThreadConflictError, 409),
    (ThreadBusyError, 409),
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


def message_of(inbox: Inbox, exc: Exception) -> str:
    """What a reviewer is told of an error: its message, without the store's location
    (the operator's business, not the reviewer's)."""
    return shown_message(exc, inbox.desk.store)


async def blocking(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (the store, the queue, a verifier) in a worker thread."""
    return await run_in_threadpool(function, *args, **kwargs)


async def read_body(request: Request) -> bytes:
    """The request's body, at most :data:`MAX_BODY_BYTES`; it must say its length."""
    try:
        return await bounded_body(request, MAX_BODY_BYTES, name="request body")
    except RequestBodyRefusedError as exc:
        raise HttpError(exc.status, str(exc)) from exc


FORM_TYPE = "application/x-www-form-urlencoded"
"""How the pages' forms are posted, and the one way the inbox reads a form."""

MAX_FORM_FIELDS = 16
"""The most fields a form may post; the pages' forms post fewer."""


async def read_form(request: Request) -> dict[str, str]:
    """The request's form (:data:`FORM_TYPE`, its body bounded as :func:`read_body`'s),
    each field once, its names and values read as UTF-8 text, strictly: a value that is
    no text is refused, never replaced by what the reader made of its bytes (Starlette's
    form parser reads raw bytes as Latin-1, and escapes that are no UTF-8 as U+FFFD, so
    a decision would record text nobody typed).

    Raises:
        HttpError: 415 for another content type; 400 for text that is not UTF-8, more
            than :data:`MAX_FORM_FIELDS` fields, or a field posted twice.
    """
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != FORM_TYPE:
        raise HttpError(415, f"a form is posted as {FORM_TYPE}, not {media or 'without a type'}")
    body = await read_body(request)
    try:
        pairs = parse_qsl(
            body.decode(), keep_blank_values=True, errors="strict", max_num_fields=MAX_FORM_FIELDS
        )
    except UnicodeDecodeError as exc:
        # The value is not echoed: the sign-in form's field is a credential.
        msg = f"the form must be UTF-8 text, percent-encoded as browsers post it ({exc.reason})"
        raise HttpError(400, msg) from None
    except ValueError:  # parse_qsl's limit on the fields
        raise HttpError(400, f"the form posts more than {MAX_FORM_FIELDS} fields") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name in fields:
            # A page posts each field once; keeping either value of a crafted post would
            # record one nobody chose (the JSON API refuses a key given twice alike).
            msg = f"the form names the field {name[:40]!r} twice: post each field once"
            raise HttpError(400, msg)
        fields[name] = value
    return fields


async def verified(inbox: Inbox, credential: str) -> Reviewer:
    """The reviewer ``credential`` verifies as: the request's one verification.

    Raises:
        ReviewerNotVerifiedError: It does not verify.
    """
    return await blocking(inbox.desk.reviewer, credential)


async def signed_in(inbox: Inbox, request: Request) -> SignedIn | None:
    """The request's session and its reviewer, if its credential still verifies (else
    the session is ended).

    Raises:
        IdentityProviderUnavailableError: The credential could not be checked; the
            session is kept (an outage must not sign every reviewer out).
    """
    session = inbox.sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is None:
        return None
    try:
        reviewer = await verified(inbox, session.credential)
    except IdentityProviderUnavailableError:
        raise
    except ReviewerNotVerifiedError:
        inbox.sessions.close(session.session_id)
        return None
    return SignedIn(session, reviewer)


def quoted(value: str) -> str:
    """``value`` as one segment of a URL's path: every character but letters, digits
    and ``-_~`` percent-encoded (the dot too, so that ``.`` and ``..`` are no dot
    segments a client would resolve)."""
    return quote(value, safe="").replace(".", "%2E")


class QuotedRoute(Route):
    """A route whose path parameters are read from the request's raw path and decoded
    one by one: an id holding ``/`` (sent as ``%2F``) stays one parameter, where the
    decoded path would split it. Its links are written with :func:`quoted`."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """Match the raw path, less the segments of the mount's ``root_path``."""
        raw = scope.get("raw_path")
        if scope["type"] != "http" or not isinstance(raw, bytes):
            return super().matches(scope)
        segments = raw.decode("latin-1").split("/")
        mounted = scope.get("root_path", "").rstrip("/").count("/")
        match = self.path_regex.match("/".join(["", *segments[1 + mounted :]]))
        if match is None:
            return Match.NONE, {}
        try:
            params = {
                name: unquote_to_bytes(value.encode("latin-1")).decode("utf-8")
                for name, value in match.groupdict().items()
            }
        except UnicodeDecodeError:
            return Match.NONE, {}
        path_params = {**scope.get("path_params", {}), **params}
        child = {"endpoint": self.endpoint, "path_params": path_params}
        if self.methods and scope["method"] not in self.methods:
            return Match.PARTIAL, child
        return Match.FULL, child
