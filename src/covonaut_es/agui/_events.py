"""What a chat front end is told: a run's stream and its thread, as AG-UI events.

:class:`RunEvents` turns what :meth:`Agent.astream <covonaut_es.Agent.astream>` yields into
AG-UI events (the answers' pieces into ``TEXT_MESSAGE_*`` and ``TOOL_CALL_*``, the
committed tool results into ``TOOL_CALL_RESULT``, each commit into a ``STATE_DELTA``), and
the stored thread into the snapshots and the interrupts that end a paused run. Message
ids are the messages' positions in the thread (``msg-0``, ``msg-1``...), so a snapshot
read from the store names the messages the stream named.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

import ag_ui.core as agui
import attrs

from covonaut_es._text import encodable
from covonaut_es.domain import AgentThread, Pause, PauseKind, ReviewRequest
from covonaut_es.messages import Message, Role, TextDelta, ToolCall, ToolCallDelta
from covonaut_es.runtime import Agent, CommittedEvent, StreamItem
from covonaut_es.service import pause_token


def message_id(position: int) -> str:
    """The AG-UI id of the thread's message at ``position``."""
    return f"msg-{position}"


@attrs.define
class _StreamedCall:
    """A tool call as its pieces streamed: the first id and name they gave (as the
    provider assembles the call), its argument fragments, and the id the front end was
    told once the call was started (its name known: AG-UI starts a call with it)."""

    sent: str = ""
    name: str = ""
    arguments: list[str] = attrs.Factory(list)
    id: str | None = None

    def add(self, piece: ToolCallDelta) -> None:
        self.sent = self.sent or piece.id
        self.name = self.name or piece.name
        self.arguments.append(piece.arguments)

    def is_(self, call: ToolCall) -> bool:
        """Whether ``call``, as committed, is this call: same name, same arguments (none
        streamed are the ``{}`` a provider commits for them)."""
        if call.name != self.name:
            return False
        streamed = "".join(self.arguments) or "{}"
        try:
            return bool(json.loads(streamed) == json.loads(call.arguments))
        except ValueError:
            return streamed == call.arguments


