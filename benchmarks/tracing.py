"""Figure 12: what tracing costs a turn.

One agent on a SQLite file (durability ``step``, the default) runs T turns: each turn
asks a scripted model, which calls an echo tool, and the last one answers; a traced turn
records two spans (a chat and an execute_tool span). Per turn is the run's time divided
by T. Each round runs every configuration once, each on a fresh store, in an order that
rotates from round to round, and the share
tracing adds is the median over the rounds of each round's traced turn against that
round's plain one, so that drift and the machine's other load hit both sides alike.
CPU is the process's CPU time (``time.process_time``, every thread), which other
processes do not inflate as they do the wall clock; the target is judged on it.

The rows, each passed as ``AgentConfig(tracer_provider=...)``. Off: OpenTelemetry is
installed but no tracer provider is set (the API's default), as in an application that
does not trace. Simple: the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` into
its ``InMemorySpanExporter``: each span is exported as it ends, in the run's thread.
Batch: the SDK's ``TracerProvider`` with a ``BatchSpanProcessor`` (its defaults) into
the same exporter, the SDK's recommended processor for production: a span that ends is
queued and exported by the processor's own thread. The wall clock of a batch run stops
when the run returns; its CPU time runs until its spans are flushed to the exporter, so
the export is charged to the run that made the spans. A real exporter's own work
(encoding, the network) comes on top, on the processor's thread with Batch. Content is
not recorded (the default). Unsampled: Batch again, under the sampler
``ParentBased(ALWAYS_OFF)``, so the run's span is not sampled (as most runs are not
under a ratio sampler in production): what a run costs that a sampler leaves out. Spans
alone: the run is not traced; the scripted model and the echo tool make the same two
spans themselves (names, kinds, attributes, a run span as their parent) with the Batch
row's SDK configuration, as an instrumented client or tool would: what the SDK's spans
cost in this very turn with none of this library's tracing code, so that Batch less this
row is this library's own share. An SDK span costs more in a SQLite turn than in a bare
loop or on the in-memory store (starting one took about 14 µs in a bare loop, 24 µs just
after a SQLite commit), which is why the in-memory store's spans are no measure of the
SQLite turn's. The same runs on the in-memory store, whose turn is the smallest the
library has, show what the spans cost in absolute terms with the least noise around it.

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
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import SpanKind, set_span_in_context
from report import Section, Table, Target, intro, seconds, status

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.domain import RunMode
from covonaut_es.runtime._tracing import SCHEMA_URL, start_run

FULL_TURNS, QUICK_TURNS = 50, 10
FULL_REPEATS, QUICK_REPEATS = 21, 2
ON_TARGET = 0.10
"""Tracing on may add at most this share to a turn's CPU time (SQLite, batch processor)."""
PROCESSORS = {"simple": SimpleSpanProcessor, "batch": BatchSpanProcessor}
"""The span processors of the traced configurations, by row name."""
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


