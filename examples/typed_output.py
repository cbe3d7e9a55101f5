"""A typed final answer: a triage agent whose answer is a ``msgspec.Struct``.

The model (scripted, so no credentials are needed) first answers with a priority the
type does not allow; the run sends the error back, the model answers again, and the
validated value is the run's output. The value is recorded in the thread: an agent
restored from the store gives the same typed value back, and the audit shows it.

Run it with ``python examples/typed_output.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal

import msgspec

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    open_store,
)
from covonaut_es.messages import ProviderResponse


class Triage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the agent decides about a support ticket."""

    priority: Literal["low", "normal", "urgent"]
    team: str
    summary: str


def config(store: Store, provider: ScriptedProvider) -> AgentConfig:
    return AgentConfig(
        provider=provider,
        model="any",
        system_prompt="Triage the support ticket.",
        output_type=Triage,
        checkpoint=CheckpointSettings(store=store, thread_id="ticket-4711"),
    )


def main() -> None:
    model = ScriptedProvider(
        [
            ProviderResponse(content='{"priority": "asap", "team": "billing", "summary": "x"}'),
            ProviderResponse(
                content='{"priority": "urgent", "team": "billing", '
                '"summary": "Charged twice for one order"}'
            ),
        ]
    )
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'tickets.db'}"
        with open_store(url) as store, Agent(config(store, model)) as agent:
            agent.run("I was charged twice for order 1234!")
            print("Sent back:", agent.messages[-2].content)
            triage: Triage = agent.output
            print(f"Output: {triage!r}")
            print("Route to:", triage.team, "with priority", triage.priority)

        # Another process, later: the value is read from the thread, typed again.
        with open_store(url) as store, Agent(config(store, ScriptedProvider())) as restored:
            print("Restored output equal:", restored.output == triage)
            print("Audit:", [entry.summary for entry in store.replay("ticket-4711")][-1])


if __name__ == "__main__":
    main()
