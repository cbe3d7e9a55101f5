"""Head anchors: each thread's newest version and chain hash, in a small table written
in the same transaction as its events (ADR 0013).

A hash chain shows an altered or removed event in the middle of a stream, but not
that the newest events were deleted: what is left still chains. The anchor says where
the stream ended when it was last written, so an audit finds a stream shorter than
its anchor. The table lives beside the events table of each back end; the back end's
application (and process) recorder is given the writing of it (an ``AgentApplication``,
a store's or the user's own on eventsourcing's SQLite or PostgreSQL module, passes the
heads of the threads it saves as a keyword of ``insert_events``, as eventsourcing's
process recorders receive their tracking record; ADR 0052).

When the table is created in a store that already holds threads, every thread is
anchored at its present version (its chain is then not recorded: ``""``). From then on
every thread the library writes has an anchor, so in a store with any anchor a thread
without one is a finding (its row was deleted, or its events were written around the
library), not a return to the state before anchors.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar
from uuid import UUID

import msgspec
from eventsourcing.persistence import ApplicationRecorder, IntegrityError, StoredEvent

from covonaut_es.errors import LeaseLostError, StoredRowError
from covonaut_es.store._chain import UNCHAINED, chain_in
from covonaut_es.store._rows import checked_head

HEADS = "covonaut_thread_heads"
"""The ``insert_events`` keyword carrying ``(originator_id, version, chain)`` rows."""

Head = tuple[UUID, int, str]

FENCES = "covonaut_lease_fences"
"""The ``insert_events`` keyword carrying ``(originator_id, token, session)`` rows: each
stream's run lease must still stand at that token (and on PostgreSQL, its lock be held by
the backend ``session``, when not 0), checked in the insert's own transaction, or the
insert fails with :class:`~covonaut_es.errors.LeaseLostError` and writes nothing."""

Fence = tuple[UUID, int, int]

NEW_STREAMS = "covonaut_new_streams"
"""The ``insert_events`` keyword naming streams, each with its row in :data:`HEADS`,
that must hold no event but the ones inserted (a fork's new thread, whose first version
is not 1, so that the uniqueness of versions does not guard it): the insert fails with
``IntegrityError`` otherwise, checked in its own transaction where the back end's
``guards_new_streams`` holds."""


class HeadAnchor(msgspec.Struct, frozen=True):
    """What the head table says of one thread.

    Attributes:
        store_anchors: The store anchors every thread's head (it holds an anchor).
        version: The anchored version, or None when the thread has no anchor.
        chain: The anchored chain hash (``""``: anchored when the table was created).
        unkept: Why the application keeps no head anchors at all, when it keeps none
            (an application of the user's own whose recorder keeps none, or whose
            database has no head table yet); empty for a store, whose missing anchors
            the table itself explains.
    """

    store_anchors: bool
    version: int | None = None
    chain: str = UNCHAINED
    unkept: str = ""


class RecorderAnchors:
    """The head-anchor parts of a back end's port, where its own application recorder
    class (``anchoring_recorder``) anchors heads; eventsourcing's stock recorders (a
    user's application on eventsourcing's module) anchor none."""

    anchoring_recorder: ClassVar[type[Any]]

    def anchor_heads(self, recorder: ApplicationRecorder, *, create: bool, summaries: bool) -> None:
        if isinstance(recorder, self.anchoring_recorder):
            recorder.anchor_heads(create=create)
            recorder.keeps_summaries = summaries

    def anchors_heads(self, recorder: ApplicationRecorder) -> bool:
        return isinstance(recorder, self.anchoring_recorder)

    def guards_new_streams(self, recorder: ApplicationRecorder) -> bool:
        return isinstance(recorder, self.anchoring_recorder) and bool(recorder.anchoring)

    def read_head(self, recorder: ApplicationRecorder, stream: UUID) -> HeadAnchor:
        if isinstance(recorder, self.anchoring_recorder):
            head: HeadAnchor = recorder.read_head(stream)
            return head
        return HeadAnchor(store_anchors=False)


def heads_of_records(records: Iterable[StoredEvent]) -> list[Head]:
    """The newest version and chain of each stream among records with plain payloads."""
    heads: dict[UUID, Head] = {}
    for record in records:
        stream = UUID(str(record.originator_id))
        heads[stream] = (stream, record.originator_version, chain_in(record.state))
    return list(heads.values())


def heads_table(recorder: Any) -> str:
    """The name of the head table beside ``recorder``'s events table."""
    return f"{recorder.events_table_name}_heads"


def lease_table(recorder: Any) -> str:
    """The name of the lease-token table beside ``recorder``'s events table."""
    return f"{recorder.events_table_name}_leases"


