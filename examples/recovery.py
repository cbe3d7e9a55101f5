"""Offline recovery: pause on a review, restore from a checkpoint, steer, resume.

No model credentials are needed: a scripted provider asks for a review until it sees a
tool result, then answers. Both agents share one in-memory store, so this shows
recovery inside one process; ``restart_recovery.py`` shows it across processes.
"""

from __future__ import annotations

from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    InterruptError,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)


def review_model(request: ProviderRequest) -> ProviderResponse:
    """Answer once a tool result is in the context; until then, ask for a review."""
    if any(message.role is Role.TOOL for message in request.messages):
        return ProviderResponse(content="Review recorded. No external action was performed.")
    return ProviderResponse(tool_calls=(ToolCall("review-1", "request_review", "{}"),))


def request_review(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Pause the run until a person has looked at the preview."""
    raise InterruptError("host review required", {"request_id": "preview-1"})


def main() -> None:
    store = open_store("memory://", max_checkpoints_per_thread=10)
    config = AgentConfig(
        model="offline-review",
        provider=ScriptedProvider(respond=review_model),
        max_turns=5,
        checkpoint=CheckpointSettings(store=store, thread_id="review-thread"),
        tools=[
            Tool(
                "request_review",
                "Pause for a host review",
                {"type": "object"},
                request_review,
            )
        ],
    )

    with Agent(config) as original:
        original.run("Prepare a request for review.")
        if original.interrupted is None:
            raise SystemExit("expected a review interrupt")
        print("Paused:", original.interrupted.reason)

    with Agent(config) as restored:
        restored.restore_latest_checkpoint("review-thread")
        if restored.interrupted is None:
            raise SystemExit("the checkpoint did not restore the interrupt")
        print("Restored:", restored.interrupted.data["request_id"])
        restored.steer("I reviewed the preview. Continue without external actions.")
        print(restored.resume())


if __name__ == "__main__":
    main()
