"""A turn's start is recorded with the model's answer, in one ``TurnAnswered`` event,
unless the turn records something of its own before the answer (steering, a compaction,
a checkpoint at the turn's start) or its model call fails: then ``TurnStarted`` comes
first, as before (ADR 0071). Checked over generated runs: every model call starts exactly
one recorded turn, no ``TurnStarted`` is stored where its answer could have carried it,
what a turn records before its answer follows a ``TurnStarted``, and the thread folded
from the store is the thread the agent holds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    open_store,
)
from covonaut_es.domain import Compaction, ThreadStatus
from covonaut_es.errors import ProviderError
from covonaut_es.messages import Message, Role
from covonaut_es.runtime._compaction import CompactionPlan
from support import OBJECT_SCHEMA, golden_store, ticking_clock

STEER, NOTE, ANSWER, FAIL = "steer", "note", "answer", "fail"
TURN_STARTS = AgentThread.TurnStarted | AgentThread.TurnAnswered

turns = st.tuples(
    st.lists(st.sampled_from((STEER, NOTE)), max_size=4), st.sampled_from((ANSWER, FAIL))
)
"""The model's turns of one run: each call before the last runs a tool that notes, or
steers the next turn; the last answers or fails."""


class EveryFewMessages:
    """Compacts, with a summary of its own, once ``every`` messages came since the last
    compaction: some turns compact and some do not."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.planned = 0

    def plan(
        self, messages: Sequence[Message], previous: Compaction | None, *, model: str
    ) -> CompactionPlan | None:
        start = previous.first_kept if previous else 0
        if len(messages) - start < self.every:
            return None
        self.planned += 1
        return CompactionPlan(first_kept=len(messages) - 1, summary=f"{len(messages)} so far")


def _agent(
    store: Any,
    plan: tuple[list[str], str],
    *,
    turn_start: bool,
    compactor: EveryFewMessages | None = None,
) -> Agent:
    calls, last = plan
    script: list[Any] = [
        ProviderResponse(tool_calls=(ToolCall(f"c{n}", tool, "{}"),))
        for n, tool in enumerate(calls)
    ]
    script.append(ProviderResponse(content="done") if last == ANSWER else RuntimeError("down"))
    agent: Agent

    def steer(ctx: Any, args: dict[str, Any]) -> str:
        agent.steer("and mind the budget")
        return "steered"

    tools = [
        Tool(STEER, "Steer the next turn", OBJECT_SCHEMA, steer),
        Tool(NOTE, "Note", OBJECT_SCHEMA, lambda ctx, args: "noted"),
    ]
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=tools,
            checkpoint=CheckpointSettings(
                store=store, thread_id="t1", save_on_turn_start=turn_start
            ),
            compactor=compactor,
            clock=ticking_clock(),
        )
    )
    return agent


def _run(agent: Agent, last: str) -> None:
    if last == FAIL:
        with pytest.raises(ProviderError):
            agent.run("go")
    else:
        assert agent.run("go") == "done"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(turns, min_size=1, max_size=3),
    turn_start=st.booleans(),
    compact=st.none() | st.integers(2, 5),
)
def test_every_model_call_starts_one_recorded_turn_folded_where_nothing_comes_between(
    runs: list[tuple[list[str], str]], turn_start: bool, compact: int | None
) -> None:
    compactor = None if compact is None else EveryFewMessages(compact)
    with open_store("memory://") as store:
        model_calls = 0
        for plan in runs:
            agent = _agent(store, plan, turn_start=turn_start, compactor=compactor)
            _run(agent, plan[1])
            model_calls += len(plan[0]) + 1
        history = store.history("t1")
        thread = store.load("t1")

        starts = [
            e for e in history if isinstance(e, AgentThread.TurnStarted | AgentThread.TurnAnswered)
        ]
        assert [e.turn for e in starts] == list(range(1, model_calls + 1))
        assert thread.turn == model_calls
        steered = sum(plan[0].count(STEER) for plan in runs)
        assert sum(isinstance(e, AgentThread.Steered) for e in history) == steered
        compacted = sum(isinstance(e, AgentThread.Compacted) for e in history)
        assert compacted == (0 if compactor is None else compactor.planned)
        started_by: Any = None
        for event, after in zip(history, [*history[1:], None], strict=True):
            if isinstance(event, TURN_STARTS):
                started_by = type(event)
            if isinstance(event, AgentThread.TurnStarted):
                # Kept only where something of the turn's own follows before its answer.
                plain_answer = type(after) is AgentThread.MessageAppended
                assert not (plain_answer and after.message.role is Role.ASSISTANT), history
            if isinstance(event, AgentThread.Steered | AgentThread.Compacted):
                # What a turn records before its answer follows a turn start of its own.
                assert started_by is AgentThread.TurnStarted, history
        assert tuple(thread.messages) == agent.messages
        assert store.state_at("t1") == store.replay_state("t1")
        assert store.verify("t1").ok
        assert len(list(store.replay("t1"))) == len(history)