def lease_lost(stream: UUID, token: int, problem: str) -> LeaseLostError:
    """The error of a save whose run lease of ``stream`` no longer stands."""
    msg = (
        f"the run lease {token} of stream {stream} was lost: {problem}, so another runner "
        "may hold the thread; nothing was written"
    )
    return LeaseLostError(msg, token=token)


def check_fences(
    fences: Iterable[Fence],
    token_of: Callable[[UUID], int | None],
    holds_lock: Callable[[UUID, int], bool] = lambda stream, session: True,
) -> None:
    """Raise unless each stream's lease stands at the fence's token, its lock held by
    the fence's session where the back end can tell."""
    for stream, token, session in fences:
        stored = token_of(stream)
        if stored != token:
            found = "none" if stored is None else f"lease {stored}"
            raise lease_lost(stream, token, f"the store records {found}")
        if session and not holds_lock(stream, session):
            raise lease_lost(stream, token, f"database session {session} holds its lock no more")


def check_heads_follow(
    heads: Iterable[Head],
    stored_events: Sequence[StoredEvent],
    anchored: Callable[[UUID], int | None],
) -> None:
    """Refuse an insert whose events follow a version below their stream's anchor (its
    newest events were deleted behind the library): the insert's anchor would hide the
    deletion that :meth:`~covonaut_es.Store.verify` reports, a recorded rejection among
    what it removed. Asked after the events were inserted, in the same transaction, so
    that a conflict stays a conflict; ``anchored`` reads a stream's anchored version
    (None: none).

    Raises:
        StoredRowError: Naming the stream and both versions; nothing is stored.
    """
    first: dict[Any, int] = {}
    for record in stored_events:
        first.setdefault(record.originator_id, record.originator_version)
    for stream, _, _ in heads:
        version = first.get(stream)
        at = None if version is None else anchored(stream)
        if at is not None and version is not None and at >= version:
            raise head_ahead(stream, at, version - 1)


def head_ahead(stream: object, anchored: int, follows: int) -> StoredRowError:
    """The refusal of a save that follows version ``follows`` of ``stream``, whose head
    is anchored at ``anchored``."""
    msg = (
        f"stream {stream}: its head is anchored at version {anchored}, but its stored "
        f"events end at version {follows}: its newest events were removed behind the "
        "library, which this save would hide; nothing was saved: `verify` names what is "
        "missing; restore the store from a backup"
    )
    return StoredRowError(msg)


def taken(stream: UUID) -> IntegrityError:
    """The error of an insert into a stream that was to be new."""
    return IntegrityError(f"stream {stream} already has events; it was to be a new one")


def refuse_taken_streams(
    kwargs: dict[str, Any],
    stored_events: Sequence[StoredEvent],
    count: Callable[[UUID], int],
) -> None:
    """Raise unless each stream in :data:`NEW_STREAMS` holds only the events inserted,
    ``count`` giving how many a stream holds now (after the insert, under its lock)."""
    new = kwargs.get(NEW_STREAMS)
    if not new:  # most saves: none to count
        return
    inserted = collections.Counter(UUID(str(e.originator_id)) for e in stored_events)
    for stream in new:
        if count(stream) != inserted[stream]:
            raise taken(stream)


def head_sql(table: str, mark: str) -> str:
    """The statement that reads what the head table says of a stream (its id, as
    stored, is ``mark``): one row, whether the table holds a row at all, then the
    stream's own row's id, version and chain (NULLs without one). No other row's value
    is read: another thread's damaged anchor is that thread's finding, not every
    thread's (a value no reader can decode fails the whole statement)."""
    return (
        f"SELECT EXISTS (SELECT 1 FROM {table}), own.originator_id, own.version, own.chain "
        f"FROM (SELECT 1) AS one LEFT JOIN {table} AS own ON own.originator_id = {mark}"
    )


def head_in_row(row: Sequence[Any], *, kept: type[bytes | str] | None = None) -> HeadAnchor:
    """What the one row of :func:`head_sql` says, its own row's values checked
    (``kept``: as :func:`~covonaut_es.store._rows.checked_id`).

    Raises:
        StoredRowError: The stream's own row holds a value of the wrong type.
    """
    anchors, stream_id, version, chain = row
    own = None if stream_id is None else checked_head(stream_id, version, chain, kept=kept)[1]
    return anchor_in(own, anchors=bool(anchors))


def anchor_in(own: tuple[int, str] | None, *, anchors: bool) -> HeadAnchor:
    """What the head table says of a stream: its own row's version and chain hash (None:
    it has no row); ``anchors``: the table holds a row, of any stream (a table without
    one is a store's from before anchors)."""
    if own is None:
        return HeadAnchor(store_anchors=anchors)
    version, chain = own
    return HeadAnchor(store_anchors=True, version=version, chain=chain)
