"""A process for the streaming kill test: it streams a run and is killed mid-stream.

Usage: ``python stream_worker.py URL THREAD PHASE [CUT]``.

- ``PHASE=first`` streams a run with ``Agent.astream``; the model streams a tool call,
  then the answer word by word. With ``CUT=TURN:N`` the model stops inside turn TURN
  after its N-th piece, prints ``cut`` and hangs there, for the test to SIGKILL the
  process; the pieces the run yielded are printed as they arrive.
- ``PHASE=second`` binds a new agent to the stored thread, prints the roles of the
  messages it restored, then streams the run on with ``astream_continue`` and prints the
  final state as JSON.
- ``PHASE=reference`` streams the same run uninterrupted and prints its final state.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ProviderRequest,
    ProviderResponse,
    Role,
    TextDelta,
    Tool,
    ToolCallDelta,
    ToolContext,
    open_store,
)
from covonaut_es.messages import StreamDelta
from covonaut_es.providers import collect_stream

ANSWER = "The echo said hello, and that is all there is."
COUNTS = {"yielded": 0, "printed": 0}
"""Pieces the model yielded and the consumer printed (each side writes its own count)."""


class StreamingModel:
    """A model whose answer depends only on the history, streamed piece by piece."""

    def __init__(self, cut: str) -> None:
        self.cut = cut

    def pieces(self, request: ProviderRequest) -> list[StreamDelta]:
        turn = 1 + sum(message.role is Role.ASSISTANT for message in request.messages)
        if turn == 1:
            fragments = ['{"te', 'xt": "hel', 'lo"}']
            opening = ToolCallDelta(index=0, id="echo-1", name="echo")
            pieces = [opening, *(ToolCallDelta(index=0, arguments=f) for f in fragments)]
            return [StreamDelta(tool_call_deltas=(piece,)) for piece in pieces]
        words = ANSWER.split(" ")
        return [StreamDelta(content=w + " ") for w in words[:-1]] + [
            StreamDelta(content=words[-1], finish_reason="stop")
        ]

    def stream(self, request: ProviderRequest) -> Iterator[StreamDelta]:
        turn = 1 + sum(message.role is Role.ASSISTANT for message in request.messages)
        for number, delta in enumerate(self.pieces(request), start=1):
            yield delta
            COUNTS["yielded"] += 1
            if self.cut == f"{turn}:{number}":
                deadline = time.monotonic() + 10
                while COUNTS["printed"] < COUNTS["yielded"] and time.monotonic() < deadline:
                    time.sleep(0.01)  # the consumer prints the pieces yielded so far
                print("cut", flush=True)
                time.sleep(60)

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        return collect_stream(self.pieces(request))


def echo(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return {"echo": args["text"]}


def make_agent(url: str, thread_id: str, cut: str) -> Agent:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return Agent(
        AgentConfig(
            provider=StreamingModel(cut),
            tools=[Tool("echo", "Echo the text", schema, echo)],
            checkpoint=CheckpointSettings(store=open_store(url), thread_id=thread_id),
        )
    )


def final_state(agent: Agent) -> dict[str, Any]:
    return {
        "status": agent.status.value,
        "messages": [
            [m.role.value, m.content, [[c.id, c.name, c.arguments] for c in m.tool_calls]]
            for m in agent.messages
        ],
        "in_doubt": [pending.call.id for pending in agent.in_doubt],
    }


async def first(agent: Agent) -> None:
    async for item in agent.astream("Echo hello, then tell me what it said."):
        if isinstance(item, TextDelta | ToolCallDelta):
            print(json.dumps({"piece": type(item).__name__}), flush=True)
            COUNTS["printed"] += 1


async def second(agent: Agent) -> None:
    print(json.dumps({"restored": [m.role.value for m in agent.messages]}), flush=True)
    async for _ in agent.astream_continue():
        pass


def main() -> None:
    url, thread_id, phase, *rest = sys.argv[1:]
    agent = make_agent(url, thread_id, rest[0] if rest else "")
    if phase == "first" or phase == "reference":
        asyncio.run(first(agent))
    else:
        asyncio.run(second(agent))
    print(json.dumps(final_state(agent)), flush=True)


if __name__ == "__main__":
    main()
