"""The inbox's ASGI application: :func:`create_app` assembles the pages, the JSON API,
the static files and the security headers, and follows the reviewer queue while the
application runs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import ExitStack, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from covonaut_es._logs import logger
from covonaut_es._text import indented_json, printable
from covonaut_es.domain import PauseKind
from covonaut_es.errors import ConfigurationError
from covonaut_es.inbox._api import api_routes
from covonaut_es.inbox._desk import ReviewDesk
from covonaut_es.inbox._http import Inbox
from covonaut_es.inbox._pages import page_routes
from covonaut_es.inbox._sessions import Sessions, checked_origin
from covonaut_es.projections import ReviewQueue
from covonaut_es.projections._follower import QueueFollower
from covonaut_es.service import ReviewerVerifier
from covonaut_es.store import Store

SECURITY_HEADERS = {
    # No inline script or style, nothing from another origin, no framing.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # "no-referrer" would make browsers send "Origin: null" with their own forms.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


KIND_NAMES = {
    PauseKind.REVIEW: "Review",
    PauseKind.INTERRUPT: "Tool's pause",
    PauseKind.IN_DOUBT: "Call in doubt",
}
"""What the pages call each kind of pause."""


RETRY_AFTER_SECONDS = 5
"""What a 503 (the store locked or down, the identity provider unreachable) asks a
client to wait before trying again, in its ``Retry-After`` header."""

_LOG = logger("covonaut_es.inbox")


def _client_gone(request: Request, _: Exception) -> Response:
    """A client that hung up before its request's body arrived whole: nobody reads an
    answer, and it is no fault of the inbox's, so a line at INFO, no traceback."""
    _LOG.info(
        "%s %s: the client hung up before sending its whole body", request.method, request.url.path
    )
    return Response(status_code=400)


def _server_error(_: Request, __: Exception) -> Response:
    """The 500 of an unexpected error: the server error middleware sends it outside
    :class:`_SecurityHeaders`, so it carries the headers itself (and no detail)."""
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-store"}
    return PlainTextResponse("Internal Server Error", 500, headers=headers)


class _SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` and ``Cache-Control: no-store`` to every response
    (pages show reviews, which must not linger in caches), and ``Retry-After`` to a 503."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                headers["Cache-Control"] = "no-store"
                if message["status"] == 503 and "retry-after" not in headers:
                    headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _pretty(value: Any) -> str:
    return printable_lines(indented_json(value))


def _shown(value: Any) -> str:
    """Text as its lines, anything else as indented JSON (a call in doubt's arguments
    are the model's text, a review's arguments and a tool's data are JSON)."""
    return printable_lines(value) if isinstance(value, str) else _pretty(value)


def printable_lines(text: str) -> str:
    """``text`` with each line neutralised by ``printable``, its line breaks kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _age(moment: datetime | None) -> str:
    if moment is None:
        return ""
    seconds = max(0, int((datetime.now(UTC) - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _templates() -> Jinja2Templates:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("covonaut_es.inbox", "templates"),
        autoescape=True,  # every template: values from models are hostile
        undefined=jinja2.StrictUndefined,
    )
    environment.filters.update(
        printable=printable, lines=printable_lines, pretty=_pretty, shown=_shown, age=_age
    )
    environment.globals["kind_names"] = KIND_NAMES
    return Jinja2Templates(env=environment)


def create_app(
    store: Store,
    verifier: ReviewerVerifier,
    *,
    queue: ReviewQueue | None = None,
    cipher_key: str | None = None,
    compress: bool | None = None,
    allowed_origins: Iterable[str] = (),
    session_ttl_seconds: float = 8 * 3600,
    page_size: int = 50,
    wait_seconds: float = 20.0,
) -> Starlette:
    """The reviewer inbox as an ASGI application, to serve or to mount in your own.

    While the application runs its lifespan, it follows the store's reviewer queue.
    Mounted in another Starlette application, pass it that lifespan:
    ``Starlette(routes=[Mount("/inbox", inbox)], lifespan=inbox.router.lifespan_context)``.

    Args:
        store: The store whose reviews are shown and decided.
        verifier: Establishes the reviewer of every sign-in, API call and decision,
            e.g. :class:`~covonaut_es.runtime.HmacReviewerVerifier`.
        queue: The store's reviewer queue; default: one kept in memory, built from the
            log when the application starts (pass one opened with the store's full URL
            when ``store.url`` hides a password).
        cipher_key: The store's cipher key, when it is encrypted: the default queue
            decrypts with it and nothing else.
        compress: Whether the store is compressed (for the default queue); default:
            as the store records it.
        allowed_origins: Origins, besides the inbox's own, allowed to post to it (a
            proxy's public origin, e.g. ``https://inbox.example.com``); anything that
            is no http(s) origin (``*``, ``null``, a path) raises ``ConfigurationError``.
        session_ttl_seconds: How long a sign-in lasts at most.
        page_size: Reviews per inbox page.
        wait_seconds: How long a live-update request waits for a change.

    Raises:
        ConfigurationError: An allowed origin is no origin, or ``page_size``,
            ``session_ttl_seconds`` or ``wait_seconds`` is below its least value (1, 1
            and 0), where every page would fail or every session end at once.
    """
    for name, value, least in (
        ("page_size", page_size, 1),
        ("session_ttl_seconds", session_ttl_seconds, 1),
        ("wait_seconds", wait_seconds, 0),
    ):
        if not value >= least:  # NaN too
            msg = f"create_app needs {name} of at least {least}, got {value!r}"
            raise ConfigurationError(msg)
    if queue is None:
        queue = ReviewQueue(
            store.url,
            view_url=f"memory://covonaut-es-inbox-{uuid.uuid4().hex}",
            cipher_key=cipher_key,
            compress=compress,
        )
    inbox = Inbox(
        desk=ReviewDesk(store, queue, verifier),
        sessions=Sessions(session_ttl_seconds),
        templates=_templates(),
        allowed_origins=frozenset(checked_origin(o) for o in allowed_origins),
        page_size=page_size,
        wait_seconds=wait_seconds,
    )
    following = queue

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        with ExitStack() as stack:
            stack.callback(following.close)  # after the runner stopped writing its view
            follower = QueueFollower(following)
            follower.start()
            stack.callback(follower.stop)
            inbox.desk.follow_with(follower)
            yield

    static = StaticFiles(packages=[("covonaut_es.inbox", "static")])
    app = Starlette(
        routes=[*page_routes(inbox), *api_routes(inbox), Mount("/static", static, name="static")],
        lifespan=lifespan,
        exception_handlers={ClientDisconnect: _client_gone, Exception: _server_error},
    )
    app.add_middleware(_SecurityHeaders)
    app.state.inbox = inbox
    return app
