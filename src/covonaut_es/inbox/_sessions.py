"""Reviewer sessions and the checks that keep a request honest.

A session is kept on the server, under a random id that is all the cookie holds: the
reviewer's credential stays in this process, is verified again by the
:class:`~covonaut_es.runtime.ReviewerVerifier` on every request, and a session ends
when it does no longer verify. Each session has its own CSRF token, which every
state-changing form carries; a state-changing request that rides on the cookie must
also come from this origin (``Sec-Fetch-Site``, ``Origin``). See ADR 0018.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

import attrs
from starlette.requests import Request

from covonaut_es.errors import ConfigurationError

SESSION_COOKIE = "covonaut_inbox"
"""The name of the session cookie (HttpOnly, SameSite=Strict, Secure under https)."""

CSRF_FIELD = "csrf"
"""The form field, and with ``X-CSRF-Token`` the header, that carries the CSRF token."""


@attrs.frozen
class Session:
    """One signed-in reviewer.

    Attributes:
        session_id: The cookie's value.
        credential: The token the reviewer signed in with, verified again at each use.
        reviewer: The reviewer id it verified as at sign-in (shown on pages only).
        csrf: The token every state-changing request of this session must carry.
        expires: When the session ends, on the monotonic clock.
    """

    session_id: str
    credential: str = attrs.field(repr=False)
    reviewer: str
    csrf: str = attrs.field(repr=False)
    expires: float

    def carries_csrf(self, token: str | None) -> bool:
        """Whether ``token`` is this session's CSRF token (compared in constant time)."""
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


MAX_SESSIONS = 10_000
"""The most sessions an inbox keeps open; signing in past it ends the oldest."""

MAX_SESSIONS_PER_REVIEWER = 32
"""The most sessions one reviewer keeps open; their sign-in past it ends their oldest,
so that one reviewer signing in again and again never ends another's session."""


class Sessions:
    """The open sessions of one inbox, in memory (signing in again after a restart).

    Args:
        ttl_seconds: How long a session lasts at most; the credential's own expiry,
            checked at every use, may end it sooner.
        clock: Monotonic seconds.
        max_open: The most sessions kept; a sign-in past it ends the oldest.
        max_per_reviewer: The most sessions of one reviewer kept; their sign-in past
            it ends their oldest.
    """

    def __init__(
        self,
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_open: int = MAX_SESSIONS,
        max_per_reviewer: int = MAX_SESSIONS_PER_REVIEWER,
    ) -> None:
        self._ttl = ttl_seconds
        self._max_open = max_open
        self._max_per_reviewer = max_per_reviewer
        self._clock = clock
        self._open: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, credential: str, reviewer: str) -> Session:
        """A new session with fresh random id and CSRF token."""
        session = Session(
            session_id=secrets.token_urlsafe(32),
            credential=credential,
            reviewer=reviewer,
            csrf=secrets.token_urlsafe(32),
            expires=self._clock() + self._ttl,
        )
        with self._lock:
            now = self._clock()
            self._open = {k: s for k, s in self._open.items() if s.expires > now}
            theirs = [k for k, s in self._open.items() if s.reviewer == reviewer]
            for key in theirs[: max(0, len(theirs) - self._max_per_reviewer + 1)]:
                del self._open[key]  # their oldest out, not another reviewer's
            while len(self._open) >= self._max_open:  # the oldest out: memory is bounded
                del self._open[next(iter(self._open))]
            self._open[session.session_id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The open session with that id, if it has not expired."""
        if not session_id:
            return None
        with self._lock:
            session = self._open.get(session_id)
            if session is not None and session.expires <= self._clock():
                del self._open[session_id]
                return None
        return session

    def close(self, session_id: str | None) -> None:
        """End a session (no error if there is none)."""
        with self._lock:
            self._open.pop(session_id or "", None)


def checked_origin(origin: str) -> str:
    """An origin to allow, as a browser writes it in ``Origin`` (lowercase).

    Raises:
        ConfigurationError: It is no http(s) origin, e.g. ``*``, ``null`` or one with a
            path (which no browser sends, so it would match nothing, or too much).
    """
    written = origin.strip().lower()
    parts = urlsplit(written)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or "@" in parts.netloc
        or written != f"{parts.scheme}://{parts.netloc}"
    ):
        msg = (
            f"allowed origin {origin!r} is not an origin: give a scheme and a host (and a "
            "port if not the default), no path, e.g. https://inbox.example.com"
        )
        raise ConfigurationError(msg)
    return f"{parts.scheme}://{parts.netloc}"


def own_origin(request: Request) -> str:
    """The origin the request was addressed to, as a browser would write it."""
    return f"{request.url.scheme}://{request.url.netloc}"


def same_origin(request: Request, allowed: Iterable[str] = ()) -> bool:
    """Whether a browser says the request comes from this origin (or one ``allowed``).

    ``Sec-Fetch-Site`` must be ``same-origin`` (or ``none``, typed by the user) when
    sent, and ``Origin`` must be this origin when sent. A client that sends neither
    is no browser riding on a cookie; such a request still needs the CSRF token.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    return origin is None or origin == own_origin(request) or origin in set(allowed)
