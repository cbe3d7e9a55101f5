"""The agent's checkpoints, interrupts, steering, restores and parallel tool calls, on
every store."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    InterruptError,
    InterruptPendingError,
    Message,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolContext,
)
from covonaut_es._text import printable
from covonaut_es.domain import CheckpointReason, ToolOutcome
from covonaut_es.errors import (
    ConfigurationError,
    InvalidRunInputError,
    NotInterruptedError,
    ProviderError,
    ProviderServerError,
)
from covonaut_es.providers import RetryPolicy
from covonaut_es.providers._retry import call_with_retry
from support import OBJECT_SCHEMA, answer, call, echo_tool, review_tool, ticking_clock


def make_config(store: Store | None, script: list[Any], **options: Any) -> AgentConfig:
    checkpoint_options = {
        k: options.pop(k)
        for k in ("save_on_turn_start", "skip_save_on_turn_end", "durability")
        if k in options
    }
    checkpoint = (
        None
        if store is None
        else CheckpointSettings(
            store=store, thread_id=options.pop("thread_id", "t1"), **checkpoint_options
        )
    )
    options.setdefault("tools", [echo_tool(), review_tool()])
    return AgentConfig(
        provider=ScriptedProvider(script),
        model="test-model",
        checkpoint=checkpoint,
        clock=ticking_clock(),
        **options,
    )


def test_checkpoint_saved_at_end_of_every_turn(store: Store) -> None:
    """With checkpointing configured, every turn end saves a checkpoint."""
    script = [call(("c1", "echo", '{"text": "a"}')), call(("c2", "echo", '{"text": "b"}'))]
    agent = Agent(make_config(store, [*script, answer("done")]))
    assert agent.run("go") == "done"
    checkpoints = store.checkpoints("t1")
    assert [c.reason for c in checkpoints] == [CheckpointReason.TURN_END] * 3
    assert [c.turn for c in checkpoints] == [1, 2, 3]
    assert [c.sequence for c in checkpoints] == [1, 2, 3]
    assert checkpoints[-1].status is ThreadStatus.FINISHED


def test_save_on_turn_start_after_steering_and_before_model_call(store: Store) -> None:
    """A turn-start checkpoint follows steering (and compaction) and precedes the
    model call."""
    seen_at_call: list[int] = []

    def respond(request: ProviderRequest) -> ProviderResponse:
        seen_at_call.append(len(store.checkpoints("t1")))
        return answer("ok")

    config = make_config(store, [respond], save_on_turn_start=True)
    agent = Agent(config)
    agent.steer("be brief")
    agent.run("hello")
    checkpoints = store.checkpoints("t1")
    assert [c.reason for c in checkpoints] == [
        CheckpointReason.TURN_START,
        CheckpointReason.TURN_END,
    ]
    assert seen_at_call == [1]  # the turn-start checkpoint was stored before the call
    state_at_start = store.state_at("t1", checkpoints[0].version)
    assert state_at_start.messages[-1].content == "be brief"  # steering already applied


def test_skip_save_on_turn_end(store: Store) -> None:
    """``skip_save_on_turn_end=True`` saves no end-of-turn checkpoint."""
    agent = Agent(make_config(store, [answer("done")], skip_save_on_turn_end=True))
    agent.run("go")
    assert store.checkpoints("t1") == ()
    assert store.state_at("t1").status is ThreadStatus.FINISHED  # step durability kept it


def test_store_shared_by_concurrent_agents_on_different_threads(store: Store) -> None:
    """One store serves several agents on different threads at the same time."""
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            script = [call((f"c{n}", "echo", '{"text": "x"}')), answer(f"done {n}")]
            agent = Agent(make_config(store, script, thread_id=f"user-{n}"))
            assert agent.run("go") == f"done {n}"
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    for n in range(6):
        assert store.state_at(f"user-{n}").status is ThreadStatus.FINISHED


def test_empty_thread_id_means_default_and_warns(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """An empty thread id is "default", and the agent warns about it."""
    with caplog.at_level(logging.WARNING, logger="covonaut_es"):
        agent = Agent(make_config(store, [answer("hi")], thread_id=""))
    assert agent.thread_id == "default"
    assert "unrelated sessions must not share" in caplog.text
    agent.run("hello")
    assert store.state_at("default").status is ThreadStatus.FINISHED


def test_checkpoint_cap_evicts_oldest_checkpoints_but_no_events(
    open_test_store: Callable[..., Store],
) -> None:
    """``max_checkpoints_per_thread`` keeps the newest checkpoints; events stay."""
    store = open_test_store(max_checkpoints_per_thread=2)
    script = [call((f"c{i}", "echo", '{"text": "x"}')) for i in range(4)]
    agent = Agent(make_config(store, [*script, answer("done")]))
    agent.run("go")
    checkpoints = store.checkpoints("t1")
    assert [c.sequence for c in checkpoints] == [4, 5]
    history = store.history("t1")
    assert [e.originator_version for e in history] == list(range(1, agent.state.version + 1))
    assert sum(e.checkpoint_reason is not None for e in history) == 5
    assert store.replay_state("t1").messages == agent.messages


def test_a_checkpoint_cap_of_zero_keeps_every_checkpoint(store: Store) -> None:
    """A cap of 0 keeps every checkpoint."""
    script = [call((f"c{i}", "echo", '{"text": "x"}')) for i in range(3)]
    Agent(make_config(store, [*script, answer("done")])).run("go")
    assert [c.sequence for c in store.checkpoints("t1")] == [1, 2, 3, 4]


def test_interrupt_records_reason_data_and_explaining_tool_result(store: Store) -> None:
    """A tool's InterruptError is recorded with reason, data, call id and tool
    name, plus a tool result explaining the pause; run() returns normally."""
    agent = Agent(make_config(store, [call(("r1", "review", "{}"))]))
    output = agent.run("pay the invoice")
    assert output == ""  # not a final answer: check `interrupted`
    assert agent.status is ThreadStatus.INTERRUPTED
    interrupt = agent.interrupted
    assert interrupt is not None
    assert (interrupt.reason, interrupt.data) == ("human review required", {"request_id": "r1"})
    assert (interrupt.tool_call_id, interrupt.tool_name) == ("r1", "review")
    tool_message = agent.messages[-1]
    assert tool_message.role is Role.TOOL and tool_message.tool_call_id == "r1"
    assert "human review required" in tool_message.content
    assert store.checkpoints("t1")[-1].reason is CheckpointReason.INTERRUPT


def test_interrupt_without_data(store: Store) -> None:
    """Data is optional."""

    def pause(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise InterruptError("wait")

    tools = [Tool("pause", "Pause", OBJECT_SCHEMA, pause)]
    agent = Agent(make_config(store, [call(("p", "pause", "{}"))], tools=tools))
    agent.run("go")
    assert agent.interrupted is not None
    assert agent.interrupted.data is None


def test_steer_and_resume_never_reruns_the_interrupted_call(store: Store) -> None:
    """The application steers and resumes; the run continues from the
    recorded tool result and the interrupted tool is not run again."""
    executions: list[str] = []
    script = [call(("r1", "review", "{}")), answer("approved and done")]
    agent = Agent(make_config(store, script, tools=[review_tool(executions)]))
    agent.run("go")
    agent.steer("The reviewer approved.")
    assert agent.resume() == "approved and done"
    assert executions == ["r1"]
    assert agent.interrupted is None
    assert agent.status is ThreadStatus.FINISHED
    request = agent.config.provider.requests[-1]  # type: ignore[attr-defined]
    contents = [m.content for m in request.messages]
    assert "The reviewer approved." in contents
    assert request.messages[-1].content == "The reviewer approved."


def test_steering_survives_a_restart_once_recorded(store: Store) -> None:
    """A steering message becomes an event when the next model call is prepared."""
    script = [call(("r1", "review", "{}")), ProviderResponse(content="x")]
    agent = Agent(make_config(store, script))
    agent.run("go")
    agent.steer("note this")
    agent.resume()
    restored = Agent(make_config(store, []))
    restored.restore_latest_checkpoint()
    assert any(m.content == "note this" for m in restored.messages)


def test_restore_never_calls_the_model(store: Store) -> None:
    """Restoring loads state and interrupt information only."""
    Agent(make_config(store, [call(("r1", "review", "{}"))])).run("go")
    provider = ScriptedProvider([])
    config = make_config(store, [])
    restored = Agent(
        AgentConfig(
            provider=provider, checkpoint=config.checkpoint, tools=config.tools, clock=config.clock
        )
    )
    checkpoint = restored.restore_latest_checkpoint("t1")
    assert checkpoint is not None and checkpoint.reason is CheckpointReason.INTERRUPT
    assert restored.interrupted is not None
    assert provider.requests == []


def test_resume_requires_a_pending_interrupt(store: Store) -> None:
    """``resume()`` without a pending interrupt raises a clear error."""
    agent = Agent(make_config(store, [answer("done")]))
    agent.run("go")
    with pytest.raises(NotInterruptedError, match="no pending interrupt"):
        agent.resume()


def test_run_and_continue_refuse_while_interrupted(store: Store) -> None:
    """``run()`` and ``continue_run()`` refuse a pending interrupt; ``resume()`` decides it."""
    agent = Agent(make_config(store, [call(("r1", "review", "{}")), answer("done")]))
    agent.run("go")
    with pytest.raises(InterruptPendingError, match="resume"):
        agent.run("something else")
    with pytest.raises(InterruptPendingError):
        agent.continue_run()
    assert agent.resume() == "done"


def test_continue_run_runs_on_without_new_input(store: Store) -> None:
    """``continue_run()`` appends no user message."""
    agent = Agent(make_config(store, [answer("first"), answer("second")]))
    agent.run("go")
    count = len(agent.messages)
    assert agent.continue_run() == "second"
    assert len(agent.messages) == count + 1
    assert agent.messages[-1].role is Role.ASSISTANT


def test_run_after_restore_appends_input(store: Store) -> None:
    """``run(input)`` after a restore appends the user message and runs."""
    Agent(make_config(store, [answer("first")])).run("one")
    restored = Agent(make_config(store, [answer("second")]))
    restored.restore_latest_checkpoint()
    assert restored.run("two") == "second"
    assert [m.content for m in restored.messages if m.role is Role.USER] == ["one", "two"]


def test_parallel_batch_records_every_result_when_one_interrupts(store: Store) -> None:
    """With parallel tools, the other calls of the batch complete and are recorded."""
    executions: list[str] = []
    batch = call(
        ("e1", "echo", '{"text": "a"}'), ("r1", "review", "{}"), ("e2", "echo", '{"text": "b"}')
    )
    config = make_config(
        store, [batch], parallel_tools=True, tools=[echo_tool(executions), review_tool()]
    )
    agent = Agent(config)
    agent.run("go")
    assert sorted(executions) == ["e1", "e2"]
    results = {m.tool_call_id: m.content for m in agent.messages if m.role is Role.TOOL}
    assert set(results) == {"e1", "r1", "e2"}
    assert agent.in_doubt == ()
    assert agent.interrupted is not None and agent.interrupted.tool_call_id == "r1"


def test_parallel_batch_records_several_interrupts(store: Store) -> None:
    """Several interrupts of one batch are all recorded."""
    batch = call(("r1", "review", "{}"), ("r2", "review", "{}"))
    agent = Agent(make_config(store, [batch, answer("done")], parallel_tools=True))
    agent.run("go")
    assert sorted(i.tool_call_id for i in agent.interrupts) == ["r1", "r2"]
    assert agent.resume() == "done"
    assert agent.interrupts == ()


def test_parallel_calls_really_run_concurrently(store: Store) -> None:
    """The calls of a parallel batch overlap in time."""
    barrier = threading.Barrier(2, timeout=10)

    def meet(ctx: ToolContext, args: dict[str, Any]) -> Any:
        barrier.wait()  # only returns when both calls are running at once
        return "met"

    tools = [Tool("meet", "Meet", OBJECT_SCHEMA, meet)]
    batch = call(("m1", "meet", "{}"), ("m2", "meet", "{}"))
    agent = Agent(make_config(store, [batch, answer("done")], parallel_tools=True, tools=tools))
    assert agent.run("go") == "done"


def test_sequential_calls_after_an_interrupt_are_recorded_as_not_executed(
    store: Store,
) -> None:
    """Sequentially, calls after the interrupting one are recorded, not run."""
    executions: list[str] = []
    batch = call(("r1", "review", "{}"), ("e1", "echo", '{"text": "a"}'))
    config = make_config(store, [batch], tools=[echo_tool(executions), review_tool()])
    agent = Agent(config)
    agent.run("go")
    assert executions == []
    results = store.history("t1")
    outcomes = {e.tool_call_id: e.outcome for e in results if hasattr(e, "outcome")}
    assert outcomes == {"r1": ToolOutcome.INTERRUPTED, "e1": ToolOutcome.NOT_EXECUTED}
    assert agent.in_doubt == ()


def test_checkpointing_needs_a_store() -> None:
    """save_checkpoint() without checkpoint settings is a configuration error."""
    agent = Agent(make_config(None, [answer("x")]))
    assert agent.run("go") == "x"
    with pytest.raises(ConfigurationError, match="CheckpointSettings"):
        agent.save_checkpoint()


def test_manual_checkpoint_returns_increasing_sequence(store: Store) -> None:
    """save_checkpoint() records a manual checkpoint and returns its sequence number."""
    agent = Agent(make_config(store, [answer("x")], durability="checkpoint"))
    agent.run("go")
    assert agent.save_checkpoint() == 2
    assert store.checkpoints("t1")[-1].reason is CheckpointReason.MANUAL


def test_checkpoint_durability_commits_only_at_checkpoints(store: Store) -> None:
    """durability="checkpoint" stores nothing between checkpoints."""
    seen: list[bool] = []

    def respond(request: ProviderRequest) -> ProviderResponse:
        seen.append(store.exists("t1"))
        return answer("ok")

    agent = Agent(make_config(store, [respond], durability="checkpoint"))
    agent.run("go")
    assert seen == [False]
    assert store.state_at("t1") == agent.state


def test_on_event_sees_every_event_once_in_order_after_its_commit(store: Store) -> None:
    """AgentConfig.on_event gets each event once, in version order, after the step that
    recorded it is stored, and before the tool that the step prepared runs."""
    seen: list[AgentThread.Event] = []
    stored_when_seen: list[bool] = []

    def on_event(event: AgentThread.Event) -> None:
        seen.append(event)
        stored_when_seen.append(store.state_at("t1").version >= event.originator_version)

    def echo_seen(ctx: ToolContext, args: dict[str, Any]) -> Any:
        return [type(e).__name__ for e in seen[-2:]]

    tools = [Tool("echo", "Echo", OBJECT_SCHEMA, echo_seen)]
    script = [call(("c1", "echo", "{}")), answer("done")]
    agent = Agent(make_config(store, script, tools=tools, on_event=on_event))
    agent.run("go")
    history = store.history("t1")
    assert [(type(e), e.originator_version) for e in seen] == [
        (type(e), e.originator_version) for e in history
    ]
    assert all(stored_when_seen)
    tool_message = next(m for m in agent.messages if m.role is Role.TOOL)
    assert tool_message.content == '["StartedWithInput","TurnAnsweredWithCalls"]'


def test_on_event_reports_only_new_events_after_a_restore(store: Store) -> None:
    """A restored agent reports the events it records, not the stored history."""
    Agent(make_config(store, [answer("first")])).run("one")
    seen: list[AgentThread.Event] = []
    restored = Agent(make_config(store, [answer("second")], on_event=seen.append))
    restored.restore_latest_checkpoint()
    version = restored.state.version
    restored.run("two")
    assert [e.originator_version for e in seen] == list(
        range(version + 1, restored.state.version + 1)
    )


def test_on_event_with_checkpoint_durability_reports_at_every_step(store: Store) -> None:
    """With durability="checkpoint", events are reported at each step boundary, before
    they are stored, so a live view does not wait for the next checkpoint."""
    seen: list[str] = []

    def respond(request: ProviderRequest) -> ProviderResponse:
        assert "StartedWithInput" in seen and not store.exists("t1")
        return answer("ok")

    agent = Agent(
        make_config(
            store,
            [respond],
            durability="checkpoint",
            on_event=lambda e: seen.append(type(e).__name__),
        )
    )
    agent.run("go")
    assert seen[-1:] == ["RunFinishedCheckpointed"]


def test_a_failing_on_event_callback_is_logged_and_the_run_goes_on(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception in on_event is logged on the covonaut_es logger; it neither stops
    the run nor leaves anything unsaved."""

    def broken(event: AgentThread.Event) -> None:
        raise RuntimeError("the UI went away")

    agent = Agent(make_config(store, [answer("done")], on_event=broken))
    with caplog.at_level(logging.ERROR, logger="covonaut_es"):
        assert agent.run("go") == "done"
    assert "on_event callback of agent 'agent' failed" in caplog.text
    assert "the UI went away" in caplog.text
    assert store.state_at("t1") == agent.state


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(min_size=1, max_size=30))
def test_every_log_record_is_one_line_whatever_a_tool_or_provider_says(
    caplog: pytest.LogCaptureFixture, text: str
) -> None:
    """Text from outside (a tool's reason for pausing, a provider's error, retried or
    failing the run) reaches the log escaped: a newline cannot forge a log line and an
    escape sequence cannot reach the operator's terminal."""

    def pausing(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise InterruptError(f"stop\n{text}", {})

    def failing() -> Any:
        raise ProviderServerError(f"overloaded\r\n{text}")

    tools = [Tool("pause", "Pause", OBJECT_SCHEMA, pausing)]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="covonaut_es"):
        agent = Agent(
            make_config(None, [call(("p1", "pause", "{}")), ValueError(text)], tools=tools)
        )
        agent.run("go")
        agent.steer("go on")
        with pytest.raises(ProviderError):
            agent.resume()
        with pytest.raises(ProviderServerError):
            call_with_retry(failing, RetryPolicy(max_attempts=2), sleep=lambda _: None)
    messages = [record.getMessage() for record in caplog.records]
    assert any("paused at version" in message for message in messages)
    assert any("run failed" in message for message in messages)
    assert any("retrying" in message for message in messages)
    assert all(printable(message) == message for message in messages), messages


