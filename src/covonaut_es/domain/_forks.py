"""Forking a thread (ADR 0009): what a fork inherits, and the event that starts it.

A fork's stream holds no copy of its parent's events: it starts with a ``Forked`` event
that names the parent and the version it branches from (the store seals it into the
parent's hash chain). These functions only read and make events; the store does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from covonaut_es.domain._ids import thread_aggregate_id
from covonaut_es.domain._thread import AgentThread
from covonaut_es.domain._values import Interrupt, PauseKind, RunMode


def fork_point(newest_first: Iterable[Any]) -> tuple[tuple[Interrupt, ...], bool]:
    """What a fork at some version inherits, from the events up to it, newest first.

    Returns the interrupts pending at that version that still wait for a person (those
    dealt with by then, a review decided, a pause answered, a call settled or sent to
    run again, are the thread's history, not its queue), and whether the thread was
    abandoned by then. Reads back only to the start of the last turn, run or resume (no
    interrupt is pending at any of them: interrupts end a run, and only ``resume``
    starts one over them, clearing them) or to the fork or saved state that started the
    stream, which records its own; so forking costs the same however long the thread is.
    """
    interrupts: list[Interrupt] = []
    dealt_with: set[tuple[bool, str]] = set()  # (a review's?, its review or call id)
    for event in newest_first:
        if isinstance(event, AgentThread.Abandoned):
            return (), True
        if isinstance(event, AgentThread.Interrupted):
            interrupts.append(event.interrupt)
        elif isinstance(event, AgentThread.ReviewDecided):
            dealt_with.add((True, event.review_id))
        elif isinstance(event, _DEALT_WITH) and event.tool_call_id:
            dealt_with.add((False, event.tool_call_id))
        elif isinstance(event, AgentThread.Forked | AgentThread.StartedFromState):
            interrupts.extend(reversed(event.interrupts))
            break
        elif isinstance(event, AgentThread.Resumed | AgentThread.TurnStarted) or (
            isinstance(event, AgentThread.RunStarted) and event.mode is not RunMode.RESUME
        ):
            break
    return tuple(i for i in reversed(interrupts) if _waiting(i, dealt_with)), False


_DEALT_WITH = (
    AgentThread.InterruptAnswered,
    AgentThread.ToolCallSettled,
    AgentThread.RetryRequested,
)
"""What deals with a tool's pause (an answer) or a call in doubt (settled, or a retry
asked for) on the call it names."""


def _waiting(interrupt: Interrupt, dealt_with: set[tuple[bool, str]]) -> bool:
    data = interrupt.data if isinstance(interrupt.data, dict) else {}
    if interrupt.kind is PauseKind.REVIEW:
        return (True, data.get("review_id")) not in dealt_with
    return (False, interrupt.tool_call_id) not in dealt_with


def fork_event(
    parent_thread_id: str,
    parent_version: int,
    *,
    new_thread_id: str,
    interrupts: tuple[Interrupt, ...],
    now: datetime,
) -> AgentThread.Forked:
    """The event that starts a fork."""
    # eventsourcing makes event classes dataclasses at run time, out of mypy's sight.
    event_class: Any = AgentThread.Forked
    forked: AgentThread.Forked = event_class(
        originator_id=thread_aggregate_id(new_thread_id),
        originator_version=parent_version + 1,
        timestamp=now,
        thread_id=new_thread_id,
        parent_thread_id=parent_thread_id,
        parent_version=parent_version,
        interrupts=interrupts,
    )
    return forked
