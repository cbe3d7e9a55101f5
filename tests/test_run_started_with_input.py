"""A run that ``run()`` starts with new input records its start and the user's message
in one ``RunStartedWithInput`` event, unless something is recorded between them: the
results of calls that unspent approvals run (a fork taken after a resume began holds
such calls and no pause), or the system prompt before a thread's first message; then
``RunStarted`` comes first, as before (ADR 0079). On a new thread the same record is its
first, ``StartedWithInput``, unless the run records something before its input or the
thread's first command is not a ``run()`` (ADR 0081). Checked over generated
sequences of runs, pauses, decisions, resumes and continues: every input is stored once,
in order, each ``run()`` starts exactly one run, no ``RunStarted`` or ``Started`` is
stored where the input after it could have carried it, and the thread folded from the
store is the thread the agent holds."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Store,
    Tool,
    open_store,
)
from covonaut_es.agui import create_agui_app
from covonaut_es.domain import RunMode
from covonaut_es.errors import InvalidRunInputError, ThreadNotFoundError, ThreadStateError
from covonaut_es.messages import Message, Role
from covonaut_es.service import ThreadService
from covonaut_es.workers._step import step
from support import GOLDEN, answer, call, ticking_clock
from test_approvals import ALICE, PAY_40, VERIFIER
from test_run_on_approval import agent_of, decide, pay_tool

ANSWER, PAUSE, CONTINUE = "answer", "pause", "continue"
APPROVE, REJECT = "approve", "reject"

steps = st.lists(st.sampled_from((ANSWER, PAUSE, CONTINUE)), min_size=1, max_size=5)
"""What each step does: ``run()`` with input that the model answers, or that asks for
a call held for review (decided, then resumed), or ``continue_run()`` without input."""


def _agent(store: Store, script: list[Any], *, system_prompt: str | None) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[pay_tool([])],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            reviewer_verifier=VERIFIER,
            system_prompt=system_prompt or "",
            clock=ticking_clock(),
        )
    )


def _is_user_message(event: Any) -> bool:
    return isinstance(event, AgentThread.MessageAppended) and event.message.role is Role.USER


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=steps,
    decisions=st.lists(st.sampled_from((APPROVE, REJECT)), min_size=5, max_size=5),
    system_prompt=st.none() | st.just("You help with payments."),
)
def test_each_input_is_stored_once_with_its_runs_start_where_nothing_comes_between(
    plan: list[str], decisions: list[str], system_prompt: str | None
) -> None:
    with open_store("memory://") as store:
        inputs: list[str] = []
        agent: Agent | None = None
        for n, step in enumerate(plan):
            if step == CONTINUE:
                agent = _agent(store, [answer(f"on {n}")], system_prompt=system_prompt)
                if not inputs:  # nothing stored to go on from: refused, nothing recorded
                    with pytest.raises(ThreadNotFoundError, match=r"start it with run\(input\)"):
                        agent.continue_run()
                    assert store.find("t") is None
                    continue
                assert agent.continue_run() == f"on {n}"
                continue
            inputs.append(f"question {n}")
            script = [call((f"c{n}", "pay", PAY_40))] if step == PAUSE else [answer(f"a{n}")]
            agent = _agent(store, script, system_prompt=system_prompt)
            agent.run(inputs[-1])
            if step == PAUSE:
                (request,) = agent.pending_reviews
                reason = {"text": "not this one"} if decisions[n] == REJECT else {}
                decide(store, request.review_id, decisions[n], **reason)
                agent = _agent(store, [answer(f"after {n}")], system_prompt=system_prompt)
                assert agent.resume() == f"after {n}"
        if not inputs:
            return
        assert agent is not None
        history = store.history("t")

        users = [e.message.content for e in history if _is_user_message(e)]
        assert users == inputs
        run_starts = [
            e for e in history if isinstance(e, AgentThread.RunStarted) and e.mode is RunMode.RUN
        ]
        assert len(run_starts) == len(inputs)
        for event, after in itertools.pairwise(history):
            if type(event) is AgentThread.RunStarted and event.mode is RunMode.RUN:
                # Kept only where something of the run's own comes before its input.
                assert not _is_user_message(after), history
                assert after.message.role is Role.SYSTEM, history
            if type(event) is AgentThread.Started:
                # Kept only where the first run records something before its input,
                # or the first command is not a run.
                assert not isinstance(after, AgentThread.RunStartedWithInput), history
        assert isinstance(history[0], AgentThread.Started)
        created_with_input = system_prompt is None  # a continue before any run stores nothing
        assert (type(history[0]) is AgentThread.StartedWithInput) is created_with_input
        assert [type(e) for e in history].count(AgentThread.StartedWithInput) <= 1
        system = [
            e
            for e in history
            if isinstance(e, AgentThread.MessageAppended) and e.message.role is Role.SYSTEM
        ]
        assert len(system) == (system_prompt is not None)
        thread = store.load("t")
        if system_prompt:
            assert thread.messages[0].role is Role.SYSTEM  # before any input
        assert tuple(thread.messages) == agent.messages
        assert store.state_at("t") == store.replay_state("t")
        assert store.verify("t").ok
        assert len(list(store.replay("t"))) == len(history)


PAY_20 = '{"amount": 20, "to": "amy"}'
STRICTER = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "to": {"type": "string"}, "memo": {}},
    "required": ["amount", "to", "memo"],
}


def _results_follow_their_calls(messages: Sequence[Message]) -> bool:
    """Each tool message follows the assistant message that asked for its call, with
    only results of that batch between them, as every provider requires."""
    asked: set[str] = set()
    for message in messages:
        if message.role is Role.TOOL:
            if message.tool_call_id not in asked:
                return False
        else:
            asked = {c.id for c in message.tool_calls}
    return True


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.integers(1, 2),
    point=st.integers(0, 3),
    tools=st.sampled_from(("none", "stricter schema")),
    system_prompt=st.none() | st.just("You pay."),
)
def test_a_fork_holding_approved_calls_records_their_results_before_new_input(
    batch: int, point: int, tools: str, system_prompt: str | None
) -> None:
    """A fork taken where a resume spends approvals on calls not yet run (its
    ``Resumed``, or a result of the batch before the next call's), given input by an
    agent that cannot run those calls: their results are recorded first, right after
    the calls, and the input after them (found by a fresh attack, helper-85)."""
    with open_store("memory://") as store:
        calls = [(f"c{i}", "pay", (PAY_40, PAY_20)[i]) for i in range(batch)]
        agent_of(store, [call(*calls)], pay_tool([])).run("Pay.")
        for request in agent_of(store, [], pay_tool([])).pending_reviews:
            decide(store, request.review_id, "approve")
        agent_of(store, [answer("done")], pay_tool([])).resume()
        history = store.history("t")
        resumed = next(e for e in history if isinstance(e, AgentThread.Resumed))
        results = [e for e in history if isinstance(e, AgentThread.ToolResultRecorded)]
        points = [resumed, *results[: batch - 1]]
        at = points[point % len(points)].originator_version
        fork = store.fork("t", at_version=at, new_thread_id="f")
        offered = [Tool("pay", "Pay", STRICTER, lambda ctx, args: "paid", requires_approval=True)]
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider([answer("ok")]),
                tools=[] if tools == "none" else offered,
                checkpoint=CheckpointSettings(store=store, thread_id=fork),
                reviewer_verifier=VERIFIER,
                system_prompt=system_prompt or "",
                clock=ticking_clock(),
            )
        )
        assert agent.run("new input") == "ok"
        thread = store.load(fork)
        assert _results_follow_their_calls(thread.messages), thread.messages
        assert [m.content for m in thread.messages if m.role is Role.USER] == [
            "Pay.",
            "new input",
        ]
        assert store.verify(fork).ok


def test_a_new_threads_run_is_three_events_and_its_audit_lines_name_the_input() -> None:
    with open_store("memory://") as store:
        assert _agent(store, [answer("hello")], system_prompt=None).run("Hi there") == "hello"
        assert _agent(store, [answer("again")], system_prompt=None).run("Once more") == "again"
        kinds = [type(e).__name__ for e in store.history("t")]
        assert kinds == [
            "StartedWithInput",
            "TurnAnswered",
            "RunFinishedCheckpointed",
            "RunStartedWithInput",
            "TurnAnswered",
            "RunFinishedCheckpointed",
        ]
        lines = [e.summary for e in store.replay("t") if "WithInput" in e.kind]
        assert lines == [
            "thread 't' started; run started with user: Hi there",
            "run started with user: Once more",
        ]
        assert list(store.thread_ids()) == ["t"]
        assert store.verify("t").ok


def test_a_new_threads_creation_carries_its_first_run_only_while_unsaved() -> None:
    """``start_run`` given input folds the creation into one ``StartedWithInput`` only
    while the plain ``Started`` is the thread's one event and unsaved: the live thread is
    then the thread the event makes. A thread loaded from the store (even one holding
    nothing but its creation) keeps its ``Started`` and starts the run apart."""
    now = ticking_clock()
    thread = AgentThread.start("t", now=now())
    at = now()
    thread.start_run(RunMode.RUN, now=at, given=Message(Role.USER, "hi"))
    (event,) = thread.pending_events
    assert type(event) is AgentThread.StartedWithInput
    assert (event.originator_version, event.timestamp, thread.version) == (1, at, 1)
    replayed = event.mutate(None)
    assert {k: v for k, v in vars(replayed).items() if k != "_pending_events"} == {
        k: v for k, v in vars(thread).items() if k != "_pending_events"
    }
    with open_store("memory://") as store:
        store.save(AgentThread.start("bare", now=now()))
        loaded = store.load("bare")
        loaded.start_run(RunMode.RUN, now=now(), given=Message(Role.USER, "hi"))
        assert [type(e) for e in loaded.pending_events] == [AgentThread.RunStartedWithInput]
        store.save(loaded)
        assert [type(e) for e in store.history("bare")] == [
            AgentThread.Started,
            AgentThread.RunStartedWithInput,
        ]
    plain = AgentThread.start("p", now=now())
    with pytest.raises(ThreadNotFoundError):  # a continue has nothing to go on from
        plain.start_run(RunMode.CONTINUE, now=now())
    plain.start_run(RunMode.RUN, now=now(), given=Message(Role.USER, "hi"), apart=True)
    assert [type(e) for e in plain.pending_events] == [AgentThread.Started, AgentThread.RunStarted]


@pytest.mark.parametrize(
    ("mode", "role"),
    [
        (RunMode.RUN, Role.ASSISTANT),
        (RunMode.RUN, Role.SYSTEM),
        (RunMode.CONTINUE, Role.USER),
        (RunMode.RESUME, Role.USER),
    ],
)
def test_only_a_run_starts_with_a_users_message(mode: RunMode, role: Role) -> None:
    """``start_run`` takes a message only for a ``run``, and only a user's: nothing is
    recorded when it refuses one."""
    now = ticking_clock()
    thread = AgentThread.start("t", now=now())
    with pytest.raises(InvalidRunInputError, match="a run given a user's message, not a"):
        thread.start_run(mode, now=now(), given=Message(role, "hi"))
    assert (thread.version, thread.messages) == (1, [])


@pytest.mark.parametrize("golden", ["v11-run-input", "v12-started-with-input"])
def test_a_thread_written_with_run_starts_apart_goes_on_with_them_together(
    tmp_path: Path, golden: str
) -> None:
    """A golden thread of the code before, whose runs stored their start and their
    input as two events (v11), or whose creation and first run's start were two (v12),
    given new input: the new run's start and input are one event, and the thread
    verifies and replays; a new thread of the same store starts with its first run."""
    shutil.copy(GOLDEN / golden / "plain.db", tmp_path / "plain.db")
    with open_store(f"sqlite:///{tmp_path / 'plain.db'}") as store:
        before = store.load("golden-values")
        for thread_id in ("golden-values", "fresh"):
            agent = Agent(
                AgentConfig(
                    provider=ScriptedProvider([answer("again")]),
                    checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                    clock=ticking_clock(),
                )
            )
            assert agent.run("once more") == "again"
            assert store.verify(thread_id).ok
            assert store.replay_state(thread_id) == store.state_at(thread_id)
        history = store.history("golden-values")
        old, new = history[: before.version], history[before.version :]
        assert type(old[0]) is AgentThread.Started
        assert any(type(e) is AgentThread.RunStarted for e in old) is (golden == "v11-run-input")
        assert any(type(e) is AgentThread.RunStartedWithInput for e in old) is (
            golden != "v11-run-input"
        )
        assert type(new[0]) is AgentThread.RunStartedWithInput
        assert new[0].message == Message(Role.USER, "once more")
        (first, *_) = store.history("fresh")
        assert type(first) is AgentThread.StartedWithInput
        assert first.message == Message(Role.USER, "once more")


not_text = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=4),
    st.lists(st.text(max_size=2), max_size=2),
    st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=1),
    st.builds(object),
    st.builds(Message, st.sampled_from(list(Role)), st.text(max_size=4)),
)
"""Values that are no str: what ``run`` must refuse as its input."""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=not_text, entry=st.sampled_from(("run", "arun", "astream")))
def test_a_run_given_no_str_is_refused_and_the_standing_decisions_stand(
    value: object, entry: str
) -> None:
    """``run``, ``arun`` and ``astream`` given anything but a str (None, a number, bytes,
    a ``Message``...) raise ``InvalidRunInputError`` naming ``input`` and record nothing:
    a rejected call's decision stands, where ``run(None)`` used to record a run with no
    input and so put the rejected call up for review again."""
    with open_store("memory://") as store:
        agent = agent_of(store, [call(("c1", "pay", PAY_40)), answer("Not paid.")], pay_tool([]))
        agent.run("Pay bob 40.")
        (request,) = agent.pending_reviews
        decide(store, request.review_id, "reject", text="no")
        agent.resume()
        before = store.history("t")
        again = agent_of(store, [call(("c2", "pay", PAY_40)), answer("done")], pay_tool([]))
        with pytest.raises(InvalidRunInputError, match=r"run\(input\).* got "):
            if entry == "run":
                again.run(value)  # type: ignore[arg-type]
            elif entry == "arun":
                asyncio.run(again.arun(value))  # type: ignore[arg-type]
            else:
                again.astream(value)  # type: ignore[arg-type]
        assert store.history("t") == before
        assert again.continue_run() == "done"  # the rejection stood: no review was asked


@pytest.mark.parametrize("given_input", [None, Message(Role.USER, 5)])  # type: ignore[arg-type]
def test_the_thread_refuses_a_run_without_a_users_text(given_input: Message | None) -> None:
    """``start_run`` refuses a ``run`` given no message, or a message that is no text,
    whatever its caller: a ``run`` is what lapses past decisions, so it must carry new
    input; nothing is recorded."""
    now = ticking_clock()
    thread = AgentThread.start("t", now=now())
    with pytest.raises(InvalidRunInputError, match=r"run\(input\)"):
        thread.start_run(RunMode.RUN, now=now(), given=given_input)
    with pytest.raises(InvalidRunInputError, match=r"run\(input\)"):
        thread.start_run(RunMode.RUN, now=now(), given=given_input, apart=True)
    assert (thread.version, thread.messages) == (1, [])


ABSENT, CREATED, STRAY_START, SYSTEM_ONLY, FAILED_EMPTY = (
    "absent",
    "created",
    "stray start",
    "system prompt only",
    "failed empty",
)
CUT_SHORT, FAILED_AFTER_INPUT = "cut short", "failed after input"
NOTHING_TO_GO_ON_FROM = (ABSENT, CREATED, STRAY_START, SYSTEM_ONLY, FAILED_EMPTY)
"""States of thread ``t`` with no message but system prompts: absent; created with no
run; running with no message (a continue of the code before started it); running with
only the system prompt (a fork taken between a run's start and its input); failed with
no message, its retry asked for (a tool server down before the first run's input)."""
CONTINUE_ENTRIES = ("continue_run", "acontinue_run", "astream_continue", "worker", "agui")


def _stored(store: Store, state: str, *, retry_asked: bool = True) -> None:
    """Store thread ``t`` in ``state`` (a failed run's retry asked for, unless not
    ``retry_asked``); the events no command records any more (a run's start with no
    message, a retry asked of it) are triggered as the code before did."""
    if state == ABSENT:
        return
    now = ticking_clock()
    thread = AgentThread.start("t", now=now())
    if state in (CUT_SHORT, FAILED_AFTER_INPUT):
        thread.start_run(RunMode.RUN, now=now(), given=Message(Role.USER, "Pay amy 20."))
    elif state != CREATED:
        thread.trigger_event(AgentThread.RunStarted, mode=RunMode.CONTINUE, timestamp=now())
    if state == SYSTEM_ONLY:
        thread.append_message(Message(Role.SYSTEM, "You help with payments."), now=now())
    if state in (FAILED_EMPTY, FAILED_AFTER_INPUT):
        thread.fail("ProviderError", "the provider was down", now=now())
    if state in (FAILED_EMPTY, FAILED_AFTER_INPUT) and retry_asked:
        thread.trigger_event(
            AgentThread.RetryRequested, tool_call_id="", requested_by="alice", timestamp=now()
        )
    store.save(thread)


def _continued(store: Store, entry: str, config: AgentConfig) -> None:
    """Start a run on from thread ``t``'s history through ``entry``."""
    if entry == "worker":
        with store.lease("t"):
            step(store, config, "t")
    elif entry == "agui":
        app = create_agui_app(store, lambda _: config, VERIFIER)
        body = {"threadId": "t", "runId": "r", "messages": []}
        with TestClient(app) as client:
            client.post("/", json=body)
    elif entry == "continue_run":
        Agent(config).continue_run()
    elif entry == "acontinue_run":
        asyncio.run(Agent(config).acontinue_run())
    else:

        async def drain() -> None:
            async for _ in Agent(config).astream_continue():
                pass

        asyncio.run(drain())


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entry=st.sampled_from(CONTINUE_ENTRIES),
    kind=st.sampled_from(("memory", "sqlite")),
    state=st.sampled_from((*NOTHING_TO_GO_ON_FROM, CUT_SHORT, FAILED_AFTER_INPUT)),
)
def test_a_continue_with_no_message_to_go_on_from_is_refused_before_the_model_is_asked(
    entry: str, kind: str, state: str
) -> None:
    """Every entry that runs on from a thread's history (the agent's three, a worker
    taking a thread over or retrying it, the AG-UI endpoint picking up a run cut short)
    refuses a thread with no message but system prompts: no model call, no event stored,
    where it used to ask the model about nothing and store the answer as a new thread.
    A thread holding a user's message runs on."""
    with tempfile.TemporaryDirectory() as folder:
        url = "memory://" if kind == "memory" else f"sqlite:///{Path(folder) / 'threads.db'}"
        with open_store(url) as store:
            _stored(store, state)
            before = store.history("t") if store.exists("t") else []
            asked: list[tuple[Message, ...]] = []

            def respond(request: ProviderRequest) -> ProviderResponse:
                asked.append(request.messages)
                return answer("Paid.")

            config = AgentConfig(
                provider=ScriptedProvider(respond=respond),
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
                system_prompt="You help with payments.",
                clock=ticking_clock(),
            )
            refused: Exception | None = None
            try:
                _continued(store, entry, config)
            except (ThreadNotFoundError, ThreadStateError) as exc:
                refused = exc
            goes_on = state == CUT_SHORT or (state == FAILED_AFTER_INPUT and entry != "agui")
            if not goes_on:
                assert asked == []
                assert (store.history("t") if store.exists("t") else []) == before
                if entry not in ("worker", "agui"):
                    expected = ThreadNotFoundError if state == ABSENT else ThreadStateError
                    assert type(refused) is expected, refused
                    assert "run(input)" in str(refused)
                return
            assert refused is None
            assert len(asked) == 1
            assert Message(Role.USER, "Pay amy 20.") in asked[0]
            assert store.state_at("t").messages[-1].content == "Paid."


def test_continue_run_on_a_thread_no_store_holds_asks_no_model_and_stores_nothing() -> None:
    """``continue_run()`` on a mistyped thread id raises ``ThreadNotFoundError`` naming
    the thread and ``run(input)``: it used to call the model with no message and store
    a new thread holding only the model's answer."""
    with open_store("memory://") as store:
        agent = _agent(store, [answer("I was asked nothing.")], system_prompt=None)
        with pytest.raises(ThreadNotFoundError, match=r"'t' not found.*run\(input\)"):
            agent.continue_run()
        assert store.find("t") is None
        assert agent.run("Pay amy 20.") == "I was asked nothing."  # the script was not spent
        again = _agent(store, [answer("Both paid.")], system_prompt=None)
        again.steer("And bob 40.")
        assert again.continue_run() == "Both paid."
        assert store.state_at("t").messages[-2] == Message(Role.USER, "And bob 40.")


@pytest.mark.parametrize("state", [FAILED_EMPTY, FAILED_AFTER_INPUT])
def test_a_retry_of_a_failed_run_with_no_message_to_go_on_from_is_refused(state: str) -> None:
    """A person's retry of a failed run whose thread holds no message (its first run
    failed before its input was recorded) is refused by the rule of a continue, with
    nothing recorded, so no worker asks the model about nothing; a run that failed
    after a user's message is retried."""
    with open_store("memory://") as store:
        _stored(store, state, retry_asked=False)
        service = ThreadService(store, verifier=VERIFIER)
        before = store.history("t")
        if state == FAILED_AFTER_INPUT:
            service.request_retry("t", reviewer=service.reviewer(ALICE))
            assert store.load("t").retry_requested
            return
        with pytest.raises(ThreadStateError, match=r"a retry of its failed run.*run\(input\)"):
            service.request_retry("t", reviewer=service.reviewer(ALICE))
        assert store.history("t") == before


@pytest.mark.parametrize("role", [Role.SYSTEM, "system"], ids=["enum", "text"])
def test_a_system_prompt_given_by_its_roles_text_is_no_message_to_continue_from(
    role: Any,
) -> None:
    """A thread driven directly, whose only message is a system prompt built with the
    role's text (``Message(role="system")``, as embedding code may write it), is refused
    a continue as one built with ``Role.SYSTEM`` is: the rule compared the role by
    identity, which only the decoded enum passes (helper-195)."""
    now = ticking_clock()
    thread = AgentThread.start("t", now=now())
    thread.append_message(Message(role=role, content="Be brief."), now=now())
    with pytest.raises(ThreadStateError, match="no message to go on from"):
        thread.start_run(RunMode.CONTINUE, now=now())
