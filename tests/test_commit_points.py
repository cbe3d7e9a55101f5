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
from covonaut_es.errors import ThreadAbandonedError
from covonaut_es.service import HmacReviewerVerifier, ThreadService
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


def lookup_tool(log: list[str]) -> Tool:
    """``lookup``: read-only; logs each execution."""

    def lookup(ctx: ToolContext, args: dict[str, Any]) -> Any:
        log.append(ctx.tool_call_id)
        return {"found": ctx.tool_call_id}

    return Tool("lookup", "Look something up", OBJECT_SCHEMA, lookup, read_only=True)


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_a_turn_of_read_only_calls_commits_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, parallel: bool
) -> None:
    """Calls that are all of read-only tools need no write-ahead: the response, its
    calls and their results are committed with the turn's checkpoint. A response that
    also calls another tool commits its write-ahead as before."""
    commits = record_commits(store, monkeypatch)
    script = [
        call(("c1", "lookup", "{}"), ("c2", "lookup", "{}")),
        call(("c3", "lookup", "{}"), ("c4", "echo", '{"text": "a"}')),
        answer("done"),
    ]
    tools = [lookup_tool([]), echo_tool()]
    assert agent_on(store, script, tools=tools, parallel_tools=parallel).run("go") == "done"
    assert commits == [
        ["StartedWithInput"],
        ["TurnAnsweredWithCalls", "ToolResultRecorded", "ToolResultCheckpointed"],
        ["TurnAnsweredWithCalls"],
        ["ToolResultRecorded"],
        ["ToolResultCheckpointed"],
        ["TurnAnswered", "RunFinishedCheckpointed"],
    ]


READ_ONLY_FLOW = [
    call(("r1", "lookup", "{}"), ("r2", "lookup", "{}")),
    call(("p1", "pay", "{}"), ("r3", "lookup", "{}")),
    answer("done"),
]
"""Two read-only calls; a payment beside a read-only call; the answer."""


class KilledFlow:
    """:data:`READ_ONLY_FLOW` on thread ``thread_id``, the process dying at its
    ``kill``-th step (a commit that returned, or a call that did its work), counted
    from 1; 0 never dies. ``ran`` lists every call that did its work, ``paid`` every
    payment's idempotency key, across the processes."""

    def __init__(self, store: Store, thread_id: str, kill: int, parallel: bool) -> None:
        self.store, self.thread_id, self.kill, self.parallel = store, thread_id, kill, parallel
        self.steps = 0
        self.ran: list[str] = []
        self.paid: list[str] = []

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.kill:
            raise Killed

    def agent(self) -> Agent:
        def lookup(ctx: ToolContext, args: dict[str, Any]) -> Any:
            self.ran.append(ctx.tool_call_id)
            self.step()
            return {"found": ctx.tool_call_id}

        def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
            self.ran.append(ctx.tool_call_id)
            self.paid.append(ctx.idempotency_key)
            self.step()
            return {"paid": ctx.idempotency_key}

        def model(request: Any) -> Any:  # as a real model, it answers the history
            return READ_ONLY_FLOW[sum(m.role.value == "assistant" for m in request.messages)]

        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=model),
                tools=[
                    Tool("lookup", "Look up", OBJECT_SCHEMA, lookup, read_only=True),
                    Tool("pay", "Pay", OBJECT_SCHEMA, pay),
                ],
                checkpoint=CheckpointSettings(store=self.store, thread_id=self.thread_id),
                clock=ticking_clock(),
                parallel_tools=self.parallel,
            )
        )
        save = self.store.save

        def save_and_step(thread: Any) -> None:
            committing = bool(thread.pending_events)
            save(thread)
            if committing:
                self.step()

        self.store.save = save_and_step  # type: ignore[method-assign]
        return agent


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_a_process_dying_at_any_step_of_read_only_calls_leaves_none_in_doubt(
    store: Store, parallel: bool
) -> None:
    """Wherever the process dies, no call of the turn of read-only calls alone is left
    in doubt (that turn was not stored: it runs again from the model call); a payment,
    and the read-only call written ahead with it, may be; settled from what it did, the
    payment is made exactly once, and the read-only call is run again by the run
    itself."""
    reference = KilledFlow(store, "reference", 0, parallel)
    assert reference.agent().run("go") == "done"
    assert reference.steps == 10  # 6 commits and 4 calls
    for kill in range(1, reference.steps + 1):
        flow = KilledFlow(store, f"killed-{kill}", kill, parallel)
        with pytest.raises(Killed):
            flow.agent().run("go")
        agent = flow.agent()
        if not store.exists(flow.thread_id):
            assert agent.run("go") == "done"
        else:
            agent.restore_latest_checkpoint()
            doubted = [pending.call.id for pending in agent.in_doubt]
            assert set(doubted) <= {"p1", "r3"}, (kill, doubted)
            for pending in agent.in_doubt:
                if pending.call.id == "r3":
                    continue  # read-only: the run retries it on its own
                if pending.idempotency_key in flow.paid:
                    agent.settle(pending.call.id, result="paid (found in the ledger)")
                else:
                    agent.settle(pending.call.id, retry=True)
            assert store.replay_state(flow.thread_id) == store.state_at(flow.thread_id)
            if agent.status.value != "finished":
                assert agent.continue_run() == "done", kill
        assert len(flow.paid) == len(set(flow.paid)) == 1, (kill, flow.paid)
        assert agent.messages[-1].content == "done"


