"""Traces of runs: OpenTelemetry spans after the GenAI semantic conventions, recorded with
the SDK's in-memory exporter; content only when opted in; a resumed run linked to the
run that paused."""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.schemas import Schemas
from starlette.testclient import TestClient

import anthropic_wire
import openai_wire
from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ScriptedProvider,
    Store,
    TextDelta,
    Tool,
    ToolContext,
    open_store,
)
from covonaut_es.agui import create_agui_app
from covonaut_es.domain import Interrupt, ThreadStatus
from covonaut_es.errors import ConfigurationError, CovonautError, ProviderError
from covonaut_es.messages import ProviderRequest, ProviderResponse, Role, ToolCall, Usage
from covonaut_es.runtime import running_calls
from covonaut_es.runtime._tracing import SEMCONV_VERSION, _links
from covonaut_es.workers import Worker
from hostile_text import hostile_text
from provider_wire import VendorWire
from support import answer, call, echo_tool, review_tool, ticking_clock
from wire_server import WireServer

VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
ALICE = VERIFIER.issue_token("alice", ttl_seconds=3600)
PAY_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
    "required": ["amount", "to"],
}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """Where the spans of the tests' tracer provider end up."""
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A tracer provider of the SDK, handed to agents through their config."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider
    tracer_provider.shutdown()


def pay_tool(runs: list[ToolContext]) -> Tool:
    """``pay``: needs a person's approval; records each execution."""

    def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
        runs.append(ctx)
        return {"paid": args["amount"]}

    return Tool("pay", "Send a payment", PAY_SCHEMA, pay, requires_approval=True)


