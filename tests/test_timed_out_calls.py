"""A call that outran its timeout keeps its identity (call id, idempotency key,
position) when the run's commit is put after another writer's."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    Message,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.domain import PauseKind
from covonaut_es.errors import ThreadAbandonedError, ThreadConflictError
from covonaut_es.service import ThreadService
from support import answer, call, ticking_clock

OBJECT: dict[str, Any] = {"type": "object"}
VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
RITA = VERIFIER.issue_token("rita", ttl_seconds=3600)


@pytest.fixture
def other(store: Store) -> Iterator[Store]:
    """A second store object on the same database, as another process would open it."""
    if store.url.startswith("memory"):
        yield store
        return
    with open_store(store.url) as second:
        yield second


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


WRITES: dict[str, Callable[[ThreadService], None]] = {
    "a label": lambda service: service.label("t", "hot"),
    "a version label": lambda service: service.label("t", "v1", version=1),
    "an abandonment": lambda service: service.abandon("t", "gone"),
}


@pytest.mark.parametrize("durability", ["step", "checkpoint"])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_timed_out_call_keeps_its_identity_over_a_commuting_write(
    store: Store, other: Store, durability: str, write: str
) -> None:
    """Another writer's commuting write lands while the tool runs; the tool outruns its
    timeout, and the run's commit goes after the write: the call in doubt is the one
    the tool was given, with the same id, key and ToolCalled version."""
    tool = Hanging(lambda: WRITES[write](ThreadService(other)))
    agent = hanging_agent(store, tool, durability)
    assert agent.run("hi") == "hello"  # the thread is stored, as of its checkpoint
    try:
        try:
            assert agent.run("go") == ""
        except ThreadAbandonedError:
            assert write == "an abandonment"
        state = store.state_at("t")
        [pending] = state.open_calls
        assert (pending.call.id, pending.idempotency_key) == ("h1", tool.keys[0])
        called = [e for e in store.history("t") if isinstance(e, AgentThread.ToolCalled)]
        assert [e.tool_call_id for e in called] == ["h1"]
        [pause] = [p for p in state.pauses if p.kind is PauseKind.IN_DOUBT]
        assert isinstance(pause.interrupt.data, dict)
        assert pause.interrupt.data["idempotency_key"] == tool.keys[0]
        assert store.replay_state("t") == state
    finally:
        tool.release.set()
        assert tool.returned.wait(30)


def test_a_rebase_never_renumbers_a_call_recorded_in_doubt(store: Store, other: Store) -> None:
    """A session's unsaved events hold a call and its pause in doubt (its tool started
    under the key its version gives); a label lands before the commit: the commit is
    refused rather than put after the label with the call renumbered."""
    service = ThreadService(store)
    now = ticking_clock()
    with service.session("t") as session:
        session.commit()
    with service.session("t") as session:
        thread = session.thread
        hang = ToolCall("h1", "hang", "{}")
        thread.append_message(Message(Role.ASSISTANT, "", tool_calls=(hang,)), now=now())
        thread.call_tools([hang], now=now())
        thread.pause_in_doubt("h1", "ran past its timeout", now=now())
        ThreadService(other).label("t", "hot")
        with pytest.raises(ThreadConflictError):
            session.commit()
    assert store.state_at("t").open_calls == ()
    assert [e for e in store.history("t") if isinstance(e, AgentThread.ToolCalled)] == []
