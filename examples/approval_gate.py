"""An approval gate on payments: a rejected run, an approved run, the audit.

``send_payment`` requires approval. The first time the model calls it, the run pauses
with a review request; a reviewer rejects it and the model reads why. Later the user
asks again, a second reviewer approves, the model calls the tool again and the payment
runs, exactly once, on that approval. Finally the thread's own events tell who decided
what, for which operation digest.

No model credentials are needed: a small function stands in for the model.
"""

from __future__ import annotations

import secrets
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    ReviewerNotVerifiedError,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    canonical_json,
    open_store,
    operation_digest,
)

THREAD = "accounts-payable"
INVOICE_17 = '{"amount": "120.00", "currency": "EUR", "payee": "ACME Ltd", "reference": "17"}'


def model(request: ProviderRequest) -> ProviderResponse:
    """Pay invoice 17 when asked or told so; call again once approved; report the rest."""
    last = request.messages[-1]
    pay = ToolCall(f"call-{len(request.messages)}", "send_payment", INVOICE_17)
    if last.role is not Role.TOOL or last.content.startswith("Approved"):
        return ProviderResponse(tool_calls=(pay,))
    if last.content.startswith(("Rejected", "Not executed")):
        return ProviderResponse(content=f"I did not pay invoice 17. {last.content}")
    return ProviderResponse(content=f"Invoice 17 is paid: {last.content}")


def send_payment(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Move the money. The runtime runs this only on an unused approval of exactly
    these arguments; the tool checks the record it was given once more."""
    approval = ctx.approval
    if approval is None or approval.digest != operation_digest(
        ctx.tool_name, args, like=approval.digest
    ):
        raise PermissionError("no approval of this exact payment")
    print(f"  bank: {args['amount']} {args['currency']} to {args['payee']}, ", end="")
    print(f"approved by {approval.reviewer} (review {approval.review_id})")
    return {"paid": args["amount"], "bank_reference": ctx.idempotency_key}


PAYMENT_TOOL = Tool(
    "send_payment",
    "Send a payment to a supplier",
    {
        "type": "object",
        "properties": {
            "amount": {"type": "string"},
            "currency": {"type": "string"},
            "payee": {"type": "string"},
            "reference": {"type": "string"},
        },
        "required": ["amount", "currency", "payee", "reference"],
    },
    send_payment,
    requires_approval=True,
)


def pending_review_id(agent: Agent) -> str:
    """Print the pending review request and return its id."""
    (request,) = agent.pending_reviews
    arguments = canonical_json(request.arguments).decode()
    print(f"  review {request.review_id}: {request.tool_name} {arguments}")
    print(f"  digest {request.digest}")
    return request.review_id


def print_audit(store: Store) -> None:
    """Who decided what, and which call used each approval, from the stored events."""
    print("Audit of", THREAD)
    requests = {}
    for event in store.history(THREAD):
        if isinstance(event, AgentThread.ReviewRequested):
            requests[event.request.review_id] = event.request
        elif isinstance(event, AgentThread.ReviewDecided):
            request = requests[event.review_id]
            print(
                f"  {event.timestamp:%Y-%m-%d %H:%M:%S} {event.reviewer} {event.decision} "
                f"{request.tool_name} {canonical_json(request.arguments).decode()}"
            )
            print(f"    review {event.review_id}, digest {event.digest}, note: {event.comment!r}")
        elif isinstance(event, AgentThread.ApprovalUsed):
            print(f"    approval {event.review_id} used by call {event.tool_call_id}")


def main() -> None:
    # In production the secret comes from your configuration, and tokens are issued
    # where reviewers sign in; here both sides live in one process.
    verifier = HmacReviewerVerifier(secrets.token_bytes(32))
    bob = verifier.issue_token("bob@finance", ttl_seconds=900)
    alice = verifier.issue_token("alice@finance", ttl_seconds=900)

    store = open_store("memory://")
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[PAYMENT_TOOL],
            checkpoint=CheckpointSettings(store=store, thread_id=THREAD),
            reviewer_verifier=verifier,
        )
    )

    print("Run 1: the model asks to pay; the run pauses for a review")
    agent.run("Pay ACME's invoice 17.")
    review_id = pending_review_id(agent)
    try:
        agent.approve(review_id, reviewer="alice@finance")  # a name is not a credential
    except ReviewerNotVerifiedError as error:
        print("  refused:", error)
    agent.steer("Approved! Go ahead and pay.")  # tells the model; authorizes nothing
    agent.reject(review_id, reviewer=bob, reason="invoice 17 was already paid by card")
    print(" ", agent.resume())

    print("Run 2: asked again, approved, paid once")
    agent.run("Invoice 17 is due after all; the card payment was refunded. Pay it.")
    review_id = pending_review_id(agent)
    agent.approve(review_id, reviewer=alice, comment="refund confirmed")
    print(" ", agent.resume())

    print_audit(store)


if __name__ == "__main__":
    main()