def failing_tool(message: str = "the tool broke") -> Tool:
    """``explode``: raises ``ValueError(message)``."""

    def explode(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise ValueError(message)

    return Tool("explode", "Always fails", {"type": "object"}, explode)


def slow_tool(release: threading.Event) -> Tool:
    """``slow``: outruns its timeout of 50 ms, returning once ``release`` is set."""

    def slow(ctx: ToolContext, args: dict[str, Any]) -> Any:
        release.wait(10)
        return "late"

    return Tool("slow", "Takes its time", {"type": "object"}, slow, timeout=0.05)


def config(provider: Any, script: Sequence[Any], **options: Any) -> AgentConfig:
    """A scripted agent's config traced by ``provider``."""
    return AgentConfig(
        provider=ScriptedProvider(script),
        model="m-1",
        name="clerk",
        tracer_provider=provider,
        clock=ticking_clock(),
        **options,
    )


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    """The finished spans, grouped by name."""
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def event_names(span: ReadableSpan) -> list[str]:
    return [event.name for event in span.events]


def test_a_run_with_tools_is_one_agent_span_over_its_model_and_tool_calls(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A run is an invoke_agent span; each model call a chat span and each tool call an
    execute_tool span under it, with the conventions' attributes and our own."""
    script = [
        ProviderResponse(
            tool_calls=(ToolCall("c1", "echo", '{"text": "x"}'),),
            usage=Usage(10, 3),
            finish_reason="tool_calls",
        ),
        answer("done", tokens=5),
    ]
    agent = Agent(config(provider, script, tools=[echo_tool()]))
    assert agent.run("go") == "done"

    spans = by_name(exporter.get_finished_spans())
    assert sorted(spans) == ["chat m-1", "execute_tool echo", "invoke_agent clerk"]
    (run,) = spans["invoke_agent clerk"]
    chats, (tool,) = spans["chat m-1"], spans["execute_tool echo"]
    assert len(chats) == 2
    assert run.parent is None
    assert all(parent_of(child) == span_id(run) for child in [*chats, tool])
    assert run.kind is trace.SpanKind.INTERNAL and chats[0].kind is trace.SpanKind.CLIENT
    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "clerk",
        "gen_ai.provider.name": "_OTHER",
        "gen_ai.conversation.id": agent.thread_id,
        "gen_ai.request.model": "m-1",
        "covonaut.run.mode": "run",
        "covonaut.durability": "memory",
        "covonaut.thread.version": agent.state.version,
        "covonaut.thread.status": "finished",
        "gen_ai.usage.input_tokens": 15,
        "gen_ai.usage.output_tokens": 8,
    }
    first = dict(chats[0].attributes or {})
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "m-1"
    assert first["gen_ai.usage.input_tokens"] == 10
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    tool_attributes = dict(tool.attributes or {})
    assert tool_attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_attributes["gen_ai.tool.name"] == "echo"
    assert tool_attributes["gen_ai.tool.call.id"] == "c1"
    assert tool_attributes["covonaut.tool.outcome"] == "succeeded"
    key = tool_attributes["covonaut.tool.idempotency_key"]
    assert isinstance(key, str) and len(key) > 8
    assert run.status.is_ok and tool.status.is_ok


def test_an_async_run_of_parallel_calls_traces_each_call_under_the_run(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Calls run concurrently under arun each get their own execute_tool span."""
    script = [
        call(("a", "echo", '{"text": "1"}'), ("b", "echo", '{"text": "2"}')),
        answer("both"),
    ]
    agent = Agent(config(provider, script, tools=[echo_tool()], parallel_tools=True))
    assert asyncio.run(agent.arun("go")) == "both"

    spans = by_name(exporter.get_finished_spans())
    (run,) = spans["invoke_agent clerk"]
    tools = spans["execute_tool echo"]
    assert sorted(str((s.attributes or {})["gen_ai.tool.call.id"]) for s in tools) == ["a", "b"]
    assert all(parent_of(tool) == span_id(run) for tool in tools)


def test_a_streamed_run_is_traced_as_the_same_run_awaited_in_one_piece(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """astream drives the same traced run: one invoke_agent span over its chat and
    execute_tool spans, while the pieces of the answer still reach the consumer."""
    script = [call(("c1", "echo", '{"text": "x"}')), answer("done")]
    agent = Agent(config(provider, script, tools=[echo_tool()]))

    async def consume() -> list[Any]:
        return [item async for item in agent.astream("go")]

    items = asyncio.run(consume())
    assert any(isinstance(item, TextDelta) for item in items)
    spans = by_name(exporter.get_finished_spans())
    assert sorted(spans) == ["chat m-1", "execute_tool echo", "invoke_agent clerk"]
    (run,) = spans["invoke_agent clerk"]
    assert (run.attributes or {})["covonaut.thread.status"] == "finished"
    assert all(
        parent_of(child) == span_id(run)
        for child in [*spans["chat m-1"], *spans["execute_tool echo"]]
    )


@pytest.mark.parametrize("driven", ["run", "arun"])
def test_spans_a_tool_or_a_model_client_makes_are_children_of_their_call(
    provider: TracerProvider, exporter: InMemorySpanExporter, driven: str
) -> None:
    """While a tool runs, or the model is asked, its span is the current one: spans an
    instrumented client makes there join the trace under it."""
    tracer = provider.get_tracer("client")

    def transfer(ctx: ToolContext, args: dict[str, Any]) -> Any:
        with tracer.start_as_current_span("bank transfer"):
            return "sent"

    def model(request: ProviderRequest) -> ProviderResponse:
        with tracer.start_as_current_span("model http"):
            if request.messages[-1].role is Role.TOOL:
                return answer("done")
            return call(("c1", "transfer", "{}"))

    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=model),
            name="clerk",
            tools=[Tool("transfer", "Sends money", {"type": "object"}, transfer)],
            tracer_provider=provider,
        )
    )
    assert (agent.run("go") if driven == "run" else asyncio.run(agent.arun("go"))) == "done"

    spans = by_name(exporter.get_finished_spans())
    (bank,), (tool,) = spans["bank transfer"], spans["execute_tool transfer"]
    assert parent_of(bank) == span_id(tool)
    chats = {span_id(chat) for chat in spans["chat"]}
    assert {parent_of(http) for http in spans["model http"]} == chats
    assert len(chats) == 2


def test_a_tool_that_raises_marks_its_span_with_the_error_type(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A tool's exception is the model's to read, and its span's error.type."""
    agent = Agent(
        config(provider, [call(("c1", "explode", "{}")), answer("sorry")], tools=[failing_tool()])
    )
    agent.run("go")

    (tool,) = by_name(exporter.get_finished_spans())["execute_tool explode"]
    assert not tool.status.is_ok
    assert (tool.attributes or {})["error.type"] == "ValueError"
    assert (tool.attributes or {})["covonaut.tool.outcome"] == "failed"
    assert tool.status.description is None  # the exception's text is content


def test_a_provider_that_raises_fails_its_chat_span_and_the_run(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A model call that fails ends its chat span and the run's in error."""
    agent = Agent(config(provider, [RuntimeError("overloaded")]))
    with pytest.raises(ProviderError):
        agent.run("go")

    spans = by_name(exporter.get_finished_spans())
    (chat,), (run,) = spans["chat m-1"], spans["invoke_agent clerk"]
    assert (chat.attributes or {})["error.type"] == "RuntimeError"
    assert (run.attributes or {})["error.type"] == "ProviderError"
    assert (run.attributes or {})["covonaut.thread.status"] == "error"
    assert not chat.status.is_ok and not run.status.is_ok
    assert not any(event.name == "exception" for event in [*chat.events, *run.events])


class ProcessDied(BaseException):
    """Stands in for the process dying inside a tool."""


def test_a_run_that_dies_in_a_tool_ends_every_span_in_error(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A crash mid-call (the call left in doubt) still ends the tool's and the run's
    spans, with the crash's type."""

    def die(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise ProcessDied

    tool = Tool("die", "Dies", {"type": "object"}, die)
    agent = Agent(config(provider, [call(("c1", "die", "{}"))], tools=[tool]))
    with pytest.raises(ProcessDied):
        agent.run("go")

    spans = by_name(exporter.get_finished_spans())
    (tool_span,), (run,) = spans["execute_tool die"], spans["invoke_agent clerk"]
    assert (tool_span.attributes or {})["error.type"] == "ProcessDied"
    assert (run.attributes or {})["error.type"] == "ProcessDied"
    assert [call.call.id for call in agent.in_doubt] == ["c1"]


def test_a_cancelled_async_run_ends_its_spans_with_the_cancellation(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A task cancelled while its tool awaits leaves no span open: the tool's and the
    run's end with error.type CancelledError."""

    async def scenario() -> None:
        started = asyncio.Event()

        async def wait(ctx: ToolContext, args: dict[str, Any]) -> Any:
            started.set()
            await asyncio.Event().wait()

        tool = Tool("wait", "Waits forever", {"type": "object"}, wait)
        agent = Agent(config(provider, [call(("c1", "wait", "{}"))], tools=[tool]))
        task = asyncio.create_task(agent.arun("go"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    spans = by_name(exporter.get_finished_spans())
    (tool_span,), (run,) = spans["execute_tool wait"], spans["invoke_agent clerk"]
    assert (tool_span.attributes or {})["error.type"] == "CancelledError"
    assert (run.attributes or {})["error.type"] == "CancelledError"


def test_a_review_pause_and_its_resume_are_two_traces_linked_by_the_stored_pause(
    provider: TracerProvider, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    """The paused run records its trace context with the pause; the run that resumes
    it, in another process, starts a new trace that links to the paused run's span."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    runs: list[ToolContext] = []
    script = [
        call(("c1", "pay", '{"amount": 40, "to": "bob"}')),
        call(("c2", "pay", '{"amount": 40, "to": "bob"}')),
        answer("paid"),
    ]
    scripted = ScriptedProvider(script)
    with open_store(url) as store:
        agent = Agent(_review_config(provider, scripted, store, runs))
        assert agent.run("pay bob") == ""
        review_id = str(agent.pending_reviews[0].review_id)
        agent.approve(review_id, reviewer=ALICE)
    (paused,) = by_name(exporter.get_finished_spans())["invoke_agent clerk"]
    assert paused.context is not None
    assert event_names(paused).count("covonaut.review.requested") == 1
    assert (paused.attributes or {})["covonaut.thread.status"] == "interrupted"
    exporter.clear()

    with open_store(url) as store:  # days later, another process
        later = Agent(_review_config(provider, scripted, store, runs))
        assert later.resume() == "paid"
    spans = by_name(exporter.get_finished_spans())
    (resumed,) = spans["invoke_agent clerk"]
    assert resumed.context is not None
    assert resumed.context.trace_id != paused.context.trace_id
    (link,) = resumed.links
    assert (link.context.trace_id, link.context.span_id) == (
        paused.context.trace_id,
        paused.context.span_id,
    )
    assert event_names(resumed)[:1] == ["covonaut.review.decided"]
    assert event_names(resumed).count("covonaut.approval.used") == 1
    assert (resumed.events[0].attributes or {})["covonaut.review.decision"] == "approved"
    (paid,) = spans["execute_tool pay"]
    assert (paid.attributes or {})["covonaut.review.id"] == review_id
    assert len(runs) == 1


def test_a_worker_that_resumes_a_decided_review_links_to_the_paused_run(
    provider: TracerProvider, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    """A worker resuming a thread whose review was decided traces the resume, linked
    to the run that paused, through the config its factory returns."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    runs: list[ToolContext] = []
    pay = '{"amount": 40, "to": "bob"}'
    scripted = ScriptedProvider([call(("c1", "pay", pay)), call(("c2", "pay", pay)), answer("ok")])
    with open_store(url) as store:
        agent = Agent(_review_config(provider, scripted, store, runs))
        agent.run("pay bob")
        agent.approve(agent.pending_reviews[0].review_id, reviewer=ALICE)
        (paused,) = by_name(exporter.get_finished_spans())["invoke_agent clerk"]
        exporter.clear()

        worker = Worker(store, lambda _: _review_config(provider, scripted, store, runs))
        worker.run(once=True)
        worker.close()
    (resumed,) = by_name(exporter.get_finished_spans())["invoke_agent clerk"]
    assert paused.context is not None
    assert [link.context.span_id for link in resumed.links] == [paused.context.span_id]
    assert (resumed.attributes or {})["covonaut.run.mode"] == "resume"
    assert len(runs) == 1


def _review_config(
    provider: TracerProvider, scripted: ScriptedProvider, store: Store, runs: list[ToolContext]
) -> AgentConfig:
    return AgentConfig(
        provider=scripted,
        model="m-1",
        name="clerk",
        tools=[pay_tool(runs)],
        checkpoint=CheckpointSettings(store=store, thread_id="t-pay"),
        reviewer_verifier=VERIFIER,
        tracer_provider=provider,
        clock=ticking_clock(),
    )


def test_a_call_in_doubt_and_its_settlement_show_in_the_paused_and_resumed_traces(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A call that outruns its timeout is in doubt on the paused run's span; its
    settlement shows on the span of the run that resumes, which links back."""
    release = threading.Event()
    script = [call(("c1", "slow", "{}")), answer("ok")]
    agent = Agent(config(provider, script, tools=[slow_tool(release)]))
    assert agent.run("go") == ""
    release.set()
    deadline = time.monotonic() + 10
    while running_calls() and time.monotonic() < deadline:
        time.sleep(0.01)
    (paused,) = by_name(exporter.get_finished_spans())["invoke_agent clerk"]
    (tool,) = by_name(exporter.get_finished_spans())["execute_tool slow"]
    assert (tool.attributes or {})["error.type"] == "timeout"
    assert (tool.attributes or {})["covonaut.tool.outcome"] == "in_doubt"
    assert event_names(paused).count("covonaut.call.in_doubt") == 1
    in_doubt = next(e for e in paused.events if e.name == "covonaut.call.in_doubt")
    assert (in_doubt.attributes or {})["gen_ai.tool.call.id"] == "c1"
    exporter.clear()

    agent.settle("c1", result="it ran")
    assert agent.resume() == "ok"
    (resumed,) = by_name(exporter.get_finished_spans())["invoke_agent clerk"]
    assert event_names(resumed)[0] == "covonaut.call.settled"
    assert paused.context is not None
    assert [link.context.span_id for link in resumed.links] == [paused.context.span_id]


def test_a_tools_pause_records_the_trace_context_and_an_untraced_one_none() -> None:
    """The pause carries the traced run's W3C traceparent; an untraced run's pause is
    stored exactly as before tracing existed."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = Agent(config(tracer_provider, [call(("c1", "review", "{}"))], tools=[review_tool()]))
    traced.run("go")
    (run,) = by_name(exporter.get_finished_spans())["invoke_agent clerk"]
    assert run.context is not None
    interrupt = traced.interrupted
    assert interrupt is not None
    assert interrupt.trace_parent == (
        f"00-{run.context.trace_id:032x}-{run.context.span_id:016x}-{run.context.trace_flags:02x}"
    )

    untraced = Agent(config(None, [call(("c1", "review", "{}"))], tools=[review_tool()]))
    untraced.run("go")
    assert untraced.interrupted is not None
    assert untraced.interrupted.trace_parent == ""
    assert b"trace_parent" not in msgspec.json.encode(untraced.interrupted)


def test_nothing_is_traced_without_a_tracer_provider(exporter: InMemorySpanExporter) -> None:
    """With the API's default provider, or a no-op one, a run records nothing."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    for tracer_provider in (None, trace.NoOpTracerProvider()):
        agent = Agent(
            config(
                tracer_provider,
                [call(("c1", "echo", '{"text": "x"}')), answer("done")],
                tools=[echo_tool()],
            )
        )
        assert agent.run("go") == "done"
    assert exporter.get_finished_spans() == ()


class AskedSampler(Sampler):
    """``ParentBased(ALWAYS_OFF)``, noting the name of each span it is asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self._sampler = ParentBased(ALWAYS_OFF)

    def should_sample(self, parent_context: Any, trace_id: int, name: str, *args: Any) -> Any:
        self.asked.append(name)
        return self._sampler.should_sample(parent_context, trace_id, name, *args)

    def get_description(self) -> str:
        return "asked"


@pytest.mark.parametrize("awaited", [False, True], ids=["run", "arun"])
def test_a_run_its_sampler_leaves_out_starts_no_other_span_yet_keeps_its_context(
    awaited: bool,
) -> None:
    """A run whose span is not sampled records nothing and asks for no span of its
    calls; a tool still runs under the run's context, and the pause records it."""
    sampler = AskedSampler()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(sampler=sampler)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list[trace.SpanContext] = []

    def look(ctx: ToolContext, args: dict[str, Any]) -> Any:
        seen.append(trace.get_current_span().get_span_context())
        return "looked"

    tools = [Tool("look", "Looks", {"type": "object"}, look), review_tool()]
    script = [call(("c1", "look", "{}")), call(("c2", "review", "{}"))]
    agent = Agent(config(tracer_provider, script, tools=tools))
    if awaited:
        asyncio.run(agent.arun("go"))
    else:
        agent.run("go")

    assert sampler.asked == ["invoke_agent clerk"]
    assert exporter.get_finished_spans() == ()
    (context,) = seen
    assert context.is_valid and not context.trace_flags.sampled
    assert agent.interrupted is not None
    assert agent.interrupted.trace_parent == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )
    tracer_provider.shutdown()


def test_a_tracer_provider_that_is_not_one_is_refused() -> None:
    """The config names what a tracer provider must be."""
    with pytest.raises(ConfigurationError, match="TracerProvider"):
        config(object(), [])


def _run_in_subprocess(script: str) -> str:
    """Run ``script`` in a fresh interpreter (the global tracer provider is set once per
    process), with the tests' modules on the path; its standard output."""
    src = Path(__file__).parents[1] / "src"
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": f"{src}:{Path(__file__).parent}", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_global_tracer_provider_traces_runs() -> None:
    """A provider set globally traces every agent without a tracer provider of its own."""
    out = _run_in_subprocess(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from covonaut_es import Agent, AgentConfig, ScriptedProvider
        from support import answer

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        Agent(AgentConfig(provider=ScriptedProvider([answer("hi")]), name="g")).run("go")
        print(sorted(span.name for span in exporter.get_finished_spans()))
        """
    )
    assert out.strip() == "['chat', 'invoke_agent g']"


def test_an_agent_runs_untraced_when_opentelemetry_is_not_installed() -> None:
    """Without the otel extra, runs go on as ever and record no trace context."""
    out = _run_in_subprocess(
        """
        import sys

        class NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(name)
                return None

        sys.meta_path.insert(0, NoOpenTelemetry())
        from covonaut_es import Agent, AgentConfig, ScriptedProvider
        from support import answer, call, review_tool

        script = ScriptedProvider([call(("c1", "review", "{}"))])
        agent = Agent(AgentConfig(provider=script, tools=[review_tool()]))
        agent.run("go")
        print(repr(agent.interrupted.trace_parent), "opentelemetry" in sys.modules)
        """
    )
    assert out.strip() == "'' False"


def test_the_attributes_are_the_pinned_conventions_names(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Every gen_ai attribute the spans carry is a name of the pinned GenAI semantic
    conventions; every other is error.type or under covonaut."""
    assert f"V{SEMCONV_VERSION.replace('.', '_')}" in Schemas.__members__
    known = {
        value
        for name, value in vars(gen_ai_attributes).items()
        if name.startswith("GEN_AI_") and isinstance(value, str)
    }
    deprecated = {"gen_ai.system", "gen_ai.prompt", "gen_ai.completion"}
    runs: list[ToolContext] = []
    script = [
        call(("c1", "echo", '{"text": "x"}'), ("c2", "explode", "{}")),
        call(("c3", "pay", '{"amount": 1, "to": "a"}')),
    ]
    agent = Agent(
        config(
            provider,
            script,
            tools=[echo_tool(), failing_tool(), pay_tool(runs)],
            trace_content=True,
        )
    )
    agent.run("go")
    names: set[str] = set()
    for span in exporter.get_finished_spans():
        names.update(span.attributes or {})
        for event in span.events:
            names.update(event.attributes or {})
    conventions = {name for name in names if name.startswith("gen_ai.")}
    assert conventions <= known - deprecated
    assert {"gen_ai.input.messages", "gen_ai.tool.call.arguments"} <= conventions
    assert all(name.startswith("covonaut.") or name == "error.type" for name in names - known)


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("wire", [openai_wire, anthropic_wire], ids=["openai", "anthropic"])
def test_the_chat_span_names_the_model_the_vendor_says_answered(
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    server: WireServer,
    wire: VendorWire,
    streamed: bool,
) -> None:
    """A bundled adapter's chat span carries gen_ai.response.model as the vendor's answer
    names it, beside the model asked for, whether the answer came whole or streamed."""
    server.reply(wire.TEXT_STREAM_REPLY if streamed else wire.ANSWER_REPLY)
    pieces: list[Any] = []
    with wire.provider(server.url) as adapter:
        agent = Agent(
            AgentConfig(
                provider=adapter,
                model=wire.MODEL,
                tracer_provider=provider,
                on_delta=pieces.append if streamed else None,
            )
        )
        agent.run(wire.QUESTION)
    assert bool(pieces) is streamed
    (chat,) = by_name(exporter.get_finished_spans())[f"chat {wire.MODEL}"]
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.request.model"] == wire.MODEL
    assert attributes["gen_ai.response.model"] == wire.ANSWERED_MODEL
    assert attributes["gen_ai.provider.name"] == wire.SDK


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("answered", ["", "m-1-2026-01-01"])
def test_the_response_model_is_recorded_as_scripted_and_absent_when_unknown(
    provider: TracerProvider, exporter: InMemorySpanExporter, answered: str, streamed: bool
) -> None:
    """A scripted answer's model is the chat span's gen_ai.response.model, whole or
    streamed; an answer that names no model leaves the attribute out rather than
    guessing it."""
    scripted = msgspec.structs.replace(answer("done two"), model=answered)
    pieces: list[Any] = []
    on_delta = pieces.append if streamed else None
    Agent(config(provider, [scripted], on_delta=on_delta)).run("go")
    assert bool(pieces) is streamed
    (chat,) = by_name(exporter.get_finished_spans())["chat m-1"]
    recorded = (chat.attributes or {}).get("gen_ai.response.model")
    assert recorded == (answered or None)


# Content ------------------------------------------------------------------------------

SECRET = st.text(min_size=6, max_size=40).map(lambda text: "§" + text)


def _content_run(provider: TracerProvider, secret: str, *, opted_in: bool) -> None:
    """A run whose system prompt, user message, tool arguments, tool result, tool
    error, review request and answer all hold ``secret``, traced by ``provider``."""
    arguments = msgspec.json.encode({"text": secret}).decode()
    pay_arguments = msgspec.json.encode({"amount": 1, "to": secret}).decode()
    script = [
        call(("c1", "echo", arguments), ("c2", "explode", arguments)),
        ProviderResponse(content=secret, tool_calls=(ToolCall("c3", "pay", pay_arguments),)),
    ]
    runs: list[ToolContext] = []
    agent = Agent(
        config(
            provider,
            script,
            tools=[echo_tool(), failing_tool(secret), pay_tool(runs)],
            trace_content=opted_in,
            system_prompt=secret,
        )
    )
    agent.run(secret)


def _recorded_text(spans: Sequence[ReadableSpan]) -> list[str]:
    """Every string a span carries: names, attribute values, events, links, status."""
    texts: list[str] = []

    def add(values: Any) -> None:
        for value in (values or {}).values():
            texts.extend(str(item) for item in (value if isinstance(value, tuple) else [value]))

    for span in spans:
        texts.append(span.name)
        texts.append(str(span.status.description))
        add(span.attributes)
        for event in span.events:
            texts.append(event.name)
            add(event.attributes)
        for link in span.links:
            add(link.attributes)
    return texts


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(secret=SECRET)
def test_no_content_is_recorded_unless_the_application_opts_in(secret: str) -> None:
    """Whatever the messages, tool arguments, results and errors hold, none of it
    reaches a span, an event or a status unless trace_content is set; then it does."""
    for opted_in in (False, True):
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        _content_run(tracer_provider, secret, opted_in=opted_in)
        texts = _recorded_text(exporter.get_finished_spans())
        encoded = msgspec.json.encode(secret).decode()[1:-1]
        leaked = [text for text in texts if secret in text or encoded in text]
        if opted_in:
            assert leaked
        else:
            assert leaked == []
        tracer_provider.shutdown()


class _Counting(SpanProcessor):
    """Counts the spans started and ended."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


HOSTILE_TEXT = hostile_text()


@settings(max_examples=40, deadline=None)
@given(
    content=HOSTILE_TEXT,
    calls=st.lists(st.tuples(HOSTILE_TEXT, HOSTILE_TEXT, HOSTILE_TEXT), max_size=2),
    model=HOSTILE_TEXT,
    finish_reason=HOSTILE_TEXT,
    opted_in=st.booleans(),
    raises=st.booleans(),
)
def test_a_hostile_answer_ends_a_traced_run_as_an_untraced_one(
    content: str,
    calls: list[tuple[str, str, str]],
    model: str,
    finish_reason: str,
    opted_in: bool,
    raises: bool,
) -> None:
    """Property: whatever text the model answers with, in its content or a tool call's
    id, name or arguments, its model or its finish reason (or the provider raises with
    that text), a traced run ends as it does
    untraced: answered, or refused with a CovonautError and its failure stored, never
    running; every span it started is ended, and every text a span holds is UTF-8 to an
    exporter. (With content traced, a lone surrogate failed the run inside the
    tracing code, with a UnicodeEncodeError, its chat span open and the run stored as
    running.)"""
    answer_ = ProviderResponse(
        content=content,
        tool_calls=tuple(ToolCall(i, n, a) for i, n, a in calls),
        model=model,
        finish_reason=finish_reason or None,
    )
    ends = []
    for traced in (False, True):
        counting, exported = _Counting(), InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(counting)
        tracer_provider.add_span_processor(SimpleSpanProcessor(exported))
        store = open_store("memory://")
        agent = Agent(
            config(
                tracer_provider if traced else None,
                [ValueError(content)] if raises else [answer_, answer("done")],
                tools=[echo_tool()],
                trace_content=opted_in,
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
            )
        )
        try:
            agent.run("go")
            ended: str = "answered"
        except CovonautError as refused:
            ended = type(refused).__name__
        assert store.load("t").status != ThreadStatus.RUNNING
        assert counting.started == counting.ended
        for text in _recorded_text(exported.get_finished_spans()):
            text.encode()  # every attribute is UTF-8 to an exporter
        ends.append((ended, store.load("t").status))
        store.close()
        tracer_provider.shutdown()
    assert ends[0] == ends[1]


def test_content_is_recorded_exactly_when_opted_in(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Opted in, a tool's arguments and result are its span's attributes, unchanged."""
    arguments = '{"text": "line one\\nline\\u0007two"}'
    agent = Agent(
        config(
            provider,
            [call(("c1", "echo", arguments)), answer("done")],
            tools=[echo_tool()],
            trace_content=True,
        )
    )
    agent.run("go")
    (tool,) = by_name(exporter.get_finished_spans())["execute_tool echo"]
    attributes = tool.attributes or {}
    assert attributes["gen_ai.tool.call.arguments"] == arguments
    assert msgspec.json.decode(str(attributes["gen_ai.tool.call.result"])) == {
        "echo": "line one\nline\x07two"
    }


# Stored trace contexts are hostile ------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    value=st.one_of(st.text(max_size=300), st.from_regex(r"\A00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]\Z"))
)
def test_a_stored_trace_context_links_only_when_it_reads_as_one(value: str) -> None:
    """Whatever a stored pause's trace context holds, reading it never raises, and it
    links only a valid W3C traceparent."""
    links = _links([Interrupt("r", trace_parent=value)])
    valid = value[3:35] != "0" * 32 and value[36:52] != "0" * 16
    if links:
        (link,) = links
        assert valid and f"{link.context.trace_id:032x}" == value[3:35]
        assert f"{link.context.span_id:016x}" == value[36:52]
    assert len(links) <= 1


def test_a_typed_answer_is_traced_as_asked_for_in_json(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The chat spans of a run whose answer is typed say the output asked for is JSON."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    Agent(config(provider, [answer('{"ok": true}')], output_type=schema)).run("go")
    Agent(config(provider, [answer("plain")])).run("go")
    first, second = by_name(exporter.get_finished_spans())["chat m-1"]
    assert dict(first.attributes or {})["gen_ai.output.type"] == "json"
    assert "gen_ai.output.type" not in dict(second.attributes or {})


# A tracer that fails never changes a run -----------------------------------------------

SPAN_KINDS = ("invoke_agent", "chat", "execute_tool")
TRACER_SECRET = "sk-tracer-" + secrets.token_hex(8)  # what a failing hook's text may quote


class TracerFault(Exception):
    """What a failing tracer raises; its text quotes a secret no log may show."""


class Fault:
    """Where the tracer fails: the ``nth`` span of ``kind`` (counted over the test's
    runs) raises in ``hook``; ``fired`` counts the times it did."""

    def __init__(self, hook: str, kind: str, nth: int) -> None:
        self.hook, self.kind, self.nth = hook, kind, nth
        self.seen = self.fired = 0

    def strike(self, hook: str, name: str) -> None:
        if hook != self.hook or not name.startswith(self.kind):
            return
        self.seen += 1
        if self.seen > self.nth:
            self.fired += 1
            raise TracerFault(f"exporter refused {TRACER_SECRET}")


class FaultyProcessor(SpanProcessor):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.fault.strike("on_start", span.name)

    def on_end(self, span: ReadableSpan) -> None:
        self.fault.strike("on_end", span.name)


class FaultySampler(Sampler):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    def should_sample(self, parent_context: Any, trace_id: int, name: str, *args: Any) -> Any:
        self.fault.strike("should_sample", name)
        return ALWAYS_ON.should_sample(parent_context, trace_id, name, *args)

    def get_description(self) -> str:
        return "faulty"


class AttributeRefusingSpan(trace.NonRecordingSpan):
    """A recording span of a custom tracer whose attributes fail to be set."""

    def __init__(self, name: str, fault: Fault) -> None:
        ids = secrets.randbits(64) | 1
        super().__init__(trace.SpanContext(ids, ids, False, trace.TraceFlags(1)))
        self.name, self.fault = name, fault

    def is_recording(self) -> bool:
        return True

    def set_attribute(self, key: str, value: Any) -> None:
        self.fault.strike("set_attribute", self.name)

    def set_attributes(self, attributes: Any) -> None:
        self.fault.strike("set_attribute", self.name)


class FaultyTracerProvider:
    """A tracer provider of its own: ``get_tracer`` fails, or its spans' attributes."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        self.fault.strike("get_tracer", "")
        return self

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return AttributeRefusingSpan(name, self.fault)


def faulty_tracer_provider(fault: Fault) -> Any:
    if fault.hook in ("get_tracer", "set_attribute"):
        return FaultyTracerProvider(fault)
    if fault.hook == "should_sample":
        return TracerProvider(sampler=FaultySampler(fault))
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(FaultyProcessor(fault))
    return tracer_provider


FAULTS = st.one_of(
    st.builds(Fault, st.just("get_tracer"), st.just(""), st.integers(0, 1)),
    st.builds(
        Fault,
        st.sampled_from(["on_start", "on_end", "should_sample", "set_attribute"]),
        st.sampled_from(SPAN_KINDS),
        st.integers(0, 1),
    ),
)


def comparable(events: Sequence[Any]) -> list[tuple[str, Any]]:
    """The events' types and payloads, without what differs from one run to the next
    of the same script (times, the traced run's context, and the chain's seals over
    them)."""

    def kept(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                key: kept(item)
                for key, item in value.items()
                if key not in ("timestamp", "trace_parent", "chain")
            }
        if isinstance(value, list):
            return [kept(item) for item in value]
        return value

    return [
        (type(event).__name__, kept(msgspec.to_builtins(vars(event), enc_hook=repr)))
        for event in events
    ]


def _scripted_run(
    path: str, fails: bool, tracer_provider: Any, tmp_path: Path
) -> tuple[Any, list[Any], int]:
    """Drive ``path`` (run, resume after a review, astream, the AG-UI endpoint) of the
    same script, whose last model call ``fails`` or answers, traced by
    ``tracer_provider``: what it returned or raised, the stored events, and how many
    times its tool ran."""
    runs: list[ToolContext] = []
    review = path == "resume"
    script = [call(("c1", "pay", '{"amount": 40, "to": "bob"}'))]
    if review:  # after the approval the model calls the tool again
        script.append(call(("c2", "pay", '{"amount": 40, "to": "bob"}')))
    script.append(ValueError("the model is down") if fails else answer("paid"))
    tool = pay_tool(runs)
    if not review:
        tool = attrs.evolve(tool, requires_approval=False)
    store = open_store(f"sqlite:///{tmp_path / 'threads.db'}")
    settings_ = CheckpointSettings(store=store, thread_id="t")

    def make_config(thread_id: str) -> AgentConfig:
        return AgentConfig(
            provider=ScriptedProvider(script),
            model="m-1",
            name="clerk",
            tools=[tool],
            checkpoint=settings_,
            reviewer_verifier=VERIFIER,
            tracer_provider=tracer_provider,
            clock=ticking_clock(),
        )

    agent = Agent(make_config("t"))
    outcome: Any
    try:
        if path == "run":
            outcome = agent.run("pay bob")
        elif path == "resume":
            agent.run("pay bob")
            agent.approve(str(agent.pending_reviews[0].review_id), reviewer=ALICE)
            outcome = agent.resume()
        elif path == "astream":

            async def consume() -> list[str]:
                return [type(item).__name__ async for item in agent.astream("pay bob")]

            outcome = asyncio.run(consume())
        else:
            app = create_agui_app(store, make_config, VERIFIER)
            body = {
                "threadId": "t",
                "runId": "r",
                "messages": [{"id": "u", "role": "user", "content": "pay bob"}],
            }
            with TestClient(app) as client:
                response = client.post("/", json=body)
            outcome = (response.status_code, re.findall(r'"type":"(\w+)"', response.text))
    except Exception as exc:
        outcome = repr(exc)
    events = comparable(store.history("t"))
    agent.close()
    store.close()
    return outcome, events, len(runs)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fault=FAULTS, path=st.sampled_from(["run", "resume", "astream", "agui"]), fails=st.booleans()
)
def test_a_run_whose_tracer_fails_goes_on_as_an_untraced_one(
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
    fault: Fault,
    path: str,
    fails: bool,
) -> None:
    """Property: whichever OpenTelemetry hook raises (the tracer provider's get_tracer,
    a sampler, a span processor's on_start or on_end, a span's set_attribute) on
    whichever span (the run's, a model call's, a tool call's), a run, a resume after a
    review, a stream and a run of the AG-UI endpoint return or raise and store what they
    do untraced, and the tool's effect is recorded; each failure is one warning naming
    its step, without the exception's text. A span processor raising in on_end after
    a tool ran failed the run and left the call in doubt (helper-175)."""
    untraced = _scripted_run(path, fails, None, tmp_path_factory.mktemp("untraced"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="covonaut_es"):
        traced = _scripted_run(
            path, fails, faulty_tracer_provider(fault), tmp_path_factory.mktemp("traced")
        )
    assert traced == untraced
    assert untraced[2] == 1  # the tool ran once, and its result is stored
    warnings = [r for r in caplog.records if r.name == "covonaut_es.tracing"]
    assert len(warnings) == fault.fired
    for record in caplog.records:
        assert TRACER_SECRET not in record.getMessage()
    for record in warnings:
        assert record.levelno == logging.WARNING
        assert "tracing of its run stopped" in record.getMessage()
        assert "TracerFault" in record.getMessage()


@pytest.mark.parametrize("hook", ["on_start", "on_end"])
def test_a_run_that_dies_is_not_told_as_its_tracers_failure(hook: str) -> None:
    """A crash the driver lets through (no ``Exception``) is the run's outcome when the
    tracer fails as the tool's span starts or as the run's span ends with the crash:
    the tracer's exception replaced it (helper-175)."""

    def die(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise ProcessDied

    tool = Tool("die", "Dies", {"type": "object"}, die)
    fault = Fault(hook, "execute_tool" if hook == "on_start" else "invoke_agent", 0)
    agent = Agent(config(faulty_tracer_provider(fault), [call(("c1", "die", "{}"))], tools=[tool]))
    with pytest.raises(ProcessDied):
        agent.run("go")
    assert fault.fired == 1
