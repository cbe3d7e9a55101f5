"""The original design note's offline recovery example, ported line by line.

Each block mirrors the Go original: a provider that asks for a review until it sees a
tool result, a memory checkpoint store capped at 10, an agent that pauses, a second
agent that restores from the checkpoint, is steered, and resumes.
"""

from __future__ import annotations

from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    InterruptError,
    Message,
    ProviderRequest,
    ProviderResponse,
    Role,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.errors import ProviderError
from covonaut_es.messages import StreamDelta


class ReviewProvider:
    """reviewProvider: a fixed review request, then a final answer."""

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        for message in request.messages:
            if message.role is Role.TOOL:
                return ProviderResponse(
                    content="Review recorded. No external action was performed."
                )
        return ProviderResponse(
            tool_calls=(ToolCall(id="review-1", name="request_review", arguments="{}"),)
        )

    def stream(self, request: ProviderRequest) -> Any:
        raise ProviderError("this offline example does not support streaming")
        yield StreamDelta()  # pragma: no cover - makes this a generator


def request_review(ctx: ToolContext, args: dict[str, Any]) -> Any:
    raise InterruptError("host review required", {"request_id": "preview-1"})


def test_note_example_ported_line_by_line(capsys: Any) -> None:
    """Pause, checkpoint, restore in a second agent, steer, resume."""
    store = open_store("memory://", max_checkpoints_per_thread=10)  # saver.MaxCheckpoints
    cfg = AgentConfig(
        model="offline-review",
        provider=ReviewProvider(),
        max_turns=5,
        checkpoint=CheckpointSettings(store=store, thread_id="review-thread"),
        tools=[
            Tool("request_review", "Pause for a host review", {"type": "object"}, request_review)
        ],
    )
    with Agent(cfg) as original:
        original.run("Prepare a request for review.")
        assert original.interrupted is not None, "expected a review interrupt"
        print("Paused:", original.interrupted.reason)

    with Agent(cfg) as restored:
        restored.restore_latest_checkpoint("review-thread")
        assert restored.interrupted is not None, "checkpoint did not restore the interrupt"
        print("Restored:", restored.interrupted.data["request_id"])
        restored.steer(
            Message(
                role=Role.USER,
                content="I reviewed the preview. Continue without external actions.",
            )
        )
        output = restored.resume()
        print(output)

    assert capsys.readouterr().out == (
        "Paused: host review required\n"
        "Restored: preview-1\n"
        "Review recorded. No external action was performed.\n"
    )
