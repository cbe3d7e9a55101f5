"""The application the worker tests run: ``covonaut-es worker --app worker_app:make_config``.

Each thread asks to pay, a person approves the payment, and after the resume the model
pays and answers. Paying appends ``THREAD KEY`` to the ledger file named by
``WORKER_TEST_LEDGER`` (the external system), so the tests count the payments made and
the idempotency keys they ran under. ``WORKER_TEST_DELAY`` (seconds) slows the model
and the payment, so that kills land in the middle of steps. While the file named by
``WORKER_TEST_HOLD`` exists, the model waits before each answer: a step stays under way
until the test removes it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import attrs

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

SECRET = b"worker-tests-reviewer-secret-0123456789"
ANSWER = "The payment is made."


def _delay() -> None:
    time.sleep(float(os.environ.get("WORKER_TEST_DELAY", "0")))


def _held() -> None:
    hold = os.environ.get("WORKER_TEST_HOLD")
    while hold and os.path.exists(hold):
        time.sleep(0.02)


def model(request: ProviderRequest) -> ProviderResponse:
    """Ask to pay, ask again once approved, then answer: a function of the history."""
    _held()
    _delay()
    answered = sum(message.role is Role.ASSISTANT for message in request.messages)
    if answered < 2:
        return ProviderResponse(tool_calls=(ToolCall(f"pay-{answered}", "pay", '{"amount": 5}'),))
    return ProviderResponse(content=ANSWER)


def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """The side effect: one ledger line per payment, naming its idempotency key."""
    fd = os.open(os.environ["WORKER_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{ctx.thread_id} {ctx.idempotency_key}\n".encode())
    finally:
        os.close(fd)
    _delay()
    return {"paid": args["amount"]}


def make_config(thread_id: str) -> AgentConfig:
    """The worker's factory: no checkpoint settings, so the worker binds its store."""
    return AgentConfig(
        provider=ScriptedProvider(respond=model),
        tools=[
            Tool("pay", "Pay", {"type": "object"}, pay, requires_approval=True, idempotent=True)
        ],
        reviewer_verifier=HmacReviewerVerifier(SECRET),
    )


def two_payments(request: ProviderRequest) -> ProviderResponse:
    """Ask for two payments at once, each under its own review, then answer."""
    answered = sum(message.role is Role.ASSISTANT for message in request.messages)
    if answered < 1:
        calls = (
            ToolCall("pay-a", "pay", '{"amount": 5}'),
            ToolCall("pay-b", "pay", '{"amount": 7}'),
        )
        return ProviderResponse(tool_calls=calls)
    return ProviderResponse(content=ANSWER)


def make_two_payments_config(thread_id: str) -> AgentConfig:
    """As :func:`make_config`, for a thread that pauses on two reviews at once."""
    return attrs.evolve(make_config(thread_id), provider=ScriptedProvider(respond=two_payments))
