"""A process for the kill test of a call an approval runs.

Usage: ``python approval_worker.py URL LEDGER PHASE``. ``PHASE=first`` runs until the
``pay`` call (``run_on_approval``) pauses for a review. ``PHASE=resume`` resumes the
decided thread: the approved call writes its idempotency key and amount to LEDGER (the
external system), then the process dies with ``os._exit(17)`` before the result is
recorded.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Tool,
    ToolContext,
    open_store,
)
from support import call, ticking_clock

SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
    "required": ["amount", "to"],
}


def main() -> None:
    url, ledger_path, phase = sys.argv[1:]
    ledger = Path(ledger_path)

    def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
        with ledger.open("a") as file:
            file.write(json.dumps({"key": ctx.idempotency_key, "amount": args["amount"]}) + "\n")
            file.flush()
            os.fsync(file.fileno())
        os._exit(17)

    store = open_store(url)
    tool = Tool("pay", "Pay", SCHEMA, pay, requires_approval=True, run_on_approval=True)
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "pay", '{"amount": 40, "to": "b"}'))]),
            tools=[tool],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
        )
    )
    if phase == "first":
        agent.run("Pay b 40.")
    else:
        agent.resume()


if __name__ == "__main__":
    main()
