"""Streaming through the run loop: the answer's pieces beside the committed events.

A streamed turn is committed exactly as a turn answered in one piece: the pieces join to
the committed answer and calls, a tool starts only once its call is committed, and a
stream cut anywhere leaves what is stored, which resumes cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    CommittedEvent,
    Role,
    ScriptedProvider,
    StreamItem,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolContext,
    open_store,
)
from covonaut_es.domain import ThreadStatus
from covonaut_es.errors import ProviderError
from covonaut_es.messages import StreamDelta
from covonaut_es.runtime import SummarizingCompactor
from support import (
    OBJECT_SCHEMA,
    AsyncScriptedProvider,
    HeldProvider,
    answer,
    call,
    call_intents,
    echo_tool,
    ticking_clock,
)


def collect(agent: Agent, user_input: str) -> list[StreamItem]:
    """Everything ``astream`` yields for one run."""

    async def main() -> list[StreamItem]:
        return [item async for item in agent.astream(user_input)]

    return asyncio.run(main())


def texts(items: list[Any]) -> list[str]:
    return [item.text for item in items if isinstance(item, TextDelta)]


def committed(items: list[Any]) -> list[AgentThread.Event]:
    return [item.event for item in items if isinstance(item, CommittedEvent)]


def split(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted({min(cut, len(text)) for cut in cuts}), len(text)]
    return [text[start:end] for start, end in itertools.pairwise(bounds)]


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=60), st.lists(st.integers(0, 60), max_size=8))
def test_text_deltas_arrive_in_order_and_join_to_the_committed_answer(
    text: str, cuts: list[int]
) -> None:
    """However the answer is split into deltas, they arrive in order, before the
    committed answer, and join to exactly it."""
    pieces = split(text, cuts)
    script = tuple(StreamDelta(content=piece) for piece in pieces)
    agent = Agent(AgentConfig(provider=ScriptedProvider([script]), clock=ticking_clock()))
    items = collect(agent, "hi")
    assert texts(items) == [piece for piece in pieces if piece]
    events = committed(items)
    finished = [e for e in events if isinstance(e, AgentThread.RunFinished)]
    assert [f.output for f in finished] == [text]
    assert agent.messages[-1].content == text
    answered = next(
        index
        for index, item in enumerate(items)
        if isinstance(item, CommittedEvent)
        and isinstance(item.event, AgentThread.MessageAppended)
        and item.event.message.role is Role.ASSISTANT
    )
    assert all(not isinstance(item, TextDelta) for item in items[answered:])


def interleavings(draw: Any, streams: list[list[Any]]) -> list[Any]:
    """One merge of ``streams`` that keeps each stream's own order."""
    cursors = [0] * len(streams)
    merged = []
    while any(cursor < len(stream) for cursor, stream in zip(cursors, streams, strict=True)):
        ready = [i for i, stream in enumerate(streams) if cursors[i] < len(stream)]
        chosen = draw(st.sampled_from(ready))
        merged.append(streams[chosen][cursors[chosen]])
        cursors[chosen] += 1
    return merged


@st.composite
def streamed_calls(draw: Any) -> tuple[list[str], list[ToolCallDelta]]:
    """Two or three echo calls whose argument JSON is cut into fragments, the fragments
    of the calls interleaved."""
    words = draw(st.lists(st.text(max_size=12), min_size=2, max_size=3))
    streams = []
    for index, word in enumerate(words):
        arguments = json.dumps({"text": word})
        fragments = split(arguments, draw(st.lists(st.integers(0, len(arguments)), max_size=4)))
        opening = ToolCallDelta(index=index, id=f"call-{index}", name="echo")
        streams.append([opening, *(ToolCallDelta(index=index, arguments=f) for f in fragments)])
    return words, interleavings(draw, streams)


@settings(max_examples=30, deadline=None)
@given(streamed_calls())
def test_parallel_tool_calls_streamed_with_interleaved_arguments_are_assembled(
    case: tuple[list[str], list[ToolCallDelta]],
) -> None:
    """Pieces of parallel calls, interleaved, arrive as streamed; each call's fragments
    join to the arguments committed for it, and each call runs with them."""
    words, pieces = case
    script = tuple(StreamDelta(tool_call_deltas=(piece,)) for piece in pieces)
    provider = ScriptedProvider([script, answer("done")])
    agent = Agent(
        AgentConfig(
            provider=provider, tools=[echo_tool()], parallel_tools=True, clock=ticking_clock()
        )
    )
    items = collect(agent, "echo them")
    streamed = [item for item in items if isinstance(item, ToolCallDelta)]
    assert streamed == pieces
    calls = next(m for m in agent.messages if m.role is Role.ASSISTANT).tool_calls
    for index, tool_call in enumerate(calls):
        joined = "".join(p.arguments for p in streamed if p.index == index)
        assert tool_call == ToolCall(f"call-{index}", "echo", joined)
    results = [m.content for m in agent.messages if m.role is Role.TOOL]
    assert [json.loads(result)["echo"] for result in results] == words


