"""The run loop: tool argument handling, turn limits, failures, compaction."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    Message,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolContext,
    open_store,
)
from covonaut_es.domain import AgentThread, ThreadSnapshot, ToolOutcome
from covonaut_es.domain._calls import event_key
from covonaut_es.errors import (
    InterruptError,
    MaxTurnsExceededError,
    OutputValidationError,
    ProviderError,
    ScriptExhaustedError,
    ThreadStateError,
    ToolArgumentsLimitError,
    ToolInDoubtError,
    ToolResultError,
)
from covonaut_es.messages import MAX_TOKEN_COUNT, ToolCall, Usage
from covonaut_es.runtime import SummarizingCompactor
from covonaut_es.runtime._compaction import SUMMARY_PREFIX, context_messages
from covonaut_es.runtime._loop import FINAL_TURN_INSTRUCTION
from covonaut_es.tools import (
    MAX_ARGUMENTS_BYTES,
    MAX_ARGUMENTS_DEPTH,
    check_arguments_limits,
    result_text,
)
from hostile_text import hostile_text
from support import OBJECT_SCHEMA, answer, call, call_intents, echo_tool, ticking_clock

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def agent_on(store: Store, script: list[Any], **options: Any) -> Agent:
    options.setdefault("tools", [echo_tool()])
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            model="m",
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
            **options,
        )
    )


def tool_results(agent: Agent) -> dict[str, str]:
    return {m.tool_call_id or "": m.content for m in agent.messages if m.role is Role.TOOL}


def test_invalid_json_arguments_become_an_error_result(store: Store) -> None:
    """Arguments that are not JSON reach the model as an error result, not an exception."""
    agent = agent_on(store, [call(("c1", "echo", "{not json")), answer("sorry")])
    assert agent.run("go") == "sorry"
    assert "not valid JSON" in tool_results(agent)["c1"]


def test_arguments_are_validated_against_the_schema(store: Store) -> None:
    """Arguments that break the tool's JSON schema are refused before the call."""
    log: list[str] = []
    script = [
        call(
            ("c1", "echo", '{"text": 5}'),
            ("c2", "echo", "{}"),
            ("c3", "echo", '{"text": "a", "x": 1}'),
        ),
        answer("ok"),
    ]
    agent = agent_on(store, script, tools=[echo_tool(log)])
    agent.run("go")
    results = tool_results(agent)
    assert "$.text: 5 is not of type 'string'" in results["c1"]
    assert "$: 'text' is a required property" in results["c2"]
    assert "('x' was unexpected)" in results["c3"]
    assert log == []


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_repeated_call_ids_are_made_unique_and_each_runs_once(store: Store, parallel: bool) -> None:
    """Ids repeated in a response, reused from an earlier turn or empty get unique ids
    derived from the id sent; each call runs once and has its own result."""
    script = [
        call(("x1", "echo", '{"text": "a"}'), ("x1", "echo", '{"text": "b"}')),
        call(("x1", "echo", '{"text": "c"}'), ("", "echo", '{"text": "d"}')),
        answer("ok"),
    ]
    log: list[str] = []
    agent = agent_on(store, script, tools=[echo_tool(log)], parallel_tools=parallel)
    assert agent.run("go") == "ok"
    assert sorted(log) == ["call-2", "x1", "x1-2", "x1-3"]
    assert tool_results(agent) == {
        "x1": '{"echo":"a"}',
        "x1-2": '{"echo":"b"}',
        "x1-3": '{"echo":"c"}',
        "call-2": '{"echo":"d"}',
    }
    called = [call_id for call_id, _ in call_intents(store.history("t"))]
    assert called == ["x1", "x1-2", "x1-3", "call-2"]
    assert agent.in_doubt == () and agent.status is ThreadStatus.FINISHED


