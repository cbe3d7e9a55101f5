"""The inbox's pages: sign-in, the pending reviews (with their live update), one
review with its actions, and one thread.

No page changes anything on GET. Every POST must come from this origin and carry the
session's CSRF token; a decision re-verifies the reviewer's credential.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from covonaut_es.errors import CovonautError, ReviewerNotVerifiedError
from covonaut_es.inbox._desk import TEXT_FIELD, Action, ReviewItem
from covonaut_es.inbox._http import (
    HttpError,
    Inbox,
    blocking,
    checked_text,
    decoded_json,
    read_body,
    signed_in,
    status_of,
    verify,
)
from covonaut_es.inbox._sessions import CSRF_FIELD, SESSION_COOKIE, Session, same_origin

_POLL_SECONDS = 0.05
"""How often a live-update request looks at the queue's position."""


def _page(
    inbox: Inbox, request: Request, name: str, context: dict[str, Any], status: int = 200
) -> Response:
    return inbox.templates.TemplateResponse(request, name, context, status_code=status)


def _error(inbox: Inbox, request: Request, exc: Exception, session: Session | None) -> Response:
    status = status_of(exc)
    context = {"session": session, "status": status, "message": str(exc)}
    return _page(inbox, request, "error.html", context, status)


def _to_login(request: Request) -> Response:
    return RedirectResponse(request.url_for("login"), status_code=303)


