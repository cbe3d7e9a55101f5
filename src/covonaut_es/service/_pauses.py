"""Naming one pause: the token a page or a listing gives a pause, and the check that a
command's pause is still the one pending.

A pause is found by its thread and its call, but a model may use a call id again in a
later turn, and the thread may pause on it again: a form loaded for the first pause
would then act on the second. The token tells them apart: it is made of the pause's
kind, its call and what makes that pause itself, which no later pause shares (a
review's id; a call in doubt's idempotency key, and the version that paused it, since
a retry keeps the key; the place in the thread of the tool message that records a
tool's pause).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol

from covonaut_es.domain import AgentThread, Pause, PauseKind, ThreadState
from covonaut_es.errors import InvalidDecisionError, SerializationError, StalePauseError
from covonaut_es.messages import Message, Role
from covonaut_es.store import Store


def pause_token(messages: Sequence[Message], pause: Pause) -> str:
    """The token of ``pause`` of a thread whose messages are ``messages`` (all of them):
    32 hex digits, the same for as long as the pause is the same.

    Args:
        messages: The thread's messages.
        pause: One of its pauses.
    """
    interrupt = pause.interrupt
    data = interrupt.data if isinstance(interrupt.data, dict) else {}
    if pause.kind is PauseKind.REVIEW:
        anchor = str(data.get("review_id"))
    elif pause.kind is PauseKind.IN_DOUBT:
        # A pause recorded before in-doubt pauses named their version keeps its token.
        anchor = str(data.get("idempotency_key"))
        if "paused_at_version" in data:
            anchor += f"@{data['paused_at_version']}"
    else:
        anchor = str(_tool_message_at(messages, interrupt.tool_call_id))
    material = f"{pause.kind}\x00{interrupt.tool_call_id}\x00{anchor}".encode()
    return hashlib.sha256(material).hexdigest()[:32]


class Listed(Protocol):
    """A pause as a listing names it (a reviewer queue's item)."""

    @property
    def thread_id(self) -> str: ...
    @property
    def kind(self) -> PauseKind: ...
    @property
    def tool_call_id(self) -> str: ...
    @property
    def review_id(self) -> str | None: ...


def listed_pause_tokens(store: Store, items: Iterable[Listed]) -> list[str]:
    """The token of each queue item as its thread records it now (one load per thread),
    for a listing: "" for an item its thread does not hold, and for every item of a
    thread whose stored records do not read (:class:`~covonaut_es.errors.SerializationError`:
    a row that does not fold, a payload that does not decode or that a newer version
    wrote): nothing can be decided on that thread, and one altered thread does not stop
    the listing of every other."""
    states: dict[str, ThreadState | None] = {}
    tokens = []
    for item in items:
        if item.thread_id not in states:
            try:
                states[item.thread_id] = store.state_at(item.thread_id)
            except SerializationError:
                states[item.thread_id] = None
        state = states[item.thread_id]
        tokens.append(
            ""
            if state is None
            else pending_pause_token(state, item.kind, item.tool_call_id, item.review_id)
        )
    return tokens


def pending_pause_token(
    state: ThreadState, kind: PauseKind, tool_call_id: str, review_id: str | None = None
) -> str:
    """The token of the pending pause of ``kind`` on ``tool_call_id`` (of review
    ``review_id``, for a review) as ``state`` records it; "" when it has none, as when
    a listing is older than the thread.

    Args:
        state: The thread's state.
        kind: The pause's kind.
        tool_call_id: Its call.
        review_id: For a review, its id.
    """
    for pause in state.pauses:
        interrupt = pause.interrupt
        data = interrupt.data if isinstance(interrupt.data, dict) else {}
        if (
            not pause.resolved
            and pause.kind is kind
            and interrupt.tool_call_id == tool_call_id
            and (review_id is None or data.get("review_id") == review_id)
        ):
            return pause_token(state.messages, pause)
    return ""


def _tool_message_at(messages: Sequence[Message], tool_call_id: str) -> int:
    """Where the last tool message of the call is (-1: none, a pause a state document
    brought)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role is Role.TOOL and message.tool_call_id == tool_call_id:
            return index
    return -1


def check_pause(thread: AgentThread, token: object, tool_call_id: str | None) -> None:
    """Refuse a command whose pause (``token``) is no longer pending on the thread: on
    ``tool_call_id``, or (None, to give the thread up) on any call.

    Raises:
        InvalidDecisionError: The token is no text.
        StalePauseError: No pending pause has that token.
    """
    if not isinstance(token, str):
        msg = f"the pause must be named by its token (text), got {type(token).__name__}"
        raise InvalidDecisionError(msg)
    pending = [
        pause
        for pause in thread.pauses
        if not pause.resolved
        and (tool_call_id is None or pause.interrupt.tool_call_id == tool_call_id)
    ]
    if any(pause_token(thread.messages, pause) == token for pause in pending):
        return
    where = f"call {tool_call_id!r}" if tool_call_id is not None else "any call"
    now = ", ".join(str(pause.kind) for pause in pending) or "none"
    msg = (
        f"the pause {token[:40]!r} is no longer pending on {where} of thread "
        f"{thread.thread_id!r} (pending there now: {now}): it was dealt with and the "
        "thread moved on; reload the pause to see what waits now; nothing was recorded"
    )
    raise StalePauseError(msg)
