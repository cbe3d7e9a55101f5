"""A turn's commit points: a turn that calls tools commits twice (its write-ahead, then
its results with its checkpoint), and a process dying at any point between them loses
nothing that was committed before the next risky step: the steering taken before a
model call, a finished call's result before the next call runs or is waited for."""

from __future__ import annotations

import time
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    Tool,
    ToolContext,
)
from support import OBJECT_SCHEMA, answer, call, echo_tool, ticking_clock


class Killed(BaseException):
    """Stands in for the process dying: nothing catches it and nothing after it runs."""


def agent_on(store: Store, script: list[Any], **options: Any) -> Agent:
    options.setdefault("tools", [echo_tool()])
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
            **options,
        )
    )


def record_commits(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The event types of each commit the store makes from now on."""
    commits: list[list[str]] = []
    save = store.save

    def recording(thread: Any) -> None:
        if thread.pending_events:
            commits.append([type(e).__name__ for e in thread.pending_events])
        save(thread)

    monkeypatch.setattr(store, "save", recording)
    return commits


def test_a_turn_that_calls_tools_commits_twice(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The response, which starts its turn, and its calls are committed before any tool runs;
    the last result, which saves the end-of-turn checkpoint; in a batch, each earlier
    result before the next call runs. The final answer's turn commits once."""
    commits = record_commits(store, monkeypatch)
    script = [
        call(("c1", "echo", '{"text": "a"}')),
        call(("c2", "echo", '{"text": "b"}'), ("c3", "echo", '{"text": "c"}')),
        answer("done"),
    ]
    assert agent_on(store, script).run("go") == "done"
    write_ahead = ["TurnAnsweredWithCalls"]  # the answer, its turn start and its calls
    results = ["ToolResultCheckpointed"]
    assert commits == [
        ["StartedWithInput"],
        write_ahead,
        results,
        write_ahead,
        ["ToolResultRecorded"],
        results,
        ["TurnAnswered", "RunFinishedCheckpointed"],
    ]


def test_steering_is_committed_before_a_model_call_that_dies(store: Store) -> None:
    """Steering taken from the agent at a turn's start is stored before the model call,
    so the process dying in that call does not lose it."""
    agent = agent_on(store, [call(("c1", "echo", "{}")), Killed()])
    with pytest.raises(Killed):
        agent.run("go")
    # A bare turn start is stored with the model's response only: nothing was lost.
    assert store.state_at("t").version == store.checkpoints("t")[-1].version
    agent = agent_on(store, [Killed()])
    agent.restore_latest_checkpoint()
    agent.steer("Use the other account.")
    with pytest.raises(Killed):
        agent.continue_run()

    restored = agent_on(store, [answer("done")])
    restored.restore_latest_checkpoint()
    assert restored.messages[-1].content == "Use the other account."
    assert restored.in_doubt == ()
    assert restored.continue_run() == "done"


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_a_finished_call_of_a_batch_is_committed_before_the_process_dies_in_the_next(
    store: Store, parallel: bool
) -> None:
    """A call that finished is not in doubt after the process dies in a later call of
    its batch: its result is committed before that call runs (sequentially) or before
    the run waits for it (in parallel)."""
    seen: list[list[str]] = []

    def dies(ctx: ToolContext, args: dict[str, Any]) -> Any:
        deadline = time.monotonic() + 10  # in parallel, the first call may still run
        while "c1" in (open_ids := [p.call.id for p in store.state_at("t").open_calls]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        seen.append(open_ids)
        raise Killed

    tools = [echo_tool(), Tool("dies", "Dies", OBJECT_SCHEMA, dies)]
    script = [call(("c1", "echo", '{"text": "a"}'), ("c2", "dies", "{}"))]
    agent = agent_on(store, script, tools=tools, parallel_tools=parallel)
    with pytest.raises(Killed):
        agent.run("go")

    assert seen == [["c2"]]
    restored = agent_on(store, [], tools=tools)
    restored.restore_latest_checkpoint()
    assert [p.call.id for p in restored.in_doubt] == ["c2"]
    assert restored.messages[-1].tool_call_id == "c1"
