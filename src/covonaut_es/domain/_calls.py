"""What a ``ToolCalled`` event does not store: its call, and the call's idempotency key.

A ``ToolCalled`` event names its call by id (ADR 0023). The call itself, with its name
and arguments, is stored once, in the assistant message appended just before; its
idempotency key is derived from the thread, the event's version and the call id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from covonaut_es.messages import Message, Role, ToolCall


def requested_call(messages: Sequence[Message], tool_call_id: str) -> ToolCall | None:
    """The call with ``tool_call_id`` in the latest assistant message that holds one,
    or None when no assistant message does.

    Models may reuse a call id across turns, so the latest message holding it is the one
    that asked; within one message the last such call counts, as it did when code before
    unique call ids recorded repeated ids one after another. The search runs back from the
    newest message, which holds the call whenever its ``ToolCalled`` is being applied.
    """
    for message in reversed(messages):
        if message.role is Role.ASSISTANT and message.tool_calls:
            call = _calls_by_id(message).get(tool_call_id)
            if call is not None:
                return call
    return None


_last_indexed: tuple[Message, dict[str, ToolCall]] | None = None


def _calls_by_id(message: Message) -> dict[str, ToolCall]:
    """The message's calls by id, the last of a repeated id winning.

    The index of the last message asked is kept: each of a response's n calls is looked
    up in the same message when it is recorded or replayed, and a scan per lookup would
    make a hostile model's batch of thousands of calls cost n² on every load.
    """
    global _last_indexed  # a memo of a pure function: worst case, built twice
    last = _last_indexed
    if last is None or last[0] is not message:
        last = (message, {call.id: call for call in message.tool_calls})
        _last_indexed = last
    return last[1]


def event_key(thread_id: str, version: int, tool_call_id: str) -> str:
    """The key of a call at the event of ``version``: 128 bits of SHA-256, in hex.

    It is the idempotency key of the call a ``ToolCalled`` or a
    ``TurnAnsweredWithCalls`` at ``version`` records, and the review id of a
    ``ReviewRequested``. The version keeps it unique when a model
    reuses call ids across turns. ``ToolCalled`` stores no key since version 2, so this
    function is part of the stored format: changing it would give every recorded call a
    new key and repeat its side effects; it needs a new ``ToolCalled`` version instead.
    """
    material = f"{thread_id}\x00{version}\x00{tool_call_id}".encode()
    return hashlib.sha256(material).hexdigest()[:32]


_KEY_FORM = re.compile(r"[0-9a-f]{32}")


def has_key_form(text: str) -> bool:
    """Whether ``text`` has the form of the keys :func:`event_key` gives: review ids
    and idempotency keys. No call may have such an id: a model that chose one could
    make a call id equal to a review id it read, or one it predicts (the function is no
    secret), and have its call taken for the review."""
    return _KEY_FORM.fullmatch(text) is not None
