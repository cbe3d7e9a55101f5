"""A worker's app for race tests: each thread calls ``charge`` (idempotent when
$CHARGE_IDEMPOTENT is set), which appends ``THREAD KEY`` to $CHARGE_LEDGER, then blocks
while $CHARGE_HOLD exists."""

from __future__ import annotations

import os
import time
from typing import Any

from covonaut_es import (
    AgentConfig,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
)


def charge(ctx: ToolContext, args: dict[str, Any]) -> Any:
    fd = os.open(os.environ["CHARGE_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{ctx.thread_id} {ctx.idempotency_key}\n".encode())
    finally:
        os.close(fd)
    hold = os.environ.get("CHARGE_HOLD")
    while hold and os.path.exists(hold):
        time.sleep(0.02)
    return {"charged": args["amount"]}


def make_config(thread_id: str) -> AgentConfig:
    def model(request: ProviderRequest) -> ProviderResponse:
        asked = any(m.role is Role.ASSISTANT for m in request.messages)
        if asked:
            return ProviderResponse(content=f"Done: {request.messages[-1].content}")
        return ProviderResponse(tool_calls=(ToolCall("c1", "charge", '{"amount": 5}'),))

    return AgentConfig(
        provider=ScriptedProvider(respond=model),
        tools=[
            Tool(
                "charge",
                "Charge",
                {"type": "object"},
                charge,
                idempotent=bool(os.environ.get("CHARGE_IDEMPOTENT")),
            )
        ],
    )