@pytest.mark.parametrize("steered", [False, True], ids=["plain", "steered"])
@pytest.mark.parametrize("lost_turn", [1, 2], ids=["first-turn", "later-turn"])
@pytest.mark.parametrize("durability", ["step", "checkpoint"])
def test_no_call_after_a_crash_gets_the_key_a_lost_read_only_call_was_given(
    store: Store, durability: str, lost_turn: int, steered: bool
) -> None:
    """A model may give its calls the same ids again (positional ids): a read-only call
    of a turn the process died in, and the payment the model asks for instead after
    the restart, under the same call id, get different idempotency keys, in every
    durability, whichever turn of the run was lost, and whether that turn began with
    steering (stored before the model call) or not. (A key is the thread's, the version
    of the call's record and the call's id: a read-only turn goes unsaved only when its
    call record is the first event unsaved, the version the next run's start takes.)"""
    keys: dict[str, list[str]] = {"lookup": [], "pay": []}
    restarted = False
    running: list[Agent] = []

    def tool(name: str, **options: Any) -> Tool:
        def run(ctx: ToolContext, args: dict[str, Any]) -> Any:
            keys[name].append(ctx.idempotency_key)
            if name == "lookup" and not restarted:
                raise Killed
            return name

        return Tool(name, name, OBJECT_SCHEMA, run, **options)

    def model(request: Any) -> Any:
        turn = sum(m.role.value == "assistant" for m in request.messages) + 1
        if steered and not restarted and turn == lost_turn - 1:
            running[0].steer("Mind the budget.")  # taken at the lost turn's start
        if turn < lost_turn:
            return call((f"p{turn}", "pay", "{}"))
        if turn == lost_turn:
            return call(("x", "pay" if restarted else "lookup", "{}"))
        return answer("done")

    def agent() -> Agent:
        return Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=model),
                tools=[tool("lookup", read_only=True), tool("pay")],
                checkpoint=CheckpointSettings(store=store, thread_id="t", durability=durability),  # type: ignore[arg-type]
                clock=ticking_clock(),
            )
        )

    running.append(agent())
    if steered and lost_turn == 1:
        running[0].steer("Mind the budget.")
    with pytest.raises(Killed):
        running[0].run("go")
    restarted = True
    again = agent()
    if store.exists("t"):
        again.restore_latest_checkpoint()
        assert again.continue_run() == "done"  # a lookup written ahead: run again
    else:
        assert again.run("go") == "done"
    assert not set(keys["lookup"]) & set(keys["pay"]), keys


class Relisting:
    """A server of tools (``ToolSource``) whose ``touch`` is read-only until ``arm``
    runs, and lists it as changing something from then on."""

    name = "relisting"

    def __init__(self, store: Store) -> None:
        self.armed = False
        self.stored_when_touched: list[list[str]] = []
        self.store = store

    def tools(self) -> list[Tool]:
        def arm(ctx: ToolContext, args: dict[str, Any]) -> Any:
            self.armed = True
            return "armed"

        def touch(ctx: ToolContext, args: dict[str, Any]) -> Any:
            state = self.store.state_at("t") if self.store.exists("t") else None
            open_calls = [] if state is None else [p.call.id for p in state.open_calls]
            self.stored_when_touched.append(open_calls)
            return "touched"

        return [
            Tool("arm", "Arm", OBJECT_SCHEMA, arm, read_only=True),
            Tool("touch", "Touch", OBJECT_SCHEMA, touch, read_only=not self.armed),
        ]


