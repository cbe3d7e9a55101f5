"""Configuration of an agent and of its checkpoints."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Literal, cast, get_args

import attrs

from covonaut_es._arguments import (
    check_callable,
    check_instance,
    check_text,
    check_whole,
    instance_of,
    refuse,
    validated,
)
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


def _at_least(least: int) -> Any:
    """An attrs validator: the setting is a whole number (no bool, no float) of at least
    ``least``; a float or a string would fail only once a run started."""
    return validated(lambda name, value: check_whole(name, value, least=least))


def _items(what: str, items: object, kind: type, expected: str) -> tuple[Any, ...]:
    """The ``AgentConfig.{what}`` items as a tuple, refusing what is no iterable of
    ``kind`` (a tool that is no Tool failed with an AttributeError)."""
    name = f"AgentConfig.{what}"
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        refuse(name, f"an iterable of {expected}", items)
    found = tuple(items)
    for item in found:
        check_instance(f"an item of {name}", item, kind, expected)
    return found


def _tools(tools: Iterable[Tool]) -> tuple[Tool, ...]:
    # A typed converter: with the bare ``tuple`` type checkers accept no list of tools.
    return _items("tools", tools, Tool, "Tool")


def _tool_sources(sources: Iterable[ToolSource]) -> tuple[ToolSource, ...]:
    return _items("mcp_servers", sources, ToolSource, "tool sources (MCPServer)")


def _steps(what: str, steps: object) -> Mapping[int, Upcaster]:
    """Upcasters keyed by step as a read-only copy, refusing what is no mapping (None
    failed with "'NoneType' object is not iterable")."""
    check_instance(what, steps, Mapping, "a mapping of upcasters keyed by version")
    return frozen_steps(cast(Mapping[int, Upcaster], steps))


def _snapshot_migrators(steps: Mapping[int, Upcaster]) -> Mapping[int, Upcaster]:
    return _steps("CheckpointSettings.migrators", steps)


def _state_migrators(steps: Mapping[int, Upcaster]) -> Mapping[int, Upcaster]:
    return _steps("AgentConfig.state_migrators", steps)


def _has_method(method: str, expected: str, *, optional: bool = False) -> Any:
    """An attrs validator: the setting has a method ``method`` (a protocol's)."""

    def check(name: str, value: object) -> None:
        if not callable(getattr(value, method, None)):
            refuse(name, expected, value)

    return validated(check, optional=optional)


def _unique_tools(
    _: object, __: attrs.Attribute[tuple[Tool, ...]], tools: tuple[Tool, ...]
) -> None:
    names = [tool.name for tool in tools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        msg = f"AgentConfig.tools must have unique names, these repeat: {duplicates}"
        raise ConfigurationError(msg)


def _durability(name: str, value: object) -> None:
    if value not in get_args(Durability) or not isinstance(value, str):
        refuse(name, " or ".join(map(repr, get_args(Durability))), value)


def _snapshot_steps(
    _: object, attribute: attrs.Attribute[Mapping[int, Upcaster]], steps: Mapping[int, Upcaster]
) -> None:
    thread_snapshot_schema().check_steps(steps, what=f"CheckpointSettings.{attribute.name}")


def _thread_id(_: object, __: attrs.Attribute[str], thread_id: str) -> None:
    # Empty means "default"; anything else must be an id some thread may be read by.
    if thread_id != "":
        thread_aggregate_id(thread_id)


_TEXT = validated(check_text)
_A_BOOL = instance_of(bool, "True or False")
_A_CALLABLE = validated(check_callable, optional=True)


def _temperature(name: str, value: object) -> None:
    check_instance(name, value, (int, float), "a number of at least 0, or None")
    if not 0 <= value < math.inf:  # type: ignore[operator]  # a number, checked above
        refuse(name, "a number of at least 0, or None", value)


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
            before any of them runs (a tool's idempotency key is always stored), but
            for a plain turn whose calls are all read-only (``Tool.read_only``), which
            is committed with their results.
        migrators: Upcasters for the thread's snapshots, keyed by the schema version
            they upgrade from; each replaces the library's own for that step. A
            snapshot that cannot be upgraded is passed over and the thread rebuilt from
            its events.
    """

    store: Store = attrs.field(validator=instance_of(Store, "a Store (see open_store)"))
    thread_id: str = attrs.field(default="", validator=_thread_id)
    save_on_turn_start: bool = attrs.field(default=False, validator=_A_BOOL)
    skip_save_on_turn_end: bool = attrs.field(default=False, validator=_A_BOOL)
    durability: Durability = attrs.field(default="step", validator=validated(_durability))
    migrators: Mapping[int, Upcaster] = attrs.field(
        default=NO_MIGRATORS,
        converter=_snapshot_migrators,
        validator=_snapshot_steps,
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

    provider: Provider | AsyncProvider = attrs.field(
        validator=_has_method("complete", "a model provider (anything with complete)")
    )
    model: str = attrs.field(default="", validator=_TEXT)
    name: str = attrs.field(default="agent", validator=_TEXT)
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools, validator=_unique_tools)
    system_prompt: str = attrs.field(default="", validator=_TEXT)
    max_turns: int = attrs.field(default=10, validator=_at_least(1))
    checkpoint: CheckpointSettings | None = attrs.field(
        default=None, validator=instance_of(CheckpointSettings, "CheckpointSettings", optional=True)
    )
    parallel_tools: bool = attrs.field(default=False, validator=_A_BOOL)
    compactor: Compactor | None = attrs.field(
        default=None,
        validator=_has_method("plan", "a Compactor (anything with plan)", optional=True),
    )
    max_tokens: int | None = attrs.field(
        default=None, validator=validated(lambda n, v: check_whole(n, v, least=1), optional=True)
    )
    temperature: float | None = attrs.field(
        default=None, validator=validated(_temperature, optional=True)
    )
    clock: Callable[[], datetime] = attrs.field(default=utc_now, converter=AwareClock)
    on_event: Callable[[AgentThread.Event], None] | None = attrs.field(
        default=None, validator=_A_CALLABLE
    )
    on_delta: Callable[[Delta], None] | None = attrs.field(default=None, validator=_A_CALLABLE)
    reviewer_verifier: ReviewerVerifier | None = attrs.field(
        default=None,
        validator=_has_method("verify", "a ReviewerVerifier (anything with verify)", optional=True),
    )
    state_store: StateStore | None = attrs.field(
        default=None,
        validator=instance_of(
            StateStore,
            "a MemoryStateStore, a FileStateStore or a Store (anything with write_state and "
            "read_state)",
            optional=True,
        ),
    )
    state_migrators: Mapping[int, Upcaster] = attrs.field(
        default=NO_MIGRATORS,
        converter=_state_migrators,
        validator=_state_document_steps,
    )
    tool_timeout: float | None = attrs.field(default=None, validator=check_timeout)
    tracer_provider: object | None = attrs.field(
        default=None,
        validator=_has_method(
            "get_tracer",
            "an OpenTelemetry TracerProvider (anything with get_tracer), or None for the "
            "global one",
            optional=True,
        ),
    )
    trace_content: bool = attrs.field(default=False, validator=_A_BOOL)
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

    def listed(self) -> AgentConfig:
        """This configuration with its servers' tools fixed as they are listed now:
        what one turn offers the model and runs the model's calls with. A call then
        runs the very tool it was offered, which its server refuses to send once its
        tools changed, never one the server listed since.

        Raises:
            ToolServerError: As :meth:`offered_tools`.
        """
        if not self.mcp_servers:
            return self
        return attrs.evolve(self, tools=self.offered_tools(), mcp_servers=())

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
