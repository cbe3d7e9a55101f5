"""An expense-approval application that keeps the agent's thread beside its own aggregate.

``ExpenseApp`` is an ordinary eventsourcing application with one aggregate of its own,
``ExpenseClaim``. Subclassing ``covonaut_es.AgentApplication`` lets it store agent
threads too, so an agent reviewing a claim runs on a thread kept in the same database,
and the manager's approval changes the claim and the thread in one transaction:
``app.save(claim, thread)`` stores both or neither (the record of who approved
what is part of the same fact as the approval).

Run it with no argument for an in-memory application, or with a SQLite file path.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from covonaut_es import (
    Agent,
    AgentApplication,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    InterruptError,
    Message,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
)


class ExpenseClaim(Aggregate):
    """An employee's claim for reimbursement, approved by a manager."""

    # The msgspec mapper decodes each event field into its annotated type: annotate
    # every parameter of an @event method.
    @event("Submitted")
    def __init__(self, employee: str, amount: Decimal, purpose: str) -> None:
        self.employee = employee
        self.amount = amount
        self.purpose = purpose
        self.approved_by: str | None = None

    @event("Approved")
    def approve(self, reviewer: str) -> None:
        """Record the manager's approval."""
        self.approved_by = reviewer


class ExpenseApp(AgentApplication):
    """Expense claims and the agent threads that review them, in one event store."""

    # The mapper reads only the events of these classes and of agent threads.
    aggregate_classes = (ExpenseClaim,)

    def submit(self, employee: str, amount: Decimal, purpose: str) -> UUID:
        """Store a new claim and return its id."""
        claim = ExpenseClaim(employee, amount, purpose)
        self.save(claim)
        return claim.id

    def claim(self, claim_id: UUID) -> ExpenseClaim:
        """The claim as stored."""
        claim: ExpenseClaim = self.repository.get(claim_id)
        return claim

    def approve(self, claim_id: UUID, thread: AgentThread, reviewer: str) -> None:
        """Approve the claim and tell the reviewing agent, in one transaction."""
        claim = self.claim(claim_id)
        claim.approve(reviewer)
        note = f"{reviewer} approved the claim for {claim.amount}."
        thread.steer(Message(Role.USER, note), now=datetime.now(UTC))
        self.save(claim, thread)  # both aggregates' events, atomically


def review_model(request: ProviderRequest) -> ProviderResponse:
    """A scripted reviewer: asks for approval until a person's decision is in context."""
    decision = next((m.content for m in request.messages if "approved the claim" in m.content), "")
    if decision:
        return ProviderResponse(content=f"Reimbursement queued: {decision}")
    return ProviderResponse(tool_calls=(ToolCall("ask-1", "request_approval", "{}"),))


def request_approval(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Pause the review until a manager decides."""
    raise InterruptError("manager approval needed", {"thread": ctx.thread_id})


def reviewer_agent(store: Store, claim_id: UUID) -> Agent:
    """An agent reviewing one claim, on a thread named after it."""
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=review_model),
            tools=[Tool("request_approval", "Ask a manager", {"type": "object"}, request_approval)],
            checkpoint=CheckpointSettings(store=store, thread_id=f"claim-{claim_id}"),
        )
    )


def main(env: dict[str, str]) -> None:
    app = ExpenseApp(env=env)
    store = Store.from_application(app)
    claim_id = app.submit("ann", Decimal("42.50"), "taxi to a client")

    agent = reviewer_agent(store, claim_id)
    agent.run(f"Review expense claim {claim_id}.")
    assert agent.interrupted is not None
    print("Paused:", agent.interrupted.reason)

    app.approve(claim_id, store.load(agent.thread_id), reviewer="maria")
    print("Approved by:", app.claim(claim_id).approved_by)

    agent.restore_latest_checkpoint()
    print(agent.resume())
    store.close()
    app.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main({"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": sys.argv[1]})
    else:
        main({})