def test_a_turns_calls_run_the_tools_the_model_was_offered_written_ahead_as_those_say(
    store: Store,
) -> None:
    """A source that lists ``touch`` anew, as changing something, once ``arm`` ran:
    the turn's ``touch`` runs the tool as the turn listed it and the model was
    offered it, read-only, so it is not written ahead; the next turn is offered the
    new listing, whose call is. (A server's own tools refuse a call their server
    changed since it was offered: ``test_mcp_connections.py``.)"""
    source = Relisting(store)
    script = [
        call(("a1", "arm", "{}"), ("t1", "touch", "{}")),
        call(("t2", "touch", "{}")),
        answer("done"),
    ]
    agent = agent_on(store, script, tools=[], mcp_servers=[source])
    assert agent.run("go") == "done"
    assert source.stored_when_touched == [[], ["t2"]]


@pytest.mark.parametrize("meanwhile", ["label", "abandon"])
@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "other"])
def test_a_label_or_an_abandon_while_a_call_runs_is_put_before_its_turn(
    store: Store, meanwhile: str, read_only: bool
) -> None:
    """Another writer labels the thread, or a person gives it up, while a call of the
    turn runs: the run's save puts its events after theirs, a read-only turn's unsaved
    calls too (they take later versions, and other keys, which a read-only call has no
    use for, ADR 0150), so a label leaves the run to finish and an abandon stops it with
    the call's result recorded, as for any call."""
    other = ThreadService(store)

    def lookup(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if meanwhile == "label":
            other.label("t", "looked at")
        else:
            other.abandon("t", "not needed any more")
        return "found"

    tool = Tool("lookup", "Look up", OBJECT_SCHEMA, lookup, read_only=read_only)
    agent = agent_on(store, [call(("c1", "lookup", "{}")), answer("done")], tools=[tool])
    if meanwhile == "label":
        assert agent.run("go") == "done"
        assert store.state_at("t").labels[-1].name == "looked at"
    else:
        with pytest.raises(ThreadAbandonedError):
            agent.run("go")
    stored = store.state_at("t")
    assert [m.content for m in stored.messages if m.tool_call_id == "c1"] == ["found"]
    assert store.replay_state("t") == stored


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "other"])
def test_a_turn_whose_first_call_spends_an_approval_commits_each_result_after_it(
    store: Store, read_only: bool
) -> None:
    """A turn of read-only calls whose first call spends an approval is stored by that
    approval's commit, so it goes on as a turn written ahead: the first call's result
    is committed before the next call runs, and the process dying in that one leaves
    only that one in doubt."""
    verifier = HmacReviewerVerifier(b"k" * 32)
    dying = [True]

    def look(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if dying[0]:
            raise Killed
        return "found"

    def model(request: Any) -> Any:
        answered = sum(m.role.value == "assistant" for m in request.messages)
        if answered == 0:
            return call(("a", "fetch", "{}"))
        if answered == 1:
            return call(("b", "fetch", "{}"), ("c", "look", "{}"))
        return answer("done")

    gated = {"read_only": read_only, "idempotent": False, "requires_approval": True}
    fetch = Tool("fetch", "Fetch a private report", OBJECT_SCHEMA, lambda c, a: "report", **gated)

    def agent() -> Agent:
        return Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=model),
                tools=[fetch, Tool("look", "Look", OBJECT_SCHEMA, look, read_only=True)],
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
                clock=ticking_clock(),
                reviewer_verifier=verifier,
            )
        )

    first = agent()
    first.run("go")
    first.approve(first.pending_reviews[0].review_id, reviewer=verifier.issue_token("ann", 60))
    with pytest.raises(Killed):
        agent().resume()
    restored = agent()
    restored.restore_latest_checkpoint()
    assert [pending.call.id for pending in restored.in_doubt] == ["c"]
