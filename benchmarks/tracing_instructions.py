"""What tracing costs a turn in CPU instructions, which other processes on the machine do
not change: the split of figure 12's cost between the OpenTelemetry SDK and this library.

Each configuration runs twice under ``valgrind --tool=callgrind`` (not part of
``make bench``: it takes minutes), a run of ``LOW`` turns and one of ``HIGH`` turns of
figure 12's agent on a SQLite file; per turn is the difference of the two counts over
``HIGH - LOW``, so that starting the interpreter and the run cancel out. The ``sdk-*``
configurations make the same two spans per turn with the same attributes and processor
as a traced turn, by a bare loop on the SDK, with no agent around them: the SDK's own
share. What is left of a traced turn's cost is this library's. The split is made with
the SimpleSpanProcessor: under callgrind, the BatchSpanProcessor's thread wakes as the
machine's load has it, and ``sdk-batch`` measured 361,705 and 1,514,461 instructions a
turn in two runs (it is still measured when named).

    python benchmarks/tracing_instructions.py            # every configuration
    python benchmarks/tracing_instructions.py off batch  # some of them
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, open_store
from covonaut_es.runtime._tracing import SCHEMA_URL
from tracing import ECHO, _script

LOW, HIGH = 10, 110
CONFIGURATIONS = ("off", "simple", "batch", "unsampled", "sdk-simple")


def _provider(name: str) -> TracerProvider | None:
    if name == "off":
        return None
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF)) if name == "unsampled" else None
    provider = provider or TracerProvider()
    processor = SimpleSpanProcessor if name.endswith("simple") else BatchSpanProcessor
    provider.add_span_processor(processor(InMemorySpanExporter()))
    return provider


def agent_turns(provider: TracerProvider | None, turns: int) -> None:
    """Figure 12's run of ``turns`` turns on a fresh SQLite file."""
    with tempfile.TemporaryDirectory() as folder, open_store(f"sqlite:///{folder}/s.db") as store:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(_script(turns)),
                tools=[ECHO],
                max_turns=turns + 1,
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
                tracer_provider=provider,
            )
        )
        assert agent.run("go") == "done"


def sdk_turns(provider: TracerProvider, turns: int) -> None:
    """The spans of ``turns`` traced turns of :func:`agent_turns`, by a bare loop."""
    tracer = provider.get_tracer("covonaut_es", schema_url=SCHEMA_URL)
    run = tracer.start_span("invoke_agent agent")
    parent = trace.set_span_in_context(run)
    common = {"gen_ai.provider.name": "_OTHER", "gen_ai.conversation.id": "t"}
    chat = {"gen_ai.operation.name": "chat", **common}
    for turn in range(turns):
        span = tracer.start_span("chat", parent, kind=trace.SpanKind.CLIENT, attributes=chat)
        span.end()
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "echo",
            "gen_ai.tool.call.id": f"c{turn}",
            "gen_ai.tool.type": "function",
            **common,
            "covonaut.tool.idempotency_key": f"{turn:032x}",
        }
        span = tracer.start_span("execute_tool echo", parent, attributes=attributes)
        span.set_attribute("covonaut.tool.outcome", "succeeded")
        span.end()
    run.end()


def child(name: str, turns: int) -> None:
    """One counted run (under valgrind): a warm-up, then ``turns`` turns."""
    provider = _provider(name)
    if name.startswith("sdk-"):
        assert provider is not None
        sdk_turns(provider, 3)
        sdk_turns(provider, turns)
    else:
        agent_turns(provider, 3)
        agent_turns(provider, turns)
    if provider is not None:
        provider.shutdown()


def instructions(name: str, turns: int) -> int:
    """Instructions of one run of :func:`child` under callgrind."""
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={folder}/out",
                sys.executable,
                __file__,
                "--child",
                name,
                str(turns),
            ],
            env={**os.environ, "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found is not None, done.stderr
    return int(found.group(1))


def main(names: list[str]) -> None:
    """Print each configuration's instructions per turn."""
    per_turn = {}
    for name in names or CONFIGURATIONS:
        per_turn[name] = (instructions(name, HIGH) - instructions(name, LOW)) // (HIGH - LOW)
        print(f"{name:12} {per_turn[name]:>12,} instructions per turn", flush=True)
    off = per_turn.get("off")
    for name in ("simple", "batch"):
        if off and name in per_turn and f"sdk-{name}" in per_turn:  # sdk-batch when named
            spans, sdk = per_turn[name] - off, per_turn[f"sdk-{name}"]
            print(
                f"{name}: tracing adds {spans:,} ({spans / off:.1%} of a plain turn): the SDK "
                f"{sdk:,} ({sdk / off:.1%}), this library {spans - sdk:,} "
                f"({(spans - sdk) / off:.1%})"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main(sys.argv[1:])
