"""Compact topics: the short code a stored row names a library class by (ADR 0064).

A row of one of the library's own classes stores a code (``"3"``) in its topic column
instead of the class's topic (``"covonaut.thread.ToolResultRecorded"``): a thirtieth of
the bytes, on every row. Rows written before keep their full topics, and every reader
takes both forms. A code has neither ``.`` nor ``:``, which every topic the library or
eventsourcing names a class by has (and the mapper refuses an application's class whose
topic is a code), so each row says which form it holds. A chain link covers the full
topic, whichever form the row holds, and an export carries it. The table is the one
place codes are given; a code, once given, names its topic for good: a class that is
removed keeps its line, and a new class takes the next number. Classes of an
application's own keep their full topics; one renamed or moved is found by the old topic
that eventsourcing's ``register_topic`` registered for it (:func:`registered_object`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

# eventsourcing 9.5.6: utils._topic_cache holds what register_topic registered (read
# only here, so that what a stored topic names is found without importing anything).
from eventsourcing.utils import _topic_cache, get_topic

_CODES = (
    ("1", "covonaut.thread.MessageAppended"),
    ("2", "covonaut.thread.ToolCalled"),
    ("3", "covonaut.thread.ToolResultRecorded"),
    ("4", "covonaut.thread.TurnStarted"),
    ("5", "covonaut.thread.CheckpointSaved"),
    ("6", "covonaut.thread.RunStarted"),
    ("7", "covonaut.thread.RunFinished"),
    ("8", "covonaut.thread.Started"),
    ("9", "covonaut.thread.Snapshot"),
    ("10", "covonaut.thread.ToolCallSettled"),
    ("11", "covonaut.thread.ToolPinned"),
    ("12", "covonaut.thread.ToolCallRetried"),
    ("13", "covonaut.thread.RetryRequested"),
    ("14", "covonaut.thread.Interrupted"),
    ("15", "covonaut.thread.InterruptAnswered"),
    ("16", "covonaut.thread.Steered"),
    ("17", "covonaut.thread.Resumed"),
    ("18", "covonaut.thread.Compacted"),
    ("19", "covonaut.thread.RunFailed"),
    ("20", "covonaut.thread.Forked"),
    ("21", "covonaut.thread.Abandoned"),
    ("22", "covonaut.thread.Labelled"),
    ("23", "covonaut.thread.ReviewRequested"),
    ("24", "covonaut.thread.ReviewDecided"),
    ("25", "covonaut.thread.ReviewApprovedWithEdits"),
    ("26", "covonaut.thread.ReviewResponded"),
    ("27", "covonaut.thread.ReviewExpired"),
    ("28", "covonaut.thread.ReviewDeadlineNear"),
    ("29", "covonaut.thread.ReviewApprovedInPart"),
    ("30", "covonaut.thread.ApprovalUsed"),
    ("31", "covonaut.thread.StartedFromState"),
    ("32", "covonaut.state.StateSaved"),
    ("33", "covonaut.submission.InputSubmitted"),
    ("34", "covonaut.submission.InputTaken"),
    ("35", "covonaut.thread.TurnAnswered"),
    ("36", "covonaut.thread.TurnAnsweredWithCalls"),
    ("37", "covonaut.thread.ToolResultCheckpointed"),
    ("38", "covonaut.thread.RunFinishedCheckpointed"),
    ("39", "covonaut.thread.RunStartedWithInput"),
    ("40", "covonaut.thread.StartedWithInput"),
)
"""Each code and the topic it stands for, in the order they were given. Append only."""

TOPIC_CODES: Mapping[str, str] = MappingProxyType(dict(_CODES))
"""The topic each code stands for."""

_BY_TOPIC: Mapping[str, str] = {topic: code for code, topic in _CODES}


def compact(topic: str) -> str:
    """The form a record of ``topic`` is stored in: its code, when it has one, else
    the topic itself (a code given stays as it is)."""
    return _BY_TOPIC.get(topic, topic)


def full_topic(stored: str) -> str:
    """The topic a stored row's topic column names: the one its code stands for, else
    the column as it is (a full topic, or text no reader knows)."""
    return TOPIC_CODES.get(stored, stored)


def with_codes(topics: Iterable[str]) -> list[str]:
    """``topics``, each a library class's with its code beside it: what a filter of
    the records named by those topics (an application's ``notify_topics``, a follower's
    ``follow_topics``, named the eventsourcing way) must name to find them."""
    named = list(topics)
    return list(dict.fromkeys([*named, *(compact(topic) for topic in named)]))


def stored_forms(classes: Iterable[type]) -> tuple[str, ...]:
    """What a filter on the records of ``classes`` names: each one's topic and, when
    it has one, its code, since rows written before codes keep their topics."""
    return tuple(with_codes(get_topic(cls) for cls in classes))


def registered_object(topic: str) -> object | None:
    """What ``register_topic`` registered for ``topic`` (a class renamed or moved, its
    old topic registered for it), found as ``resolve_topic`` finds it, but without
    importing anything: the object registered under the topic itself, or under the
    topic's module and a leading part of its path, then the rest of the path as
    attributes of that object. None when nothing registered names it."""
    if topic in _topic_cache:
        return _topic_cache[topic]
    module, _, path = topic.partition(":")
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        found = _topic_cache.get(f"{module}:{'.'.join(parts[:cut])}")
        if found is not None:
            for name in parts[cut:]:
                found = getattr(found, name, None)
            return found
    return None
