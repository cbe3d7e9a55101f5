"""Traces of runs in OpenTelemetry, following its semantic conventions for generative AI.

Internal; the one module that imports OpenTelemetry (the ``otel`` extra). A run is traced
when OpenTelemetry has a tracer provider: ``AgentConfig.tracer_provider``, else the global
one. Without the package, or with only the API's default no-op provider, :func:`start_run`
returns None and the run is driven as it is, untouched.

A traced run is an ``invoke_agent`` span; each model call a ``chat`` span and each tool
call an ``execute_tool`` span under it. They are observed, not called: :meth:`RunTrace.traced`
wraps the run loop's program and sees the effects it yields and their results, so the
loop and the drivers know nothing of tracing; the span of a model call or a lone tool
call is the current span while the driver performs it. The thread's events that matter to an
operator (reviews, pauses, calls in doubt, settlements) become span events when they are
committed. Message contents, tool arguments and results are attributes only when
``AgentConfig.trace_content`` is set, bounded by :data:`MAX_CONTENT_CHARS`.

A pause records the run's W3C ``traceparent`` (``Interrupt.trace_parent``); the run that
resumes it, days later maybe, starts a new trace with a link to each paused run's span.

Tracing never changes a run (ADR 0131): every call to OpenTelemetry goes through the run's
:class:`_Guard`, so that an exception from the tracer provider, a sampler, a span
processor or an exporter hook is logged once, as a warning naming the step, and tracing
stops for the rest of the run, which goes on as it would untraced.
"""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import msgspec

from covonaut_es import _logs
from covonaut_es._text import encodable, exception_text
from covonaut_es.domain import AgentThread, Interrupt, PauseKind, RunMode
from covonaut_es.messages import Message, ProviderRequest, ProviderResponse, Role
from covonaut_es.runtime._config import AgentConfig
from covonaut_es.runtime._loop import (
    Commit,
    Complete,
    Effect,
    NextToolReport,
    PreparedCall,
    Program,
    RunTool,
    StartTools,
    ToolReport,
)

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: nothing is ever traced
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Tracer
    from opentelemetry.util.types import AttributeValue

logger = _logs.logger("covonaut_es.tracing")

P = ParamSpec("P")
T = TypeVar("T")

SEMCONV_VERSION = "1.37.0"
"""The version of the OpenTelemetry semantic conventions the spans follow."""

SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

MAX_CONTENT_CHARS = 16_384
"""Content attributes (opted in with ``trace_content``) keep this many characters."""

_MAX_TRACE_PARENT_CHARS = 256  # a stored traceparent longer than this is no link

# Names of the GenAI conventions' attributes; our own are under "covonaut.".
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
OUTPUT_TYPE = "gen_ai.output.type"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"

# The guard's steps (_Guard) that start and end the spans of an effect.
_STARTING_CHAT, _ENDING_CHAT = "starting a model call's span", "ending a model call's span"
_STARTING_TOOL, _ENDING_TOOL = "starting a tool call's span", "ending a tool call's span"

_PROVIDERS = {
    "covonaut_es.providers.openai": "openai",
    "covonaut_es.providers.anthropic": "anthropic",
}


def start_run(config: AgentConfig, thread: AgentThread, mode: RunMode) -> RunTrace | None:
    """The trace of a run that starts now on ``thread``, or None when nothing traces
    (nor when its tracer, or its span, failed to start: the run goes on untraced)."""
    if trace is None:
        return None
    guard = _Guard(thread.thread_id)
    tracer = guard.call("getting the tracer", _tracer, config.tracer_provider)
    if tracer is None:
        return None
    return guard.call("starting the run's span", RunTrace, tracer, config, thread, mode, guard)


def _tracer(provider: Any) -> Tracer | None:
    if provider is None:
        provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # the API's default: no SDK configured, so nothing would be recorded
    tracer: Tracer = provider.get_tracer("covonaut_es", schema_url=SCHEMA_URL)
    return tracer


def provider_name(provider: object) -> str:
    """``gen_ai.provider.name`` for a model provider: the vendor of a bundled adapter, a
    string ``provider_name`` attribute the provider declares, else ``_OTHER``."""
    named = getattr(provider, "provider_name", None)
    if isinstance(named, str) and named:
        return named
    return _PROVIDERS.get(type(provider).__module__, "_OTHER")