class RunEvents:
    """The AG-UI events of one run, from the items its stream yields.

    A streamed call is told under the id the model sent, unless the thread or this run
    holds that id already (models repeat them): then under a new ``<id>-<n>``, so no
    two calls a front end sees share an id. Its result is told under the id it
    streamed as, found by what the committed call holds, not by its position, which a
    provider's assembled calls may not keep.

    Args:
        messages: The thread's messages when the run started.
    """

    def __init__(self, messages: tuple[Message, ...]) -> None:
        # The position the next message takes: the committed events say where the
        # thread stands when a piece arrives (the run may be further on by then).
        self._next = len(messages)
        self._text: str | None = None  # the id of the text message being streamed
        self._calls: dict[int, _StreamedCall] = {}  # this answer's streamed calls, by index
        self._names: dict[str, str] = {}  # a committed call id -> the id it streamed as
        self._told = {call.id for message in messages for call in message.tool_calls}

    def of(self, item: StreamItem) -> list[agui.BaseEvent]:
        """The events that tell ``item``."""
        match item:
            case TextDelta(text=text):
                events = self._opened_text()
                assert self._text is not None
                events.append(
                    agui.TextMessageContentEvent(message_id=self._text, delta=encodable(text))
                )
                return events
            case ToolCallDelta():
                return self._call_piece(item)
            case CommittedEvent(event=event):
                return [*self._committed(event), _version_delta(event)]
        raise AssertionError(f"unknown stream item {item!r}")  # pragma: no cover

    def closed(self) -> list[agui.BaseEvent]:
        """The ends of a text message and tool calls left open (a run that failed)."""
        events: list[agui.BaseEvent] = []
        if self._text is not None:
            events.append(agui.TextMessageEndEvent(message_id=self._text))
            self._text = None
        events += [agui.ToolCallEndEvent(tool_call_id=c.id) for c in self._calls.values() if c.id]
        self._calls = {}
        return events

    def _opened_text(self) -> list[agui.BaseEvent]:
        if self._text is not None:
            return []
        self._text = message_id(self._next)
        return [agui.TextMessageStartEvent(message_id=self._text, role="assistant")]

    def _call_piece(self, piece: ToolCallDelta) -> list[agui.BaseEvent]:
        call = self._calls.setdefault(piece.index, _StreamedCall())
        call.add(piece)
        if call.id is None:
            return self._started(call) if call.name else []
        if not piece.arguments:
            return []
        return [agui.ToolCallArgsEvent(tool_call_id=call.id, delta=encodable(piece.arguments))]

    def _started(self, call: _StreamedCall) -> list[agui.BaseEvent]:
        """Start ``call`` under a new id, its name, and the arguments streamed so far."""
        call.id = self._new_id(encodable(call.sent))
        events: list[agui.BaseEvent] = [
            agui.ToolCallStartEvent(
                tool_call_id=call.id,
                tool_call_name=encodable(call.name),
                parent_message_id=message_id(self._next),
            )
        ]
        if arguments := "".join(call.arguments):
            events.append(agui.ToolCallArgsEvent(tool_call_id=call.id, delta=encodable(arguments)))
        return events

    def _new_id(self, sent: str) -> str:
        """``sent``, or the first ``<sent>-<n>`` no call told so far has."""
        told, n = sent or "call", 2
        while told in self._told:
            told, n = f"{sent or 'call'}-{n}", n + 1
        self._told.add(told)
        return told

    def _committed(self, event: AgentThread.Event) -> list[agui.BaseEvent]:
        events: list[agui.BaseEvent] = []
        match event:
            case AgentThread.MessageAppended(message=message) if message.role is Role.ASSISTANT:
                streamed = dict(self._calls)
                for index, call in enumerate(message.tool_calls):
                    # The same position first, else the streamed call that holds it; a
                    # call that streamed as none is told now, whole.
                    order = [index, *(i for i in streamed if i != index)]
                    match = next(
                        (i for i in order if i in streamed and streamed[i].is_(call)), None
                    )
                    told = streamed.pop(match) if match is not None else None
                    if told is None:
                        told = _StreamedCall(call.id, call.name, [call.arguments])
                        self._calls[-1 - index] = told  # ended with the others
                    if told.id is None:
                        events += self._started(told)
                    assert told.id is not None
                    self._names[call.id] = told.id
                    self._told.add(call.id)
                events += self.closed()
            case AgentThread.ToolResultRecorded(tool_call_id=call_id, content=content):
                result = agui.ToolCallResultEvent(
                    message_id=message_id(self._next),
                    tool_call_id=self._names.get(call_id, call_id),
                    content=content,
                    role="tool",
                )
                events = [result]
        if isinstance(event, MESSAGE_EVENTS):
            self._next += 1
        return events


MESSAGE_EVENTS = (AgentThread.MessageAppended, AgentThread.ToolResultRecorded, AgentThread.Steered)
"""The events that add a message to the thread."""


def _version_delta(event: AgentThread.Event) -> agui.StateDeltaEvent:
    patch = [{"op": "add", "path": "/version", "value": event.originator_version}]
    return agui.StateDeltaEvent.model_validate({"delta": patch})


# The thread, from the store ------------------------------------------------------------


def state_snapshot(agent: Agent, *, stored: bool) -> agui.StateSnapshotEvent:
    """The thread's state as the front end keeps it: its id, version and status, as
    stored; version 0 while the store holds nothing of it (``stored`` false), though
    the agent holds its start, not saved until a run records something."""
    state = agent.state
    version = state.version if stored else 0
    snapshot = {"thread_id": agent.thread_id, "version": version, "status": str(state.status)}
    return agui.StateSnapshotEvent(snapshot=snapshot)


def messages_snapshot(agent: Agent) -> agui.MessagesSnapshotEvent:
    """The thread's messages, as stored, under their AG-UI ids."""
    return agui.MessagesSnapshotEvent(
        messages=[_message(position, m) for position, m in enumerate(agent.messages)]
    )


