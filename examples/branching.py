"""Branching: run to a review, fork the thread, decide differently in each branch.

The original thread pauses on a payment review. A fork at that point is paused on the
same review; one branch is told the payment was approved, the other that it was
rejected, and each resumes to its own answer. The parent's events are shared, not
copied: the fork stores one small event.
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
    Store,
    ThreadTree,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)


def payments_model(request: ProviderRequest) -> ProviderResponse:
    """Ask for the payment; once a person decided, report what they said."""
    decision = [m.content for m in request.messages if m.role is Role.USER][-1]
    if any(m.role is Role.TOOL for m in request.messages):
        return ProviderResponse(content=f"Understood: {decision}")
    return ProviderResponse(tool_calls=(ToolCall("pay-1", "send_payment", '{"amount": 120}'),))


def send_payment(ctx: ToolContext, args: dict[str, Any]) -> Any:
    raise InterruptError("payment needs a review", {"amount": args["amount"]})


def agent(store: Store, thread_id: str) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=payments_model),
            tools=[Tool("send_payment", "Send a payment", {"type": "object"}, send_payment)],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    )


def show(tree: ThreadTree, indent: str = "") -> None:
    at = "" if tree.parent_version is None else f" (from version {tree.parent_version})"
    labels = "".join(f" [{label.name}]" for label in tree.labels)
    print(f"{indent}{tree.thread_id}{at}{labels}")
    for child in tree.children:
        show(child, indent + "  ")


def main() -> None:
    store = open_store("memory://")
    original = agent(store, "invoice-17")
    original.run("Pay invoice 17.")
    assert original.interrupted is not None
    print("Paused:", original.interrupted.reason, original.interrupted.data)

    rejected_id = store.fork("invoice-17", new_thread_id="invoice-17/rejected")
    approved, rejected = original, agent(store, rejected_id)
    approved.steer("The reviewer approved the payment.")
    rejected.steer("The reviewer rejected the payment.")
    print("Approved branch:", approved.resume())
    print("Rejected branch:", rejected.resume())

    store.label("invoice-17", "approved")
    store.label(rejected_id, "rejected")
    show(store.tree("invoice-17"))


if __name__ == "__main__":
    main()