class _Guard:
    """The one way a run's tracing calls OpenTelemetry. The first exception a call raises
    (of the tracer provider, a sampler, a span processor, an exporter's hook) is logged
    as a warning naming the step, by the exception's type alone (its text may quote
    what a span holds); from then on the run's tracing calls nothing (ADR 0131)."""

    def __init__(self, thread_id: str) -> None:
        self._thread_id = thread_id
        self.stopped = False

    def call(
        self, step: str, action: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T | None:
        """``action(*args, **kwargs)``, or None once tracing has stopped or when it raises
        an ``Exception`` (which stops it)."""
        if self.stopped:
            return None
        try:
            return action(*args, **kwargs)
        except Exception as exc:
            self._stop(step, exc)
            return None

    def detach(self, token: Token[Context]) -> None:
        """Restore the context ``token`` was given for, even once tracing has stopped: a
        span left current would be the parent of what the driving thread does next."""
        try:
            otel_context.detach(token)
        except Exception as exc:
            self._stop("restoring the context", exc)

    def _stop(self, step: str, error: Exception) -> None:
        if not self.stopped:
            self.stopped = True
            logger.warning(
                "thread %r: tracing of its run stopped %s (OpenTelemetry raised %s); "
                "the run goes on untraced",
                self._thread_id,
                step,
                type(error).__qualname__,
            )


class RunTrace:
    """The spans of one run: its ``invoke_agent`` span, started on construction and
    ended when the program it traces ends.

    Attributes:
        trace_parent: The run span's W3C ``traceparent``, recorded with every pause.
    """

    def __init__(
        self,
        tracer: Tracer,
        config: AgentConfig,
        thread: AgentThread,
        mode: RunMode,
        guard: _Guard,
    ) -> None:
        self._tracer = tracer
        self._guard = guard
        self._thread = thread
        self._content = config.trace_content
        settings = config.checkpoint
        self._common: dict[str, AttributeValue] = {
            PROVIDER: provider_name(config.provider),
            CONVERSATION: thread.thread_id,
        }
        attributes = {
            OPERATION: "invoke_agent",
            AGENT_NAME: config.name,
            **self._common,
            "covonaut.run.mode": str(mode),
            "covonaut.durability": settings.durability if settings else "memory",
        }
        if config.model:
            attributes[REQUEST_MODEL] = config.model
        self._span = tracer.start_span(
            f"invoke_agent {config.name}",
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            links=_links(thread.interrupts),
        )
        self._context: Context = trace.set_span_in_context(self._span)
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, self._context)
        self.trace_parent = carrier.get("traceparent", "")
        self._seen = thread.version - len(thread.pending_events)
        self._chat: Span | None = None
        self._chat_settings: tuple[object, ...] = ()
        self._chat_name = ""
        self._chat_attributes: dict[str, AttributeValue] = {}
        self._tools: dict[str, Span] = {}
        self._tool_attributes: dict[str, AttributeValue] = {
            OPERATION: "execute_tool",
            TOOL_TYPE: "function",
            **self._common,
        }
        self._input_tokens = self._output_tokens = 0
        self._ended = False
        for name, event_attributes in _resolved_pauses(thread):
            self._span.add_event(name, event_attributes)

    @contextlib.contextmanager
    def driving(self) -> Iterator[None]:
        """While the run is driven: make its span the current span, so that spans a
        provider's client or a tool makes on the driving thread belong to its trace; and
        end the trace with any exception the driver lets through (one that is no
        ``Exception``, never thrown into the program)."""
        # As trace.use_span does; failures are recorded by _end(), which knows whether
        # content may be.
        token = self._guard.call(
            "making the run's span current", otel_context.attach, self._context
        )
        try:
            yield
        except BaseException as exc:
            self._end(exc)
            raise
        finally:
            if token is not None:
                self._guard.detach(token)

    def traced(self, program: Program) -> Program:
        """``program``, observed: it yields the same effects and gets the same results,
        and every span is ended when it ends, however it ends.

        A run its sampler left out is not observed: the SDK's samplers leave its calls
        out too (they follow the parent's decision or the trace id's), and starting
        their spans would cost every turn for nothing recorded (ADR 0039)."""
        if not self._guard.call("asking whether the run is sampled", self._span.is_recording):
            self._ended = True
            return (yield from program)
        guard = self._guard
        reply: Any = None
        error: Exception | None = None
        try:
            while True:
                try:
                    effect = program.send(reply) if error is None else program.throw(error)
                except StopIteration as stop:
                    self._end(None)
                    output: str = stop.value
                    return output
                # Commits are most effects of a turn and start no span: dispatched here,
                # without the calls the other effects go through.
                commit = type(effect) is Commit
                if commit:
                    guard.call("noting the thread's events", self._note_events)
                    current = None
                else:
                    chat = type(effect) is Complete
                    current = guard.call(
                        _STARTING_CHAT if chat else _STARTING_TOOL, self._before, effect
                    )
                # The span of a model call or of a lone tool call is the current one while
                # the driver performs it, so that the spans its client or the tool makes
                # on the driving thread (or a task or worker thread it starts) are its
                # children. Not detached on a BaseException: driving() resets the context.
                token = (
                    None
                    if current is None
                    else guard.call("making a call's span current", otel_context.attach, current)
                )
                try:
                    reply, error = (yield effect), None
                except Exception as exc:  # the effect failed: the program decides what then
                    reply, error = None, exc
                if token is not None:
                    guard.detach(token)
                if not commit:
                    step = _ENDING_CHAT if chat else _ENDING_TOOL
                    guard.call(step, self._after, effect, reply, error)
        except BaseException as exc:
            self._end(exc)
            raise
        finally:
            program.close()

    # Effects -------------------------------------------------------------------------

    def _before(self, effect: Effect) -> Context | None:
        """Start the effect's spans; the context to make current while it is performed."""
        # Compared by type, most frequent first: this runs for every effect of every turn.
        if type(effect) is Complete:
            self._chat = self._start_chat(effect.request)
            return trace.set_span_in_context(self._chat, self._context)
        elif type(effect) is RunTool:
            return trace.set_span_in_context(self._start_tool(effect.prepared), self._context)
        elif type(effect) is StartTools:
            for prepared in effect.calls:
                self._start_tool(prepared)
        return None

    def _after(self, effect: Effect, reply: Any, error: Exception | None) -> None:
        if type(effect) is Complete:
            self._end_chat(reply, error)
        elif type(effect) is RunTool:
            self._end_tool(effect.prepared.call.id, reply, error)
        elif type(effect) is NextToolReport and error is None:
            assert isinstance(reply, ToolReport)
            self._end_tool(reply.tool_call_id, reply, None)
        elif type(effect) is StartTools and error is not None:  # none of them started
            for prepared in effect.calls:
                self._end_tool(prepared.call.id, None, error)

    def _start_chat(self, request: ProviderRequest) -> Span:
        settings = (request.model, request.max_tokens, request.temperature, request.output)
        if settings != self._chat_settings:  # most runs ask every turn alike
            self._chat_settings = settings
            self._chat_name, self._chat_attributes = self._chat_start(request)
        attributes = self._chat_attributes
        if self._content:
            attributes = {**attributes, INPUT_MESSAGES: _bounded(_messages_json(request.messages))}
        return self._tracer.start_span(
            self._chat_name, self._context, kind=trace.SpanKind.CLIENT, attributes=attributes
        )

    def _chat_start(self, request: ProviderRequest) -> tuple[str, dict[str, AttributeValue]]:
        """The name and first attributes of the chat span of ``request``, without content."""
        attributes: dict[str, AttributeValue] = {OPERATION: "chat", **self._common}
        if request.model:
            attributes[REQUEST_MODEL] = request.model
        if request.max_tokens is not None:
            attributes[REQUEST_MAX_TOKENS] = request.max_tokens
        if request.temperature is not None:
            attributes[REQUEST_TEMPERATURE] = request.temperature
        if request.output is not None:  # a typed answer is asked for as JSON
            attributes[OUTPUT_TYPE] = "json"
        return (f"chat {request.model}" if request.model else "chat"), attributes

    def _end_chat(self, response: Any, error: Exception | None) -> None:
        span, self._chat = self._chat, None
        if span is None:  # pragma: no cover - every Complete starts one
            return
        if error is not None or not isinstance(response, ProviderResponse):
            _fail(span, error or TypeError(type(response).__name__), content=self._content)
            span.end()
            return
        attributes: dict[str, AttributeValue] = {}
        # The response is checked after this, by the run: an attribute's text is UTF-8
        # to exporters, whatever the model said.
        if response.model:
            attributes[RESPONSE_MODEL] = encodable(response.model)
        if response.finish_reason:
            attributes[FINISH_REASONS] = (encodable(response.finish_reason),)
        if response.usage is not None:
            attributes[INPUT_TOKENS] = response.usage.input_tokens
            attributes[OUTPUT_TOKENS] = response.usage.output_tokens
            self._input_tokens += response.usage.input_tokens
            self._output_tokens += response.usage.output_tokens
        if self._content:
            answer = Message(Role.ASSISTANT, response.content, tool_calls=response.tool_calls)
            attributes[OUTPUT_MESSAGES] = _bounded(_messages_json([answer]))
        if attributes:
            span.set_attributes(attributes)  # at once: the SDK locks the span for each call
        span.end()

    def _start_tool(self, prepared: PreparedCall) -> Span:
        call, context = prepared.call, prepared.context
        attributes: dict[str, AttributeValue] = {
            **self._tool_attributes,
            TOOL_NAME: call.name,
            TOOL_CALL_ID: call.id,
            "covonaut.tool.idempotency_key": context.idempotency_key,
        }
        if context.approval is not None:
            attributes["covonaut.review.id"] = context.approval.review_id
        if self._content:
            attributes[TOOL_ARGUMENTS] = _bounded(call.arguments)
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            self._context,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._tools[call.id] = span
        return span

    def _end_tool(self, call_id: str, report: Any, error: BaseException | None) -> None:
        span = self._tools.pop(call_id, None)
        if span is None:
            return
        if error is not None or not isinstance(report, ToolReport):
            _fail(span, error or TypeError(type(report).__name__), content=self._content)
            span.end()
            return
        if report.expired_after is not None:
            span.set_attributes({ERROR_TYPE: "timeout", "covonaut.tool.outcome": "in_doubt"})
            span.set_status(trace.StatusCode.ERROR)
        elif report.error_type or self._content:
            attributes: dict[str, AttributeValue] = {"covonaut.tool.outcome": str(report.outcome)}
            if report.error_type:
                attributes[ERROR_TYPE] = report.error_type
                span.set_status(trace.StatusCode.ERROR)
            if self._content:
                attributes[TOOL_RESULT] = _bounded(report.content)
            span.set_attributes(attributes)
        else:  # most calls: one attribute, which the SDK sets for less alone than in a dict
            span.set_attribute("covonaut.tool.outcome", str(report.outcome))
        span.end()

    # Events and the end ---------------------------------------------------------------

    def _note_events(self) -> None:
        """The thread's new events that matter to an operator, as span events."""
        events = self._thread.pending_events
        if not events:
            return
        seen = self._seen
        self._seen = max(seen, events[-1].originator_version)  # in the order of versions
        for event in events:
            # Most events are not noted: their type is looked up before their version.
            if type(event) in _NOTED and event.originator_version > seen:
                noted = _span_event(event)
                if noted is not None:
                    self._span.add_event(*noted)

    def _end(self, error: BaseException | None) -> None:
        if self._ended:  # by the driver's exception, then by closing the program
            return
        self._ended = True
        self._guard.call("ending the run's spans", self._close, error)

    def _close(self, error: BaseException | None) -> None:
        self._note_events()
        unfinished = error or _Unfinished("the run ended before this operation did")
        if self._chat is not None:
            _fail(self._chat, unfinished, content=self._content)
            self._chat.end()
        for span in self._tools.values():
            _fail(span, unfinished, content=self._content)
            span.end()
        thread, span = self._thread, self._span
        span.set_attributes(
            {
                "covonaut.thread.version": thread.version,
                "covonaut.thread.status": str(thread.status),
                INPUT_TOKENS: self._input_tokens,
                OUTPUT_TOKENS: self._output_tokens,
            }
        )
        if error is not None:  # a run that fails raises, once its failure is recorded
            _fail(span, error, content=self._content)
        span.end()