def test_the_thread_refuses_a_call_id_it_already_used() -> None:
    """AgentThread.call_tools refuses a repeated id; unique_calls gives the ids to use."""
    thread = AgentThread.start("t", now=NOW)
    asked = (ToolCall("x1", "echo"), ToolCall("y", "echo"))
    thread.append_message(Message(Role.ASSISTANT, tool_calls=asked), now=NOW)
    thread.call_tools([ToolCall("x1", "echo")], now=NOW)
    with pytest.raises(ThreadStateError, match="'x1' is empty or already used"):
        thread.call_tools([ToolCall("x1", "echo")], now=NOW)
    with pytest.raises(ThreadStateError, match="'y' is empty or already used"):
        thread.call_tools([ToolCall("y", "echo"), ToolCall("y", "echo")], now=NOW)
    calls = (ToolCall("x1", "echo"), ToolCall("x1-2", "echo"), ToolCall("x1", "echo"))
    assert [c.id for c in thread.unique_calls(calls)] == ["x1-3", "x1-2", "x1-4"]


def test_the_thread_records_only_calls_its_latest_assistant_message_asks_for() -> None:
    """A ToolCalled names its call by id, so call_tools refuses a call that no assistant
    message holds, or that the latest message holding its id asks with other arguments."""
    thread = AgentThread.start("t", now=NOW)
    with pytest.raises(ThreadStateError, match="'c1' \\(echo\\) is not asked for"):
        thread.call_tools([ToolCall("c1", "echo", "{}")], now=NOW)
    thread.append_message(
        Message(Role.ASSISTANT, tool_calls=(ToolCall("c1", "echo", '{"a": 1}'),)), now=NOW
    )
    thread.append_message(
        Message(Role.ASSISTANT, tool_calls=(ToolCall("c1", "echo", '{"a": 2}'),)), now=NOW
    )
    with pytest.raises(ThreadStateError, match="append the assistant message with the calls"):
        thread.call_tools([ToolCall("c1", "echo", '{"a": 1}')], now=NOW)
    assert thread.version == 3
    thread.call_tools([ToolCall("c1", "echo", '{"a": 2}')], now=NOW)
    (pending,) = thread.open_calls.values()
    assert pending.call == ToolCall("c1", "echo", '{"a": 2}')


def test_the_call_ids_a_thread_used_are_derived_not_snapshotted() -> None:
    """The ids of recorded results are known to a thread loaded from a snapshot, which
    does not hold them, and to a live thread as it goes on."""

    def called(thread: AgentThread, call_id: str) -> None:
        call = ToolCall(call_id, "echo")
        thread.append_message(Message(Role.ASSISTANT, tool_calls=(call,)), now=NOW)
        thread.call_tools([call], now=NOW)
        thread.record_tool_result(call_id, "done", ToolOutcome.SUCCEEDED, now=NOW)

    thread = AgentThread.start("t", now=NOW)
    called(thread, "x1")
    assert [c.id for c in thread.unique_calls([ToolCall("x1", "echo")])] == ["x1-2"]
    snapshot = ThreadSnapshot.take(thread)
    assert set(snapshot.state) == set(ThreadSnapshot.take(AgentThread.start("u", now=NOW)).state)
    loaded = snapshot.mutate(None)
    assert [c.id for c in loaded.unique_calls([ToolCall("x1", "echo")])] == ["x1-2"]
    called(loaded, "y")
    assert [c.id for c in loaded.unique_calls([ToolCall("y", "echo")])] == ["y-2"]


def test_sequential_results_are_recorded_in_call_order(store: Store) -> None:
    """An invalid call's error result comes after the results of the calls before it."""
    script = [call(("c1", "echo", '{"text": "a"}'), ("c2", "echo", "{}")), answer("ok")]
    agent = agent_on(store, script)
    assert agent.run("go") == "ok"
    assert list(tool_results(agent)) == ["c1", "c2"]


def test_unknown_tool_becomes_an_error_result(store: Store) -> None:
    """A call to a tool that does not exist is answered with an error result."""
    agent = agent_on(store, [call(("c1", "nope", "{}")), answer("ok")])
    agent.run("go")
    assert "no tool named 'nope'" in tool_results(agent)["c1"]


