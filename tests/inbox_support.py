"""Shared by the inbox's tests: a store with agents paused on reviews, and the inbox
application over it."""

from __future__ import annotations

import re
import socket
from typing import Any

from starlette.testclient import TestClient

from covonaut_es import Agent, Store, ToolContext
from covonaut_es.inbox import create_app
from test_approvals import VERIFIER, make_agent, paused_on_review

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'


def paused(store: Store, thread_id: str, script: list[Any], runs: list[ToolContext]) -> Agent:
    """An agent of ``thread_id`` paused on a review of ``pay`` 40 to bob."""
    return paused_on_review(store, script, runs, thread_id=thread_id)


def resume(store: Store, thread_id: str, script: list[Any], runs: list[ToolContext]) -> str:
    """Resume ``thread_id`` as a fresh agent would, answering with ``script``."""
    return make_agent(store, script, runs, thread_id=thread_id).resume()


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