class _Unfinished(Exception):
    """An operation the run did not wait for (a parallel call it left running)."""


def _fail(span: Span, error: BaseException, *, content: bool) -> None:
    kind = type(error).__qualname__
    span.set_attribute(ERROR_TYPE, kind)
    if content:  # an exception's text may quote the model, the arguments or a result
        # As record_exception records it, each text as UTF-8 can carry it: an error may
        # quote a lone surrogate the model sent.
        text = encodable(exception_text(error))
        span.add_event(
            "exception",
            {
                "exception.type": kind,
                "exception.message": text,
                "exception.stacktrace": encodable("".join(traceback.format_exception(error))),
            },
        )
        span.set_status(trace.StatusCode.ERROR, f"{kind}: {text}")
    else:
        span.set_status(trace.StatusCode.ERROR)


def _bounded(text: str) -> str:
    return text[:MAX_CONTENT_CHARS]


def _messages_json(messages: Iterable[Message]) -> str:
    """Messages in the conventions' shape: a role and a list of parts."""
    converted = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if message.content:
            kind = "tool_call_response" if message.tool_call_id else "text"
            if kind == "text":
                parts.append({"type": "text", "content": message.content})
            else:
                parts.append(
                    {"type": kind, "id": message.tool_call_id, "response": message.content}
                )
        for call in message.tool_calls:
            parts.append(
                {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
            )
        converted.append({"role": str(message.role), "parts": parts})
    try:
        return msgspec.json.encode(converted).decode()
    except UnicodeEncodeError:  # a lone surrogate from the model, which the run refuses
        return json.dumps(converted)  # escaped: an attribute's text is UTF-8 to exporters


def _links(interrupts: Sequence[Interrupt]) -> list[Link]:
    """A link to the span of each traced run that recorded one of ``interrupts``."""
    links: dict[tuple[int, int], Link] = {}
    propagator = TraceContextTextMapPropagator()
    for interrupt in interrupts:
        value = interrupt.trace_parent
        if not value or len(value) > _MAX_TRACE_PARENT_CHARS:
            continue
        context = trace.get_current_span(propagator.extract({"traceparent": value}))
        span_context = context.get_span_context()
        key = (span_context.trace_id, span_context.span_id)
        if span_context.is_valid and key not in links:
            links[key] = trace.Link(span_context, {"covonaut.link": "paused run"})
    return list(links.values())


def _resolved_pauses(thread: AgentThread) -> Iterator[tuple[str, Mapping[str, AttributeValue]]]:
    """The pauses a person dealt with since the run paused, as span events of the run
    that resumes it: reviews decided, calls in doubt settled, tools' pauses answered."""
    for pause in thread.pauses:
        if not pause.resolved:
            continue
        interrupt = pause.interrupt
        attributes: dict[str, AttributeValue] = {
            TOOL_CALL_ID: interrupt.tool_call_id,
            TOOL_NAME: interrupt.tool_name,
        }
        if pause.kind is PauseKind.REVIEW:
            review_id = interrupt.data.get("review_id") if isinstance(interrupt.data, dict) else ""
            review = thread.reviews.get(str(review_id))
            attributes["covonaut.review.id"] = str(review_id)
            if review is not None and review.decision is not None:
                attributes["covonaut.review.decision"] = str(review.decision.decision)
            yield "covonaut.review.decided", attributes
        elif pause.kind is PauseKind.IN_DOUBT:
            attributes["covonaut.call.retry"] = interrupt.tool_call_id in thread.retries_requested
            yield "covonaut.call.settled", attributes
        else:
            yield "covonaut.pause.answered", attributes


_NOTED = frozenset(
    {
        AgentThread.ReviewRequested,
        AgentThread.ReviewDecided,
        AgentThread.ReviewApprovedWithEdits,
        AgentThread.ReviewResponded,
        AgentThread.ReviewExpired,
        AgentThread.Interrupted,
        AgentThread.ToolCallSettled,
        AgentThread.ToolCallRetried,
        AgentThread.ApprovalUsed,
    }
)


def _span_event(event: Any) -> tuple[str, Mapping[str, AttributeValue]] | None:
    match event:
        case AgentThread.ReviewRequested(request=request):
            return "covonaut.review.requested", {
                "covonaut.review.id": request.review_id,
                TOOL_NAME: request.tool_name,
                TOOL_CALL_ID: request.tool_call_id,
            }
        case AgentThread.ReviewDecided(review_id=review_id, decision=decision):
            return "covonaut.review.decided", {
                "covonaut.review.id": review_id,
                "covonaut.review.decision": str(decision),
            }
        case AgentThread.Interrupted(interrupt=interrupt):
            attributes: dict[str, AttributeValue] = {
                "covonaut.pause.kind": str(interrupt.kind),
                TOOL_NAME: interrupt.tool_name,
                TOOL_CALL_ID: interrupt.tool_call_id,
            }
            if interrupt.kind is PauseKind.IN_DOUBT:
                data = interrupt.data if isinstance(interrupt.data, dict) else {}
                attributes["covonaut.tool.idempotency_key"] = str(data.get("idempotency_key"))
                return "covonaut.call.in_doubt", attributes
            return "covonaut.run.paused", attributes
        case AgentThread.ToolCallSettled(tool_call_id=call_id, tool_name=name, outcome=outcome):
            return "covonaut.call.settled", {
                TOOL_CALL_ID: call_id,
                TOOL_NAME: name,
                "covonaut.tool.outcome": str(outcome),
            }
        case AgentThread.ToolCallRetried(tool_call_id=call_id):
            return "covonaut.call.retried", {TOOL_CALL_ID: call_id}
        case AgentThread.ApprovalUsed(review_id=review_id, tool_call_id=call_id):
            return "covonaut.approval.used", {
                "covonaut.review.id": review_id,
                TOOL_CALL_ID: call_id,
            }
    return None