@pytest.mark.parametrize("durability", ["step", "checkpoint"])
def test_a_tool_starts_only_after_its_streamed_call_is_committed(
    durability: str, tmp_path: Path
) -> None:
    """With streaming on, every piece of a call arrives, then its call is committed (and
    stored), and only then does its tool start."""
    store = open_store(f"sqlite:///{tmp_path / 'threads.db'}")
    log: list[Any] = []

    def charge(ctx: ToolContext, args: dict[str, Any]) -> Any:
        stored = store.load("t")  # what a process restored now would find
        log.append(("started", ctx.tool_call_id, ctx.tool_call_id in stored.open_calls))
        return "charged"

    provider = ScriptedProvider(
        [call(("c1", "charge", "{}"), ("c2", "charge", "{}")), answer("both charged")]
    )
    agent = Agent(
        AgentConfig(
            provider=provider,
            tools=[Tool("charge", "Charge", OBJECT_SCHEMA, charge)],
            checkpoint=CheckpointSettings(store=store, thread_id="t", durability=durability),  # type: ignore[arg-type]
            on_delta=log.append,
            on_event=lambda event: log.append(event),
            clock=ticking_clock(),
        )
    )
    assert agent.run("charge twice") == "both charged"
    for call_id in ("c1", "c2"):
        last_piece = max(
            i for i, e in enumerate(log) if isinstance(e, ToolCallDelta) and e.id == call_id
        )
        intent = next(
            i for i, e in enumerate(log) if any(c == call_id for c, _ in call_intents([e]))
        )
        start = log.index(("started", call_id, True))
        assert last_piece < intent < start


def test_blocking_runs_hand_the_pieces_to_on_delta() -> None:
    """``on_delta`` gets the pieces of each turn's answer in a blocking run, and an
    ``async def`` provider without ``stream()`` hands its answer on in one piece."""
    pieces: list[Any] = []
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([answer("one two three")]),
            on_delta=pieces.append,
            clock=ticking_clock(),
        )
    )
    assert agent.run("count") == "one two three"
    assert pieces == [TextDelta("one "), TextDelta("two "), TextDelta("three")]

    whole: list[Any] = []
    agent = Agent(
        AgentConfig(
            provider=AsyncScriptedProvider([answer("in one piece")]),
            on_delta=whole.append,
            clock=ticking_clock(),
        )
    )
    assert agent.run("go") == "in one piece"
    assert whole == [TextDelta("in one piece")]


def test_a_failing_on_delta_is_logged_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An exception raised by ``on_delta`` is logged; the run still commits its answer."""

    def broken(piece: Any) -> None:
        raise RuntimeError("display gone")

    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([answer("still here")]),
            on_delta=broken,
            clock=ticking_clock(),
        )
    )
    assert agent.run("go") == "still here"
    assert "on_delta callback" in caplog.text


def reference_messages() -> list[tuple[Role, str]]:
    return [(Role.USER, "tell me"), (Role.ASSISTANT, "a long answer in many words")]


def shape(agent: Agent) -> list[tuple[Role, str]]:
    return [(m.role, m.content) for m in agent.messages]


def stored_agent(url: str, provider: Any) -> Agent:
    return Agent(
        AgentConfig(
            provider=provider,
            checkpoint=CheckpointSettings(store=open_store(url), thread_id="t"),
            clock=ticking_clock(),
        )
    )


def test_leaving_the_stream_mid_answer_leaves_a_thread_that_continues_cleanly(
    tmp_path: Path,
) -> None:
    """A consumer that stops iterating mid-answer stops the run; the stored thread, in a
    new agent, continues to the answer an uninterrupted run gives."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    text = "a long answer in many words"
    provider = HeldProvider([answer(text)])
    agent = stored_agent(url, provider)

    async def leave_after_two() -> list[StreamItem]:
        seen: list[StreamItem] = []
        async with contextlib.aclosing(agent.astream("tell me")) as items:
            async for item in items:
                seen.append(item)
                if len(texts(seen)) == 2:
                    break
        provider.go.set()  # the run is stopped: its stream, let go on, reads no further
        return seen

    seen = asyncio.run(leave_after_two())
    assert "".join(texts(seen)) == "a long "
    assert not any(isinstance(e, AgentThread.RunFinished) for e in committed(seen))

    restored = stored_agent(url, ScriptedProvider([answer(text)]))
    assert restored.continue_run() == text
    assert shape(restored) == reference_messages()