class _SpansAlone(ScriptedProvider):
    """The "spans alone" row: the spans of a traced turn, made by the model and the tool
    themselves with the SDK, as an instrumented client or tool would, under a run span."""

    def __init__(self, provider: TracerProvider, turns: int) -> None:
        super().__init__(_script(turns))
        self.provider = provider
        self._tracer = provider.get_tracer("covonaut_es", schema_url=SCHEMA_URL)
        self.tool = Tool("echo", "Echo the text back", {"type": "object"}, self._echo)

    def start(self) -> None:
        """Start the run span, as a traced run does when it starts."""
        self._run = self._tracer.start_span(
            "invoke_agent agent", attributes={"gen_ai.operation.name": "invoke_agent"}
        )
        self._parent = set_span_in_context(self._run)

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        """The scripted answer, in a chat span with a traced chat's attributes."""
        span = self._tracer.start_span(
            "chat", self._parent, kind=SpanKind.CLIENT, attributes=_CHAT_ATTRIBUTES
        )
        try:
            return super().complete(request)
        finally:
            span.end()

    def _echo(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        span = self._tracer.start_span(
            f"execute_tool {ctx.tool_name}",
            self._parent,
            attributes={
                **_TOOL_ATTRIBUTES,
                "gen_ai.tool.name": ctx.tool_name,
                "gen_ai.tool.call.id": ctx.tool_call_id,
                "covonaut.tool.idempotency_key": ctx.idempotency_key,
            },
        )
        try:
            return _echo(ctx, args)
        finally:
            span.set_attribute("covonaut.tool.outcome", "succeeded")
            span.end()

    def end(self) -> None:
        """End the run span and export every span, as a traced run's CPU time does."""
        self._run.end()
        self.provider.force_flush()


_COMMON = {"gen_ai.provider.name": "_OTHER", "gen_ai.conversation.id": "t"}
_CHAT_ATTRIBUTES = {"gen_ai.operation.name": "chat", **_COMMON}
_TOOL_ATTRIBUTES = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.type": "function"}
_TOOL_ATTRIBUTES |= _COMMON


def _per_turn(
    store_url: str, turns: int, tracer: TracerProvider | None, *, alone: bool = False
) -> tuple[float, float]:
    """Wall-clock and CPU time per turn of one run; the CPU time until its spans are
    exported. ``alone``: the run is not traced, its model and tool make the spans."""
    with open_store(store_url) as store:
        spans = _SpansAlone(tracer, turns) if alone and tracer is not None else None
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(_script(turns)) if spans is None else spans,
                tools=[ECHO if spans is None else spans.tool],
                max_turns=turns + 1,
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
                tracer_provider=None if spans is not None else tracer,
            )
        )
        wall, cpu = time.perf_counter(), time.process_time()
        if spans is not None:
            spans.start()
        assert agent.run("go") == "done"
        wall = time.perf_counter() - wall
        if spans is not None:
            spans.end()
        elif tracer is not None:
            tracer.force_flush()
        return wall / turns, (time.process_time() - cpu) / turns


def _store_url(ctx: Context, backend: str, name: str) -> str:
    if backend == "memory":
        return "memory://"
    return f"sqlite:///{ctx.target('sqlite', name)}"


