"""Naming the threads the reviewer queue lists, from the store (ADR 0076).

The queue's events name a thread's stream, not the thread. A fork's first event and a
start from a saved state name their thread, and the queue follows them; a thread begun
afresh is named by its first event, which the queue does not follow: it reads that
event from the store when it first has something of the thread to list, with the
thread's abandonment if any, so that naming costs the threads that pause, not every
thread the log began.
"""

from __future__ import annotations

from collections.abc import Collection
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from covonaut_es import _logs
from covonaut_es.domain import AgentThread
from covonaut_es.errors import SerializationError
from covonaut_es.store._openings import OPENING_VERSION
from covonaut_es.store._records import StoredRecords

log = _logs.logger(__name__)


class ThreadNames:
    """The ids of the threads of streams the queue is about to list, read from the
    threads' first events in the store of ``records``."""

    def __init__(self, records: StoredRecords) -> None:
        self._records = records
        self._read = records.mapper.to_domain_event

    def __call__(self, streams: Collection[UUID]) -> dict[str, str]:
        """The thread id of each of ``streams`` (by its hex) that a thread began afresh
        and that holds no abandonment: an abandoned thread waits for nobody, and the
        events of a run it stopped, committed after it, list nothing of it."""
        if not streams:
            return {}
        names: dict[str, str] = {}
        abandoned: set[str] = set()
        for record in self._records.openings(streams, AgentThread.Abandoned):
            event = self._event(record)
            if isinstance(event, AgentThread.Abandoned):
                abandoned.add(event.originator_id.hex)
            elif isinstance(event, AgentThread.Started):
                names[event.originator_id.hex] = event.thread_id
        return {stream: name for stream, name in names.items() if stream not in abandoned}

    def _event(self, record: StoredEvent) -> object:
        try:
            return self._read(record)
        except SerializationError as exc:
            # Named by its kind alone: the record's error names a stream, whose unkeyed
            # id an encrypted store keeps out of clear text.
            opening = record.originator_version == OPENING_VERSION
            log.warning(
                "review queue: passing over a thread's %s, which does not decode (%s); %s. "
                "`covonaut-es replay --verify` names the thread",
                "first event" if opening else "abandonment",
                type(exc).__name__,
                "its pauses are not listed" if opening else "it may be listed as waiting",
            )
            return None
