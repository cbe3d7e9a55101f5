"""The inbox's pages: sign-in, what waits for a person (with its live update), one
review with its actions, one pause with its actions (each with a live status that tells
an open page when someone else dealt with it), and one thread.

No page records a decision on GET (reading a review past its deadline records its
expiry, as a worker's sweep would). Every POST must come from this origin and carry the
session's CSRF token; the reviewer's credential is verified once per request, and every
command of the request records the reviewer it verified as.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from covonaut_es._text import indented_json, json_printable, whole_number
from covonaut_es.domain import PauseKind, ThreadStatus, canonical_json
from covonaut_es.errors import (
    CovonautError,
    InvalidDecisionError,
    ReviewerNotVerifiedError,
    ReviewExpiredError,
    StaleReviewError,
    ThreadNotFoundError,
)
from covonaut_es.inbox._http import (
    HttpError,
    Inbox,
    SignedIn,
    blocking,
    message_of,
    read_form,
    signed_in,
    status_of,
    verified,
)
from covonaut_es.inbox._items import ReviewItem
from covonaut_es.inbox._sessions import CSRF_FIELD, SESSION_COOKIE, Session, same_origin
from covonaut_es.projections import PendingReview
from covonaut_es.service import (
    TEXT_FIELD,
    Action,
    Reviewer,
    ReviewSubmission,
    Settlement,
    submitted_review,
)

_POLL_SECONDS = 0.05
"""How often a live-update request looks at the queue's position."""

_PAUSE_ACTIONS = ("answer", "ran", "not-run", "retry", "abandon")
"""What the pause page's forms post: answer a tool's pause, settle a call in doubt as
run or as not run, have it run again, or give the thread up."""


def _page(
    inbox: Inbox, request: Request, name: str, context: dict[str, Any], status: int = 200
) -> Response:
    return inbox.templates.TemplateResponse(request, name, context, status_code=status)


def _error(inbox: Inbox, request: Request, exc: Exception, session: Session | None) -> Response:
    status = status_of(exc)
    titles = {409: "Not possible now", 403: "Refused", 404: "Not found"}
    if isinstance(exc, ReviewExpiredError):
        title: str | None = "Expired"
    elif isinstance(exc, StaleReviewError):
        title = "Already decided"
    else:
        title = titles.get(status)
    context = {
        "session": session,
        "status": status,
        "title": title or f"Error {status}",
        "message": message_of(inbox, exc),
    }
    return _page(inbox, request, "error.html", context, status)


def _to_login(request: Request) -> Response:
    return RedirectResponse(request.url_for("login"), status_code=303)