def test_runs_are_logged_on_the_covonaut_es_logger(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Run boundaries are logged at INFO and failures at WARNING; message contents
    never reach the log."""
    agent = Agent(make_config(store, [call(("r1", "review", "{}")), ValueError("boom")]))
    with caplog.at_level(logging.INFO, logger="covonaut_es"):
        agent.run("a secret question")
        agent.steer("approved")
        with pytest.raises(ProviderError):
            agent.resume()
    records = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert records[0] == ("INFO", "thread 't1': run started at version 1")
    assert any(
        level == "INFO" and "paused at version" in text and "'review'" in text
        for level, text in records
    )
    assert any("resume started" in text for _, text in records)
    assert records[-1][0] == "WARNING" and "ValueError: boom" in records[-1][1]
    assert "a secret question" not in caplog.text


wrong_count = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.builds(object),
    st.integers(max_value=-1),
)
"""Values that are no count of turns or of retries."""


@settings(max_examples=40, deadline=None)
@given(setting=st.sampled_from(("max_turns", "output_retries")), value=wrong_count)
def test_a_count_that_is_no_whole_number_is_refused_when_configured(
    setting: str, value: object
) -> None:
    """``max_turns`` and ``output_retries`` must be whole numbers (no bool, no float, no
    text) in range, refused with ``ConfigurationError`` naming the setting: a float
    ``max_turns`` used to be taken, and the run then died in ``range()`` after its
    start was stored."""
    with pytest.raises(ConfigurationError, match=rf"AgentConfig\.{setting} must be a whole"):
        AgentConfig(provider=ScriptedProvider([]), **{setting: value})


@pytest.mark.parametrize("value", [object(), 42, None, b"x", Message(Role.USER, 5)])  # type: ignore[arg-type]
def test_steering_that_is_no_text_is_refused_when_given(value: object) -> None:
    """``steer`` takes a str or a ``Message`` of text, refusing anything else with
    ``InvalidRunInputError`` and queueing nothing: it used to be queued and the next run
    failed on it after its start was stored."""
    agent = Agent(AgentConfig(provider=ScriptedProvider([answer("hi")])))
    with pytest.raises(InvalidRunInputError, match=r"steer\(message\) takes a str"):
        agent.steer(value)  # type: ignore[arg-type]
    assert agent.run("hello") == "hi"
    assert [m.content for m in agent.messages] == ["hello", "hi"]