def test_cancelling_the_consuming_task_mid_answer_leaves_a_thread_that_continues(
    tmp_path: Path,
) -> None:
    """A task consuming the stream (closing it, as documented), cancelled mid-answer,
    stops the run; what is stored continues in a new agent to the answer an
    uninterrupted run gives."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    text = "a long answer in many words"
    provider = HeldProvider([answer(text)])
    agent = stored_agent(url, provider)

    async def cancel_after_the_first_piece() -> None:
        first = asyncio.Event()

        async def consume() -> None:
            async with contextlib.aclosing(agent.astream("tell me")) as items:
                async for item in items:
                    if isinstance(item, TextDelta):
                        first.set()
                        await asyncio.sleep(60)  # a slow reader, cancelled here

        task = asyncio.create_task(consume())
        await first.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        provider.go.set()

    asyncio.run(cancel_after_the_first_piece())
    restored = stored_agent(url, ScriptedProvider([answer(text)]))
    assert restored.continue_run() == text
    assert shape(restored) == reference_messages()


def test_a_stream_cut_by_the_provider_fails_the_run_and_resumes() -> None:
    """A provider whose stream breaks mid-answer: the pieces before the break arrive,
    the failure is committed and raised, and the run continues afterwards."""
    script = (StreamDelta(content="half "), ProviderError("connection reset mid-stream"))
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([script, answer("whole answer")]), clock=ticking_clock()
        )
    )
    seen: list[StreamItem] = []

    async def consume() -> None:
        async for item in agent.astream("go"):
            seen.append(item)

    with pytest.raises(ProviderError, match="connection reset"):
        asyncio.run(consume())
    assert texts(seen) == ["half "]
    assert any(isinstance(e, AgentThread.RunFailed) for e in committed(seen))
    assert agent.continue_run() == "whole answer"
    assert [m.content for m in agent.messages if m.role is Role.ASSISTANT] == ["whole answer"]


def test_a_compaction_summary_is_not_streamed() -> None:
    """Only a turn's answer streams: the pieces a consumer sees are those of answers."""
    provider = ScriptedProvider(
        [answer("first answer"), answer("the summary"), answer("second answer")]
    )
    pieces: list[Any] = []
    agent = Agent(
        AgentConfig(
            provider=provider,
            compactor=SummarizingCompactor(max_context_chars=10, keep_last=1),
            on_delta=pieces.append,
            clock=ticking_clock(),
        )
    )
    agent.run("one")
    agent.run("two")
    assert "".join(texts(pieces)) == "first answersecond answer"


class _ClockBroke(RuntimeError):
    """What the application's clock raises, once."""


@settings(max_examples=12, deadline=None)
@given(broken_reading=st.integers(min_value=2, max_value=12))
def test_a_streamed_run_that_fails_hands_its_failure_on_the_loop_and_raises_it(
    broken_reading: int,
) -> None:
    """Property: whichever reading of the clock fails, a streamed run, under asyncio's
    debug mode (which refuses a queue fed from another thread), raises the run's own
    error to its consumer, and every committed event (the RunFailed among them, when the
    run had started) reaches it on the loop's thread. The failure was published from
    the worker thread that recorded it, and the consumer waited for ever (helper-112)."""
    ticks, readings = ticking_clock(), itertools.count(1)

    def clock() -> Any:
        if next(readings) == broken_reading:
            raise _ClockBroke("the clock broke")
        return ticks()

    store = open_store("memory://")
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "echo", '{"text": "a"}')), answer("done")]),
            tools=[echo_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=clock,
        )
    )
    committed: list[Any] = []

    async def consume() -> None:
        loop_thread = threading.get_ident()
        async for item in agent.astream("go"):
            if isinstance(item, CommittedEvent):
                assert threading.get_ident() == loop_thread
                committed.append(item.event)

    raised: list[BaseException] = []

    def stream() -> None:
        try:
            asyncio.run(consume(), debug=True)
        except BaseException as exc:  # handed to the test's thread
            raised.append(exc)

    streaming = threading.Thread(target=stream, daemon=True)  # a hang fails, not blocks
    streaming.start()
    streaming.join(10)
    assert not streaming.is_alive(), "the consumer was left waiting"
    assert all(isinstance(exc, _ClockBroke) for exc in raised), raised
    if store.exists("t"):
        thread = store.load("t")
        assert thread.status is not ThreadStatus.RUNNING
        if committed:  # each committed event handed on once, in order, to the last
            first = committed[0].originator_version
            assert [e.originator_version for e in committed] == list(
                range(first, thread.version + 1)
            )