def _for_reviewers(
    inbox: Inbox, handler: Callable[[Request, SignedIn], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """A page for signed-in reviewers only (others are sent to sign in), whose refusals
    and errors are shown as an error page with their status."""

    async def page(request: Request) -> Response:
        signed = None
        try:
            signed = await signed_in(inbox, request)
            if signed is None:
                return _to_login(request)
            return await handler(request, signed)
        except (HttpError, CovonautError) as exc:
            return _error(inbox, request, exc, signed.session if signed else None)

    return page


def _for_live_updates(
    inbox: Inbox, handler: Callable[[Request, SignedIn], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """A live-update endpoint of the pages' script: signed-in reviewers only,
    its refusals and errors answered as JSON with their status."""

    async def endpoint(request: Request) -> Response:
        try:
            signed = await signed_in(inbox, request)
            if signed is None:
                return JSONResponse({"error": "sign in again"}, 401)
            return await handler(request, signed)
        except (HttpError, CovonautError) as exc:
            return JSONResponse({"error": message_of(inbox, exc)}, status_of(exc))

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
    fields = await read_form(request)
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
            credential = fields.get("token", "")
            reviewer = await verified(inbox, credential)
        except (HttpError, ReviewerNotVerifiedError) as exc:
            context = {"session": None, "message": message_of(inbox, exc)}
            return _page(inbox, request, "login.html", context, status_of(exc))
        inbox.sessions.close(request.cookies.get(SESSION_COOKIE))  # one browser, one session
        session = inbox.sessions.open(credential, reviewer.id)
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

    def listing(request: Request, reviewer: Reviewer) -> dict[str, Any]:
        query = request.query_params
        number = max(1, whole_number(query.get("page", "1"), most_digits=9) or 1)
        kind = query.get("kind", "")
        filters = {
            "thread": query.get("thread", ""),
            "tool": query.get("tool", ""),
            "kind": kind if kind in set(PauseKind) else "",
        }
        newest_first = query.get("order") == "newest"
        position = inbox.desk.position()  # before the page: a change after it is noticed
        page = inbox.desk.page(
            reviewer, **filters, newest_first=newest_first, number=number, size=inbox.page_size
        )
        return {
            "page": page,
            "filters": filters,
            "kinds": [str(k) for k in PauseKind],
            "order": "newest" if newest_first else "oldest",
            "position": position,
            "query": str(request.url.query),
        }

    async def home(request: Request, signed: SignedIn) -> Response:
        context = await blocking(listing, request, signed.reviewer)
        return _page(inbox, request, "inbox.html", {"session": signed.session, **context})

    async def rows(request: Request, signed: SignedIn) -> Response:
        context = await blocking(listing, request, signed.reviewer)
        return _page(inbox, request, "_rows.html", {"session": signed.session, **context})

    async def changes(request: Request, _: SignedIn) -> Response:
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

    async def review(request: Request, signed: SignedIn) -> Response:
        named = _named_review(request)
        context = await blocking(_review_context, inbox, *named, signed.reviewer)
        return _page(inbox, request, "review.html", {"session": signed.session, **context})

    async def review_status(request: Request, signed: SignedIn) -> Response:
        named = _named_review(request)
        context = await blocking(_review_status, inbox, *named, signed.reviewer)
        return _page(inbox, request, "_live_status.html", {"session": signed.session, **context})

    async def pause_status(request: Request, signed: SignedIn) -> Response:
        query = request.query_params
        context = await blocking(
            _pause_status,
            inbox,
            query.get("thread", ""),
            query.get("call", ""),
            query.get("pause", ""),
            signed.reviewer,
        )
        return _page(inbox, request, "_live_status.html", {"session": signed.session, **context})

    async def decide(request: Request, signed: SignedIn) -> Response:
        fields = await _form(inbox, request, signed.session)
        review_id, thread_id = fields.get("review", ""), fields.get("thread") or None
        try:
            decision = await blocking(
                inbox.desk.decide,
                review_id,
                _submission(fields),
                reviewer=signed.reviewer,
                thread_id=thread_id,
            )
        except (HttpError, CovonautError) as exc:
            # Shown on the review page, with what was typed: a reviewer is not stranded
            # on an error page (one that cannot be loaded falls back to it).
            try:
                context = await blocking(
                    _review_context, inbox, review_id, thread_id, signed.reviewer
                )
            except CovonautError:
                raise exc from None
            context |= {"session": signed.session, "error": message_of(inbox, exc)}
            context["submitted"] = fields
            return _page(inbox, request, "review.html", context, status_of(exc))
        target = request.url_for("review").include_query_params(
            id=decision.review_id, thread=decision.thread_id
        )
        return RedirectResponse(target, status_code=303)

    async def pause(request: Request, signed: SignedIn) -> Response:
        thread_id = request.query_params.get("thread", "")
        call_id = request.query_params.get("call", "")
        view = await blocking(inbox.desk.pause, thread_id, call_id, reviewer=signed.reviewer)
        if view is None:
            msg = (
                f"thread {thread_id!r} has no pending pause on call {call_id!r}: it may have "
                "resumed since; its page shows what happened"
            )
            raise HttpError(404, msg)
        if view.review_id:
            target = request.url_for("review").include_query_params(
                id=view.review_id, thread=thread_id
            )
            return RedirectResponse(target, status_code=303)
        context = {"session": signed.session, "view": view, "error": ""}
        return _page(inbox, request, "pause.html", context)

    async def act(request: Request, signed: SignedIn) -> Response:
        fields = await _form(inbox, request, signed.session)
        try:
            return await record(request, fields, signed.reviewer)
        except (HttpError, CovonautError) as exc:
            # Shown on the pause's page while it is pending, as a refused decision is.
            thread_id, call_id = fields.get("thread", ""), fields.get("call", "")
            try:
                view = await blocking(
                    inbox.desk.pause, thread_id, call_id, reviewer=signed.reviewer
                )
            except CovonautError:
                view = None
            if view is None or view.review_id:
                raise exc from None
            context = {"session": signed.session, "view": view, "error": message_of(inbox, exc)}
            return _page(inbox, request, "pause.html", context, status_of(exc))

    async def record(request: Request, fields: dict[str, str], reviewer: Reviewer) -> Response:
        """Record what a pause page's form asks; where to go next."""
        thread_id, call_id = fields.get("thread", ""), fields.get("call", "")
        action, desk = fields.get("action", ""), inbox.desk
        if action not in _PAUSE_ACTIONS:
            msg = f"unknown action {action!r}: expected one of {', '.join(_PAUSE_ACTIONS)}"
            raise InvalidDecisionError(msg)
        # The pause the page was loaded for: a stale page acts on no later pause.
        pause = fields.get("pause", "")
        if not pause:
            msg = (
                "the form names no pause (its field 'pause' is missing): reload the "
                "pause's page and act from there; nothing was recorded"
            )
            raise InvalidDecisionError(msg)
        acting = {"reviewer": reviewer, "pause": pause}
        if action == "answer":
            answer = fields.get("answer", "")
            await blocking(desk.answer, thread_id, call_id, answer, **acting)
        elif action in ("ran", "not-run"):
            settlement = (
                Settlement.ran_with(fields.get("result", ""))
                if action == "ran"
                else Settlement.not_run(fields.get("note", ""))
            )
            await blocking(desk.settle, thread_id, call_id, settlement, **acting)
        elif action == "retry":
            await blocking(desk.request_retry, thread_id, call_id, **acting)
        else:  # abandon
            await blocking(desk.abandon, thread_id, fields.get("reason", ""), **acting)
            target = request.url_for("thread").include_query_params(id=thread_id)
            return RedirectResponse(target, status_code=303)
        target = request.url_for("pause").include_query_params(thread=thread_id, call=call_id)
        return RedirectResponse(target, status_code=303)

    async def thread(request: Request, signed: SignedIn) -> Response:
        thread_id = request.query_params.get("id", "")
        view = await blocking(inbox.desk.thread, thread_id, reviewer=signed.reviewer)
        return _page(inbox, request, "thread.html", {"session": signed.session, "thread": view})

    async def healthz(request: Request) -> Response:
        reachable = await blocking(inbox.desk.reachable)
        health = {"store": "reachable" if reachable else "unreachable"}
        if await blocking(inbox.desk.following) is not None:  # may start a runner
            health["queue"] = "stopped"  # its listings would no longer change
        healthy = reachable and "queue" not in health
        return JSONResponse(health, 200 if healthy else 503)

    return [
        Route("/", _for_reviewers(inbox, home), name="inbox", methods=["GET"]),
        Route("/login", login, name="login", methods=["GET", "POST"]),
        Route("/logout", logout, name="logout", methods=["POST"]),
        Route("/rows", _for_live_updates(inbox, rows), name="rows", methods=["GET"]),
        Route("/changes", _for_live_updates(inbox, changes), name="changes", methods=["GET"]),
        Route("/review", _for_reviewers(inbox, review), name="review", methods=["GET"]),
        Route(
            "/review/status",
            _for_live_updates(inbox, review_status),
            name="review_status",
            methods=["GET"],
        ),
        Route("/decide", _for_reviewers(inbox, decide), name="decide", methods=["POST"]),
        Route("/pause", _for_reviewers(inbox, pause), name="pause", methods=["GET"]),
        Route("/pause", _for_reviewers(inbox, act), name="act", methods=["POST"]),
        Route(
            "/pause/status",
            _for_live_updates(inbox, pause_status),
            name="pause_status",
            methods=["GET"],
        ),
        Route("/thread", _for_reviewers(inbox, thread), name="thread", methods=["GET"]),
        Route("/healthz", healthz, name="healthz", methods=["GET"]),
    ]


def _submission(fields: dict[str, str]) -> ReviewSubmission:
    """The decision a review page's form posted, read by the service layer's reader:
    ``approve-edited`` is an approval with the edited arguments as JSON text."""
    kind = fields.get("action", "")
    edited = kind == "approve-edited"
    action = Action.APPROVE.value if edited else kind
    name = next((TEXT_FIELD[a] for a in Action if a.value == action), "")
    sent: dict[str, object] = {key: fields[key] for key in (name, "digest") if key in fields}
    if edited:
        sent["arguments"] = fields.get("arguments", "")
    return submitted_review(action, sent)


def _review_context(
    inbox: Inbox, review_id: str, thread_id: str | None, reviewer: Reviewer
) -> dict[str, Any]:
    """What the review page shows: the review, the forms its rules offer ``reviewer``,
    its thread's last messages, the edit box's text, and the oldest other review
    ``reviewer`` may decide (the "next review" link)."""
    item: ReviewItem = inbox.desk.review(review_id, thread_id, reviewer=reviewer)
    return {
        "review": item,
        "actions": item.actions(reviewer),
        "seconding": _seconding(item),
        "messages": inbox.desk.messages(item.thread_id, reviewer=reviewer),
        "arguments_json": _editable_json(item.arguments),
        "next_review": _next_review(inbox, reviewer, item.review_id, item.thread_id),
        "error": "",
        "submitted": {},
    }


def _seconding(item: ReviewItem) -> str:
    """Under four eyes, the arguments the first reviewer approved, as the JSON a second
    approval posts (it must cover the same operation); "" when there is none."""
    first = item.approvals[0] if item.approvals else None
    if first is None or first.arguments is None:
        return ""
    return canonical_json(first.arguments).decode()


def _editable_json(value: Any) -> str:
    """``value`` as indented JSON, each line through :func:`json_printable`: what shows
    nothing (a Hangul filler, a bidirectional override, a C1 control) is written as a
    JSON escape, so the edit box shows what is stored and parses back to exactly it."""
    return "\n".join(json_printable(line) for line in indented_json(value).split("\n"))


def _next_review(
    inbox: Inbox, reviewer: Reviewer, review_id: str, thread_id: str
) -> PendingReview | None:
    """The oldest review waiting that ``reviewer`` may decide, other than that one (the
    "next review" link)."""
    return next(
        (
            pending
            for pending in inbox.desk.pending(reviewer)
            if pending.review_id
            and (pending.review_id, pending.thread_id) != (review_id, thread_id)
        ),
        None,
    )


def _named_review(request: Request) -> tuple[str, str | None]:
    """The review id and thread (None when not named) a review page's query names."""
    query = request.query_params
    return query.get("id", ""), query.get("thread") or None


def _review_status(
    inbox: Inbox, review_id: str, thread_id: str | None, reviewer: Reviewer
) -> dict[str, Any]:
    """What an open review page's live status shows: nothing while the review waits;
    once it was decided (by anyone, or expired) or its thread given up, who decided
    what, and the next review.

    Raises:
        ReviewNotFoundError: No such review in that thread.
    """
    item: ReviewItem = inbox.desk.review(review_id, thread_id, reviewer=reviewer)
    if item.decision is not None:
        state = "decided"
    elif item.given_up:
        state = "abandoned"
    else:
        return {"state": "pending", "decision": None, "next_review": None}
    following = _next_review(inbox, reviewer, item.review_id, item.thread_id)
    return {"state": state, "decision": item.decision, "next_review": following}


def _pause_status(
    inbox: Inbox, thread_id: str, call_id: str, token: str, reviewer: Reviewer
) -> dict[str, Any]:
    """What an open pause page's live status shows: nothing while the pause it was
    loaded for (``token``) waits; once it was dealt with or its thread given up, that,
    and the next review. A pause no longer shown to ``reviewer`` (its thread moved on
    to what they may not see) was dealt with; so, alike, is one no thread has."""
    try:
        view = inbox.desk.pause(thread_id, call_id, reviewer=reviewer)
    except ThreadNotFoundError:
        view = None
    if view is not None and view.status == ThreadStatus.ABANDONED:
        state = "abandoned"
    elif view is None or view.token != token or view.pause.resolved:
        state = "dealt-with"
    else:
        return {"state": "pending", "decision": None, "next_review": None}
    return {"state": state, "decision": None, "next_review": _next_review(inbox, reviewer, "", "")}
