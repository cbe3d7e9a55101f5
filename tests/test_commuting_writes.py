"""Writes that commute with a run, landing while one of its tools runs, keep the tool's
result: the run's next save puts its own events after them (ADR 0026)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderResponse,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    open_store,
)
from covonaut_es.errors import ThreadAbandonedError
from covonaut_es.messages import Role
from covonaut_es.service import ThreadService, review_submission

VERIFIER = HmacReviewerVerifier(b"a reviewer secret of 32 bytes!!!")
OBJECT = {"type": "object"}


@pytest.fixture
def two_stores(store_url: str) -> Iterator[tuple[Store, Store]]:
    """Two store objects on one database, as two processes would have (one for an
    in-memory store, which lives in one object)."""
    runner = open_store(store_url)
    other = runner if store_url == "memory://" else open_store(store_url)
    yield runner, other
    runner.close()
    other.close()


def blocked_run(runner: Store) -> tuple[threading.Thread, threading.Event, dict[str, Any]]:
    """Start a run whose batch asks for a review of ``pay`` and runs ``slow``, which
    blocks until the returned event is set."""
    started, gate, outcome = threading.Event(), threading.Event(), {}

    def slow(ctx: Any, args: dict[str, Any]) -> str:
        started.set()
        gate.wait(10)
        return "slow done"

    script = [
        ProviderResponse(
            tool_calls=(ToolCall("p1", "pay", '{"amount": 1}'), ToolCall("s1", "slow", "{}"))
        ),
        ProviderResponse(content="end"),
    ]
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[
                Tool("pay", "Pay", OBJECT, lambda c, a: "paid", requires_approval=True),
                Tool("slow", "Slow", OBJECT, slow),
            ],
            parallel_tools=True,
            checkpoint=CheckpointSettings(store=runner, thread_id="t"),
        )
    )

    def run() -> None:
        try:
            outcome["output"] = agent.run("go")
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(10)
    return thread, gate, outcome


WRITES: dict[str, Callable[[ThreadService], None]] = {
    "a decision": lambda service: service.decide(
        service.store.state_at("t").reviews[0].request.review_id,
        review_submission("reject", text="not today"),
        reviewer=service.reviewer(VERIFIER.issue_token("bob", 60)),
    ),
    "a label": lambda service: service.label("t", "hot"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_that_lands_while_a_tool_runs_keeps_the_tools_result(
    two_stores: tuple[Store, Store], write: str
) -> None:
    """A decision on another review of the batch, or a label, recorded by another
    writer while a tool runs: the run records the tool's result after it, and the
    thread replays to the state it loads to."""
    runner, other = two_stores
    thread, gate, outcome = blocked_run(runner)
    WRITES[write](ThreadService(other, verifier=VERIFIER))
    gate.set()
    thread.join(10)
    assert "error" not in outcome, outcome.get("error")
    state = runner.state_at("t")
    results = [m.content for m in state.messages if m.role is Role.TOOL]
    assert "slow done" in results
    assert runner.replay_state("t") == state


def test_giving_a_thread_up_while_a_tool_runs_keeps_the_result_and_stops_the_run(
    two_stores: tuple[Store, Store],
) -> None:
    """The run saves the tool's result after the abandonment and stops with
    ThreadAbandonedError; the thread stays abandoned."""
    runner, other = two_stores
    thread, gate, outcome = blocked_run(runner)
    ThreadService(other).abandon("t", "customer left")
    gate.set()
    thread.join(10)
    assert isinstance(outcome.get("error"), ThreadAbandonedError)
    state = runner.state_at("t")
    assert state.status.value == "abandoned"
    assert "slow done" in [m.content for m in state.messages if m.role is Role.TOOL]
    assert runner.replay_state("t") == state
