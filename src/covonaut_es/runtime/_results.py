"""What a run command ended with: :class:`RunResult`, built from the thread it left.

The single place a run's ``output`` is computed is :func:`finished`; the status and what
waits are read from the thread, so a result says the same as the stored record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import attrs

from covonaut_es._text import exception_line
from covonaut_es.domain import AgentThread, PauseKind, awaiting_a_person

RunStatus = Literal["finished", "paused", "failed"]
"""How a run command ended."""

WaitsFor = Literal["reviewer", "human", "operator"]
"""Who must act before the thread runs on: a reviewer decides a review, a human answers
a tool's pause, an operator checks the external system and settles a call in doubt."""

_WHO: dict[PauseKind, WaitsFor] = {
    PauseKind.REVIEW: "reviewer",
    PauseKind.INTERRUPT: "human",
    PauseKind.IN_DOUBT: "operator",
}


@attrs.frozen
class Waiting:
    """One thing a paused (or failed) thread waits on.

    Attributes:
        kind: A review, a tool's pause or a call in doubt.
        waits_for: Who must act: ``"reviewer"``, ``"human"`` or ``"operator"``.
        tool_call_id: The call it concerns.
        tool_name: That call's tool.
        reason: Why it waits, for a person to read.
        review_id: For a review, its id (pass it to ``approve``/``reject``); else empty.
    """

    kind: PauseKind
    waits_for: WaitsFor
    tool_call_id: str
    tool_name: str
    reason: str
    review_id: str = ""


@attrs.frozen
class RunResult:
    """How a run command (``run``, ``resume``, ``continue_run``, their ``a``-versions
    and the ``astream`` ones) ended.

    Attributes:
        status: ``"finished"`` (the model gave its final answer), ``"paused"`` (the
            thread waits on what ``waiting`` lists) or ``"failed"`` (the command raised;
            ``error`` says what).
        output: When finished, the final answer: the validated value (as
            :attr:`Agent.output <covonaut_es.Agent.output>` gives it) for an agent with an
            ``output_type``, else the answer text; None otherwise.
        waiting: The reviews, tools' pauses and calls in doubt nobody has dealt with
            yet, each saying whom it waits for; empty when finished.
        error: For a failed run, the exception's type and message; else empty.
    """

    status: RunStatus
    output: Any = None
    waiting: tuple[Waiting, ...] = ()
    error: str = ""


def finished(thread: AgentThread, output: Callable[[], Any]) -> RunResult:
    """The result of a run command that returned: paused with what waits, or finished
    with ``output()`` (the answer text, or the typed value of a typed agent)."""
    waiting = waiting_in(thread)
    if thread.interrupts or waiting:
        return RunResult("paused", waiting=waiting)
    return RunResult("finished", output=output())


def failed(thread: AgentThread | None, error: Exception) -> RunResult:
    """The result of a run command that raised ``error``; ``thread``, if still held,
    says what waits (calls in doubt that kept the run from starting, say)."""
    waiting = waiting_in(thread) if thread is not None else ()
    return RunResult("failed", waiting=waiting, error=exception_line(error))


def waiting_in(thread: AgentThread) -> tuple[Waiting, ...]:
    """What the thread waits on a person for: its unresolved pauses, then its calls in
    doubt that no pause names."""
    items: list[Waiting] = []
    for pause in thread.awaiting_person:
        interrupt = pause.interrupt
        data = interrupt.data if isinstance(interrupt.data, dict) else {}
        review_id = data.get("review_id") if pause.kind is PauseKind.REVIEW else ""
        items.append(
            Waiting(
                pause.kind,
                _WHO[pause.kind],
                interrupt.tool_call_id,
                interrupt.tool_name,
                interrupt.reason,
                review_id if isinstance(review_id, str) else "",
            )
        )
    named = {item.tool_call_id for item in items}
    for pending in awaiting_a_person(thread.status, thread.in_doubt):
        if pending.call.id in named:
            continue
        reason = "recorded as called, with no result: it may or may not have run"
        items.append(
            Waiting(PauseKind.IN_DOUBT, "operator", pending.call.id, pending.call.name, reason)
        )
    return tuple(items)
