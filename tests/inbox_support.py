"""Shared by the inbox's tests: a store with agents paused on reviews, on tools' own
pauses and on calls in doubt, and the inbox application over it."""

from __future__ import annotations

import re
import socket
from typing import Any

import pytest
from starlette.testclient import TestClient

from covonaut_es import Agent, InterruptError, Store, Tool, ToolContext
from covonaut_es.domain import PauseKind
from covonaut_es.inbox import create_app
from covonaut_es.service import ThreadService
from support import call
from test_approvals import VERIFIER, make_agent, paused_on_review

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'


def paused(store: Store, thread_id: str, script: list[Any], runs: list[ToolContext]) -> Agent:
    """An agent of ``thread_id`` paused on a review of ``pay`` 40 to bob."""
    return paused_on_review(store, script, runs, thread_id=thread_id)


def ask_tool(data: Any = None) -> Tool:
    """``ask``: pauses the run with ``InterruptError`` (and ``data``) every time."""

    def ask(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise InterruptError("which account should the refund go to?", data)

    return Tool("ask", "Ask a person", {"type": "object"}, ask)


def paused_on_tool(store: Store, thread_id: str, *, call_id: str = "c1", data: Any = None) -> None:
    """``thread_id`` paused by its tool ``ask`` (call ``call_id``), which raised
    ``InterruptError`` with ``data``: a tool's pause, for a person to answer."""
    script = [call((call_id, "ask", '{"about": "refund"}'))]
    agent = make_agent(store, script, [], thread_id=thread_id, tool=ask_tool(data))
    agent.run("Refund the customer.")
    (pause,) = store.state_at(thread_id).pauses
    assert pause.kind is PauseKind.INTERRUPT


class ProcessDied(BaseException):
    """Stands for the runner's process dying inside a tool: nothing after it runs."""


def in_doubt(store: Store, thread_id: str, *, call_id: str = "c1") -> str:
    """``thread_id`` paused on its call ``call_id`` of ``transfer``, in doubt: its runner
    died inside the tool, and the next one paused on the call for a person to settle.
    Returns the call's idempotency key."""

    def transfer(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise ProcessDied

    tool = Tool("transfer", "Move money", {"type": "object"}, transfer)
    script = [call((call_id, "transfer", '{"amount": 900, "to": "acct-7"}'))]
    with pytest.raises(ProcessDied):
        make_agent(store, script, [], thread_id=thread_id, tool=tool).run("Send 900.")
    ThreadService(store).pause_calls_in_doubt(thread_id, "its runner stopped inside the tool")
    state = store.state_at(thread_id)
    assert [p.kind for p in state.pauses] == [PauseKind.IN_DOUBT]
    (pending,) = state.open_calls
    return pending.idempotency_key


def resume(
    store: Store,
    thread_id: str,
    script: list[Any],
    runs: list[ToolContext],
    *,
    tool: Tool | None = None,
) -> str:
    """Resume ``thread_id`` as a fresh agent would, answering with ``script``."""
    return make_agent(store, script, runs, thread_id=thread_id, tool=tool).resume()


def current(client: TestClient) -> None:
    """Wait until the inbox's reviewer queue has caught up with the store."""
    desk = client.app.state.inbox.desk  # type: ignore[attr-defined]
    desk.queue.wait_until_current(desk.store)


def inbox_client(store: Store, **options: Any) -> TestClient:
    """A test client of the inbox over ``store`` (use it in a ``with`` block)."""
    return TestClient(create_app(store, VERIFIER, **options), base_url="http://inbox.test")


def sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form; returns the session's CSRF token."""
    response = client.post("/login", data={"token": token}, headers={"Origin": "http://inbox.test"})
    assert response.status_code == 200, response.text  # followed the redirect to the inbox
    match = re.search(r'name="csrf" value="([^"]+)"', response.text)
    assert match is not None
    return match.group(1)


def free_port() -> int:
    """A TCP port free on the loopback interface just now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
