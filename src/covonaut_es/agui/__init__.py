"""The AG-UI endpoint: a stored thread run for a chat front end (ADR 0034).

This package owns :func:`create_agui_app`, a Starlette application that speaks the AG-UI
protocol (the ``ag-ui-protocol`` package's event types and encoder): a run's lifecycle,
its answers streamed as text and tool-call events, its state, and the interrupts a paused
run ends with, named by review id. A resume is a set of reviewers' decisions: checked by
the service layer's one reader of what people submit, each bound to its operation's
digest, verified by a :class:`~covonaut_es.service.ReviewerVerifier` and recorded through
:class:`~covonaut_es.service.ThreadService`. It runs threads through the runtime's
:class:`~covonaut_es.Agent`, may import every layer below the command line, and needs the
``agui`` extra.
"""

from covonaut_es._extras import missing_extra

try:
    from covonaut_es.agui._app import create_agui_app
except ModuleNotFoundError as exc:
    for _package in ("ag_ui", "starlette"):
        if (_error := missing_extra(exc, _package, "agui", user="the AG-UI endpoint")) is not exc:
            raise _error from exc
    raise

__all__ = ["create_agui_app"]