def measure(ctx: Context, backend: str, turns: int, repeats: int) -> dict[str, dict[str, float]]:
    """For each configuration (``off``, each of :data:`PROCESSORS`, ``unsampled`` and
    ``alone``, the spans made by the model and the tool) on ``backend``:
    the median wall-clock and CPU time per turn (``wall``, ``cpu``) and, traced, the
    median of the rounds' shares added to the plain turn (``wall_adds``, ``cpu_adds``)
    and the median of their CPU time less the spans alone's, as a share of the plain
    turn (``cpu_ours``)."""
    exporter = InMemorySpanExporter()
    tracers: dict[str, TracerProvider | None] = {"off": None}
    for name, processor in PROCESSORS.items():
        tracers[name] = provider = TracerProvider()
        provider.add_span_processor(processor(exporter))
    tracers["unsampled"] = provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracers["alone"] = provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    rounds: list[dict[str, tuple[float, float]]] = []
    for index in range(repeats + 1):  # the first round warms up
        found = {}
        names = list(tracers)
        for name in names[index % len(names) :] + names[: index % len(names)]:
            tracer = tracers[name]
            url = _store_url(ctx, backend, f"tracing-{name}-{index}")
            found[name] = _per_turn(url, turns, tracer, alone=name == "alone")
            exporter.clear()
        if index:
            rounds.append(found)
    for tracer in tracers.values():
        if tracer is not None:
            tracer.shutdown()
    measured = {}
    for name in tracers:
        walls = [found[name][0] for found in rounds]
        cpus = [found[name][1] for found in rounds]
        row = {"wall": statistics.median(walls), "cpu": statistics.median(cpus)}
        if name != "off":
            row["wall_adds"] = statistics.median(
                found[name][0] / found["off"][0] - 1 for found in rounds
            )
            row["cpu_adds"] = statistics.median(
                found[name][1] / found["off"][1] - 1 for found in rounds
            )
            # what is left once the SDK's own spans are taken out: this library's share
            row["cpu_ours"] = statistics.median(
                (found[name][1] - found["alone"][1]) / found["off"][1] for found in rounds
            )
        measured[name] = row
    return measured


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
        f"time per turn over a run of {turns} turns (medians of {repeats} rounds)",
        ["store", "configuration", "wall", "wall adds", "CPU", "CPU adds"],
    )
    found = {}
    for backend in ("sqlite", "memory"):
        log(f"tracing cost, {backend}, T={turns}, {repeats} rounds")
        found[backend] = measured = measure(ctx, backend, turns, repeats)
        for name, row in measured.items():
            traced = name != "off"
            table.rows.append(
                [
                    backend,
                    _CONFIGURATIONS[name],
                    seconds(row["wall"]),
                    f"{row['wall_adds']:+.1%}" if traced else "",
                    seconds(row["cpu"]),
                    f"{row['cpu_adds']:+.1%}" if traced else "",
                ]
            )
    sqlite, memory = found["sqlite"], found["memory"]
    sqlite_turn = sqlite["off"]["cpu"]
    spans = {name: memory[name]["cpu"] - memory["off"]["cpu"] for name in PROCESSORS}
    check = off_check_s()
    table.notes += [
        "adds: the median over the rounds of each round's traced turn against its plain "
        "one, so it is not the ratio of the medians beside it.",
        "CPU: the process's CPU time (`time.process_time`, all threads), which other "
        "processes on the machine do not inflate as they do the wall clock.",
        "the spans of a turn (a chat and an execute_tool span, exported) cost, in CPU on "
        "the in-memory store: "
        + ", ".join(
            f"{_CONFIGURATIONS[name]} {seconds(cost)} ({cost / sqlite_turn:.1%} of a SQLite "
            "turn's CPU)"
            for name, cost in spans.items()
        )
        + ".",
        "this library's own share (a traced turn less the spans alone, in CPU, of a plain "
        "turn): "
        + ", ".join(
            f"{backend} {_CONFIGURATIONS[name]} {found[backend][name]['cpu_ours']:+.1%}"
            for backend in ("sqlite", "memory")
            for name in PROCESSORS
        )
        + ".",
        f"off: a run checks once whether anything traces it: {seconds(check)}, "
        f"{check / sqlite_turn:.2%} of one SQLite turn's CPU.",
    ]
    section.tables.append(table)
    simple, batch = sqlite["simple"]["cpu_adds"], sqlite["batch"]["cpu_adds"]
    section.targets += [
        Target(
            "tracing off: nothing measurable (the run's check under 1% of one turn)",
            f"{seconds(check)} a run, {check / sqlite_turn:.2%} of a turn's CPU",
            status(check / sqlite_turn < OFF_TARGET),
        ),
        Target(
            "tracing on (SQLite, the SDK's BatchSpanProcessor into its in-memory exporter): "
            "under 10% per turn, in CPU time",
            f"{batch:+.1%} per turn (SimpleSpanProcessor: {simple:+.1%}; the spans' CPU "
            f"on the in-memory store: {spans['batch'] / sqlite_turn:.1%} / "
            f"{spans['simple'] / sqlite_turn:.1%} of a SQLite turn; the same spans made "
            f"without this library's tracing: {sqlite['alone']['cpu_adds']:+.1%}, so "
            f"this library's share {sqlite['batch']['cpu_ours']:+.1%}; "
            f"a run left out by its sampler: {sqlite['unsampled']['cpu_adds']:+.1%})",
            status(batch < ON_TARGET),
        ),
    ]
    return [section]


_CONFIGURATIONS = {
    "off": "off (no tracer provider)",
    "simple": "SDK, SimpleSpanProcessor, in-memory exporter",
    "batch": "SDK, BatchSpanProcessor, in-memory exporter",
    "unsampled": "SDK, BatchSpanProcessor, the run not sampled",
    "alone": "spans alone: the same spans, made by the model and the tool (Batch)",
}


if __name__ == "__main__":
    raise SystemExit(cli([run]))
