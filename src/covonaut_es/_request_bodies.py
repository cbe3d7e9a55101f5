"""Reading a request body of bounded size, for the HTTP apps (the inbox, the AG-UI
endpoint): the body must say its length, which is checked before it is read and again
after (a client may send more than it said)."""

from __future__ import annotations

from starlette.requests import Request

from covonaut_es._text import whole_number


class RequestBodyRefusedError(ValueError):
    """A request body refused before it was taken: 411 (no length said) or 413 (too
    large), and what to tell the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def bounded_body(request: Request, limit: int, *, name: str) -> bytes:
    """The request's body, at most ``limit`` bytes; ``name`` is what the client is told
    it sent ("request body").

    Raises:
        RequestBodyRefusedError: No Content-Length that is a whole number (411), or a
            length or a body over ``limit`` (413).
    """
    length = whole_number(request.headers.get("content-length", ""), most_digits=19)
    if length is None:
        raise RequestBodyRefusedError(411, f"a {name} needs a Content-Length header")
    too_large = f"the {name} exceeds {limit} bytes"
    if length > limit:
        raise RequestBodyRefusedError(413, too_large)
    body = await request.body()
    if len(body) > limit:
        raise RequestBodyRefusedError(413, too_large)
    return body
