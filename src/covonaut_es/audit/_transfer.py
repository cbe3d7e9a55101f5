"""Export a thread's stream as JSON Lines, and import it into another store.

One line per event: the thread id, version, topic and the payload exactly as stored
(decrypted and decompressed), so that an imported thread keeps its hash chain and an
audit of the copy verifies. Importing checks every line, the versions and the chain
before it writes anything, and then writes each thread in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from eventsourcing.persistence import StoredEvent

from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.domain._integrity import CHAIN_KEY, UNCHAINED, chain_hash
from covonaut_es.errors import SerializationError, ThreadConflictError, TransferError
from covonaut_es.store import Store


class ExportedEvent(msgspec.Struct, frozen=True):
    """One line of an export."""

    thread_id: str
    version: int
    topic: str
    payload: dict[str, Any]


def export_thread(store: Store, thread_id: str) -> Iterator[str]:
    """The thread's own events as JSON lines (a fork's inherited events stay with its
    parent: export that too, first)."""
    store.load(thread_id)  # a clear error for an unknown thread
    owner = thread_aggregate_id(thread_id)
    for record in store._stored_records(thread_id):
        if record.originator_id != owner:
            continue
        payload = msgspec.json.decode(store._plain_payload(record))
        line = ExportedEvent(thread_id, record.originator_version, record.topic, payload)
        yield msgspec.json.encode(line).decode()


def import_threads(store: Store, lines: Iterable[str]) -> list[str]:
    """Import exported lines; returns the thread ids written, in order.

    Raises:
        TransferError: A line is malformed, a version is missing or repeated, a topic is
            unknown, or the hash chain does not verify; nothing was written.
        ThreadConflictError: A thread already exists in the store.
    """
    threads: dict[str, list[ExportedEvent]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = msgspec.json.decode(line, type=ExportedEvent)
        except msgspec.DecodeError as exc:
            msg = f"line {number} is not an exported event: {exc}"
            raise TransferError(msg) from exc
        threads.setdefault(event.thread_id, []).append(event)
    for thread_id, events in threads.items():
        _check(store, thread_id, events)
    for thread_id, events in threads.items():
        store._insert_records(
            StoredEvent(
                originator_id=thread_aggregate_id(thread_id),
                originator_version=event.version,
                topic=event.topic,
                state=msgspec.json.encode(event.payload),
            )
            for event in events
        )
    return list(threads)


def _check(store: Store, thread_id: str, events: list[ExportedEvent]) -> None:
    if store.exists(thread_id):
        msg = f"cannot import thread {thread_id!r}: the store already has it"
        raise ThreadConflictError(msg, thread_id=thread_id, expected_version=0)
    first = events[0]
    start, previous = 1, UNCHAINED
    if first.topic == AgentThread.Forked.TOPIC:
        parent, at = first.payload.get("parent_thread_id"), first.payload.get("parent_version")
        base = store.find(str(parent), version=at) if isinstance(at, int) else None
        if base is None or not isinstance(at, int):
            msg = f"fork {thread_id!r} needs its parent {parent!r} at version {at}: import it first"
            raise TransferError(msg)
        start, previous = at + 1, base.chain_head or UNCHAINED
    for expected, event in enumerate(events, start=start):
        where = f"thread {thread_id!r} version {event.version}"
        if event.version != expected:
            msg = f"{where}: expected version {expected}; versions must be contiguous"
            raise TransferError(msg)
        try:
            store._mapper.event_class(event.topic, where=where)
        except SerializationError as exc:
            msg = f"{where}: unknown event type {event.topic!r}"
            raise TransferError(msg) from exc
        chain = event.payload.get(CHAIN_KEY, UNCHAINED)
        if chain != UNCHAINED:
            if chain != chain_hash(previous, event.topic, event.version, event.payload):
                msg = f"{where}: the hash chain does not verify; the export was altered"
                raise TransferError(msg)
            previous = chain
