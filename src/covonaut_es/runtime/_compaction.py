"""Context compaction: what the model sees when the conversation grows too long.

Compaction never deletes history. A ``Compacted`` event records a summary and the
index of the first message still shown; the model then sees the system prompt, the
summary, and the messages from that index on, while the stream keeps everything for
audits and forks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs
import msgspec

from covonaut_es.domain import Compaction
from covonaut_es.messages import Message, ProviderRequest, Role

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


class CompactionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A compactor's decision to compact.

    Attributes:
        first_kept: Index of the first message the model keeps seeing.
        summary_request: A request whose answer is the summary (the runtime sends it to
            the agent's provider); or None when ``summary`` is given directly.
        summary: The summary, when computed without a model.
    """

    first_kept: int
    summary_request: ProviderRequest | None = None
    summary: str = ""


class Compactor(Protocol):
    """Decides before each model call whether the context must be compacted."""

    def plan(
        self, messages: Sequence[Message], previous: Compaction | None, *, model: str
    ) -> CompactionPlan | None:
        """Return a plan when the context is too long, else None.

        Args:
            messages: Every message of the thread.
            previous: The thread's latest compaction, if any.
            model: The agent's model, for a summary request.
        """
        ...


def context_messages(messages: Sequence[Message], compaction: Compaction | None) -> list[Message]:
    """The messages the model sees: the system prompt, the summary, the kept tail."""
    if compaction is None:
        return list(messages)
    head = [messages[0]] if messages and messages[0].role is Role.SYSTEM else []
    summary = Message(Role.USER, SUMMARY_PREFIX + compaction.summary)
    return [*head, summary, *messages[max(compaction.first_kept, len(head)) :]]


def _size(message: Message) -> int:
    return len(message.content) + sum(len(c.arguments) for c in message.tool_calls)


@attrs.frozen
class SummarizingCompactor:
    """Asks the model for a summary when the context passes a size budget.

    Sizes are counted in characters (about four per token) so that no tokenizer is
    needed.

    Attributes:
        max_context_chars: Compact when the context the model would see is larger.
        keep_last: Keep at most this many of the newest messages verbatim.
        keep_chars: ...and at most this many characters of them.
        instructions: The system prompt of the summary request.
    """

    max_context_chars: int = 48_000
    keep_last: int = 8
    keep_chars: int = 16_000
    instructions: str = (
        "Summarize the conversation below for your own later use. Keep every fact, "
        "decision, open question and tool result that may still matter. Be concise."
    )

    def plan(
        self, messages: Sequence[Message], previous: Compaction | None, *, model: str
    ) -> CompactionPlan | None:
        """Plan a compaction when the visible context exceeds ``max_context_chars``."""
        visible = context_messages(messages, previous)
        if sum(map(_size, visible)) <= self.max_context_chars:
            return None
        first_kept = self._first_kept(messages)
        start = previous.first_kept if previous else 0
        if first_kept <= start:
            return None  # nothing new to summarize
        earlier = [m for m in messages[start:first_kept] if m.role is not Role.SYSTEM]
        transcript = "\n".join(f"{m.role}: {m.content}" for m in earlier)
        if previous:
            transcript = f"{SUMMARY_PREFIX}{previous.summary}\n\n{transcript}"
        request = ProviderRequest(
            model=model,
            messages=(Message(Role.SYSTEM, self.instructions), Message(Role.USER, transcript)),
        )
        return CompactionPlan(first_kept=first_kept, summary_request=request)

    def _first_kept(self, messages: Sequence[Message]) -> int:
        first = len(messages)
        kept_chars = 0
        while first > 0 and len(messages) - first < self.keep_last:
            size = _size(messages[first - 1])
            if kept_chars + size > self.keep_chars or messages[first - 1].role is Role.SYSTEM:
                break
            kept_chars += size
            first -= 1
        # A tool result cannot lead the context without the call it answers.
        while first < len(messages) and messages[first].role is Role.TOOL:
            first += 1
        return first
