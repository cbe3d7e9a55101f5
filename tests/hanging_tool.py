"""A tool that hangs past its timeout until released, and the agent that calls it once:
shared by the tests of calls that outrun their timeout."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ScriptedProvider,
    Store,
    Tool,
    ToolContext,
)
from support import answer, call, ticking_clock

OBJECT: dict[str, Any] = {"type": "object"}
VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
RITA = VERIFIER.issue_token("rita", ttl_seconds=3600)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll until ``condition`` holds, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Hanging:
    """A tool that does a write of another writer's, then hangs past its timeout until
    released; it logs the key of each run."""

    def __init__(self, write: Callable[[], None] = lambda: None) -> None:
        self.write = write
        self.keys: list[str] = []
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.keys.append(ctx.idempotency_key)
        try:
            self.write()
            self.release.wait(timeout=30)
            return "late"
        finally:
            self.returned.set()


def hanging_agent(store: Store, tool: Hanging, durability: str = "step") -> Agent:
    """An agent of thread ``t`` that answers, then calls ``tool`` (timeout 0.3 s)."""
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(
                [answer("hello"), call(("h1", "hang", "{}")), answer("done")]
            ),
            tools=[Tool("hang", "Hang", OBJECT, tool, timeout=0.3)],
            checkpoint=CheckpointSettings(store=store, thread_id="t", durability=durability),
            reviewer_verifier=VERIFIER,
            clock=ticking_clock(),
        )
    )
