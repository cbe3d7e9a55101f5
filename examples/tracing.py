"""Traces of a run that pauses for a review and resumes later, printed as span trees.

The agent looks an order up, then asks to refund it; ``refund`` requires approval, so
the first run pauses. A reviewer approves, and the run that resumes (in a real
deployment, days later and in another process) starts a new trace with a link to the
paused one. The spans go to the OpenTelemetry SDK's in-memory exporter, handed to the
agent with ``AgentConfig(tracer_provider=...)``; an application would export them to
its collector instead (OTLP, for example).

No model credentials are needed: a scripted provider answers.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.messages import Usage

ORDER = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
SHOWN = ("gen_ai.tool.call.id", "gen_ai.usage.output_tokens", "covonaut.thread.status")


def lookup(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """The order's state, from the shop's database."""
    return {"order": args["order"], "state": "damaged in transit"}


def refund(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Refund the order; runs only on an approval of exactly these arguments."""
    return {"refunded": args["order"], "reference": ctx.idempotency_key[:8]}


def model() -> ScriptedProvider:
    """Look the order up, ask for its refund, then say it is done."""
    said = Usage(input_tokens=120, output_tokens=18)
    return ScriptedProvider(
        [
            ProviderResponse(
                tool_calls=(ToolCall("call-1", "lookup", '{"order": "A-17"}'),), usage=said
            ),
            ProviderResponse(
                tool_calls=(ToolCall("call-2", "refund", '{"order": "A-17"}'),), usage=said
            ),
            ProviderResponse(
                tool_calls=(ToolCall("call-3", "refund", '{"order": "A-17"}'),), usage=said
            ),
            ProviderResponse(content="Order A-17 is refunded.", usage=said),
        ]
    )


def print_tree(title: str, spans: Sequence[ReadableSpan], paused: ReadableSpan | None) -> None:
    """Each span under its parent, with a few attributes, its events and its links."""
    print(title)
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(span: ReadableSpan, depth: int) -> None:
        attributes = span.attributes or {}
        shown = ", ".join(key + "=" + str(attributes[key]) for key in SHOWN if key in attributes)
        print(f"{'  ' * depth}- {span.name}" + (f" ({shown})" if shown else ""))
        for event in span.events:
            print(f"{'  ' * depth}    event {event.name}")
        paused_id = paused.context.span_id if paused and paused.context else None
        for link in span.links:
            to = "the paused run" if link.context.span_id == paused_id else "another span"
            print(f"{'  ' * depth}    link to {to}")
        for child in children.get(span.context.span_id if span.context else None, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 1)


def main() -> None:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    verifier = HmacReviewerVerifier(secrets.token_bytes(32))
    provider = model()
    with open_store("memory://") as store:

        def agent() -> Agent:
            return Agent(
                AgentConfig(
                    provider=provider,
                    model="support-model",
                    name="support",
                    tools=[
                        Tool("lookup", "Look an order up", ORDER, lookup),
                        Tool("refund", "Refund an order", ORDER, refund, requires_approval=True),
                    ],
                    checkpoint=CheckpointSettings(store=store, thread_id="customer-42"),
                    reviewer_verifier=verifier,
                    tracer_provider=tracing,
                )
            )

        first = agent()
        first.run("My order A-17 arrived broken; refund it please.")
        (paused,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke")]
        print_tree("Trace of the run that paused:", exporter.get_finished_spans(), None)
        review = first.pending_reviews[0]
        first.approve(review.review_id, reviewer=verifier.issue_token("ops", ttl_seconds=60))
        exporter.clear()

        answer = agent().resume()  # a later process would build its agent the same way
        print_tree("Trace of the run that resumed:", exporter.get_finished_spans(), paused)
        print(answer)
    tracing.shutdown()


if __name__ == "__main__":
    main()