def test_a_plain_turn_is_one_event_and_its_audit_line_names_the_turn() -> None:
    with open_store("memory://") as store:
        _run(_agent(store, ([NOTE], ANSWER), turn_start=False), ANSWER)
        kinds = [type(e).__name__ for e in store.history("t1")]
        assert "TurnStarted" not in kinds
        assert (kinds.count("TurnAnsweredWithCalls"), kinds.count("TurnAnswered")) == (1, 1)
        summaries = [e.summary for e in store.replay("t1") if e.kind == "TurnAnswered"]
        assert summaries[-1] == "turn 2: assistant: done"


def test_a_turn_is_answered_by_the_model_only() -> None:
    now = ticking_clock()
    thread = AgentThread.start("t1", now=now())
    with pytest.raises(ValueError, match="assistant message, not a user one"):
        thread.answer_turn(Message(Role.USER, "hi"), now=now())
    assert (thread.turn, thread.version, thread.messages) == (0, 1, [])


def test_a_thread_written_with_turn_starts_goes_on_counting_its_turns(tmp_path: Path) -> None:
    """A golden thread of the code before, all of whose turns began with ``TurnStarted``,
    run on: its next turn is one more, folded, and the thread verifies and replays."""
    with golden_store("retries-begun", tmp_path) as store:
        thread_id = next(t for t in store.thread_ids() if store.load(t).status.value == "finished")
        before = store.load(thread_id)
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider([ProviderResponse(content="again")]),
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                clock=ticking_clock(),
            )
        )
        assert agent.run("once more") == "again"
        history = store.history(thread_id)
        assert any(isinstance(e, AgentThread.TurnStarted) for e in history[: before.version])
        (folded,) = [
            e for e in history[before.version :] if isinstance(e, AgentThread.TurnAnswered)
        ]
        assert folded.turn == before.turn + 1 == store.load(thread_id).turn
        assert store.verify(thread_id).ok
        assert store.replay_state(thread_id) == store.state_at(thread_id)


class FailingOnPlan(EveryFewMessages):
    """Compacts as :class:`EveryFewMessages`, and raises at its ``fail_at``-th plan."""

    def __init__(self, every: int, fail_at: int) -> None:
        super().__init__(every)
        self.fail_at, self.plans = fail_at, 0

    def plan(
        self, messages: Sequence[Message], previous: Compaction | None, *, model: str
    ) -> CompactionPlan | None:
        self.plans += 1
        if self.plans == self.fail_at:
            raise LookupError("the planner's index is gone")
        return super().plan(messages, previous, model=model)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    calls=st.lists(st.sampled_from((STEER, NOTE)), min_size=1, max_size=4),
    every=st.integers(2, 5),
    fail_at=st.integers(1, 5),
)
def test_a_compactor_that_fails_fails_the_run_on_record(
    calls: list[str], every: int, fail_at: int
) -> None:
    """A compactor's plan that raises, before a turn starts or after steering started
    it, is recorded as the run's failure (its turn counted), as a model call's is, and
    raised as it is; the thread folds and verifies, and a run after goes on."""
    compactor = FailingOnPlan(every, fail_at)
    with open_store("memory://") as store:
        agent = _agent(store, (calls, ANSWER), turn_start=False, compactor=compactor)
        if fail_at > len(calls) + 1:  # the run ends before the failing plan
            agent.run("go")
            return
        with pytest.raises(LookupError, match="index is gone"):
            agent.run("go")
        history = store.history("t1")
        assert isinstance(history[-1], AgentThread.RunFailed)
        assert history[-1].error_type == "LookupError"
        state = store.state_at("t1")
        assert state.status is ThreadStatus.ERROR and state.turn == fail_at
        assert state == store.replay_state("t1")
        assert store.verify("t1").ok
        again = Agent(
            AgentConfig(
                provider=ScriptedProvider([ProviderResponse(content="recovered")]),
                checkpoint=CheckpointSettings(store=store, thread_id="t1"),
                clock=ticking_clock(),
            )
        )
        assert again.continue_run() == "recovered"
