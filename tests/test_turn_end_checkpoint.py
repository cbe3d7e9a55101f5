"""A turn's checkpoint is saved by the event that ends the turn: its last tool result
(``ToolResultCheckpointed``) or the final answer (``RunFinishedCheckpointed``), where a
``CheckpointSaved`` of its own followed them (ADR 0073). Checked over generated runs
(tools that answer, fail, pause, need a review or come from a server; in sequence and in
parallel; both durability modes; turn-end checkpoints kept, capped or skipped; a last
answer or a failed model call): every turn that ends unpaused saves exactly one
checkpoint, carried by its last event wherever that is a result or the final answer;
each checkpoint is the thread at its version; the store holds what the agent holds; and
the thread folds, replays and verifies alike."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    InterruptError,
    ProviderResponse,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.domain import CheckpointReason, ThreadStatus, ToolOutcome
from covonaut_es.domain._tool_pins import ToolPin
from covonaut_es.errors import ProviderError, ThreadAbandonedError
from covonaut_es.messages import Message, Role
from covonaut_es.service import ThreadService
from support import GOLDEN, OBJECT_SCHEMA, answer, ticking_clock

NOTE, FAILING, PAUSING, REVIEWED, PINNED = "note", "failing", "pausing", "reviewed", "pinned"
PIN = ToolPin.of(
    server="files", origin="stdio:files", tool=PINNED, description="Pinned", parameters={}
)

turns = st.lists(
    st.lists(st.sampled_from((NOTE, FAILING, PAUSING, REVIEWED, PINNED)), min_size=1, max_size=3),
    max_size=3,
)
"""The answers that call tools, each the tools its calls are to."""


def _tools() -> list[Tool]:
    def note(ctx: ToolContext, args: dict[str, Any]) -> str:
        return "noted"

    def failing(ctx: ToolContext, args: dict[str, Any]) -> str:
        raise RuntimeError("the ledger is down")

    def pausing(ctx: ToolContext, args: dict[str, Any]) -> str:
        raise InterruptError("which account?", {"ask": ctx.tool_call_id})

    return [
        Tool(NOTE, "Note", OBJECT_SCHEMA, note),
        Tool(FAILING, "Fail", OBJECT_SCHEMA, failing),
        Tool(PAUSING, "Ask", OBJECT_SCHEMA, pausing),
        Tool(REVIEWED, "Pay", OBJECT_SCHEMA, note, requires_approval=True),
        Tool(PINNED, "Pinned", OBJECT_SCHEMA, note, pin=PIN),
    ]


def _agent(store: Store, script: list[Any], *, parallel: bool, **checkpointing: Any) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=_tools(),
            parallel_tools=parallel,
            checkpoint=CheckpointSettings(store=store, thread_id="t1", **checkpointing),
            clock=ticking_clock(),
        )
    )


def _script(calls: list[list[str]], ends: str, run: int) -> list[Any]:
    script: list[Any] = [
        ProviderResponse(
            tool_calls=tuple(ToolCall(f"r{run}t{t}c{i}", tool, "{}") for i, tool in enumerate(turn))
        )
        for t, turn in enumerate(calls)
    ]
    script.append(answer("done") if ends == "answer" else RuntimeError("down"))
    return script


def _abandoning(store: Store, item: Any) -> Any:
    """``item`` of a script, played after the thread is given up (once it is stored)."""

    def respond(request: Any) -> Any:
        if store.exists("t1"):
            ThreadService(store).abandon("t1", "the customer left")
        if isinstance(item, Exception):
            raise item
        return item

    return respond


def _turns(history: list[Any]) -> list[list[Any]]:
    """The events of each model call's turn, from the event that records its answer to
    the event before the next turn, run or resumption starts."""
    spans: list[list[Any]] = []
    in_turn = False
    for event in history:
        starts_turn = isinstance(event, AgentThread.TurnAnswered | AgentThread.TurnStarted)
        if starts_turn and not (in_turn and isinstance(spans[-1][-1], AgentThread.TurnStarted)):
            spans.append([event])
            in_turn = True
        elif isinstance(event, AgentThread.RunStarted | AgentThread.Resumed):
            in_turn = False  # a run's first events belong to no turn
        elif in_turn:
            spans[-1].append(event)
    return spans


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(st.tuples(turns, st.sampled_from(("answer", "fail"))), min_size=1, max_size=3),
    parallel=st.booleans(),
    durability=st.sampled_from(("step", "checkpoint")),
    skip_end=st.booleans(),
    save_on_turn_start=st.booleans(),
    retain=st.sampled_from((0, 2)),
    abandon_in_call=st.none() | st.integers(0, 3),
)
@example(  # given up during the last model call, whose answer is stored after that
    runs=[([[NOTE]], "answer")],
    parallel=False,
    durability="step",
    skip_end=False,
    save_on_turn_start=False,
    retain=0,
    abandon_in_call=1,
)
def test_every_turn_that_ends_saves_one_checkpoint_with_its_last_result_or_answer(
    runs: list[tuple[list[list[str]], str]],
    parallel: bool,
    durability: str,
    skip_end: bool,
    save_on_turn_start: bool,
    retain: int,
    abandon_in_call: int | None,
) -> None:
    """``abandon_in_call``: the model call of the first run during which a person gives
    the thread up (the run's later events are stored after it, ADR 0026)."""
    # Under durability="checkpoint" a thread that saves no turn-end checkpoint commits
    # only its pauses and failures: nothing for a turn to fold into.
    assume(not (durability == "checkpoint" and skip_end))
    with open_store("memory://", max_checkpoints_per_thread=retain) as store:
        for run, (calls, ends) in enumerate(runs):
            script = _script(calls, ends, run)
            if run == 0 and abandon_in_call is not None and abandon_in_call < len(script):
                script[abandon_in_call] = _abandoning(store, script[abandon_in_call])
            elif run and store.load("t1").status is ThreadStatus.ABANDONED:
                break
            agent = _agent(
                store,
                script,
                parallel=parallel,
                durability=durability,
                skip_save_on_turn_end=skip_end,
                save_on_turn_start=save_on_turn_start,
            )
            if store.exists("t1"):
                agent.restore_latest_checkpoint()
                if agent.interrupts:  # a pause ends this thread's runs
                    break
            try:
                agent.run("go")
            except ProviderError:
                assert ends == "fail"
            except ThreadAbandonedError:
                assert run == 0 and abandon_in_call is not None
            # The store holds what the agent holds: a run's end, failure and pause are
            # each committed.
            assert store.load("t1").version == agent.state.version
        history = list(store.history("t1"))
        thread = store.load("t1")

        savers = [e for e in history if e.checkpoint_reason is not None]
        kept = savers[-retain:] if retain else savers
        assert [(c.version, c.reason) for c in thread.checkpoints] == [
            (e.originator_version, e.checkpoint_reason) for e in kept
        ]
        assert [c.sequence for c in thread.checkpoints] == list(
            range(len(savers) - len(kept) + 1, len(savers) + 1)
        )
        for checkpoint in thread.checkpoints:  # each is the thread at its version
            at = store.state_at("t1", checkpoint.version)
            assert (at.turn, at.status) == (checkpoint.turn, checkpoint.status)

        given_up = next(
            (e.originator_version for e in history if isinstance(e, AgentThread.Abandoned)), None
        )
        for whole in _turns(history):
            # What a person does beside a run (here, giving the thread up) is no turn's.
            span = [e for e in whole if not isinstance(e, AgentThread.Abandoned)]
            ended = [e for e in span if e.checkpoint_reason is CheckpointReason.TURN_END]
            paused = any(isinstance(e, AgentThread.Interrupted) for e in span)
            failed = any(isinstance(e, AgentThread.RunFailed) for e in span)
            if skip_end or paused or failed:
                assert ended == [], span
                continue
            if given_up is not None and whole[-1].originator_version >= given_up:
                # The run stopped after what it had recorded: a turn it ended saved one.
                assert ended in ([], [span[-1]]), span
                continue
            # One checkpoint, saved by the turn's last event: its last result or answer.
            assert ended == [span[-1]], span
            assert isinstance(
                span[-1], AgentThread.ToolResultCheckpointed | AgentThread.RunFinishedCheckpointed
            ), span
        for event, after in itertools.pairwise(history):
            if after.checkpoint_reason is CheckpointReason.TURN_END:
                # Never a checkpoint of its own where the event before could carry it.
                assert type(after) is not AgentThread.CheckpointSaved or type(event) not in (
                    AgentThread.ToolResultRecorded,
                    AgentThread.RunFinished,
                ), history

        assert tuple(thread.messages) == agent.messages
        assert store.state_at("t1") == store.replay_state("t1")
        assert store.verify("t1").ok
        assert len(list(store.replay("t1"))) == len(history)


def test_a_turn_with_a_tool_and_a_final_answer_store_no_checkpoint_of_their_own() -> None:
    with open_store("memory://") as store:
        _agent(store, _script([[NOTE]], "answer", 0), parallel=False).run("go")
        kinds = [type(e).__name__ for e in store.history("t1")]
        assert kinds == [
            "StartedWithInput",
            "TurnAnsweredWithCalls",
            "ToolResultCheckpointed",
            "TurnAnswered",
            "RunFinishedCheckpointed",
        ]
        lines = [e.summary for e in store.replay("t1")][-3:]
        assert lines == [
            "note succeeded: noted, checkpoint saved (turn_end)",
            "turn 2: assistant: done",
            "answered: done, checkpoint saved (turn_end)",
        ]
        (first, second) = store.checkpoints("t1")
        assert (first.version, first.turn, first.status) == (3, 1, ThreadStatus.RUNNING)
        assert (second.version, second.turn, second.status) == (5, 2, ThreadStatus.FINISHED)


def test_the_thread_saves_the_checkpoint_with_what_it_records() -> None:
    now = ticking_clock()
    thread = AgentThread.start("t1", now=now())
    call = ToolCall("c1", NOTE, "{}")
    thread.answer_turn_calling(Message(Role.ASSISTANT, "", tool_calls=(call,)), now=now())
    checkpoint = thread.record_tool_result_checkpointed(
        "c1", "noted", ToolOutcome.SUCCEEDED, retain=1, now=now()
    )
    assert (checkpoint.version, checkpoint.reason) == (thread.version, CheckpointReason.TURN_END)
    finished = thread.finish_checkpointed("done", retain=1, now=now())
    assert thread.checkpoints == [finished]  # retain keeps the newest
    assert finished.status is ThreadStatus.FINISHED and thread.output is None


@pytest.mark.parametrize("saving", ["result", "finish", "checkpoint"])
def test_a_negative_retain_is_refused_before_anything_changes(saving: str) -> None:
    now = ticking_clock()
    thread = AgentThread.start("t1", now=now())
    call = ToolCall("c1", NOTE, "{}")
    thread.answer_turn_calling(Message(Role.ASSISTANT, "", tool_calls=(call,)), now=now())
    before = (thread.version, list(thread.checkpoints), list(thread.open_calls), thread.status)
    with pytest.raises(ValueError, match="retain counts the newest checkpoints"):
        if saving == "result":
            thread.record_tool_result_checkpointed(
                "c1", "noted", ToolOutcome.SUCCEEDED, retain=-1, now=now()
            )
        elif saving == "finish":
            thread.finish_checkpointed("done", retain=-1, now=now())
        else:
            thread.save_checkpoint(CheckpointReason.MANUAL, retain=-1, now=now())
    after = (thread.version, list(thread.checkpoints), list(thread.open_calls), thread.status)
    assert after == before
    assert len(thread.collect_events()) == 2  # its start and the answer


def test_a_thread_written_before_goes_on_saving_its_checkpoints_with_its_turns(
    tmp_path: Path,
) -> None:
    """A golden thread of the code before, whose turns each end with a
    ``CheckpointSaved``, runs on: its next turns save theirs with their last events."""
    shutil.copy(GOLDEN / "v9-calls-with-answer" / "plain.db", tmp_path / "threads.db")
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        before = store.load("golden-values")
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(
                    [ProviderResponse(tool_calls=(ToolCall("v9", "echo", "{}"),)), answer("again")]
                ),
                tools=[Tool("echo", "Echo", OBJECT_SCHEMA, lambda ctx, args: "echoed")],
                checkpoint=CheckpointSettings(store=store, thread_id="golden-values"),
                clock=ticking_clock(),
            )
        )
        assert agent.run("once more") == "again"
        history = store.history("golden-values")
        assert any(type(e) is AgentThread.CheckpointSaved for e in history[: before.version])
        after = [type(e).__name__ for e in history[before.version :]]
        assert "CheckpointSaved" not in after
        assert after[-1] == "RunFinishedCheckpointed"
        assert [c.version for c in store.checkpoints("golden-values")][-3:] == [
            before.checkpoints[-1].version,
            before.version + 3,  # the run started with its input (ADR 0079), then a turn
            before.version + 5,
        ]
        assert store.verify("golden-values").ok


@pytest.mark.parametrize("durability", ["step", "checkpoint"])
def test_a_run_under_either_durability_commits_each_turn_with_its_checkpoint(
    durability: str,
) -> None:
    with open_store("memory://") as store:
        agent = _agent(
            store,
            _script([[NOTE], [NOTE, NOTE]], "answer", 0),
            parallel=True,
            durability=durability,
        )
        assert agent.run("go") == "done"
        assert [c.turn for c in store.checkpoints("t1")] == [1, 2, 3]
