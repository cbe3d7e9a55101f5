"""Forking a thread (ADR 0009): what a fork inherits, and the event that starts it.

A fork's stream holds no copy of its parent's events: it starts with a ``Forked`` event
that names the parent and the version it branches from (the store seals it into the
parent's hash chain). These functions only read and make events; the store does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

from covonaut_es.domain._ids import thread_aggregate_id
from covonaut_es.domain._pauses import pauses_of
from covonaut_es.domain._thread import AgentThread
from covonaut_es.domain._values import Interrupt, PauseKind, RunMode, ToolOutcome

_TURN_OR_RESUME_START = (AgentThread.TurnStarted, AgentThread.TurnAnswered, AgentThread.Resumed)
"""The events no interrupt is pending at, besides a run's start."""


def fork_point(newest_first: Iterable[Any]) -> tuple[tuple[Interrupt, ...], bool]:
    """What a fork at some version inherits, from the events up to it, newest first.

    Returns the interrupts pending at that version that still wait for a person, by the
    thread's own rule (:func:`pauses_of`: a review decided, a tool's pause answered, a
    call in doubt settled or sent to run again and not yet run again are history, not
    queue), and whether the thread was abandoned by then. Reads back only to the start
    of the last turn, run or resume (no interrupt is pending at any of them: interrupts
    end a run, and only ``resume`` starts one over them, clearing them) or to the fork or
    saved state that started the stream, which records its own; so forking costs the
    same however long the thread is.
    """
    newest_interrupts: list[Interrupt] = []
    tail = _Tail()
    for event in newest_first:
        if isinstance(event, AgentThread.Abandoned):
            return (), True
        if isinstance(event, AgentThread.Forked | AgentThread.StartedFromState):
            newest_interrupts.extend(map(tail.as_read, reversed(event.interrupts)))
            break
        if isinstance(event, _TURN_OR_RESUME_START) or (
            isinstance(event, AgentThread.RunStarted) and event.mode is not RunMode.RESUME
        ):
            break
        if isinstance(event, AgentThread.Interrupted):
            newest_interrupts.append(tail.paused(event.interrupt))
        else:
            tail.note(event)
    pauses = pauses_of(
        newest_interrupts[::-1], tail.decided, tail.open, tail.answered, tail.retries
    )
    return tuple(p.interrupt for p in pauses if not p.resolved), False


class _Open:
    """The calls open at the fork's version, as far as its tail tells: every call but
    those whose result it records."""

    def __init__(self, closed: set[str]) -> None:
        self._closed = closed

    def __contains__(self, call_id: object) -> bool:
        return call_id not in self._closed


class _Tail:
    """What the events after the last interrupt's run began record about its pauses,
    read newest first: for each call, the newest event that gives or takes back an
    answer or a retry is the one that stands, as the thread's folding leaves it."""

    def __init__(self) -> None:
        self.decided: set[str] = set()
        self.closed: set[str] = set()
        self.open = _Open(self.closed)
        self.paused_in_tool: set[str] = set()
        self._answers: dict[str, bool] = {}
        # As the thread keeps them: retries asked for, until one begins or the call is
        # settled; and retries begun, until the call's result or a new pause in doubt.
        self._requested: dict[str, bool] = {}
        self._begun: dict[str, bool] = {}

    @property
    def answered(self) -> set[str]:
        return {call_id for call_id, given in self._answers.items() if given}

    @property
    def retries(self) -> set[str]:
        asked = {call_id for call_id, given in self._requested.items() if given}
        return asked | {call_id for call_id, given in self._begun.items() if given}

    def note(self, event: Any) -> None:
        if isinstance(event, AgentThread.ReviewDecided):
            self.decided.add(event.review_id)
        elif isinstance(event, AgentThread.InterruptAnswered):
            self._answers.setdefault(event.tool_call_id, True)
        elif isinstance(event, AgentThread.Steered) and event.answer_to:
            self._answers.setdefault(event.answer_to, False)
        elif isinstance(event, AgentThread.RetryRequested) and event.tool_call_id:
            self._requested.setdefault(event.tool_call_id, True)
        elif isinstance(event, AgentThread.ToolCallRetried):
            # A retry begun deals with the call's pause, as asking for it did; a record
            # of the code before revived it (ADR 0066).
            self._requested.setdefault(event.tool_call_id, False)
            if not event.revives_pause:
                self._begun.setdefault(event.tool_call_id, True)
        if isinstance(event, AgentThread.ToolResultRecorded):
            self.closed.add(event.tool_call_id)
            self._begun.setdefault(event.tool_call_id, False)
            if isinstance(event, AgentThread.ToolCallSettled):
                self._requested.setdefault(event.tool_call_id, False)
            if event.outcome is ToolOutcome.INTERRUPTED:
                self.paused_in_tool.add(event.tool_call_id)

    def paused(self, interrupt: Interrupt) -> Interrupt:
        """``interrupt`` as the thread reads it now (:meth:`as_read`), noted: a pause in
        doubt is newer than the retry begun before it, which dealt with an older one;
        a retry asked for and not begun deals with it too."""
        read = self.as_read(interrupt)
        if read.kind is PauseKind.IN_DOUBT:
            self._begun.setdefault(read.tool_call_id, False)
        return read

    def as_read(self, interrupt: Interrupt) -> Interrupt:
        """``interrupt`` as the thread reads it now: a claim of doubt on a call whose
        later result says its tool paused is that tool's pause (``paused_by_its_tool``)."""
        if interrupt.kind is PauseKind.IN_DOUBT and interrupt.tool_call_id in self.paused_in_tool:
            return msgspec.structs.replace(interrupt, kind=PauseKind.INTERRUPT)
        return interrupt


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
