"""A fork taken inside the run that holds the parent (a tool forking its own thread, a
hook of the run) is granted the run's own lease re-entrantly, so Store.fork's refusal of
a fork at a version holding calls open never applies: the fork holds the running call
open, for a worker to run again (helper-254)."""

from __future__ import annotations

from typing import Any

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, Store, Tool
from covonaut_es.errors import ToolCallRunningError
from support import answer, call


def test_a_tool_forking_its_own_running_thread_at_its_head_is_refused(store: Store) -> None:
    outcome: dict[str, Any] = {}

    def charge(ctx: Any, args: dict[str, Any]) -> str:
        try:
            outcome["fork"] = store.fork(ctx.thread_id, new_thread_id="f")
        except ToolCallRunningError as exc:
            outcome["refused"] = exc
        return "charged"

    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "charge", "{}")), answer("done")]),
            tools=[Tool("charge", "Charge", {"type": "object"}, charge, idempotent=True)],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )
    agent.run("Charge.")
    if "fork" in outcome:
        # the fork holds the call that was running open, for a worker to run again
        assert not store.state_at("f").open_calls, "fork holds open call c1 running in the parent"
    assert "refused" in outcome