def _message(position: int, message: Message) -> Any:
    key = message_id(position)
    match message.role:
        case Role.SYSTEM:
            return agui.SystemMessage(id=key, content=message.content)
        case Role.USER:
            return agui.UserMessage(id=key, content=message.content)
        case Role.TOOL:
            return agui.ToolMessage(
                id=key, content=message.content, tool_call_id=message.tool_call_id or ""
            )
    calls = [
        agui.ToolCall(id=c.id, function=agui.FunctionCall(name=c.name, arguments=c.arguments))
        for c in message.tool_calls
    ]
    return agui.AssistantMessage(id=key, content=message.content, tool_calls=calls or None)


def results_of(agent: Agent, tool_call_ids: Collection[str]) -> list[agui.BaseEvent]:
    """The recorded results of these calls (a review's decision records its call's), as
    the thread holds them."""
    return [
        agui.ToolCallResultEvent(
            message_id=message_id(position),
            tool_call_id=message.tool_call_id or "",
            content=message.content,
            role="tool",
        )
        for position, message in enumerate(agent.messages)
        if message.role is Role.TOOL and message.tool_call_id in tool_call_ids
    ]


def interrupts(agent: Agent) -> list[agui.Interrupt]:
    """An AG-UI interrupt for each pause that waits for a person, named by its review id
    (a review) or its pause token (a tool's pause, a call in doubt)."""
    messages, requests = agent.messages, review_requests(agent)
    return [_interrupt(messages, requests, pause) for pause in agent.awaiting_person]


def review_requests(agent: Agent) -> dict[str, ReviewRequest]:
    """The thread's pending review requests by review id: what a review asks about is
    its request, whose digest is computed from the operation it holds, never what its
    pause's data says (a record anyone who can write the database can change)."""
    return {request.review_id: request for request in agent.pending_reviews}


def open_interrupt_ids(agent: Agent) -> dict[str, Pause]:
    """The pauses waiting for a person, by the id their AG-UI interrupt carries."""
    messages = agent.messages
    return {interrupt_id(messages, p): p for p in agent.awaiting_person}


def interrupt_id(messages: tuple[Message, ...], pause: Pause) -> str:
    """A review's id, or another pause's token."""
    if pause.kind is PauseKind.REVIEW:
        return str(pause.interrupt.data["review_id"])
    return pause_token(messages, pause)


def _interrupt(
    messages: tuple[Message, ...], requests: Mapping[str, ReviewRequest], pause: Pause
) -> agui.Interrupt:
    interrupt = pause.interrupt
    key = interrupt_id(messages, pause)
    if pause.kind is PauseKind.REVIEW:
        request = requests[key]  # the thread pauses on a review only while it is pending
        return agui.Interrupt(
            id=key,
            reason="tool_call",
            message=f"Approve the call of {request.tool_name!r} with these arguments?",
            tool_call_id=request.tool_call_id,
            response_schema=review_answer_schema(request.digest),
            metadata={
                "covonaut": {
                    "digest": request.digest,
                    "tool_name": request.tool_name,
                    "arguments": request.arguments,
                }
            },
        )
    if pause.kind is PauseKind.INTERRUPT:
        return agui.Interrupt(
            id=key,
            reason="input_required",
            message=interrupt.reason,
            tool_call_id=interrupt.tool_call_id,
            response_schema={
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
                "additionalProperties": False,
            },
        )
    return agui.Interrupt(
        id=key,
        reason="covonaut:in_doubt",
        message=f"{interrupt.reason} (settle it in the reviewer inbox or the command line)",
        tool_call_id=interrupt.tool_call_id,
    )


def review_answer_schema(digest: str) -> dict[str, Any]:
    """What a review's resume payload holds: the decision, bound to the digest of the
    operation the reviewer was shown."""
    text = {"type": "string"}
    return {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "digest": {"const": digest},
            "editedArgs": {
                "type": "object",
                "description": "Full replacement of the tool's arguments, with an approval.",
            },
            "comment": text,
            "reason": text,
            "answer": {**text, "description": "The tool's result instead of running it."},
        },
        "required": ["approved", "digest"],
        "additionalProperties": False,
    }