def _for_reviewers(
    inbox: Inbox, handler: Callable[[Request, Session], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """A page for signed-in reviewers only (others are sent to sign in), whose refusals
    and errors are shown as an error page with their status."""

    async def page(request: Request) -> Response:
        session = None
        try:
            session = await signed_in(inbox, request)
            if session is None:
                return _to_login(request)
            return await handler(request, session)
        except (HttpError, CovonautError) as exc:
            return _error(inbox, request, exc, session)

    return page


def _for_live_updates(
    inbox: Inbox, handler: Callable[[Request, Session], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """A live-update endpoint of the inbox page's script: signed-in reviewers only,
    its refusals and errors answered as JSON with their status."""

    async def endpoint(request: Request) -> Response:
        try:
            session = await signed_in(inbox, request)
            if session is None:
                return JSONResponse({"error": "sign in again"}, 401)
            return await handler(request, session)
        except (HttpError, CovonautError) as exc:
            return JSONResponse({"error": str(exc)}, status_of(exc))

    return endpoint


async def _form(inbox: Inbox, request: Request, session: Session | None) -> dict[str, str]:
    """The posted form, once the request is shown to come from this origin with the
    session's CSRF token (a sign-in, having no session yet, needs the origin only)."""
    if not same_origin(request, inbox.allowed_origins):
        msg = (
            "refused: this form was posted from another site (an inbox behind a proxy "
            "names the proxy's public origin with --allowed-origin)"
        )
        raise HttpError(403, msg)
    await read_body(request)  # bounds the body before the form parser reads it
    form = await request.form(max_files=0, max_fields=16)
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if session is not None and not session.carries_csrf(fields.get(CSRF_FIELD)):
        raise HttpError(403, "refused: the form's CSRF token is missing or not this session's")
    return fields


def page_routes(inbox: Inbox) -> list[Route]:
    """The pages' routes."""

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return _page(inbox, request, "login.html", {"session": None, "message": ""})
        try:
            fields = await _form(inbox, request, None)
            credential = checked_text(fields.get("token", ""), "token", required=True)
            reviewer = await verify(inbox, credential)
        except (HttpError, ReviewerNotVerifiedError) as exc:
            context = {"session": None, "message": str(exc)}
            return _page(inbox, request, "login.html", context, status_of(exc))
        inbox.sessions.close(request.cookies.get(SESSION_COOKIE))  # one browser, one session
        session = inbox.sessions.open(credential, reviewer)
        response = RedirectResponse(request.url_for("inbox"), status_code=303)
        # Behind a proxy that ends TLS this hop is http, but the browser's Origin is https.
        https = "https" in (request.url.scheme, urlsplit(request.headers.get("origin", "")).scheme)
        response.set_cookie(
            SESSION_COOKIE,
            session.session_id,
            httponly=True,
            samesite="strict",
            secure=https,
            path=request.scope.get("root_path") or "/",
        )
        return response

    async def logout(request: Request) -> Response:
        session = inbox.sessions.get(request.cookies.get(SESSION_COOKIE))
        try:
            await _form(inbox, request, session)
        except HttpError as exc:
            return _error(inbox, request, exc, session)
        if session is not None:
            inbox.sessions.close(session.session_id)
        response = _to_login(request)
        response.delete_cookie(SESSION_COOKIE, path=request.scope.get("root_path") or "/")
        return response

    def listing(request: Request) -> dict[str, Any]:
        query = request.query_params
        try:
            number = max(1, int(query.get("page", "1")))
        except ValueError:
            number = 1
        filters = {"thread": query.get("thread", ""), "tool": query.get("tool", "")}
        newest_first = query.get("order") == "newest"
        page = inbox.desk.page(
            **filters, newest_first=newest_first, number=number, size=inbox.page_size
        )
        return {
            "page": page,
            "filters": filters,
            "order": "newest" if newest_first else "oldest",
            "position": inbox.desk.position(),
            "query": str(request.url.query),
        }

    async def home(request: Request, session: Session) -> Response:
        context = await blocking(listing, request)
        return _page(inbox, request, "inbox.html", {"session": session, **context})

    async def rows(request: Request, session: Session) -> Response:
        context = await blocking(listing, request)
        return _page(inbox, request, "_rows.html", {"session": session, **context})

    async def changes(request: Request, _: Session) -> Response:
        """Answers when the queue's position differs from ``since``, or after a wait."""
        since = request.query_params.get("since", "")
        position = await blocking(inbox.desk.position)
        waited = 0.0
        while str(position) == since and waited < inbox.wait_seconds:
            if await request.is_disconnected():
                break
            await asyncio.sleep(_POLL_SECONDS)
            waited += _POLL_SECONDS
            position = await blocking(inbox.desk.position)
        return JSONResponse({"position": position})

    async def review(request: Request, session: Session) -> Response:
        context = await blocking(_review_context, inbox, request)
        return _page(inbox, request, "review.html", {"session": session, **context})

    async def decide(request: Request, session: Session) -> Response:
        fields = await _form(inbox, request, session)
        action, text, arguments = _decision(fields)
        item = await blocking(
            inbox.desk.review, fields.get("review", ""), fields.get("thread") or None
        )
        await blocking(
            inbox.desk.decide, item, action, session.credential, text=text, arguments=arguments
        )
        target = request.url_for("review").include_query_params(
            id=item.review_id, thread=item.thread_id
        )
        return RedirectResponse(target, status_code=303)

    async def thread(request: Request, session: Session) -> Response:
        view = await blocking(inbox.desk.thread, request.query_params.get("id", ""))
        return _page(inbox, request, "thread.html", {"session": session, "thread": view})

    async def healthz(request: Request) -> Response:
        reachable = await blocking(inbox.desk.reachable)
        return JSONResponse({"store": "reachable" if reachable else "unreachable"},
                            200 if reachable else 503)  # fmt: skip

    return [
        Route("/", _for_reviewers(inbox, home), name="inbox", methods=["GET"]),
        Route("/login", login, name="login", methods=["GET", "POST"]),
        Route("/logout", logout, name="logout", methods=["POST"]),
        Route("/rows", _for_live_updates(inbox, rows), name="rows", methods=["GET"]),
        Route("/changes", _for_live_updates(inbox, changes), name="changes", methods=["GET"]),
        Route("/review", _for_reviewers(inbox, review), name="review", methods=["GET"]),
        Route("/decide", _for_reviewers(inbox, decide), name="decide", methods=["POST"]),
        Route("/thread", _for_reviewers(inbox, thread), name="thread", methods=["GET"]),
        Route("/healthz", healthz, name="healthz", methods=["GET"]),
    ]


def _decision(fields: dict[str, str]) -> tuple[Action, str, dict[str, Any] | None]:
    """The action, its text and any edited arguments a review page's form posted."""
    kind = fields.get("action", "")
    if kind == "approve-edited":
        arguments = decoded_json(fields.get("arguments", ""), "the edited arguments")
        if not isinstance(arguments, dict):
            raise HttpError(400, "the edited arguments must be a JSON object")
        return Action.APPROVE, checked_text(fields.get("comment", ""), "comment"), arguments
    try:
        action = Action(kind)
    except ValueError:
        raise HttpError(400, f"unknown action {kind!r}") from None
    name = TEXT_FIELD[action]
    text = checked_text(fields.get(name, ""), name, required=action is not Action.APPROVE)
    return action, text, None


def _review_context(inbox: Inbox, request: Request) -> dict[str, Any]:
    query = request.query_params
    item: ReviewItem = inbox.desk.review(query.get("id", ""), query.get("thread") or None)
    return {
        "review": item,
        "messages": inbox.desk.messages(item.thread_id),
        "arguments_json": _editable_json(item.arguments),
    }


def _editable_json(value: Any) -> str:
    """``value`` as indented JSON, its invisible and line-breaking characters (a
    bidirectional override, a C1 control) written as JSON escapes: the edit box then
    shows what is stored, and parses back to exactly it."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return "".join(
        char if char.isprintable() or char == "\n" else json.dumps(char)[1:-1] for char in text
    )
