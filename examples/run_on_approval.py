"""An approval that runs the call: a payment held for review, approved with an edit,
run by the worker that resumes the thread, without asking the model first.

``pay`` is declared ``requires_approval=True, run_on_approval=True``. The model asks to
pay 400; the run pauses and ``agent.result`` says it waits for a reviewer. A reviewer
approves 350 instead, through the service layer the inbox and the command line use. A
worker then resumes the thread: the held-back call runs once, with 350 and the call's
own idempotency key, and the model is asked only for its final answer. Its audit shows
which decision ran which call.

No model credentials are needed: a small function stands in for the model, and it
counts its calls.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    Worker,
    open_store,
)
from covonaut_es.service import ThreadService, review_submission

THREAD = "invoice-31"
VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
model_calls: list[int] = []


def model(request: ProviderRequest) -> ProviderResponse:
    """Asks to pay 400 for the user's message; once a result is in, answers with it."""
    model_calls.append(len(request.messages))
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return ProviderResponse(content=f"Done: {last.content.splitlines()[-1]}")
    return ProviderResponse(
        tool_calls=(ToolCall("p1", "pay", '{"amount": 400, "to": "ACME Ltd"}'),)
    )


def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    assert ctx.approval is not None
    print(
        f"bank: {args['amount']} to {args['to']}, key {ctx.idempotency_key}, "
        f"approved by {ctx.approval.reviewer} in review {ctx.approval.review_id}"
    )
    return {"paid": args["amount"]}


def config(store: Store, thread_id: str) -> AgentConfig:
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
        "required": ["amount", "to"],
    }
    tool = Tool("pay", "Pay", schema, pay, requires_approval=True, run_on_approval=True)
    return AgentConfig(
        provider=ScriptedProvider(respond=model),
        tools=[tool],
        checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        reviewer_verifier=VERIFIER,
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = open_store(f"sqlite:///{Path(directory) / 'payments.db'}")
        agent = Agent(config(store, THREAD))
        agent.run("Pay ACME's invoice 31.")
        assert agent.result is not None
        (waiting,) = agent.result.waiting
        print(f"Run {agent.result.status}: waits for a {waiting.waits_for} ({waiting.reason})")

        service = ThreadService(store, verifier=VERIFIER)
        rita = service.reviewer(VERIFIER.issue_token("rita", ttl_seconds=300))
        edited = review_submission(
            "approve", text="partial", arguments={"amount": 350, "to": "ACME Ltd"}
        )
        service.decide(waiting.review_id, edited, reviewer=rita)
        before = len(model_calls)

        Worker(store, lambda thread_id: config(store, thread_id)).run(once=True)
        print("Model calls after the decision:", len(model_calls) - before)
        print("Answer:", store.state_at(THREAD).messages[-1].content)

        print(f"Audit of {THREAD}")
        for event in store.history(THREAD):
            if isinstance(event, AgentThread.ReviewDecided):
                print(f"  {event.reviewer} {event.decision} review {event.review_id}")
            elif isinstance(event, AgentThread.ApprovalUsed):
                print(f"  review {event.review_id} ran call {event.tool_call_id}")
            elif isinstance(event, AgentThread.ToolResultRecorded):
                print(f"  call {event.tool_call_id} {event.outcome}")
        store.close()


if __name__ == "__main__":
    main()