@pytest.mark.parametrize(
    ("error", "found"),
    [
        (RuntimeError("disk full"), "RuntimeError: disk full"),
        (ValueError("bad \ud800 byte"), "ValueError: bad \\ud800 byte"),
    ],
    ids=["plain", "lone-surrogate"],
)
def test_tool_exception_becomes_an_error_result(store: Store, error: Exception, found: str) -> None:
    """A tool that raises gives the model an error result, even when its message holds
    a lone surrogate; the run goes on and the call is not in doubt."""

    def broken(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise error

    tools = [Tool("broken", "Breaks", OBJECT_SCHEMA, broken)]
    agent = agent_on(store, [call(("c1", "broken", "{}")), answer("handled")], tools=tools)
    assert agent.run("go") == "handled"
    assert found in tool_results(agent)["c1"]
    assert agent.in_doubt == ()


def test_tool_context_carries_thread_call_and_idempotency_key(store: Store) -> None:
    """ToolContext names the thread, the call and a key derived from the thread, the
    version of the event that recorded the call's intent and the call id, exactly as
    keys were always made: no event stores the key, so the derivation is part of the
    stored format."""
    seen: list[ToolContext] = []

    def record(ctx: ToolContext, args: dict[str, Any]) -> Any:
        seen.append(ctx)
        return "ok"

    tools = [Tool("record", "Records", OBJECT_SCHEMA, record)]
    agent = agent_on(store, [call(("c1", "record", "{}")), answer("ok")], tools=tools)
    agent.run("go")
    (ctx,) = seen
    assert (ctx.thread_id, ctx.tool_call_id, ctx.tool_name) == ("t", "c1", "record")
    ((_, version),) = call_intents(store.history("t"))
    material = f"t\x00{version}\x00c1".encode()
    assert ctx.idempotency_key == hashlib.sha256(material).hexdigest()[:32]
    assert (
        event_key("t", 7, "c1") == "3b6b46bcab05d69d30c35752b9975881"
    )  # pinned: a change re-keys every stored call


def test_max_turns_gives_a_final_turn_instruction(store: Store) -> None:
    """max_turns: the last allowed turn forbids tool calls and asks for a final answer."""
    provider = ScriptedProvider([call(("c1", "echo", '{"text": "a"}')), answer("wrapped up")])
    agent = Agent(
        AgentConfig(
            provider=provider,
            tools=[echo_tool()],
            max_turns=2,
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )
    assert agent.run("go") == "wrapped up"
    first, last = provider.requests
    assert first.tools == last.tools  # still declared: the history refers to them
    assert (first.tool_choice, last.tool_choice) == ("auto", "none")
    assert last.messages[-1] == Message(Role.SYSTEM, FINAL_TURN_INSTRUCTION)
    assert FINAL_TURN_INSTRUCTION not in [m.content for m in agent.messages]


def test_max_turns_is_per_call_and_enforced(store: Store) -> None:
    """A model that keeps calling tools stops at max_turns with a typed error; the
    calls of the last turn are recorded as not executed and continue_run goes on."""
    log: list[str] = []
    script = [call((f"c{i}", "echo", '{"text": "a"}')) for i in range(3)]
    agent = agent_on(store, [*script, answer("finally")], tools=[echo_tool(log)], max_turns=2)
    with pytest.raises(MaxTurnsExceededError, match="max_turns=2"):
        agent.run("go")
    assert log == ["c0"]
    assert agent.status is ThreadStatus.ERROR
    assert "Not executed" in tool_results(agent)["c1"]
    assert agent.continue_run() == "finally"  # c2 runs on its first turn, then the answer
    assert log == ["c0", "c2"]


def test_provider_error_is_recorded_and_the_thread_can_continue(store: Store) -> None:
    """A provider failure ends the run with status error, a recorded failure event
    and a typed exception; continue_run() later works."""
    agent = agent_on(store, [ConnectionError("network down"), answer("back")])
    with pytest.raises(ProviderError, match="network down") as info:
        agent.run("go")
    assert isinstance(info.value.__cause__, ConnectionError)
    assert agent.status is ThreadStatus.ERROR
    assert store.state_at("t").error == "ConnectionError: network down"
    assert agent.continue_run() == "back"
    assert agent.state.error is None


def test_provider_errors_of_the_library_keep_their_type(store: Store) -> None:
    """A ProviderError subclass from the provider is re-raised as it is."""
    agent = agent_on(store, [])
    with pytest.raises(ScriptExhaustedError):
        agent.run("go")
    assert agent.status is ThreadStatus.ERROR


def test_system_prompt_is_recorded_once_per_thread(store: Store) -> None:
    """The system prompt is the thread's first message, recorded once."""
    agent = agent_on(store, [answer("a"), answer("b")], system_prompt="Be kind.")
    agent.run("one")
    agent.run("two")
    system = [m for m in agent.messages if m.role is Role.SYSTEM]
    assert system == [Message(Role.SYSTEM, "Be kind.")]
    assert agent.messages[0] == system[0]


def test_usage_accumulates(store: Store) -> None:
    """Token usage adds up over model calls and runs."""
    agent = agent_on(store, [answer("a", tokens=3), answer("b", tokens=4)])
    agent.run("one")
    agent.run("two")
    assert agent.usage == Usage(7, 7)
    assert agent.usage.total_tokens == 14


@settings(max_examples=30, deadline=None)
@given(
    counts=st.tuples(
        st.integers(-(2**70), 2**70) | st.sampled_from([-1, MAX_TOKEN_COUNT, MAX_TOKEN_COUNT + 1]),
        st.integers(0, 100),
    )
)
def test_a_providers_token_count_out_of_bounds_fails_the_run(counts: tuple[int, int]) -> None:
    """Property: whatever provider answers, a response whose token counts are from 0 to
    MAX_TOKEN_COUNT is recorded with them; one with a count below or past them fails the
    run with ProviderError, recorded, and the thread's total never goes negative. It was
    recorded as given (helper-173)."""
    store = open_store("memory://")
    usage = Usage(*counts)
    agent = agent_on(store, [ProviderResponse(content="hi", usage=usage, finish_reason="stop")])
    if 0 <= counts[0] <= MAX_TOKEN_COUNT:
        assert agent.run("go") == "hi"
        assert agent.usage == usage
        return
    with pytest.raises(ProviderError, match="input_tokens"):
        agent.run("go")
    assert agent.usage == Usage()
    assert isinstance(store.history("t")[-1], AgentThread.RunFailed)


def test_compaction_summarizes_without_destroying_history(store: Store) -> None:
    """A compactor's summary replaces old context for the model; the stream keeps all."""
    long_text = "x" * 300

    def respond(request: ProviderRequest) -> ProviderResponse:
        if request.messages[0].content.startswith("Summarize"):
            return ProviderResponse(content="SUMMARY", usage=Usage(1, 1))
        return answer("ok")

    provider = ScriptedProvider(respond=respond)
    compactor = SummarizingCompactor(max_context_chars=1000, keep_last=2, keep_chars=700)
    agent = Agent(
        AgentConfig(
            provider=provider,
            system_prompt="sys",
            compactor=compactor,
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )
    for _ in range(5):
        agent.run(long_text)
    compaction = agent.state.compaction
    assert compaction is not None and compaction.summary == "SUMMARY"
    model_requests = [r for r in provider.requests if r.messages[-1].content == long_text]
    last = model_requests[-1]
    assert last.messages[0] == Message(Role.SYSTEM, "sys")
    assert last.messages[1].content == SUMMARY_PREFIX + "SUMMARY"
    assert sum(len(m.content) for m in last.messages) < 1000
    assert len(agent.messages) == 11  # system + 5 x (user, assistant): nothing deleted
    history_types = [type(e).__name__ for e in store.history("t")]
    assert "Compacted" in history_types


def test_context_messages_never_start_the_tail_with_a_tool_result() -> None:
    """The kept tail never starts with a tool result whose call was summarized away."""
    messages = [
        Message(Role.SYSTEM, "s"),
        Message(Role.USER, "u" * 50),
        Message(Role.ASSISTANT, "", tool_calls=()),
        Message(Role.TOOL, "r" * 10, tool_call_id="c"),
        Message(Role.USER, "u"),
    ]
    compactor = SummarizingCompactor(max_context_chars=10, keep_last=2, keep_chars=100)
    plan = compactor.plan(messages, None, model="m")
    assert plan is not None
    assert messages[plan.first_kept].role is not Role.TOOL
    from covonaut_es.domain import Compaction

    view = context_messages(messages, Compaction("s", plan.first_kept))
    assert view[0].role is Role.SYSTEM and view[1].content.startswith(SUMMARY_PREFIX)


class _Returns:
    """A provider whose complete() returns a fixed value, whatever it is."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def complete(self, request: ProviderRequest) -> Any:
        return self.value


@pytest.mark.parametrize(
    "value",
    [None, "hello", {"content": "hi"}, ProviderResponse(content=5)],  # type: ignore[arg-type]
    ids=["none", "str", "dict", "badly-typed"],
)
@pytest.mark.parametrize("driver", ["blocking", "async"])
def test_a_provider_answer_that_is_not_a_response_fails_the_run(
    store: Store, value: Any, driver: str
) -> None:
    """Anything but a well-typed ProviderResponse is a ProviderError and a recorded failure."""
    agent = Agent(
        AgentConfig(
            provider=_Returns(value),  # type: ignore[arg-type]
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
        )
    )
    with pytest.raises(ProviderError, match="the model provider returned"):
        agent.run("go") if driver == "blocking" else asyncio.run(agent.arun("go"))
    assert agent.status is ThreadStatus.ERROR
    assert [type(e).__name__ for e in store.history("t")][-1] == "RunFailed"
    assert store.state_at("t").status is ThreadStatus.ERROR


def outcomes(store: Store) -> dict[str, ToolOutcome]:
    return {
        e.tool_call_id: e.outcome
        for e in store.history("t")
        if isinstance(e, AgentThread.ToolResultRecorded)
    }


@pytest.mark.parametrize(
    ("arguments", "found"),
    [
        ('{"text": ' + "[" * 1000 + "]" * 1000 + "}", "nested 1001 deep, more than the 64"),
        ('{"text": "' + "x" * (MAX_ARGUMENTS_BYTES + 1) + '"}', "bytes, more than the"),
    ],
    ids=["deep", "huge"],
)
def test_arguments_over_the_limits_are_refused_and_not_in_doubt(
    store: Store, arguments: str, found: str
) -> None:
    """Too deep or too large arguments get a recorded refusal; the tool never runs."""
    log: list[str] = []
    agent = agent_on(store, [call(("c1", "echo", arguments)), answer("ok")], tools=[echo_tool(log)])
    assert agent.run("go") == "ok"
    assert found in tool_results(agent)["c1"]
    assert tool_results(agent)["c1"].startswith("Not executed: arguments for 'echo' were refused")
    assert outcomes(store) == {"c1": ToolOutcome.NOT_EXECUTED}
    assert log == [] and agent.in_doubt == ()


def test_arguments_at_the_depth_limit_are_accepted() -> None:
    """Nesting up to MAX_ARGUMENTS_DEPTH, brackets inside strings aside, is allowed."""
    inner = "[" * MAX_ARGUMENTS_DEPTH + '"[[[{{{"' + "]" * MAX_ARGUMENTS_DEPTH
    check_arguments_limits("echo", inner)
    with pytest.raises(ToolArgumentsLimitError, match="nested 65 deep"):
        check_arguments_limits("echo", "[" + inner + "]")


@pytest.mark.parametrize("number", ["1e999", "-1e400", "NaN", "Infinity"])
def test_numbers_json_cannot_carry_in_arguments_are_refused(store: Store, number: str) -> None:
    """Arguments with infinite or NaN numbers get an error result; the tool never runs."""
    log: list[str] = []
    script = [call(("c1", "echo", '{"text": ' + number + "}")), answer("ok")]
    agent = agent_on(store, script, tools=[echo_tool(log)])
    assert agent.run("go") == "ok"
    assert tool_results(agent)["c1"].startswith("Error: arguments for 'echo'")
    assert log == [] and agent.in_doubt == ()


def _recursive() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("\ud800", "surrogates not allowed"),
        ({"text": ["\udfff"]}, "surrogates not allowed"),
        (_recursive(), "recursion"),
        (object(), "unsupported"),
        (float("nan"), "nan is not a JSON number"),
        ({"total": float("inf")}, "inf is not a JSON number"),
        ([float("-inf")], "-inf is not a JSON number"),
        (b"%PDF-1.7", "bytes is not text"),
        ({"page": [bytearray(b"\x00")]}, "bytearray is not text"),
        (memoryview(b"ok"), "memoryview is not text"),
    ],
    ids=[
        *("surrogate", "nested-surrogate", "recursive", "object", "nan", "inf", "-inf"),
        *("bytes", "nested-bytearray", "memoryview"),
    ],
)
def test_a_result_that_cannot_be_recorded_is_the_calls_error(
    store: Store, value: Any, found: str
) -> None:
    """A tool result JSON cannot carry faithfully is recorded as the call's error."""

    def give(ctx: ToolContext, args: dict[str, Any]) -> Any:
        return value

    tools = [Tool("give", "Gives", OBJECT_SCHEMA, give)]
    agent = agent_on(store, [call(("c1", "give", "{}")), answer("ok")], tools=tools)
    assert agent.run("go") == "ok"
    result = tool_results(agent)["c1"]
    assert result.startswith("Error: tool 'give' failed: ToolResultError: ")
    assert found in result
    assert outcomes(store) == {"c1": ToolOutcome.FAILED}
    assert agent.in_doubt == ()


_JSON_LEAVES = st.none() | st.booleans() | st.integers(-9, 9) | st.text(max_size=3)
_BINARY = st.binary(max_size=3).flatmap(lambda b: st.sampled_from([b, bytearray(b), memoryview(b)]))


@settings(max_examples=50, deadline=None)
@given(
    value=st.recursive(
        _JSON_LEAVES | _BINARY,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.tuples(inner, inner)
            | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=8,
    )
)
def test_a_result_holding_bytes_anywhere_is_refused(value: Any) -> None:
    """Property: a tool result is refused with ToolResultError if it holds bytes, a
    bytearray or a memoryview anywhere, and recorded as JSON otherwise. Bytes were written
    as base64 text, which the model read as the result (helper-173)."""

    def binary(item: Any) -> bool:
        if isinstance(item, bytes | bytearray | memoryview):
            return True
        if isinstance(item, dict):
            return any(binary(v) for v in item.values())
        return isinstance(item, list | tuple) and any(binary(v) for v in item)

    if binary(value):
        with pytest.raises(ToolResultError, match="is not text"):
            result_text([value])
    else:
        assert result_text([value]) == msgspec.json.encode([value]).decode()


@pytest.mark.parametrize("data", [object(), {"x": float("nan")}, "\ud800"])
def test_an_interrupt_whose_data_cannot_be_recorded_is_the_calls_error(
    store: Store, data: Any
) -> None:
    """An InterruptError with data JSON cannot carry faithfully becomes the call's error."""

    def pause(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise InterruptError("check", data=data)

    tools = [Tool("pause", "Pauses", OBJECT_SCHEMA, pause)]
    agent = agent_on(store, [call(("c1", "pause", "{}")), answer("ok")], tools=tools)
    assert agent.run("go") == "ok"
    assert "cannot be recorded" in tool_results(agent)["c1"]
    assert agent.state.interrupts == () and agent.in_doubt == ()


class _Verdict(msgspec.Struct, frozen=True):
    approved: bool


class _FailingPlanner:
    def plan(self, messages: Any, previous: Any, *, model: str) -> None:
        raise LookupError("the planner's index is gone")


_FAILURES: dict[str, tuple[Callable[[], dict[str, Any]], type[BaseException]]] = {
    "the model call": (
        lambda: {"provider": ScriptedProvider([RuntimeError("down")])},
        ProviderError,
    ),
    "the compactor": (
        lambda: {"provider": ScriptedProvider([answer("x")]), "compactor": _FailingPlanner()},
        LookupError,
    ),
    "the turn limit": (
        lambda: {"provider": ScriptedProvider([call(("c1", "echo", "{}"))]), "max_turns": 1},
        MaxTurnsExceededError,
    ),
    "the typed answer": (
        lambda: {
            "provider": ScriptedProvider([answer("not json")]),
            "output_type": _Verdict,
            "output_retries": 0,
        },
        OutputValidationError,
    ),
}
"""Each way a run fails: the agent's options that make it fail so, and what it raises."""


@pytest.mark.parametrize("durability", ["step", "checkpoint"])
@pytest.mark.parametrize("failure", sorted(_FAILURES))
def test_a_failed_run_is_on_record_in_every_durability_mode(
    store: Store, failure: str, durability: str
) -> None:
    """However a run fails (its model call, its compactor, its turn limit, a typed
    answer refused), the failure is committed with what led to it, also where steps are
    committed only with checkpoints: the store never shows a run that ended as running."""
    options, raised = _FAILURES[failure]
    agent = Agent(
        AgentConfig(
            tools=[echo_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id="t", durability=durability),
            clock=ticking_clock(),
            **options(),
        )
    )
    with pytest.raises(raised):
        agent.run("go")
    stored = store.state_at("t")
    assert stored.status is ThreadStatus.ERROR
    assert stored == agent.state
    assert isinstance(store.history("t")[-1], AgentThread.RunFailed)


class _Fault(RuntimeError):
    """What the generated faults raise: no error of the library's."""


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(("clock", "save")),
    at=st.integers(min_value=1, max_value=30),
    durability=st.sampled_from(("step", "checkpoint")),
    awaited=st.booleans(),
)
def test_whatever_a_run_raises_the_store_never_shows_it_running(
    where: str, at: int, durability: str, awaited: bool
) -> None:
    """An exception from anywhere once a run started (the application's clock at its
    ``at``-th reading, the store's ``at``-th save) ends the run with its failure on
    record, ``RunFailed`` naming it, committed after what the store holds: no stored
    thread is left running while the process that ran it lives. It used to be left
    running, with no failure, by any exception but the model's and the compactor's (a
    float ``max_turns``, a bad steering message)."""
    readings = itertools.count(1)
    ticks = ticking_clock()

    def clock() -> datetime:
        if where == "clock" and next(readings) == at:
            raise _Fault("the clock broke")
        return ticks()

    with open_store("memory://") as store:
        saves = itertools.count(1)
        save = store.save

        def faulty_save(*args: Any, **kwargs: Any) -> Any:
            if where == "save" and next(saves) == at:
                raise _Fault("the disk broke")
            return save(*args, **kwargs)

        script = [call(("c1", "echo", '{"text": "a"}')), call(("c2", "echo", '{"text": "b"}'))]
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider([*script, answer("done")]),
                tools=[echo_tool()],
                checkpoint=CheckpointSettings(store=store, thread_id="t", durability=durability),
                clock=clock,
            )
        )
        with mock.patch.object(store, "save", faulty_save):
            try:
                asyncio.run(agent.arun("go")) if awaited else agent.run("go")
            except _Fault as exc:
                failed: str | None = f"_Fault: {exc}"
            else:
                failed = None
        if not store.exists("t"):
            return  # the fault came before anything was stored
        stored = store.state_at("t")
        assert stored.status is not ThreadStatus.RUNNING
        if failed is not None and stored.status is ThreadStatus.ERROR:
            assert stored.error == failed
            assert isinstance(store.history("t")[-1], AgentThread.RunFailed)


@settings(max_examples=25, deadline=None)
@given(text=hostile_text(min_size=1))
def test_a_providers_error_is_recorded_whatever_its_text_holds(text: str) -> None:
    """Property: a provider's exception whose text holds anything (a lone surrogate
    among it) fails the run with ProviderError and is stored as that failure, its text
    escaped where UTF-8 cannot hold it. The failure's record failed to encode, and the
    thread stored a SerializationError about RunFailed in place of what happened
    (helper-113)."""
    store = open_store("memory://")
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([ValueError(text)]),
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
        )
    )
    with pytest.raises(ProviderError):
        agent.run("go")
    failed = [e for e in store.history("t") if isinstance(e, AgentThread.RunFailed)]
    assert [e.error_type for e in failed] == ["ValueError"]
    assert failed[0].message == text.encode("utf-8", "backslashreplace").decode()


