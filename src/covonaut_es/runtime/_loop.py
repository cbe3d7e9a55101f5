"""The run loop as a program of effects, shared by every driver.

:func:`run_program` is a generator: it changes the thread (pure commands on the
aggregate) and *yields* an effect whenever I/O is needed: ask the model, run a tool,
commit to the store. A driver performs each effect and sends the result back (or
throws the exception it raised). The drivers in :mod:`covonaut_es.runtime._drivers` perform
them with blocking calls or with ``await``, and share every decision.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from typing import Any

import attrs
import msgspec

from covonaut_es._strict_json import FOR_A_TOOL, JsonRefused, strict_loads
from covonaut_es._text import exception_line, exception_text
from covonaut_es.domain import (
    AgentThread,
    CheckpointReason,
    Compaction,
    Interrupt,
    PendingToolCall,
    RunMode,
    ToolOutcome,
    ToolPin,
    TypedOutput,
    canonical_json,
)
from covonaut_es.domain._reviews import operation_digests, ran_text, refusal_text
from covonaut_es.errors import (
    CovonautError,
    InterruptError,
    MaxTurnsExceededError,
    OutputValidationError,
    ProviderError,
    ToolArgumentsLimitError,
    ToolInDoubtError,
    ToolResultError,
    ToolServerError,
)
from covonaut_es.messages import (
    Message,
    ProviderRequest,
    ProviderResponse,
    Role,
    ToolCall,
    token_count,
)
from covonaut_es.runtime._compaction import CompactionPlan, context_messages
from covonaut_es.runtime._config import AgentConfig
from covonaut_es.runtime._output import AnswerRefused
from covonaut_es.tools import ArgumentsError, Tool, ToolContext, parse_arguments, result_text

FINAL_TURN_INSTRUCTION = (
    "This is the last turn of this run: do not call any tool. "
    "Give your final answer now from what you already know."
)

# Effects ----------------------------------------------------------------------------


@attrs.frozen
class Complete:
    """Ask the provider; the driver sends back a ``ProviderResponse``. ``answer``: the
    turn's answer, which the driver streams when deltas are asked for (a compaction's
    summary is not)."""

    request: ProviderRequest
    answer: bool = False


@attrs.frozen
class Commit:
    """A step boundary. ``checkpoint`` marks a saved checkpoint, which is committed in
    every durability mode and may be followed by a snapshot. ``always`` commits in
    every durability mode too: the calls' records are stored before any tool runs, an
    approval is marked used in the store before its tool runs, and a reviewer's
    decision is never left in memory only."""

    checkpoint: bool = False
    always: bool = False
    movable: frozenset[str] = frozenset()
    """The calls of a read-only turn that ran unsaved (ADR 0150): put after another
    writer's events, they may take other versions, and so other keys, which a read-only
    call has no use for."""


@attrs.frozen
class PreparedCall:
    """A validated tool call, ready to execute within ``timeout`` seconds (None: no
    limit)."""

    tool: Tool
    call: ToolCall
    args: dict[str, Any]
    context: ToolContext
    timeout: float | None = None


@attrs.frozen
class RunTool:
    """Execute one call; the driver sends back a ``ToolReport``."""

    prepared: PreparedCall


@attrs.frozen
class StartTools:
    """Start several calls concurrently; the driver sends back None."""

    calls: tuple[PreparedCall, ...]


@attrs.frozen
class NextToolReport:
    """Wait for the next started call to end; the driver sends back its ``ToolReport``."""


@attrs.frozen
class ReviewTime:
    """The time a review asked for at ``now`` (the runner's clock) counts its deadline
    from; the driver sends back ``now``, or the database's time when the runner's clock
    is out of step with it (ADR 0119)."""

    now: datetime


Effect = Complete | Commit | RunTool | StartTools | NextToolReport | ReviewTime


@attrs.frozen
class ToolReport:
    """How one tool call ended; ``ran``: its tool ran (made by the class methods), not
    a result known without running it; ``expired_after``: it outran its timeout of
    that many seconds and may or may not have done its work; ``error_type``: the name of
    the exception the tool raised; ``in_doubt``: the tool said it cannot tell whether its
    operation happened, and why."""

    tool_call_id: str
    outcome: ToolOutcome
    content: str
    interrupt: Interrupt | None = None
    expired_after: float | None = None
    error_type: str = ""
    in_doubt: str = ""
    ran: bool = False

    @classmethod
    def expired(cls, prepared: PreparedCall) -> ToolReport:
        """The call ran past its timeout; nothing is known of its result."""
        assert prepared.timeout is not None
        call_id, timeout = prepared.call.id, prepared.timeout
        return cls(call_id, ToolOutcome.FAILED, "", expired_after=timeout, ran=True)

    @classmethod
    def returned(cls, prepared: PreparedCall, value: Any) -> ToolReport:
        """The tool returned ``value``."""
        try:
            content = result_text(value)
        except ToolResultError as exc:
            return cls.raised(prepared, exc)
        return cls(prepared.call.id, ToolOutcome.SUCCEEDED, content, ran=True)

    @classmethod
    def raised(cls, prepared: PreparedCall, error: BaseException) -> ToolReport:
        """The tool raised; an ``InterruptError`` pauses the run, anything else is an
        error result the model reads. A ``ToolServerError`` says the call was never
        sent (its server refused it or could not be reached): the tool did not run."""
        call = prepared.call
        if isinstance(error, ToolInDoubtError):
            reason = exception_text(error) or "no reason given"
            return cls(call.id, ToolOutcome.FAILED, "", in_doubt=reason, ran=True)
        if isinstance(error, InterruptError):
            try:
                # Round-trip the data so the live state equals the state replayed later;
                # wrapped in a list so a string is encoded too and checked like a result.
                (data,) = strict_loads(result_text([error.data]), FOR_A_TOOL)
                reason = result_text(error.reason)
            except (ToolResultError, JsonRefused, RecursionError) as exc:
                msg = f"the tool's InterruptError carries data that cannot be recorded: {exc}"
                return cls.raised(prepared, ToolResultError(msg))
            interrupt = Interrupt(reason, data, call.id, call.name)
            content = (
                f"Paused for review: {reason}. The operation waits for a person's "
                "decision; you will be told the outcome."
            )
            return cls(call.id, ToolOutcome.INTERRUPTED, content, interrupt, ran=True)
        content = f"Error: tool {call.name!r} failed: {exception_line(error)}"
        # An exception's text may hold a lone surrogate, which could not be stored.
        content = content.encode("utf-8", "backslashreplace").decode("utf-8")
        error_type, ran = type(error).__qualname__, not isinstance(error, ToolServerError)
        return cls(call.id, ToolOutcome.FAILED, content, error_type=error_type, ran=ran)


# The program --------------------------------------------------------------------------


@attrs.frozen
class RunSettings:
    """What the program needs to know about persistence."""

    checkpointing: bool
    retain: int = 0
    save_on_turn_start: bool = False
    skip_save_on_turn_end: bool = False


Program = Generator[Effect, Any, str]


def run_program(
    thread: AgentThread,
    config: AgentConfig,
    settings: RunSettings,
    mode: RunMode,
    *,
    user_input: Message | None = None,
    steering: Callable[[], Sequence[Message]] = tuple,
    trace_parent: str = "",
) -> Program:
    """Run turns until a final answer, an interrupt, an error or the turn limit.

    Returns the final answer, or ``""`` when the run paused on an interrupt. Every
    pause it records carries ``trace_parent``, the traced run's context, if any. A
    typed answer that does not validate is sent back to the model, up to
    ``config.output_retries`` times.
    """
    now = config.clock
    thread.refuse_given_before(user_input)  # before a retry or a server's failure records
    yield from _reach_tool_servers(thread, config)
    paused = len(thread.interrupts)
    yield from _retry_calls(thread, config, trace_parent)
    if len(thread.interrupts) > paused:
        # A call run again paused (its tool raised InterruptError, or it needs a review):
        # the run stays paused on it, as on any pause, for a person to deal with.
        yield from _checkpoint(thread, settings, CheckpointReason.INTERRUPT, now())
        return ""
    apart = user_input is not None and _input_apart(thread, config)
    thread.start_run(mode, now=now(), given=user_input, apart=apart)
    # Calls that reviewers approved run first, each spending its approval: their
    # results come right after the calls in the history, before any new input.
    yield from _run_approved_calls(thread, config, trace_parent)
    if not thread.messages and config.system_prompt:
        thread.append_message(Message(Role.SYSTEM, config.system_prompt), now=now())
    if user_input is not None and apart:
        thread.append_message(user_input, now=now())
    yield Commit()
    if thread.interrupts:  # an approved call paused (or was left in doubt)
        yield from _checkpoint(thread, settings, CheckpointReason.INTERRUPT, now())
        return ""

    refusals = 0
    for turn_in_run in range(1, config.max_turns + 1):
        final_turn = turn_in_run == config.max_turns
        steered = steering()
        # A turn start with nothing of its own to record before the answer is recorded
        # with the answer, in one event (ADR 0071); steering, a compaction and a
        # checkpoint at the turn's start follow a turn start of their own.
        started = bool(thread.answers or steered) or settings.save_on_turn_start
        plan = None
        if config.compactor is not None and not started:  # no steering changes the messages
            plan = yield from _plan(thread, config, unstarted=True)
            started = plan is not None
        if started:
            thread.start_turn(now=now())
            turn_started = thread.version
            thread.steer_answers(now=now())
            for message in steered:
                thread.steer(message, now=now())
            if config.compactor is not None:
                yield from _compact(thread, config, plan)
            if settings.save_on_turn_start:
                yield from _checkpoint(thread, settings, CheckpointReason.TURN_START, now())
            elif thread.version > turn_started:
                # Steering taken from its source, or a compaction, outlives the
                # process dying in the model call; a bare turn start waits for the
                # response.
                yield Commit()

        offered = config.listed()  # the turn's calls run the tools the model was offered
        request = build_request(thread, offered, final_turn=final_turn)
        response = yield from _ask(thread, request, now, answer=True, unstarted=not started)
        calls = thread.unique_calls(response.tool_calls)
        answer = Message(Role.ASSISTANT, response.content, tool_calls=calls, usage=response.usage)
        pins = _pins(offered)
        if started:
            thread.append_message(answer, now=now())
            thread.call_tools(calls, now=now(), pins=pins)
        elif calls and not any(call.name in pins for call in calls):
            # The calls' intents go with the answer, in one event (ADR 0072); a pinned
            # tool's intent is followed by its pin, so its calls keep events of their own.
            thread.answer_turn_calling(answer, now=now())
        else:
            thread.answer_turn(answer, now=now())
            thread.call_tools(calls, now=now(), pins=pins)
        if not calls:  # the answer and the end of the run are committed together
            shape = config.output_shape
            try:
                typed = None if shape is None else shape.check(response.content)
            except AnswerRefused as refused:
                refusals += 1
                yield from _send_back(thread, config, refused, refusals, final_turn=final_turn)
                yield from _end_of_turn(thread, settings, now())
                continue
            yield from _finish(thread, settings, response.content, typed, now())
            return response.content
        # Write-ahead, in every durability mode: a tool gets its idempotency key only
        # once the record it derives from is stored, or a restore could call it anew
        # under another key. Calls that change nothing outside need none (ADR 0150):
        # a process dying in them leaves nothing to lose, as in the model call.
        ahead = WriteAhead(done=not _read_only_turn(thread, offered, calls))
        if ahead.done:
            yield Commit(always=True)

        if final_turn:
            yield from _refuse_calls_on_final_turn(thread, offered, calls)
        retain = _turn_end(settings)
        if (yield from _run_tools(thread, offered, calls, trace_parent, retain, ahead)):
            # The last result saved the turn's checkpoint.
            yield Commit(checkpoint=True, movable=ahead.movable(calls))
            continue
        if thread.interrupts:
            interrupt = CheckpointReason.INTERRUPT
            yield from _checkpoint(thread, settings, interrupt, now(), ahead.movable(calls))
            return ""
        yield from _end_of_turn(thread, settings, now(), ahead.movable(calls))
    raise AssertionError("unreachable: the final turn returns or raises")  # pragma: no cover


def build_request(thread: AgentThread, config: AgentConfig, *, final_turn: bool) -> ProviderRequest:
    """The request for the next model call: the compacted context and the tools; on the
    final turn the model is told to answer and may call no tool."""
    messages = context_messages(thread.messages, thread.compaction)
    if final_turn:
        messages.append(Message(Role.SYSTEM, FINAL_TURN_INSTRUCTION))
    return ProviderRequest(
        model=config.model,
        messages=tuple(messages),
        tools=tuple(tool.spec for tool in config.offered_tools()),
        tool_choice="none" if final_turn else "auto",
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        output=None if config.output_shape is None else config.output_shape.spec,
    )


def _reach_tool_servers(thread: AgentThread, config: AgentConfig) -> Generator[Effect, Any, None]:
    """List the tool servers' tools (reaching a server that is down, once), or record
    the run as failed with the typed error, as a provider failure is."""
    try:
        config.offered_tools()
    except ToolServerError as exc:
        yield from _record_failure(thread, exc, config.clock)
        raise


def _pins(config: AgentConfig) -> dict[str, ToolPin]:
    """The pins of the offered tools that come from servers, by tool name."""
    return {tool.name: tool.pin for tool in config.offered_tools() if tool.pin is not None}


def _ask(
    thread: AgentThread,
    request: ProviderRequest,
    clock: Callable[[], datetime],
    *,
    answer: bool = False,
    unstarted: bool = False,
) -> Generator[Effect, Any, ProviderResponse]:
    """The model's response to ``request``; a failure is recorded and raised.
    ``unstarted``: the turn this call answers has no record yet, and a failure records
    its start first, as a turn whose answer never came."""
    try:
        response = _checked_response((yield Complete(request, answer)))
    except Exception as exc:
        yield from _record_failure(thread, exc, clock, unstarted=unstarted)
        if isinstance(exc, CovonautError):
            raise
        msg = f"the model provider failed: {exception_line(exc)}"
        raise ProviderError(msg) from exc
    return response


def _plan(
    thread: AgentThread, config: AgentConfig, *, unstarted: bool
) -> Generator[Effect, Any, CompactionPlan | None]:
    """The compactor's plan for the thread's messages; a failure is recorded, as a
    model call's is, and raised as it is (the compactor is the application's code)."""
    assert config.compactor is not None
    try:
        return config.compactor.plan(thread.messages, thread.compaction, model=config.model)
    except Exception as exc:
        yield from _record_failure(thread, exc, config.clock, unstarted=unstarted)
        raise


def _record_failure(
    thread: AgentThread,
    exc: Exception,
    clock: Callable[[], datetime],
    *,
    unstarted: bool = False,
) -> Generator[Effect, Any, None]:
    """Record the run as failed by ``exc``, committed in every durability mode: the
    process knows the run ended, so the store says so too. ``unstarted``: the turn it
    failed in has no record yet, and its start is recorded first, so that a failed turn
    counts."""
    if unstarted:
        thread.start_turn(now=clock())
    thread.fail(type(exc).__name__, exception_text(exc), now=clock())
    yield Commit(always=True)


def _checked_response(value: object) -> ProviderResponse:
    """The provider's answer, checked to be a ``ProviderResponse`` that can be stored:
    a provider is outside code, and anything else would fail later, mid-step."""
    if not isinstance(value, ProviderResponse):
        msg = (
            f"the model provider returned {type(value).__name__}, expected a "
            "ProviderResponse; make its complete() return covonaut_es.ProviderResponse(...)"
        )
        raise ProviderError(msg)
    try:
        response = msgspec.json.decode(msgspec.json.encode(value), type=ProviderResponse)
    except (TypeError, ValueError, RecursionError, msgspec.MsgspecError) as exc:
        msg = (
            f"the model provider returned a ProviderResponse that cannot be stored: {exc}; "
            "its fields must have their declared types and hold valid text"
        )
        raise ProviderError(msg) from exc
    if response.usage is not None:
        token_count(response.usage.input_tokens, "usage.input_tokens")
        token_count(response.usage.output_tokens, "usage.output_tokens")
    return response


def _compact(
    thread: AgentThread, config: AgentConfig, plan: CompactionPlan | None
) -> Generator[Effect, Any, None]:
    """Compact the context by ``plan``, or by the compactor's plan now if None (it may
    have none)."""
    if plan is None:
        plan = yield from _plan(thread, config, unstarted=False)
    if plan is None:
        return
    summary, usage = plan.summary, None
    if plan.summary_request is not None:
        yield Commit()  # the turn's steering outlives the process dying in this call
        response = yield from _ask(thread, plan.summary_request, config.clock)
        summary, usage = response.content, response.usage
    thread.compact(Compaction(summary, plan.first_kept), usage=usage, now=config.clock())


def _read_only_turn(thread: AgentThread, config: AgentConfig, calls: Sequence[ToolCall]) -> bool:
    """Whether a turn's ``calls`` need no write-ahead (ADR 0150): each is of a
    read-only tool (``Tool.read_only``), and the one event the thread holds unsaved is
    the one that records them all (the answer with its calls, ADR 0072).

    Else something must be saved before they run. A keyed save checks every link since
    the point this process knows before anything acts on the thread (ADR 0144). And a
    call's idempotency key is the thread's, the version of its record and its id, which
    a model may give again: after a crash, the next run records its start at the first
    version the crash lost, so only a call recorded at that very version cannot meet
    its key again in a later call (a turn's start or steering stored before the answer,
    a call's pin after it, or anything unsaved before the turn, would each move the
    next run's calls onto the versions the lost ones held)."""
    pending = thread.pending_events
    if len(pending) != 1 or not isinstance(recorded := pending[0], AgentThread.Event):
        return False
    if set(recorded.intended_calls) != {call.id for call in calls}:
        return False
    return all((tool := config.tool(call.name)) is not None and tool.read_only for call in calls)


@attrs.define
class WriteAhead:
    """Whether a turn's calls are stored (``done``): before the first that runs, unless
    every call is read-only (ADR 0150). A call is judged by the tool it runs, which a
    server's new listing may have changed since the response was judged."""

    done: bool

    def before(self, calls: Sequence[PreparedCall]) -> Commit | None:
        """The commit before ``calls`` start, if one is needed: the turn's write-ahead
        when one of them is not read-only and it was not written yet, the approvals
        they spend, or what was recorded before them in a turn written ahead."""
        unwritten = not self.done and any(not call.tool.read_only for call in calls)
        always = unwritten or any(_authorized(call) for call in calls)
        if not (always or self.done):
            return None
        self.done = True  # committed now: the turn's calls are stored, as written ahead
        return Commit(always=always)

    def movable(self, calls: Sequence[ToolCall]) -> frozenset[str]:
        """The ``calls`` that ran unsaved, if the turn was never written ahead."""
        return frozenset() if self.done else frozenset(call.id for call in calls)

    def waiting(self) -> Commit | None:
        """The commit before waiting for a running call: the results recorded so far,
        in a turn written ahead."""
        return Commit() if self.done else None


def _run_tools(
    thread: AgentThread,
    config: AgentConfig,
    calls: Sequence[ToolCall],
    trace_parent: str,
    retain: int | None,
    ahead: WriteAhead,
) -> Generator[Effect, Any, bool]:
    """Run a response's calls and record every result in the order the model asked.
    The last result saves the turn's checkpoint with it (``retain`` says how many are
    kept; None: the turn saves none) unless the run is paused; returns whether it did.
    The last result is committed with the end of the turn; what is committed before a
    call runs, ``ahead`` says."""
    last = len(calls) - 1
    if not (config.parallel_tools and len(calls) > 1):
        saved = False
        for index, call in enumerate(calls):
            # A call admitted after an earlier one paused the run does not execute.
            paused = bool(thread.interrupts)
            admitted = yield from _admitted(thread, config, call, trace_parent, paused=paused)
            ends = retain if index == last else None
            saved = yield from _execute(thread, config, admitted, trace_parent, ends, ahead)
        return saved

    slots: list[Admitted] = []
    for call in calls:
        slots.append((yield from _admitted(thread, config, call, trace_parent)))
    runnable = tuple(slot for slot in slots if isinstance(slot, PreparedCall))
    finished: dict[str, ToolReport] = {}
    saved = False
    for index, slot in enumerate(slots):
        ends = retain if index == last else None
        if isinstance(slot, PreparedCall):
            # What is recorded (the approvals used, the results before this call) is
            # committed before any call runs, and before waiting for a running one.
            commit = ahead.before(runnable) if slot is runnable[0] else ahead.waiting()
            if commit is not None:
                yield commit
            if slot is runnable[0]:
                yield StartTools(runnable)
            while slot.call.id not in finished:  # the calls end in any order
                report: ToolReport = yield NextToolReport()
                finished[report.tool_call_id] = report
            report = finished.pop(slot.call.id)
            saved = yield from _execute(thread, config, report, trace_parent, ends)
        else:
            saved = yield from _execute(thread, config, slot, trace_parent, ends)
    return saved


Admitted = PreparedCall | ToolReport | None
"""A call to execute, a result to record without executing, or None for a call held
back for a review."""


def _admitted(
    thread: AgentThread,
    config: AgentConfig,
    call: ToolCall,
    trace_parent: str,
    *,
    paused: bool = False,
) -> Generator[Effect, Any, Admitted]:
    item = _prepare(thread, config, call)
    if isinstance(item, PreparedCall):
        return (yield from _admit(thread, item, config.clock(), trace_parent, paused=paused))
    return item


def _execute(
    thread: AgentThread,
    config: AgentConfig,
    item: Admitted,
    trace_parent: str,
    retain: int | None = None,
    ahead: WriteAhead | None = None,
) -> Generator[Effect, Any, bool]:
    """Run an admitted call and record its result, or record a result known without
    running it; as :func:`_record` with ``retain``, return whether the result saved
    the turn's checkpoint. The result is left to the next commit: the one before the
    next call runs, or the end of the turn's. Before the call runs, what ``ahead``
    says is committed (an earlier call's result, its approval marked used); without
    it, the call was stored before (an approved call run on resume, a retry)."""
    report = yield from _report(item, ahead)
    if report is None:
        return False
    return _record(thread, report, config.clock(), trace_parent, retain)


def _report(
    item: Admitted, ahead: WriteAhead | None = None
) -> Generator[Effect, Any, ToolReport | None]:
    """How an admitted call ended: run once what ``ahead`` says is committed (as
    :func:`_execute`), or the result known without running it; None for a call held
    back for a review."""
    if isinstance(item, PreparedCall):
        commit = (ahead or WriteAhead(done=True)).before((item,))
        if commit is not None:
            yield commit
        report: ToolReport = yield RunTool(item)
        return report
    return item


def _prepare(thread: AgentThread, config: AgentConfig, call: ToolCall) -> PreparedCall | ToolReport:
    """Validate a call; an invalid one gives the result to record instead. A call an
    approval runs is validated with the approved arguments, which it runs with."""
    tool = config.tool(call.name)
    review = thread.reviews.of_call(call.id)
    if review is not None and review.runs_call:
        approved = canonical_json(review.approved_arguments).decode()
        call = msgspec.structs.replace(call, arguments=approved)
    try:
        if tool is None:
            msg = f"there is no tool named {call.name!r}"
            raise ArgumentsError(msg)
        args = parse_arguments(tool, call)
    except ArgumentsError as exc:
        return ToolReport(call.id, ToolOutcome.FAILED, f"Error: {exc}")
    except ToolArgumentsLimitError as exc:  # refused before running: not in doubt
        return ToolReport(call.id, ToolOutcome.NOT_EXECUTED, f"Not executed: {exc}")
    key, timeout = thread.open_calls[call.id].idempotency_key, config.timeout_of(tool)
    context = ToolContext(thread.thread_id, call.id, call.name, key, timeout=timeout)
    return PreparedCall(tool, call, args, context, timeout)


def _admit(
    thread: AgentThread,
    item: PreparedCall,
    now: datetime,
    trace_parent: str,
    *,
    paused: bool = False,
) -> Generator[Effect, Any, Admitted]:
    """Let a prepared call run now, with the approval that authorizes it if its tool
    requires one; otherwise give the result saying why it does not run, or ask for its
    review (None).

    ``paused``: an earlier call of the batch paused the run, so nothing more runs, but
    a call without a standing decision still gets its own review.
    """
    call, key = item.call, item.context.idempotency_key
    own, review = thread.reviews.of_call(call.id), None
    # A call an approval runs goes through its approval whatever the policy says of
    # the approved arguments: the spent approval is its write-ahead record.
    if (own is not None and own.runs_call) or item.tool.needs_approval(item.args):
        # Digest the very dict the tool will get, after the policy has seen it.
        pin = item.tool.pin
        digests = operation_digests(call.name, item.args, pin)
        review = thread.reviews.runs_on_approval(
            call.id, digests, thread_id=thread.thread_id
        ) or thread.reviews.standing(digests, key, thread_id=thread.thread_id)
        if review is None:
            wait = item.tool.deadline_of(item.args)
            deadline = None if wait is None else (yield ReviewTime(now)) + wait
            thread.request_review(
                call,
                item.args,
                now=now,
                tool=pin,
                trace_parent=trace_parent,
                run_on_approval=item.tool.run_on_approval,
                deadline=deadline,
                rules=item.tool.review_rules(item.args),
            )
            return None
    if paused:
        note = "Not executed: an earlier call in this batch paused the run."
        return ToolReport(call.id, ToolOutcome.NOT_EXECUTED, note)
    if review is None:
        return item
    if not (review.usable or review.authorizes(key)):
        return ToolReport(call.id, ToolOutcome.NOT_EXECUTED, refusal_text(review))
    approval = review.decision
    if review.usable:
        approval = thread.use_approval(review.request.review_id, call.id, now=now)
    return attrs.evolve(item, context=attrs.evolve(item.context, approval=approval))


def _authorized(item: PreparedCall) -> bool:
    return item.context.approval is not None


def retry_program(
    thread: AgentThread, config: AgentConfig, tool_call_id: str, trace_parent: str = ""
) -> Program:
    """Run a call in doubt again with its idempotency key and record the result.

    A retry runs the tool the call was made of, or none (ADR 0154). A call whose tool
    requires approval is admitted as any call is: the approval it used authorizes it
    again, since it is the same call. A retry that does not run records no result,
    which would say the call did not run: refused before it runs (a standing rejection,
    arguments a tool no longer takes, another tool under its name) or never sent (its
    server refused it or could not be reached), it may have run before, so it is paused
    in doubt again, for a person to settle.
    """
    config = config.listed()  # the tool checked below is the one that runs
    pending = thread.retry_tool_call(tool_call_id, now=config.clock())
    yield Commit(always=True)  # its write-ahead, in every durability mode
    tool = config.tool(pending.call.name)
    if tool is not None and not _made_of(pending, tool):
        report: ToolReport | None = ToolReport(
            tool_call_id, ToolOutcome.NOT_EXECUTED, _other_tool_text(pending, tool)
        )
    else:
        admitted = yield from _admitted(thread, config, pending.call, trace_parent)
        report = yield from _report(admitted)
    if report is not None and not report.ran:
        reason = (
            f"call {tool_call_id!r} was not run again ({report.content}) and may have run "
            "before; check the external system, then settle it"
        )
        thread.pause_in_doubt(tool_call_id, reason, now=config.clock(), trace_parent=trace_parent)
    elif report is not None:
        _record(thread, report, config.clock(), trace_parent)
    yield Commit()
    return ""


def settle_program(
    thread: AgentThread, config: AgentConfig, tool_call_id: str, content: str, *, ran: bool
) -> Program:
    """Record what the application found of a call in doubt: it ran, with ``content``
    as its result, or it did not run."""
    thread.settle(tool_call_id, content, ran=ran, now=config.clock())
    yield Commit()
    return ""


def _input_apart(thread: AgentThread, config: AgentConfig) -> bool:
    """Whether the user's message a run starts with is recorded apart from the run's
    start, not with it in one event (ADR 0079): something goes between the two, the
    results of calls that unspent approvals run (a fork taken after a resume began holds
    such calls and no pause), or the system prompt before a thread's first message."""
    return bool(thread.approved_calls) or bool(config.system_prompt and not thread.messages)


def _run_approved_calls(
    thread: AgentThread, config: AgentConfig, trace_parent: str
) -> Generator[Effect, Any, None]:
    """Run each call an unspent approval runs (``Tool(run_on_approval=True)``), with
    the approved arguments and without asking the model: the approval is spent and
    committed before the call starts, so a crash leaves it in doubt, never run twice."""
    for pending in thread.approved_calls:
        if pending.call.id not in thread.open_calls:
            continue  # an earlier call of the batch was the same call (never in practice)
        admitted = yield from _admitted(thread, config, pending.call, trace_parent)
        yield from _execute(thread, config, admitted, trace_parent)


def _retry_calls(thread: AgentThread, config: AgentConfig, trace_parent: str) -> Program:
    """Run again the calls in doubt that may run again: a person asked for it, or the
    tool the call was made of is idempotent (a read-only tool is, unless it says
    otherwise); a server's tool listed anew under its name is another tool."""
    config = config.listed()  # judged and run with the same tools
    for pending in thread.in_doubt:
        tool = config.tool(pending.call.name)
        asked = pending.call.id in thread.retries_requested
        if asked or (tool is not None and tool.idempotent and _made_of(pending, tool)):
            yield from retry_program(thread, config, pending.call.id, trace_parent)
    return ""


def _made_of(pending: PendingToolCall, tool: Tool) -> bool:
    """Whether ``tool`` is the one ``pending`` was made of: its server's tool as listed
    then (the call's pin), or again one of the application's own for a call of one."""
    made, now = pending.pin, tool.pin
    return (made and made.digest) == (now and now.digest)


def _other_tool_text(pending: PendingToolCall, tool: Tool) -> str:
    """Why a retry does not run ``tool``: it is not the one ``pending`` was made of. A
    call with no pin was made of one of the application's own tools, or its pin is not
    in the thread's record (a fork taken between the call's record and its pin's)."""
    made = "a tool the thread's record does not pin" if pending.pin is None else pending.pin.label
    now = "one of the application's own" if tool.pin is None else tool.pin.label
    return (
        f"Not executed: {pending.call.name!r} names another tool now ({now}) than the "
        f"one the call was made of ({made})"
    )


def _record(
    thread: AgentThread,
    report: ToolReport,
    now: datetime,
    trace_parent: str,
    retain: int | None = None,
) -> bool:
    """Record what a call's report says. A result that ends its turn saves the turn's
    checkpoint with it (ADR 0073), given its ``retain`` (None: the turn saves none),
    unless the run is paused, which saves a checkpoint of its own: returns whether it
    did."""
    if report.expired_after is not None or report.in_doubt:  # the call stays open
        if report.expired_after is not None:
            why = f"ran past its timeout of {report.expired_after:g} s"
        else:
            why = f"lost its answer ({report.in_doubt})"
        reason = (
            f"call {report.tool_call_id!r} {why} and may or may not have done its work; "
            "check the external system, then settle it (or run it again with its "
            "idempotency key)"
        )
        thread.pause_in_doubt(report.tool_call_id, reason, now=now, trace_parent=trace_parent)
        return False
    content = report.content
    if report.interrupt is not None:
        interrupt = msgspec.structs.replace(report.interrupt, trace_parent=trace_parent)
        thread.interrupt(interrupt, now=now)
    elif (review := thread.reviews.of_call(report.tool_call_id)) is not None and review.runs_call:
        content = ran_text(review, content, ran=report.ran)
    if retain is not None and not thread.interrupts:
        thread.record_tool_result_checkpointed(
            report.tool_call_id, content, report.outcome, retain=retain, now=now
        )
        return True
    thread.record_tool_result(report.tool_call_id, content, report.outcome, now=now)
    return False


def _refuse_calls_on_final_turn(
    thread: AgentThread, config: AgentConfig, calls: Sequence[ToolCall]
) -> Generator[Effect, Any, None]:
    now = config.clock
    note = "Not executed: the run reached its turn limit."
    for call in calls:
        thread.record_tool_result(call.id, note, ToolOutcome.NOT_EXECUTED, now=now())
    msg = (
        f"the model still called tools on turn {config.max_turns}, the last one "
        f"max_turns={config.max_turns} allows; continue_run() gives it more turns"
    )
    error = MaxTurnsExceededError(msg)
    yield from _record_failure(thread, error, now)
    raise error


def _send_back(
    thread: AgentThread,
    config: AgentConfig,
    refused: AnswerRefused,
    refusals: int,
    *,
    final_turn: bool,
) -> Generator[Effect, Any, None]:
    """Tell the model why its typed answer was refused, for it to answer again; or,
    past ``output_retries`` refusals or on the last turn, record the run as failed."""
    assert config.output_shape is not None
    if refusals <= config.output_retries and not final_turn:
        thread.append_message(
            Message(Role.USER, config.output_shape.correction(refused)), now=config.clock()
        )
        return
    limit = (
        f"on turn {config.max_turns}, the last one max_turns={config.max_turns} allows"
        if final_turn
        else f"{refusals} times, more than output_retries={config.output_retries} allows"
    )
    msg = (
        f"the model's final answer was refused {limit}: {refused}; raise the limit, "
        "or make the output type easier to meet"
    )
    error = OutputValidationError(msg)
    yield from _record_failure(thread, error, config.clock)
    raise error


def _turn_end(settings: RunSettings) -> int | None:
    """The ``retain`` of the checkpoint that ends a turn; None when a turn saves none."""
    if settings.skip_save_on_turn_end or not settings.checkpointing:
        return None
    return settings.retain


def _end_of_turn(
    thread: AgentThread,
    settings: RunSettings,
    now: datetime,
    movable: frozenset[str] = frozenset(),
) -> Generator[Effect, Any, None]:
    retain = _turn_end(settings)
    if retain is None:
        yield Commit(movable=movable)
        return
    thread.save_checkpoint(CheckpointReason.TURN_END, retain=retain, now=now)
    yield Commit(checkpoint=True, movable=movable)


def _finish(
    thread: AgentThread,
    settings: RunSettings,
    output: str,
    typed: TypedOutput | None,
    now: datetime,
) -> Generator[Effect, Any, None]:
    """Record the final answer, which saves the turn's checkpoint with it (ADR 0073)
    when the turn saves one, and commit it."""
    retain = _turn_end(settings)
    if retain is None:
        thread.finish(output, now=now, typed=typed)
        yield Commit()
        return
    thread.finish_checkpointed(output, retain=retain, now=now, typed=typed)
    yield Commit(checkpoint=True)


def _checkpoint(
    thread: AgentThread,
    settings: RunSettings,
    reason: CheckpointReason,
    now: datetime,
    movable: frozenset[str] = frozenset(),
) -> Generator[Effect, Any, None]:
    if not settings.checkpointing:
        yield Commit(movable=movable)
        return
    thread.save_checkpoint(reason, retain=settings.retain, now=now)
    yield Commit(checkpoint=True, movable=movable)
