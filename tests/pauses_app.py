"""The application the command line's pause tests run:
``covonaut-es worker --app pauses_app:make_config``.

A thread's id says what its model does first: ``ask-*`` calls ``ask``, a tool that
pauses for a person's answer; ``charge-*`` calls ``charge``, which is not idempotent and
writes ``THREAD KEY`` to the ledger file ``$PAUSES_APP_LEDGER`` (the external system);
any other thread answers at once. Once the model has asked once it answers
``Done: <what it read last>``, so the tests can see what a person's answer or
settlement gave it. While the file ``$PAUSES_APP_FAILS/<thread>`` exists, the model is
down for that thread: the file is removed and the call raises, so that one run fails.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from covonaut_es import (
    AgentConfig,
    InterruptError,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
)

QUESTION = "Which account should the money go to?"


def ask(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Pause for a person's answer."""
    raise InterruptError(QUESTION, {"question": QUESTION})


def charge(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """The side effect: one ledger line per charge, naming its idempotency key."""
    with Path(os.environ["PAUSES_APP_LEDGER"]).open("a") as ledger:
        ledger.write(f"{ctx.thread_id} {ctx.idempotency_key}\n")
    return {"charged": args["amount"]}


TOOLS = (
    Tool("ask", "Ask a person", {"type": "object"}, ask),
    Tool("charge", "Charge the customer", {"type": "object"}, charge),
)

_FIRST_CALLS = {
    "ask": ToolCall("a1", "ask", "{}"),
    "charge": ToolCall("c1", "charge", '{"amount": 5}'),
}


def make_config(thread_id: str) -> AgentConfig:
    """The worker's factory: no checkpoint settings, so the worker binds its store."""

    def model(request: ProviderRequest) -> ProviderResponse:
        down = Path(os.environ.get("PAUSES_APP_FAILS", "/nonexistent")) / thread_id
        if down.exists():
            down.unlink()
            msg = "the model is down"
            raise RuntimeError(msg)
        first = _FIRST_CALLS.get(thread_id.split("-")[0])
        asked = any(message.role is Role.ASSISTANT for message in request.messages)
        if first is None or asked:
            return ProviderResponse(content=f"Done: {request.messages[-1].content}")
        return ProviderResponse(tool_calls=(first,))

    return AgentConfig(provider=ScriptedProvider(respond=model), tools=TOOLS)
