"""Configuration of an agent and of its checkpoints."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Literal

import attrs

from covonaut_es._clock import AwareClock, utc_now
from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.errors import ConfigurationError, ToolServerError
from covonaut_es.messages import Delta
from covonaut_es.migrations import Upcaster
from covonaut_es.migrations._registry import state_document_schema, thread_snapshot_schema
from covonaut_es.migrations._upcasting import NO_MIGRATORS, frozen_steps
from covonaut_es.providers import AsyncProvider, Provider
from covonaut_es.runtime._compaction import Compactor
from covonaut_es.runtime._output import OUTPUT_NAME, OutputShape
from covonaut_es.service import ReviewerVerifier
from covonaut_es.store import StateStore, Store
from covonaut_es.tools import Tool, ToolSource, check_timeout

Durability = Literal["step", "checkpoint"]


def _at_least(least: int) -> Callable[[object, attrs.Attribute[int], object], None]:
    """An attrs validator: the setting is a whole number (no bool, no float) of at least
    ``least``; a float or a string would fail only once a run started."""

    def check(_: object, attribute: attrs.Attribute[int], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            msg = (
                f"AgentConfig.{attribute.name} must be a whole number of at least {least}, "
                f"got {value!r}"
            )
            raise ConfigurationError(msg)

    return check


def _tools(tools: Iterable[Tool]) -> tuple[Tool, ...]:
    # A typed converter: with the bare ``tuple`` type checkers accept no list of tools.
    return tuple(tools)


def _tool_sources(sources: Iterable[ToolSource]) -> tuple[ToolSource, ...]:
    return tuple(sources)


def _unique_tools(
    _: object, __: attrs.Attribute[tuple[Tool, ...]], tools: tuple[Tool, ...]
) -> None:
    names = [tool.name for tool in tools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        msg = f"tool names must be unique, these repeat: {duplicates}"
        raise ValueError(msg)


def _snapshot_steps(
    _: object, attribute: attrs.Attribute[Mapping[int, Upcaster]], steps: Mapping[int, Upcaster]
) -> None:
    thread_snapshot_schema().check_steps(steps, what=f"CheckpointSettings.{attribute.name}")


def _thread_id(_: object, __: attrs.Attribute[str], thread_id: str) -> None:
    # Empty means "default"; anything else must be an id some thread may be read by.
    if thread_id != "":
        thread_aggregate_id(thread_id)


def _state_store(_: object, __: attrs.Attribute[StateStore | None], store: object) -> None:
    if store is not None and not isinstance(store, StateStore):
        msg = (
            "AgentConfig.state_store must be a MemoryStateStore, a FileStateStore or a "
            f"Store (anything with write_state and read_state), got {store!r}"
        )
        raise ConfigurationError(msg)


def _tracer_provider(_: object, __: attrs.Attribute[object], provider: object) -> None:
    if provider is not None and not callable(getattr(provider, "get_tracer", None)):
        msg = (
            "AgentConfig.tracer_provider must be an OpenTelemetry TracerProvider (anything "
            f"with get_tracer), or None for the global one; got {type(provider).__name__}"
        )
        raise ConfigurationError(msg)


def _state_document_steps(
    _: object, attribute: attrs.Attribute[Mapping[int, Upcaster]], steps: Mapping[int, Upcaster]
) -> None:
    state_document_schema().check_steps(steps, what=f"AgentConfig.{attribute.name}")


@attrs.frozen(kw_only=True)
class CheckpointSettings:
    """Where and when an agent saves its thread.

    Attributes:
        store: The thread store (see :func:`~covonaut_es.open_store`).
        thread_id: The conversation's id. Empty means ``"default"``, with a warning:
            unrelated sessions must never share a thread id.
        save_on_turn_start: Also checkpoint at the start of each turn, after steering
            and compaction, before the model is called.
        skip_save_on_turn_end: Do not checkpoint at the end of each turn.
        durability: ``"step"`` (default) commits events at every step boundary, so the
            intent to call a tool is stored before the tool runs; ``"checkpoint"``
            commits when a checkpoint is saved and, in every mode, a turn's calls
            before any of them runs (a tool's idempotency key is always stored).
        migrators: Upcasters for the thread's snapshots, keyed by the schema version
            they upgrade from; each replaces the library's own for that step. A
            snapshot that cannot be upgraded is passed over and the thread rebuilt from
            its events.
    """

    store: Store
    thread_id: str = attrs.field(default="", validator=_thread_id)
    save_on_turn_start: bool = False
    skip_save_on_turn_end: bool = False
    durability: Durability = attrs.field(
        default="step", validator=attrs.validators.in_(("step", "checkpoint"))
    )
    migrators: Mapping[int, Upcaster] = attrs.field(
        default=NO_MIGRATORS, converter=frozen_steps, validator=_snapshot_steps
    )


@attrs.frozen(kw_only=True)
class AgentConfig:
    """Everything an :class:`~covonaut_es.Agent` needs.

    Attributes:
        provider: The model provider, blocking or ``async def`` (either works with
            both ``run`` and ``arun``).
        model: The model name passed to the provider.
        name: A name for logs.
        tools: The tools the model may call; names must be unique.
        system_prompt: Recorded once per thread, as its first message.
        max_turns: Model calls allowed per ``run``/``continue_run``/``resume`` call; the
            last one asks the model to answer without tools.
        checkpoint: Persistence; without it the thread lives only in this object.
        parallel_tools: Run the calls of one model response concurrently.
        compactor: Decides when to compact the context (see ``SummarizingCompactor``).
        max_tokens: Passed to the provider.
        temperature: Passed to the provider.
        clock: Source of event timestamps; each reading must be a timezone-aware
            datetime (else ``ConfigurationError``, naming the clock, before it is used).
        on_event: Called with each of the thread's events, in order, once the step that
            recorded it is committed (with ``durability="checkpoint"``: once the step
            ends), on the thread that drives the run (the event loop's, for ``arun``).
            For live views and streaming UIs; an exception it raises is logged and
            does not stop the run.
        on_delta: Called with each piece of a turn's answer (a
            :class:`~covonaut_es.TextDelta` or :class:`~covonaut_es.ToolCallDelta`) as the
            provider streams it in; when set, runs ask the provider with ``stream()``.
            Pieces are news, not state: the committed events (``on_event``) say what
            was recorded. Called on the thread that drives the run; an exception it
            raises is logged and does not stop the run. ``Agent.astream`` yields the
            same pieces.
        reviewer_verifier: Verifies reviewers' credentials for ``Agent.approve`` and
            ``Agent.reject`` (see ``HmacReviewerVerifier``).
        state_store: Where ``save_state`` and ``load_state`` keep named states: a
            :class:`~covonaut_es.MemoryStateStore`, a :class:`~covonaut_es.FileStateStore`
            or a thread :class:`~covonaut_es.Store`.
        state_migrators: Upcasters for state documents, keyed by the schema version
            they upgrade from; each replaces the library's own for that step.
        mcp_servers: Servers whose tools are offered beside ``tools`` (see
            :class:`covonaut_es.mcp.MCPServer`; anything with ``name`` and ``tools()``
            will do). A server is reached when its tools are first needed; the names
            of all tools must be unique.
        tool_timeout: Seconds a tool call may run unless its ``Tool(timeout=...)`` says
            otherwise; None (the default) lets calls run as long as they take. A call
            past its timeout is recorded in doubt and the run pauses on it.
        tracer_provider: The OpenTelemetry ``TracerProvider`` that traces runs; None
            (the default) uses the global one. A run is traced only when there is a
            provider (not the API's default no-op one) and the ``otel`` extra is
            installed; see the tracing page of the documentation.
        trace_content: Record message contents, tool arguments and tool results in the
            spans (bounded in size). Off by default: they may hold personal data, and a
            trace back end is rarely guarded like the thread store.
        output_type: Makes the final answer typed: a ``msgspec.Struct`` class, an attrs
            class or a JSON Schema (a dict) of a JSON object. The model is asked for an
            answer of that shape (the adapters use their API's structured-output mode);
            the answer is validated, its value recorded with the run's end, and
            :attr:`Agent.output <covonaut_es.Agent.output>` gives it back in the type.
            No tool may then be named ``final_answer``.
        output_retries: How many refused answers a run sends back to the model, with
            the reason, before it fails with ``OutputValidationError`` (each try is a
            model call within ``max_turns``).
        output_shape: ``output_type`` compiled: the schema the model is told and the
            validator of its answers; None for an untyped answer.
    """

    provider: Provider | AsyncProvider
    model: str = ""
    name: str = "agent"
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools, validator=_unique_tools)
    system_prompt: str = ""
    max_turns: int = attrs.field(default=10, validator=_at_least(1))
    checkpoint: CheckpointSettings | None = None
    parallel_tools: bool = False
    compactor: Compactor | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    clock: Callable[[], datetime] = attrs.field(default=utc_now, converter=AwareClock)
    on_event: Callable[[AgentThread.Event], None] | None = None
    on_delta: Callable[[Delta], None] | None = None
    reviewer_verifier: ReviewerVerifier | None = None
    state_store: StateStore | None = attrs.field(default=None, validator=_state_store)
    state_migrators: Mapping[int, Upcaster] = attrs.field(
        default=NO_MIGRATORS, converter=frozen_steps, validator=_state_document_steps
    )
    tool_timeout: float | None = attrs.field(default=None, validator=check_timeout)
    tracer_provider: object | None = attrs.field(default=None, validator=_tracer_provider)
    trace_content: bool = False
    mcp_servers: tuple[ToolSource, ...] = attrs.field(default=(), converter=_tool_sources)
    output_type: object | None = None
    output_retries: int = attrs.field(default=2, validator=_at_least(0))
    output_shape: OutputShape | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        """Compile ``output_type`` once, so a bad one fails here.

        Raises:
            ConfigurationError: ``output_type`` is not a valid output type, or a tool
                has the name the typed answer takes.
        """
        shape = None if self.output_type is None else OutputShape.of(self.output_type)
        if shape is not None and any(tool.name == OUTPUT_NAME for tool in self.tools):
            msg = (
                f"a typed answer is given as {OUTPUT_NAME!r}, and a tool has that name; "
                "rename the tool"
            )
            raise ConfigurationError(msg)
        object.__setattr__(self, "output_shape", shape)

    def offered_tools(self) -> tuple[Tool, ...]:
        """``tools``, then each of ``mcp_servers``' tools.

        Raises:
            ToolServerError: A server cannot be reached, or one of its tools has the
                name of another tool.
        """
        if not self.mcp_servers:
            return self.tools
        offered = list(self.tools)
        for server in self.mcp_servers:
            offered.extend(server.tools())
        counts = Counter(tool.name for tool in offered)
        if self.output_shape is not None:
            counts[OUTPUT_NAME] += 1  # the typed answer's name is taken
        duplicates = sorted(name for name, n in counts.items() if n > 1)
        if duplicates:
            msg = (
                f"the MCP servers {[s.name for s in self.mcp_servers]} offer tools whose names "
                f"another tool has: {duplicates}; give a server a tool_prefix"
            )
            raise ToolServerError(msg)
        return tuple(offered)

    def tool(self, name: str) -> Tool | None:
        """The tool with that name, if configured (a server's tools included)."""
        return next((tool for tool in self.offered_tools() if tool.name == name), None)

    def timeout_of(self, tool: Tool) -> float | None:
        """How long a call of ``tool`` may run: its own timeout, else the default."""
        return tool.timeout if tool.timeout is not None else self.tool_timeout


def bound_config(
    make_config: Callable[[str], AgentConfig],
    store: Store,
    thread_id: str,
    *,
    server: str = "the worker",
) -> AgentConfig:
    """The application's configuration for the thread; one without checkpoint settings
    is bound to ``store`` and that thread. For the servers that run threads by id (the
    workers, the AG-UI endpoint), named ``server`` in the errors.

    Raises:
        ConfigurationError: The factory returned no AgentConfig, or one bound to
            another thread.
    """
    config = make_config(thread_id)
    if not isinstance(config, AgentConfig):
        msg = (
            f"{server}'s config factory returned {type(config).__name__} for thread "
            f"{thread_id!r}, expected an AgentConfig"
        )
        raise ConfigurationError(msg)
    settings = config.checkpoint
    if settings is None:
        return attrs.evolve(config, checkpoint=CheckpointSettings(store=store, thread_id=thread_id))
    if settings.thread_id != thread_id:
        msg = (
            f"{server}'s config factory bound thread {thread_id!r} to thread "
            f"{settings.thread_id!r}; leave checkpoint unset, or set thread_id={thread_id!r}"
        )
        raise ConfigurationError(msg)
    return config
