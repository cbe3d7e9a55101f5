"""Streaming a run: the answer's pieces as they arrive, beside the committed events.

The model (a scripted function, so no credentials are needed) first streams a call of
the ``forecast`` tool, its arguments in fragments, then streams its answer. The run is
read with ``Agent.astream``: text pieces are printed as they come, tool-call pieces and
committed events are named. The tool starts only once its call is committed.

A second question is then left mid-answer (the consumer stops iterating): the stored
thread, at its last commit, is continued to the whole answer.

Run it with ``python examples/streaming.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    CommittedEvent,
    ProviderRequest,
    Role,
    ScriptedProvider,
    TextDelta,
    Tool,
    ToolCallDelta,
    ToolContext,
    open_store,
)
from covonaut_es.messages import StreamDelta
from covonaut_es.providers import StreamScript


def words(text: str) -> StreamScript:
    """An answer streamed word by word."""
    *most, last = text.split(" ")
    return (
        *(StreamDelta(content=word + " ") for word in most),
        StreamDelta(content=last, finish_reason="stop"),
    )


def model(request: ProviderRequest) -> StreamScript:
    """Stream a forecast call for the first question, then answers."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return words(f"Tomorrow in Lyon: {last.content}, so take an umbrella.")
    if any(message.role is Role.TOOL for message in request.messages):
        return words("The day after, Lyon should be dry and mild.")
    fragments = ['{"ci', 'ty": "Ly', 'on"}']
    opening = ToolCallDelta(index=0, id="call-1", name="forecast")
    pieces = [opening, *(ToolCallDelta(index=0, arguments=f) for f in fragments)]
    return tuple(StreamDelta(tool_call_deltas=(piece,)) for piece in pieces)


def forecast(ctx: ToolContext, args: dict[str, Any]) -> str:
    print(f"\n  [tool forecast starts for {args['city']}, its call committed]")
    return "light rain"


def make_agent() -> Agent:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[Tool("forecast", "Tomorrow's forecast", schema, forecast)],
            checkpoint=CheckpointSettings(store=open_store("memory://"), thread_id="weather"),
        )
    )


async def stream_whole(agent: Agent) -> None:
    async for item in agent.astream("Will it rain in Lyon tomorrow?"):
        match item:
            case TextDelta(text=text):
                print(text, end="", flush=True)
            case ToolCallDelta(name=name, arguments=arguments):
                print(f"  [call piece {name or ''}{arguments}]")
            case CommittedEvent(event=event) if event.intended_calls:
                # The calls' intents: with the answer that asks for them, or one by one.
                print(f"  [committed: calls {', '.join(event.intended_calls)} to run]")
            case CommittedEvent(event=AgentThread.RunFinished(output=output)):
                print(f"\n  [committed: the answer, {len(output)} characters]")


async def leave_mid_answer(agent: Agent) -> str:
    seen = ""
    async with contextlib.aclosing(agent.astream("And the day after?")) as items:
        async for item in items:
            if isinstance(item, TextDelta):
                seen += item.text
                if seen.count(" ") == 3:
                    break  # the reader goes away mid-answer
    return seen


def main() -> None:
    agent = make_agent()
    asyncio.run(stream_whole(agent))
    seen = asyncio.run(leave_mid_answer(agent))
    print(f"Left after: {seen!r}")
    print("Continued:", agent.continue_run())


if __name__ == "__main__":
    main()
