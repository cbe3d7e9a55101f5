"""An application whose one tool outruns its timeout: ``covonaut-es worker --app
hang_app:make_config``. ``hang`` (timeout 0.3 s) sleeps ``HANG_SECONDS`` and then writes
its idempotency key to the file ``HANG_DONE`` names, so a test knows when it returned."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from covonaut_es import AgentConfig, ProviderResponse, ScriptedProvider, Tool, ToolCall, ToolContext


def hang(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Sleep past the timeout, then record that the tool returned."""
    time.sleep(float(os.environ.get("HANG_SECONDS", "5")))
    Path(os.environ["HANG_DONE"]).write_text(ctx.idempotency_key)
    return "late"


def make_config(thread_id: str) -> AgentConfig:
    """The worker's factory: one call of ``hang``, then an answer."""
    script = [
        ProviderResponse(tool_calls=(ToolCall("h1", "hang", "{}"),)),
        ProviderResponse(content="done"),
    ]
    return AgentConfig(
        provider=ScriptedProvider(script),
        tools=[Tool("hang", "Hang", {"type": "object"}, hang, timeout=0.3)],
    )
