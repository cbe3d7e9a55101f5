"""Naming the threads the reviewer queue lists, from the store (ADR 0076).

The queue's events name a thread's stream, not the thread. A fork's first event and a
start from a saved state name their thread, and the queue follows them; a thread begun
afresh is named by its first event, which the queue does not follow: it reads that
event from the thread's stream when it first has a pause of the thread to list (and
keeps the name), so that naming costs the threads that pause, not every thread the log
began. A thread given up is kept as such by the view, and never named after.
"""

from __future__ import annotations

from collections.abc import Collection
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from covonaut_es import _logs
from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.errors import SerializationError
from covonaut_es.store._records import StoredRecords

log = _logs.logger(__name__)


class ThreadNames:
    """The ids of the threads of streams the queue is about to list, read from the
    threads' first events in the store of ``records``."""

    def __init__(self, records: StoredRecords) -> None:
        self._records = records
        self._read = records.mapper.to_domain_event

    def __call__(self, streams: Collection[UUID]) -> dict[str, str]:
        """The thread id of each of ``streams`` (by its hex) that a thread began afresh.
        A first event names only the stream its thread id derives to: one copied or
        moved into another stream (a fork's, which opens after version 1) names none."""
        if not streams:
            return {}
        read = self._records.openings(streams)
        names: dict[str, str] = {}
        passed_over = read.passed_over
        for record in read.records:
            event = self._event(record)
            if (
                isinstance(event, AgentThread.Started)
                and thread_aggregate_id(event.thread_id) == event.originator_id
            ):
                names[event.originator_id.hex] = event.thread_id
            else:
                passed_over += 1
        if passed_over:
            # Counted, not named: a record's stream id is what an encrypted store keeps
            # out of clear text.
            log.warning(
                "review queue: passing over %d of the threads' first events it read, "
                "damaged or not theirs: those threads' pauses are not listed. "
                "`covonaut-es migrate --check` reads every record and names a damaged one",
                passed_over,
            )
        return names

    def _event(self, record: StoredEvent) -> object:
        try:
            return self._read(record)
        except SerializationError:
            return None
