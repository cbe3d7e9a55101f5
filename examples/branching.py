"""Branching: run to a review, fork the thread, decide differently in each branch.

The original thread pauses on a payment that needs approval. A fork taken at that point
is paused on the same review; a reviewer approves it in the original and rejects it in
the branch, and each resumes to its own outcome. The parent's events are shared, not
copied: the fork stores one small event.
"""

from __future__ import annotations

import secrets
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
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
from covonaut_es.service import ThreadService

VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
REVIEWER = VERIFIER.issue_token("rita@finance", ttl_seconds=600)


def payments_model(request: ProviderRequest) -> ProviderResponse:
    """Ask to pay; once approved, pay; once rejected or paid, say what happened."""
    last = request.messages[-1]
    pay = ToolCall(f"pay-{len(request.messages)}", "send_payment", '{"amount": 120}')
    if last.role is not Role.TOOL or last.content.startswith("Approved"):
        return ProviderResponse(tool_calls=(pay,))
    return ProviderResponse(content=f"Outcome: {last.content}")


def send_payment(ctx: ToolContext, args: dict[str, Any]) -> Any:
    assert ctx.approval is not None  # the runtime runs it only on a recorded approval
    return f"paid {args['amount']}, approved by {ctx.approval.reviewer}"


def agent(store: Store, thread_id: str) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=payments_model),
            tools=[
                Tool(
                    "send_payment",
                    "Send a payment",
                    {"type": "object"},
                    send_payment,
                    requires_approval=True,
                )
            ],
            reviewer_verifier=VERIFIER,
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
    review_id = original.interrupted.data["review_id"]
    print("Paused:", original.interrupted.reason)

    branch_id = store.fork("invoice-17", new_thread_id="invoice-17/rejected")
    branch = agent(store, branch_id)
    original.approve(review_id, reviewer=REVIEWER, comment="refund confirmed")
    branch.reject(review_id, reviewer=REVIEWER, reason="already paid by card")
    print("Approved branch:", original.resume())
    print("Rejected branch:", branch.resume())

    service = ThreadService(store)
    service.label("invoice-17", "approved")
    service.label(branch_id, "rejected")
    show(store.tree("invoice-17"))


if __name__ == "__main__":
    main()
