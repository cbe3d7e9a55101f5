"""The reviewer inbox in the browser, and its JSON API: an ASGI application.

This package owns :func:`create_app`: server-rendered pages (what waits for a person
across threads: reviews, tools' pauses and calls in doubt; one review or pause with its
context and actions; one thread's timeline, checkpoints, forks and audit status), a JSON
API for scripts, reviewer sign-in, sessions and the web-security rules around them (ADR
0018). It reads the reviewer queue (``projections``) and the store, verifies audits
(``audit``/``store``), and records every decision, answer, settlement, retry request and
abandonment through the service layer (``service``), under the reviewer a
:class:`~covonaut_es.service.ReviewerVerifier` establishes once per request. It may
import every layer below the command line, and needs the ``inbox`` extra (Starlette,
Jinja2, uvicorn).
"""

from covonaut_es._extras import missing_extra

try:
    from covonaut_es.inbox._app import create_app
except ModuleNotFoundError as exc:
    for _package in ("starlette", "jinja2"):
        if (_error := missing_extra(exc, _package, "inbox", user="the reviewer inbox")) is not exc:
            raise _error from exc
    raise

__all__ = ["create_app"]
