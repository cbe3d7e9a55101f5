"""Figure 12: what tracing costs a turn.

One agent on a SQLite file (durability ``step``, the default) runs T turns: each turn
asks a scripted model, which calls an echo tool, and the last one answers. Per turn is
the run's time divided by T; the median of several runs, the configurations taking turns
so that drift hits them alike. Off: OpenTelemetry is installed but no tracer provider is
set (the API's default), as in an application that does not trace. On: the SDK's
`TracerProvider` with a `SimpleSpanProcessor` into its `InMemorySpanExporter`, passed as
`AgentConfig(tracer_provider=...)`: every span is built and exported, synchronously, in
the run's thread; content is not recorded (the default). The same runs on the in-memory
store, whose turn is the smallest the library has, show what the spans cost in absolute
terms with the least noise around it.

What off costs is measured apart: the check a run makes to find that nothing traces
(once per run, never per turn), timed over many calls.
"""

from __future__ import annotations

import statistics
import time
import timeit
from datetime import UTC, datetime
from typing import Any

from harness import Context, cli, log
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from report import Section, Table, Target, intro, seconds, status

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    open_store,
)
from covonaut_es.domain import RunMode
from covonaut_es.runtime._tracing import start_run

FULL_TURNS, QUICK_TURNS = 50, 10
FULL_REPEATS, QUICK_REPEATS = 15, 2
ON_TARGET = 0.10
"""Tracing on may add at most this share to a turn (SQLite)."""
OFF_TARGET = 0.01
"""The check that finds nothing traces may cost at most this share of one turn."""


def _echo(ctx: Any, args: dict[str, Any]) -> Any:
    return {"echo": args["text"]}


ECHO = Tool("echo", "Echo the text back", {"type": "object"}, _echo)


def _script(turns: int) -> list[ProviderResponse]:
    calls = [
        ProviderResponse(tool_calls=(ToolCall(f"c{turn}", "echo", '{"text": "hello"}'),))
        for turn in range(1, turns)
    ]
    return [*calls, ProviderResponse(content="done")]


def _per_turn(store_url: str, turns: int, tracer: Any) -> tuple[float, float]:
    """Wall-clock and CPU time per turn of one run."""
    with open_store(store_url) as store:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(_script(turns)),
                tools=[ECHO],
                max_turns=turns + 1,
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
                tracer_provider=tracer,
            )
        )
        wall, cpu = time.perf_counter(), time.process_time()
        assert agent.run("go") == "done"
        return (time.perf_counter() - wall) / turns, (time.process_time() - cpu) / turns


def _store_url(ctx: Context, backend: str, name: str) -> str:
    if backend == "memory":
        return "memory://"
    return f"sqlite:///{ctx.target('sqlite', name)}"


def measure(ctx: Context, backend: str, turns: int, repeats: int) -> dict[str, float]:
    """Median wall-clock and CPU time per turn (``off``, ``on``, ``off_cpu``,
    ``on_cpu``), tracing off and on, on ``backend``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    found: dict[str, list[float]] = {"off": [], "on": [], "off_cpu": [], "on_cpu": []}
    for index in range(repeats + 1):  # the first round warms up
        for name, tracer in (("off", None), ("on", provider)):
            url = _store_url(ctx, backend, f"tracing-{name}-{index}")
            wall, cpu = _per_turn(url, turns, tracer)
            if index:
                found[name].append(wall)
                found[f"{name}_cpu"].append(cpu)
            exporter.clear()
    provider.shutdown()
    return {name: statistics.median(values) for name, values in found.items()}


def off_check_s() -> float:
    """The time a run takes to find that nothing traces it."""
    config = AgentConfig(provider=ScriptedProvider())
    thread = AgentThread.start("t", now=datetime.now(UTC))
    number = 20_000
    total = timeit.timeit(lambda: start_run(config, thread, RunMode.RUN), number=number)
    return total / number


def run(ctx: Context) -> list[Section]:
    """Figure 12."""
    section = Section("12. What tracing costs a turn", intro(__doc__))
    turns = QUICK_TURNS if ctx.quick else FULL_TURNS
    repeats = QUICK_REPEATS if ctx.quick else FULL_REPEATS
    table = Table(
        f"time per turn over a run of {turns} turns (median of {repeats} runs)",
        ["store", "tracing off", "tracing on", "on adds", "CPU off", "CPU on", "CPU on adds"],
    )
    found = {}
    for backend in ("sqlite", "memory"):
        log(f"tracing cost, {backend}, T={turns}, {repeats} runs")
        found[backend] = measured = measure(ctx, backend, turns, repeats)
        table.rows.append(
            [
                backend,
                seconds(measured["off"]),
                seconds(measured["on"]),
                f"{measured['on'] / measured['off'] - 1:+.1%}",
                seconds(measured["off_cpu"]),
                seconds(measured["on_cpu"]),
                f"{measured['on_cpu'] / measured['off_cpu'] - 1:+.1%}",
            ]
        )
    sqlite_turn = found["sqlite"]["off"]
    spans_cost = found["memory"]["on_cpu"] - found["memory"]["off_cpu"]
    share = (found["sqlite"]["on"] - sqlite_turn) / sqlite_turn
    check = off_check_s()
    table.notes += [
        "CPU: the process's CPU time (`time.process_time`), which other processes on the "
        "machine do not inflate as they do the wall clock.",
        f"on: the spans of a turn (a chat and an execute_tool span, exported) cost "
        f"{seconds(spans_cost)} of CPU on the in-memory store, {spans_cost / sqlite_turn:.1%} "
        "of a SQLite turn.",
        f"off: a run checks once whether anything traces it: {seconds(check)}, "
        f"{check / sqlite_turn:.2%} of one SQLite turn.",
    ]
    section.tables.append(table)
    section.targets += [
        Target(
            "tracing off: nothing measurable (the run's check under 1% of one turn)",
            f"{seconds(check)} a run, {check / sqlite_turn:.2%} of a turn",
            status(check / sqlite_turn < OFF_TARGET),
        ),
        Target(
            "tracing on (SQLite, in-memory exporter): under 10% per turn",
            f"{share:+.1%} per turn (the spans' CPU: {spans_cost / sqlite_turn:.1%})",
            status(share < ON_TARGET),
        ),
    ]
    return [section]


if __name__ == "__main__":
    raise SystemExit(cli([run]))
