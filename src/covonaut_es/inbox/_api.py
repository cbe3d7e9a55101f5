"""The JSON API: list pending reviews and pauses, decide reviews, answer tools' pauses,
settle calls in doubt or have them run again, and give threads up.

Authorised by ``Authorization: Bearer <token>`` (or a signed-in session, whose
state-changing requests must then come from this origin and carry the session's CSRF
token in ``X-CSRF-Token``). The credential is verified once per request, and the
reviewer it verifies as is who every command of the request records. Bodies are read by
the service layer's strict reader; a refusal records nothing. A review already decided,
or a pause no longer waiting for what was asked, answers 409. A command on a pause may
name it by the token ``GET /api/pauses`` lists (``"pause"`` in the body): a pause dealt
with since, and a later pause of the same call, is then refused with 409.

``GET /api/reviews`` is paged: ``?limit=`` (1 to 500, default 100) and ``?after=``, the
cursor the previous page gave in its ``Link: <...>; rel="next"`` and ``X-Next-Cursor``
headers; the last page has neither.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from covonaut_es._bearer import bearer_token
from covonaut_es._text import whole_number
from covonaut_es.errors import CovonautError, InvalidDecisionError, InvalidPageRequestError
from covonaut_es.inbox._http import (
    HttpError,
    Inbox,
    QuotedRoute,
    blocking,
    message_of,
    read_body,
    status_of,
    verified,
)
from covonaut_es.inbox._items import decision_json
from covonaut_es.inbox._sessions import CSRF_FIELD, SESSION_COOKIE, same_origin
from covonaut_es.projections import MAX_PAGE_SIZE
from covonaut_es.service import (
    TEXT_FIELD,
    Action,
    Reviewer,
    Settlement,
    json_object,
    sent_pause,
    submitted_review,
)

REVIEWS_PAGE_SIZE = 100
"""How many items ``GET /api/reviews`` and ``GET /api/pauses`` list when ``?limit=``
does not say."""

NEXT_CURSOR = "X-Next-Cursor"
"""The header that gives the next page's cursor (``?after=``), beside ``Link``."""


async def _credential(inbox: Inbox, request: Request, *, changes: bool) -> Reviewer:
    """The reviewer of the request: its bearer token's, else its session's, verified
    once."""
    authorization = request.headers.get("authorization")
    if authorization is not None:
        token = bearer_token(authorization)
        if token is None:
            raise HttpError(401, "expected the header Authorization: Bearer <reviewer token>")
        credential = token
    else:
        session = inbox.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None:
            raise HttpError(401, "send Authorization: Bearer <reviewer token>, or sign in")
        if changes and not (
            same_origin(request, inbox.allowed_origins)
            and session.carries_csrf(request.headers.get("x-csrf-token"))
        ):
            msg = f"refused: a change needs this origin and the session's {CSRF_FIELD} token"
            raise HttpError(403, msg)
        credential = session.credential
    return await verified(inbox, credential)


def _handled(
    endpoint: Callable[[Inbox, Request], Awaitable[Any]], inbox: Inbox
) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            found = await endpoint(inbox, request)
            return found if isinstance(found, Response) else JSONResponse(found)
        except (HttpError, CovonautError) as exc:
            headers = {"WWW-Authenticate": "Bearer"} if status_of(exc) == 401 else None
            return JSONResponse({"error": message_of(inbox, exc)}, status_of(exc), headers=headers)

    return handle


async def _body(request: Request, fields: Collection[str]) -> dict[str, Any]:
    """The request's body: one JSON object (read strictly) of ``fields`` only; an empty
    body is an empty object."""
    body = await read_body(request)
    value = json_object(body, "the body") if body else {}
    if unknown := set(value) - set(fields):
        msg = f"unknown fields {sorted(unknown)}: this request takes {sorted(fields)}"
        raise InvalidDecisionError(msg)
    return value


def _thread_named(request: Request) -> str | None:
    """The thread ``?thread=ID`` names, if any; named twice, refused (either one kept
    would decide on a thread the client may not have meant)."""
    return _query_once(request, "thread", refused=InvalidDecisionError)


# Reviews ------------------------------------------------------------------------------


def _query_once(
    request: Request, name: str, *, refused: type[CovonautError] = InvalidPageRequestError
) -> str | None:
    """The query parameter ``name``, if given; given twice, ``refused``."""
    given = request.query_params.getlist(name)
    if len(given) > 1:
        msg = f"?{name}= is given {len(given)} times: give it once"
        raise refused(msg)
    return given[0] if given else None


def _page_size(request: Request) -> int:
    """The page size ``?limit=`` asks for (checked by the queue), else the default."""
    text = _query_once(request, "limit")
    if text is None:
        return REVIEWS_PAGE_SIZE
    size = whole_number(text, most_digits=6)
    if size is None:
        msg = f"?limit= takes a whole number of items from 1 to {MAX_PAGE_SIZE}"
        raise InvalidPageRequestError(msg)
    return size


def _page_asked(request: Request) -> tuple[str | None, int]:
    """The cursor (``?after=``) and the size (``?limit=``) of the page a listing asks
    for."""
    return _query_once(request, "after"), _page_size(request)


def _page(request: Request, items: list[Any], next_cursor: str | None, limit: int) -> Response:
    """A listing's page: a list of ``items``, the next page named in the headers."""
    headers = {}
    if next_cursor is not None:  # RFC 8288: the next page, as a reference to this path
        query = urlencode({"after": next_cursor, "limit": limit})
        headers = {"Link": f'<{request.url.path}?{query}>; rel="next"', NEXT_CURSOR: next_cursor}
    return JSONResponse(items, headers=headers)


