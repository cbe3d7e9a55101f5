"""The JSON API: list and get pending reviews, and approve, reject or respond to one.

Authorised by ``Authorization: Bearer <token>`` (or a signed-in session, whose
state-changing requests must then come from this origin and carry the session's CSRF
token in ``X-CSRF-Token``). A review already decided answers 409 and nothing is
recorded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from covonaut_es.errors import CovonautError
from covonaut_es.inbox._desk import TEXT_FIELD, Action, decision_json
from covonaut_es.inbox._http import (
    HttpError,
    Inbox,
    blocking,
    checked_text,
    decoded_json,
    read_body,
    status_of,
    verify,
)
from covonaut_es.inbox._sessions import CSRF_FIELD, SESSION_COOKIE, same_origin

_FIELDS: dict[Action, dict[str, bool]] = {
    Action.APPROVE: {TEXT_FIELD[Action.APPROVE]: False, "arguments": False},
    Action.REJECT: {TEXT_FIELD[Action.REJECT]: True},
    Action.RESPOND: {TEXT_FIELD[Action.RESPOND]: True},
}
"""Each action's body fields, and whether each is required."""


async def _credential(inbox: Inbox, request: Request, *, changes: bool) -> str:
    """The verified credential of the request: its bearer token, else its session's."""
    authorization = request.headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HttpError(401, "expected the header Authorization: Bearer <reviewer token>")
        credential = token.strip()
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
    await verify(inbox, credential)
    return credential


def _handled(
    endpoint: Callable[[Inbox, Request], Awaitable[Any]], inbox: Inbox
) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            return JSONResponse(await endpoint(inbox, request))
        except (HttpError, CovonautError) as exc:
            headers = {"WWW-Authenticate": "Bearer"} if status_of(exc) == 401 else None
            return JSONResponse({"error": str(exc)}, status_of(exc), headers=headers)

    return handle


async def _list(inbox: Inbox, request: Request) -> Any:
    await _credential(inbox, request, changes=False)
    reviews = await blocking(inbox.desk.reviews)
    return [review.to_json() for review in reviews]


async def _get(inbox: Inbox, request: Request) -> Any:
    await _credential(inbox, request, changes=False)
    thread = request.query_params.get("thread")
    item = await blocking(inbox.desk.review, request.path_params["review_id"], thread)
    return item.to_json()


def _decider(action: Action) -> Callable[[Inbox, Request], Awaitable[Any]]:
    async def decide(inbox: Inbox, request: Request) -> Any:
        credential = await _credential(inbox, request, changes=True)
        body = _fields(await read_body(request), action)
        thread = request.query_params.get("thread")
        item = await blocking(inbox.desk.review, request.path_params["review_id"], thread)
        text = body.get(TEXT_FIELD[action], "")
        decision = await blocking(
            inbox.desk.decide, item, action, credential, text=text, arguments=body.get("arguments")
        )
        return decision_json(decision)

    return decide


def _fields(body: bytes, action: Action) -> dict[str, Any]:
    """The body's fields for ``action``, checked: a JSON object with known keys only."""
    value = decoded_json(body, "the body") if body else {}
    if not isinstance(value, dict):
        raise HttpError(400, f"the body must be a JSON object, got {type(value).__name__}")
    fields = _FIELDS[action]
    if unknown := set(value) - set(fields):
        msg = f"unknown fields {sorted(unknown)}; {action} takes {sorted(fields)}"
        raise HttpError(400, msg)
    checked: dict[str, Any] = {}
    for name, required in fields.items():
        if name == "arguments":
            arguments = value.get(name)
            if arguments is not None and not isinstance(arguments, dict):
                raise HttpError(400, "arguments must be a JSON object of the tool's arguments")
            checked[name] = arguments
        elif name in value or required:
            checked[name] = checked_text(value.get(name), name, required=required)
    return checked


def api_routes(inbox: Inbox) -> list[Route]:
    """The JSON API's routes."""
    routes = [
        Route("/api/reviews", _handled(_list, inbox), methods=["GET"]),
        Route("/api/reviews/{review_id}", _handled(_get, inbox), methods=["GET"]),
    ]
    for action in Action:
        path = f"/api/reviews/{{review_id}}/{action}"
        routes.append(Route(path, _handled(_decider(action), inbox), methods=["POST"]))
    return routes
