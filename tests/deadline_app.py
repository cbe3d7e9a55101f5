"""The application the deadline tests run: ``covonaut-es worker --app deadline_app:make_config``.

Each thread asks to pay; the review of a payment expires a millisecond after it is asked
for, so a worker started later finds it past its deadline. Paying appends a line to the
ledger file named by ``DEADLINE_TEST_LEDGER``: an expired review must leave it empty.
The model answers with the result its call got.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from covonaut_es import (
    AgentConfig,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
)

SECRET = b"deadline-tests-reviewer-secret-0123456789"


def model(request: ProviderRequest) -> ProviderResponse:
    """Ask to pay; answer with the call's result once there is one."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return ProviderResponse(content=f"Finished: {last.content}")
    return ProviderResponse(tool_calls=(ToolCall("pay-1", "pay", '{"amount": 5}'),))


def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """The side effect an expired review must never let run."""
    with open(os.environ["DEADLINE_TEST_LEDGER"], "a") as ledger:
        ledger.write(f"{ctx.thread_id} {ctx.idempotency_key}\n")
    return {"paid": args["amount"]}


def make_config(thread_id: str) -> AgentConfig:
    """The worker's factory: no checkpoint settings, so the worker binds its store."""
    tool = Tool(
        "pay",
        "Pay",
        {"type": "object"},
        pay,
        requires_approval=True,
        review_deadline=timedelta(milliseconds=1),
    )
    return AgentConfig(
        provider=ScriptedProvider(respond=model),
        tools=[tool],
        reviewer_verifier=HmacReviewerVerifier(SECRET),
    )