async def _reviews(inbox: Inbox, request: Request) -> Any:
    reviewer = await _credential(inbox, request, changes=False)
    after, limit = _page_asked(request)
    reviews, next_cursor = await blocking(inbox.desk.reviews, reviewer, after=after, limit=limit)
    return _page(request, [review.to_json() for review in reviews], next_cursor, limit)


async def _review(inbox: Inbox, request: Request) -> Any:
    reviewer = await _credential(inbox, request, changes=False)
    thread = _thread_named(request)
    review_id = request.path_params["review_id"]
    item = await blocking(inbox.desk.review, review_id, thread, reviewer=reviewer)
    return item.to_json()


def _decider(action: Action) -> Callable[[Inbox, Request], Awaitable[Any]]:
    text_field = TEXT_FIELD[action]

    async def decide(inbox: Inbox, request: Request) -> Any:
        reviewer = await _credential(inbox, request, changes=True)
        body = await _body(request, (text_field, "arguments", "digest"))
        submission = submitted_review(action, body, json_body=True)
        decision = await blocking(
            inbox.desk.decide,
            request.path_params["review_id"],
            submission,
            reviewer=reviewer,
            thread_id=_thread_named(request),
        )
        return decision_json(decision)

    return decide


# Pauses -------------------------------------------------------------------------------


async def _pauses(inbox: Inbox, request: Request) -> Any:
    reviewer = await _credential(inbox, request, changes=False)
    after, limit = _page_asked(request)
    pauses, next_cursor = await blocking(inbox.desk.pauses, reviewer, after=after, limit=limit)
    return _page(request, [pause.to_json() for pause in pauses], next_cursor, limit)


async def _answer(inbox: Inbox, request: Request) -> Any:
    reviewer = await _credential(inbox, request, changes=True)
    body = await _body(request, ("answer", "pause"))
    thread_id, call_id = request.path_params["thread_id"], request.path_params["tool_call_id"]
    text, pause = body.get("answer", ""), sent_pause(body)
    await blocking(inbox.desk.answer, thread_id, call_id, text, reviewer=reviewer, pause=pause)
    return _recorded(thread_id, call_id, "answer", reviewer)


async def _settle(inbox: Inbox, request: Request) -> Any:
    reviewer = await _credential(inbox, request, changes=True)
    body = await _body(request, ("ran", "result", "note", "pause"))
    settlement, pause = _settlement(body), sent_pause(body)
    thread_id, call_id = request.path_params["thread_id"], request.path_params["tool_call_id"]
    await blocking(
        inbox.desk.settle,
        thread_id,
        call_id,
        settlement,
        reviewer=reviewer,
        pause=pause,
    )
    return {**_recorded(thread_id, call_id, "settle", reviewer), "ran": settlement.ran}


def _settlement(body: dict[str, Any]) -> Settlement:
    """A settle request's body: ``{"ran": true, "result": ...}`` or ``{"ran": false,
    "note": ...}``."""
    ran = body.get("ran")
    if not isinstance(ran, bool):
        msg = (
            f'"ran" must be true (the call ran: give its "result") or false (it did not: '
            f'an optional "note" says why), got {ran!r}'
        )
        raise InvalidDecisionError(msg)
    other = "note" if ran else "result"
    if other in body:
        msg = f'a call that {"ran" if ran else "did not run"} is settled without a "{other}"'
        raise InvalidDecisionError(msg)
    return (
        Settlement.ran_with(body.get("result", ""))
        if ran
        else Settlement.not_run(body.get("note", ""))
    )


async def _retry(inbox: Inbox, request: Request) -> Any:
    reviewer = await _credential(inbox, request, changes=True)
    body = await _body(request, ("pause",))
    thread_id, call_id = request.path_params["thread_id"], request.path_params["tool_call_id"]
    pause = sent_pause(body)
    await blocking(inbox.desk.request_retry, thread_id, call_id, reviewer=reviewer, pause=pause)
    return _recorded(thread_id, call_id, "retry", reviewer)


async def _abandon(inbox: Inbox, request: Request) -> Any:
    reviewer = await _credential(inbox, request, changes=True)
    body = await _body(request, ("reason", "pause"))
    thread_id = request.path_params["thread_id"]
    reason, pause = body.get("reason", ""), sent_pause(body)
    await blocking(inbox.desk.abandon, thread_id, reason, reviewer=reviewer, pause=pause)
    return {"thread_id": thread_id, "action": "abandon", "reviewer": reviewer.id, "reason": reason}


def _recorded(thread_id: str, call_id: str, action: str, reviewer: Reviewer) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "tool_call_id": call_id,
        "action": action,
        "reviewer": reviewer.id,
    }


def api_routes(inbox: Inbox) -> list[BaseRoute]:
    """The JSON API's routes (those naming a thread, a call or a review read them
    quoted)."""
    routes: list[BaseRoute] = [
        Route("/api/reviews", _handled(_reviews, inbox), methods=["GET"]),
        QuotedRoute("/api/reviews/{review_id}", _handled(_review, inbox), methods=["GET"]),
        Route("/api/pauses", _handled(_pauses, inbox), methods=["GET"]),
    ]
    for action in Action:
        path = f"/api/reviews/{{review_id}}/{action}"
        routes.append(QuotedRoute(path, _handled(_decider(action), inbox), methods=["POST"]))
    pause = "/api/pauses/{thread_id}/{tool_call_id}"
    for name, endpoint in (("answer", _answer), ("settle", _settle), ("retry", _retry)):
        routes.append(QuotedRoute(f"{pause}/{name}", _handled(endpoint, inbox), methods=["POST"]))
    abandon = _handled(_abandon, inbox)
    routes.append(QuotedRoute("/api/threads/{thread_id}/abandon", abandon, methods=["POST"]))
    return routes