class _Text(str):
    """A subclass of str, as a library a tool calls may return (markupsafe's Markup)."""


def test_a_tool_returning_a_str_subclass_is_recorded_as_its_text() -> None:
    """A tool's result that is a subclass of str is recorded as the text it holds: no
    event holds the subclass, so the result's save failed after the tool ran, and the
    call was left in doubt (helper-116)."""
    store = open_store("memory://")
    tool = Tool("fmt", "Format", OBJECT_SCHEMA, lambda ctx, args: _Text("<b>ok</b>"))
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "fmt", "{}")), answer("done")]),
            tools=[tool],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )
    assert agent.run("go") == "done"
    (result,) = [m for m in store.load("t").messages if m.tool_call_id == "c1"]
    assert type(result.content) is str and result.content == "<b>ok</b>"


_TEXT_FAULTS = st.sampled_from(
    [
        *(RuntimeError, TypeError, ValueError, KeyError, AttributeError, RecursionError),
        *(MemoryError, UnicodeError, ZeroDivisionError, OSError, ProviderError, ToolInDoubtError),
    ]
)


def _unshowable(base: type[Exception], fault: type[Exception] | None) -> Exception:
    """An instance of a subclass of ``base`` whose ``__str__`` and ``__repr__`` raise
    ``fault``, or give no string if ``fault`` is None."""

    def text(self: Exception) -> Any:
        if fault is None:
            return 42
        raise fault("the text exploded")

    return type("Unshowable", (base,), {"__str__": text, "__repr__": text})()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fault=st.none() | _TEXT_FAULTS,
    base=st.sampled_from([RuntimeError, ValueError, ToolInDoubtError]),
    parallel=st.booleans(),
    bad_first=st.booleans(),
)
def test_a_tool_exception_whose_text_raises_is_still_its_error_result(
    fault: type[Exception] | None, base: type[Exception], parallel: bool, bad_first: bool
) -> None:
    """Property: a tool exception whose __str__ raises (any kind of exception) or gives no
    string is recorded as the call's error, named by its class, and the other call's
    result is kept, in sequential and parallel mode. Its text was formatted unguarded: run()
    raised the formatting error untyped, and both calls were left in doubt, the one that
    never ran and, in parallel mode, the one whose result had come back (helper-173)."""
    store = open_store("memory://")
    ran: list[str] = []

    def bad(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise _unshowable(base, fault)

    def good(ctx: ToolContext, args: dict[str, Any]) -> Any:
        ran.append(ctx.tool_call_id)
        return "ok"

    calls = [("c1", "bad", "{}"), ("c2", "good", "{}")]
    tools = [Tool("bad", "Bad", OBJECT_SCHEMA, bad), Tool("good", "Good", OBJECT_SCHEMA, good)]
    script = [call(*(calls if bad_first else calls[::-1])), answer("done")]
    agent = agent_on(store, script, tools=tools, parallel_tools=parallel)
    if base is ToolInDoubtError:  # the run pauses on the call in doubt; a later one waits
        agent.run("go")
        assert [c.call.id for c in agent.in_doubt] == ["c1"]
        assert ran == (["c2"] if parallel or not bad_first else [])
        assert outcomes(store) == {"c2": ToolOutcome.SUCCEEDED if ran else ToolOutcome.NOT_EXECUTED}
        return
    assert agent.run("go") == "done"
    assert agent.in_doubt == ()
    assert "Unshowable whose text cannot be shown" in tool_results(agent)["c1"]
    assert ran == ["c2"] and tool_results(agent)["c2"] == "ok"


@settings(max_examples=20, deadline=None)
@given(fault=st.none() | _TEXT_FAULTS)
def test_a_provider_exception_whose_text_raises_fails_the_run_typed(
    fault: type[Exception] | None,
) -> None:
    """Property: a provider exception whose __str__ raises or gives no string fails the run
    with ProviderError, recorded as a RunFailed naming its class; the formatting error
    escaped untyped, and the failure went unrecorded (helper-173)."""
    store = open_store("memory://")
    agent = agent_on(store, [_unshowable(RuntimeError, fault)])
    with pytest.raises(ProviderError, match="Unshowable whose text cannot be shown"):
        agent.run("go")
    (failed,) = [e for e in store.history("t") if isinstance(e, AgentThread.RunFailed)]
    assert failed.error_type == "Unshowable"
