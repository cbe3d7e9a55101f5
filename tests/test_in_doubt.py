"""Calls in doubt: recorded as called, no recorded result; settled explicitly."""

from __future__ import annotations

from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolCallsInDoubtError,
    ToolContext,
)
from covonaut_es.domain import ToolOutcome
from covonaut_es.errors import ThreadStateError
from support import OBJECT_SCHEMA, answer, call, ticking_clock


class ProcessDied(BaseException):
    """Stands in for the process dying inside a tool: nothing after it runs."""


def crashing_tool(executions: list[str], *, idempotent: bool = False) -> Tool:
    """``transfer``: records its execution; the first execution kills the 'process'."""

    def transfer(ctx: ToolContext, args: dict[str, Any]) -> Any:
        executions.append(ctx.idempotency_key)
        if len(executions) == 1:
            raise ProcessDied
        return "transferred"

    return Tool("transfer", "Move money", OBJECT_SCHEMA, transfer, idempotent=idempotent)


def agent_on(store: Store, tool: Tool, script: list[Any]) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[tool],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
        )
    )


def crash_in_tool(store: Store, tool: Tool) -> Agent:
    """Run until the tool 'kills the process', then restore in a fresh agent."""
    with pytest.raises(ProcessDied):
        agent_on(store, tool, [call(("c1", "transfer", "{}"))]).run("send it")
    restored = agent_on(store, tool, [answer("done")])
    restored.restore_latest_checkpoint()
    return restored


def test_restored_agent_reports_the_call_in_doubt(store: Store) -> None:
    """After a restore, a call without a recorded result is reported with its key."""
    executions: list[str] = []
    agent = crash_in_tool(store, crashing_tool(executions))
    (pending,) = agent.in_doubt
    assert (pending.call.id, pending.call.name, pending.call.arguments) == ("c1", "transfer", "{}")
    assert pending.idempotency_key == executions[0]
    assert agent.status is ThreadStatus.RUNNING


def test_continue_and_resume_refuse_while_calls_are_in_doubt(store: Store) -> None:
    """continue_run() and resume() refuse with a clear error naming the calls."""
    agent = crash_in_tool(store, crashing_tool([]))
    with pytest.raises(ToolCallsInDoubtError, match="in doubt") as info:
        agent.continue_run()
    assert info.value.tool_call_ids == ("c1",)
    with pytest.raises(ToolCallsInDoubtError):
        agent.resume()
    with pytest.raises(ToolCallsInDoubtError):
        agent.run("more")


def test_settle_with_a_result_records_it_without_running_the_tool(store: Store) -> None:
    """settle(result=...) is an event; the tool is not run again."""
    executions: list[str] = []
    agent = crash_in_tool(store, crashing_tool(executions))
    agent.settle("c1", result={"status": "transferred (checked with the bank)"})
    assert executions == [executions[0]]
    assert agent.in_doubt == ()
    settled = store.history("t")[-1]
    assert isinstance(settled, AgentThread.ToolCallSettled)
    assert settled.outcome is ToolOutcome.SETTLED
    assert agent.continue_run() == "done"


def test_settle_with_retry_runs_the_call_again_with_the_same_key(store: Store) -> None:
    """settle(retry=True) records the decision and runs the tool with the same key."""
    executions: list[str] = []
    agent = crash_in_tool(store, crashing_tool(executions))
    agent.settle("c1", retry=True)
    assert len(executions) == 2 and executions[0] == executions[1]
    kinds = [type(e).__name__ for e in store.history("t")[-2:]]
    assert kinds == ["ToolCallRetried", "ToolResultRecorded"]
    assert agent.continue_run() == "done"


def test_idempotent_tools_are_retried_automatically(store: Store) -> None:
    """A tool declared idempotent is retried by the next continue_run()."""
    executions: list[str] = []
    agent = crash_in_tool(store, crashing_tool(executions, idempotent=True))
    assert agent.continue_run() == "done"
    assert len(executions) == 2 and executions[0] == executions[1]
    assert any(isinstance(e, AgentThread.ToolCallRetried) for e in store.history("t"))


def test_restore_itself_never_runs_a_call_in_doubt(store: Store) -> None:
    """Restoring, even for an idempotent tool, runs nothing."""
    executions: list[str] = []
    crash_in_tool(store, crashing_tool(executions, idempotent=True))
    assert len(executions) == 1


def test_settle_refuses_an_unknown_call_and_a_bad_combination(store: Store) -> None:
    """settle() names what was wrong: an unknown call, or result and retry together."""
    agent = crash_in_tool(store, crashing_tool([]))
    with pytest.raises(ThreadStateError, match=r"'nope' .* is not open"):
        agent.settle("nope", result="x")
    with pytest.raises(ThreadStateError, match="exactly one"):
        agent.settle("c1", result="x", retry=True)
    with pytest.raises(ThreadStateError, match="exactly one"):
        agent.settle("c1")
