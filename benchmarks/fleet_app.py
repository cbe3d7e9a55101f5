"""The application the worker benchmark's processes run (``--app fleet_app:make_config``).

Its model answers after ``FLEET_MODEL_LATENCY`` seconds (0.2 by default): it asks to pay
the amount in the user's message, then answers. A payment over 100 needs a person's
approval; with ``FLEET_RUN_ON_APPROVAL=1`` the approval runs the held-back call on
resume (``Tool(run_on_approval=True)``), else the model calls the tool again. When
``FLEET_CALLS`` names a file, each model call appends ``THREAD TIME`` (the wall clock
when the call started) to it; ``FLEET_TOOL_CALLS`` does the same for each payment.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
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

SECRET = b"benchmark-reviewer-secret-0123456789"


def _model(thread_id: str) -> Callable[[ProviderRequest], ProviderResponse]:
    def respond(request: ProviderRequest) -> ProviderResponse:
        _append("FLEET_CALLS", thread_id)
        time.sleep(float(os.environ.get("FLEET_MODEL_LATENCY", "0.2")))
        if any(m.role is Role.TOOL for m in request.messages[-1:]) and _paid(request):
            return ProviderResponse(content="Paid.")
        asked = next(m.content for m in request.messages if m.role is Role.USER)
        amount = int(re.findall(r"\d+", asked)[0])
        answered = sum(m.role is Role.ASSISTANT for m in request.messages)
        return ProviderResponse(
            tool_calls=(ToolCall(f"pay-{answered}", "pay", f'{{"amount": {amount}}}'),)
        )

    return respond


def _paid(request: ProviderRequest) -> bool:
    return '"paid"' in request.messages[-1].content


def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    _append("FLEET_TOOL_CALLS", ctx.thread_id)
    return {"paid": args["amount"]}


def _append(variable: str, thread_id: str) -> None:
    path = os.environ.get(variable)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"{thread_id} {time.time()}\n".encode())
        os.close(fd)


def make_config(thread_id: str) -> AgentConfig:
    """A thread's configuration; the worker binds it to its store."""
    return AgentConfig(
        provider=ScriptedProvider(respond=_model(thread_id)),
        tools=[
            Tool(
                "pay",
                "Pay",
                {"type": "object"},
                pay,
                requires_approval=lambda args: args["amount"] > 100,
                run_on_approval=os.environ.get("FLEET_RUN_ON_APPROVAL") == "1",
            )
        ],
        reviewer_verifier=HmacReviewerVerifier(SECRET),
    )
