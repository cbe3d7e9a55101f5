"""A worker process for the kill tests: it runs a payment flow and dies on cue.

Usage: ``python kill_worker.py URL THREAD DURABILITY LEDGER PHASE [KILL]``.

- ``PHASE=first`` runs the flow until the review interrupt. With ``KILL=save:N`` it exits
  with ``os._exit`` right after the N-th commit returns; with ``KILL=tool:ID`` it exits
  inside tool call ID after its side effect, before the result is recorded. Without KILL it
  prints, after every commit, the thread version and the open call ids as JSON lines.
- ``PHASE=second`` restores the thread in a new process, settles every call in doubt by
  looking it up in the ledger (the external system), and runs to the final answer.

The "external system" is the LEDGER file: one line per executed charge, keyed by the
call's idempotency key.
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
    InterruptError,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from support import ticking_clock

SCRIPT = [
    ProviderResponse(
        tool_calls=(
            ToolCall("charge-1", "charge", '{"amount": 10}'),
            ToolCall("charge-2", "charge", '{"amount": 20}'),
        )
    ),
    ProviderResponse(tool_calls=(ToolCall("review-1", "review", "{}"),)),
    ProviderResponse(content="All charges done and reviewed."),
]


def scripted_model(request: ProviderRequest) -> ProviderResponse:
    """The model's answer depends only on the history, as a real model's would."""
    answered = sum(message.role is Role.ASSISTANT for message in request.messages)
    return SCRIPT[answered]


def make_agent(url: str, thread_id: str, durability: str, ledger: Path, kill: str) -> Agent:
    def charge(ctx: ToolContext, args: dict[str, Any]) -> Any:
        with ledger.open("a") as file:
            file.write(f"{ctx.idempotency_key} {ctx.tool_call_id} {args['amount']}\n")
            file.flush()
            os.fsync(file.fileno())
        if kill == f"tool:{ctx.tool_call_id}":
            os._exit(17)
        return {"charged": args["amount"]}

    def review(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise InterruptError("review the charges")

    store = open_store(url)
    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=scripted_model),
            tools=[
                Tool("charge", "Charge a card", schema, charge),
                Tool("review", "Ask for a review", {"type": "object"}, review),
            ],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id, durability=durability),  # type: ignore[arg-type]
            clock=ticking_clock(),
        )
    )


def watch_saves(store: Store, agent: Agent, kill: str) -> None:
    """Report or die after every commit (an instance attribute shadows the method)."""
    save = store.save
    count = 0

    def save_and_watch(thread: Any) -> None:
        nonlocal count
        if not thread.pending_events:
            return  # nothing to commit: not a step boundary
        save(thread)
        count += 1
        if kill == f"save:{count}":
            os._exit(17)
        if not kill:
            print(json.dumps({"version": thread.version, "open": sorted(thread.open_calls)}))

    store.save = save_and_watch  # type: ignore[method-assign]


def ledger_keys(ledger: Path) -> set[str]:
    if not ledger.exists():
        return set()
    return {line.split()[0] for line in ledger.read_text().splitlines()}


def main() -> None:
    url, thread_id, durability, ledger_path, phase, *rest = sys.argv[1:]
    kill = rest[0] if rest else ""
    ledger = Path(ledger_path)
    agent = make_agent(url, thread_id, durability, ledger, kill)
    assert agent.config.checkpoint is not None
    store = agent.config.checkpoint.store
    if phase == "first":
        watch_saves(store, agent, kill)
        agent.run("Charge both cards, then ask for a review.")
        return
    if not store.exists(thread_id):
        agent.run("Charge both cards, then ask for a review.")  # nothing was committed
    else:
        agent.restore_latest_checkpoint()
    report = {"restored_version": agent.state.version, "in_doubt": []}
    for pending in agent.in_doubt:
        report["in_doubt"].append(pending.call.id)
        if pending.idempotency_key in ledger_keys(ledger):
            agent.settle(pending.call.id, result="charged (found in the ledger)")
        else:
            agent.settle(pending.call.id, retry=True)
    while True:
        if agent.interrupted is not None:
            agent.steer("The reviewer approved the charges.")
            output = agent.resume()
        elif agent.status.value == "finished":
            output = agent.messages[-1].content
        else:
            output = agent.continue_run()
        if output:
            break
    report["output"] = output
    print(json.dumps(report))


if __name__ == "__main__":
    main()
