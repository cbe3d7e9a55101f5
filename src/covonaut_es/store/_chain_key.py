"""A store's chain key: which key it adopted, and from where its events must bear it
(ADR 0029, 0099).

The first open that may write and is given a chain key adopts it: the store records the
key's fingerprint (an HMAC-SHA256 of a fixed label under the key: never the key) in a
small table of its own, and, for each thread stream it holds at that moment, the version
its newest event had, sealed with the key. An event of a stream above that version
(every event of a stream begun after the adoption) must bear a keyed hash: an unkeyed
one there is a finding that no later save can hide, since a save never seals anything
but its own new events. A writer without the key cannot move a stream's adoption point
(its row is sealed), and deleting the row only makes more of the stream need the key.
The point's seal covers the chain hash of the event it names too, and so, link by link,
every event before it: the public history a stream had when the key was adopted cannot
be rewritten afterwards. An import records the same point for a thread whose unkeyed
first events a keyed one seals over (a thread begun before its store adopted the key).

From then on, an open that may write without the key, or with another, is refused
before anything is written; an open that only reads may go without it. A save seals
its events after the stored event before them only once that event's own seal verifies
under the key (and, above the adoption point, is keyed), so no save builds on a
history rewritten without the key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import weakref
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent

from covonaut_es._text import whole_number
from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.errors import (
    BrokenChainError,
    ChainKeyMismatchError,
    ChainKeyRequiredError,
    StoreSettingsError,
)
from covonaut_es.store._chain import (
    CHAIN_FIELD,
    UNCHAINED,
    chain_in,
    link_problem,
    same_seal,
    scheme_of,
)
from covonaut_es.store._codec import aggregate_event_classes
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._settings import settings_table
from covonaut_es.store._stream_ids import stored_stream
from covonaut_es.store._topic_codes import full_topic, stored_forms

CHAIN_TABLE = "covonaut_chain"
"""The table recording a store's chain key: ``key`` (its fingerprint), ``adopted_at``
(the log position when it was adopted, sealed with the key) and one row per stream (its
adoption point)."""

SEALS_NOTHING = "COVONAUT_SEALS_NOTHING"
"""The setting of an application that reads a store's threads and never saves one (the
reviewer queue's): with ``"y"``, it opens a keyed store without the key."""

_KEY_ROW = "key"
_POSITION_ROW = "adopted_at"
_FINGERPRINT_LABEL = b"covonaut-es chain key check v1"
_POINT_LABEL = b"covonaut-es chain adoption point v2"
_POSITION_LABEL = b"covonaut-es chain adoption position v1"
_PAGE = 500
_FINGERPRINT = re.compile(r"hmac-sha256:[0-9a-f]{64}", re.ASCII)
"""The form of the recorded fingerprint (:func:`chain_key_fingerprint`)."""

_THREAD_TOPICS = stored_forms(aggregate_event_classes(AgentThread))


def chain_key_fingerprint(key: bytes) -> str:
    """The fingerprint of a chain key as a store records it (the key is not derivable
    from it)."""
    return "hmac-sha256:" + hmac.new(key, _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()


def check_chain_key(app: Application[UUID], key: bytes | None, url: str, *, writes: bool) -> None:
    """Check an open's chain key against the one the store adopted; an open that may
    write adopts the key it is given in a store that has none.

    Raises:
        ChainKeyRequiredError: The store has a key, and the open may write without it.
        ChainKeyMismatchError: The key given is not the store's.
        StoreSettingsError: The store's record of its key is not a fingerprint.
    """
    table = settings_table(app, CHAIN_TABLE)
    recorded = table.get(_KEY_ROW)
    if recorded is None and key is not None and writes:
        _adopt(app, key)
        recorded = table.get(_KEY_ROW)  # another process may have adopted its key first
    if recorded is None:
        return
    if key is None:
        if writes:
            msg = (
                f"store {url} seals its chain with a key: pass it with chain_key "
                "(--chain-key-env on the command line); nothing was written"
            )
            raise ChainKeyRequiredError(msg)
        return
    if not _FINGERPRINT.fullmatch(recorded):
        msg = (
            f"store {url}: the {_KEY_ROW!r} row of table {CHAIN_TABLE!r} is damaged: its "
            "value is not in the form 'hmac-sha256:<64 hex digits>'; restore the table from "
            "a backup (nothing was written)"
        )
        raise StoreSettingsError(msg)
    if not same_seal(recorded, chain_key_fingerprint(key)):
        msg = (
            f"store {url} seals its chain with another key than the one given: pass the "
            "chain key it adopted (nothing was written)"
        )
        raise ChainKeyMismatchError(msg)


def _adopt(app: Application[UUID], key: bytes) -> None:
    """Record each thread stream's adoption point, then the key: an open that stops in
    between leaves a store without a key, which the next keyed open adopts again.

    A store whose adoption position is sealed with the key adopted it before, and only
    its record of the key was deleted: the key is recorded again, and no point granted.
    Otherwise the points cover only what was written before the first keyed event in
    the log: a store that holds one was keyed already, so an event written after it (a
    thread rewritten with the public hash in its place) must bear the key, as before."""
    table = settings_table(app, CHAIN_TABLE)
    if _sealed_position(key, table.get(_POSITION_ROW)) is not None:
        table.write({_KEY_ROW: chain_key_fingerprint(key)})
        return
    mapper = app.mapper
    assert isinstance(mapper, MsgspecMapper)
    position = app.recorder.max_notification_id() or 0
    heads: dict[UUID, tuple[int, str]] = {}
    after: int | None = None
    while True:
        page = app.recorder.select_notifications(
            after, _PAGE, stop=position, topics=_THREAD_TOPICS, inclusive_of_start=False
        )
        for record in page:
            chain = chain_in(mapper.plain_payload(record))
            if scheme_of(chain).keyed:
                break
            heads[UUID(str(record.originator_id))] = (record.originator_version, chain)
        else:
            if len(page) == _PAGE:
                after = page[-1].id
                continue
        break
    table.write(_point_rows(app, key, heads))
    table.write({_POSITION_ROW: _position(key, position), _KEY_ROW: chain_key_fingerprint(key)})


def _row(app: Application[UUID], stream: UUID) -> str:
    """The row of ``stream``'s adoption point: named by its id as the store keeps it."""
    return stored_stream(app.recorder, stream).hex


def _position(key: bytes, position: int) -> str:
    material = b"%s|%d" % (_POSITION_LABEL, position)
    return f"{position}:{hmac.new(key, material, hashlib.sha256).hexdigest()}"


def _sealed_position(key: bytes, row: str | None) -> int | None:
    """The log position a store adopted ``key`` at, from its row; None unless the row
    is sealed with ``key``."""
    position = whole_number((row or "").partition(":")[0], most_digits=19)
    if position is None or not same_seal(row or "", _position(key, position)):
        return None
    return position


def _point(key: bytes, stream: UUID, version: int, chain: str) -> str:
    material = b"%s|%s|%d|%s" % (_POINT_LABEL, stream.hex.encode(), version, chain.encode())
    return f"{version}:{hmac.new(key, material, hashlib.sha256).hexdigest()}"


def _point_rows(
    app: Application[UUID], key: bytes, heads: Mapping[UUID, tuple[int, str]]
) -> dict[str, str]:
    """The rows recording each stream's adoption point: ``heads`` holds the version of
    its newest unkeyed event and that event's chain hash."""
    return {_row(app, stream): _point(key, stream, *head) for stream, head in heads.items()}


def head_problem(head: str) -> str | None:
    """Why a thread of a keyed store whose newest chain hash is ``head`` breaks the key,
    or None: its newest event must be sealed with it, so that a keyed link seals over
    every unkeyed one before it (and, after a keyed link, none may be unkeyed)."""
    if scheme_of(head).keyed:
        return None
    found = "a public one" if head else "none"
    return f"head not sealed with the chain key: expected a keyed hash, found {found}"


class ChainAdoption:
    """What a store records of its chain key, read for one audit or save."""

    def __init__(self, app: Application[UUID], key: bytes | None) -> None:
        self._app = app
        self._table = settings_table(app, CHAIN_TABLE)
        self._key = key
        self._points: dict[UUID, int] = {}
        self._forged: dict[UUID, str] = {}
        self.adopted = self._table.get(_KEY_ROW) is not None

    def unkeyed_until(self, stream: UUID) -> int:
        """The newest version of ``stream`` that may bear an unkeyed hash: its adoption
        point; 0 when it has none, or one not sealed with the key over the chain hash
        stored at its version."""
        if not self.adopted:
            return 2**63
        if stream not in self._points:
            self._points[stream] = self._point_of(stream)
        return self._points[stream]

    def _point_of(self, stream: UUID) -> int:
        row = self._table.get(_row(self._app, stream))
        if row is None or self._key is None:
            return 0
        version = row.partition(":")[0]
        self._forged[stream] = version[:20]
        at = whole_number(version, most_digits=19)
        if at is None:
            return 0
        mapper = self._app.mapper
        assert isinstance(mapper, MsgspecMapper)
        found = self._app.recorder.select_events(stream, gt=at - 1, lte=at, limit=1)
        chain = chain_in(mapper.plain_payload(found[0])) if found else UNCHAINED
        if not same_seal(row, _point(self._key, stream, at, chain)):
            return 0
        del self._forged[stream]
        return at

    def grant(self, points: Mapping[UUID, tuple[int, str]]) -> list[UUID]:
        """Record each stream's adoption point as the adoption of the key records them:
        ``points`` holds the version of its newest unkeyed event and that event's chain
        hash. Returns the streams whose row held another point already, which stays (the
        first writer's, as with every row of the table).
        """
        assert self._key is not None, "a point is sealed with the key"
        rows = _point_rows(self._app, self._key, points)
        self._table.write(rows)
        held = [self._table.get(row) != value for row, value in rows.items()]
        return [stream for stream, other in zip(points, held, strict=True) if other]

    def problem(self, stream: UUID, version: int, stored: str) -> str | None:
        """Why an event of ``stream`` at ``version`` sealed with ``stored`` breaks the
        adoption of the key, or None."""
        if scheme_of(stored).keyed or version <= self.unkeyed_until(stream):
            return None
        if stream in self._forged:
            return (
                f"the thread's adoption point (version {self._forged[stream]!r}) does not "
                "verify under the chain key: the point, or the events up to it, were "
                "rewritten without the key after the store adopted it"
            )
        found = "a public one" if stored else "none"
        return (
            f"not sealed with the chain key after the store adopted it: expected a keyed "
            f"hash, found {found}; the event was written or rewritten by someone without "
            "the key"
        )


def sealed_predecessor(
    app: Application[UUID], key: bytes, thread_id: str, stream: UUID, version: int
) -> str:
    """The chain hash stored with ``stream``'s event at ``version``, the one a new event
    (a fork's) is to be sealed after, once that event's own link verifies under ``key``:
    :func:`sealed_tail` from the hash stored before it.

    Raises:
        BrokenChainError: As :func:`sealed_tail`.
    """
    trusted: SealedPoint | None = None
    if version > 1:
        mapper = app.mapper
        assert isinstance(mapper, MsgspecMapper)
        before = app.recorder.select_events(stream, gt=version - 2, lte=version - 1)
        if before:
            trusted = (version - 1, chain_in(mapper.plain_payload(before[0])))
    return sealed_tail(app, key, thread_id, stream, version, trusted)


SealedPoint = tuple[int, str]
"""A version of a thread's stream and the chain hash stored with its event there."""


class SealedPoints:
    """For each thread object of this process, the point of its stream known to be its
    own: the snapshot under a key it was loaded from, or its last save; forgotten with
    the object. (Kept by the object's identity: eventsourcing's aggregates refuse to be
    hashed.)"""

    def __init__(self) -> None:
        self._points: dict[int, tuple[weakref.ref[AgentThread], SealedPoint]] = {}

    def get(self, thread: AgentThread) -> SealedPoint | None:
        """The point noted for ``thread``, if any."""
        entry = self._points.get(id(thread))
        return entry[1] if entry is not None and entry[0]() is thread else None

    def note(self, thread: AgentThread, point: SealedPoint | None) -> None:
        """Note ``point`` for ``thread``; None: it has none (a fork grafted onto the
        object its parent's load made, whose point is the parent's)."""
        key, points = id(thread), self._points
        if point is None:
            points.pop(key, None)
            return
        points[key] = (weakref.ref(thread, lambda _: points.pop(key, None)), point)


def sealed_tail(
    app: Application[UUID],
    key: bytes | None,
    thread_id: str,
    stream: UUID,
    through: int,
    trusted: SealedPoint | None,
) -> str:
    """The chain hash stored with ``stream``'s event at version ``through``, the one a
    new event is to be sealed after, once each stored link after ``trusted`` (a point
    this process knows to be the stream's own: a snapshot sealed under the store's key,
    or its own last save; None: the stream's start) verifies, under ``key`` or, in a
    store that encrypts without one, as the public hash: rows copied in from another
    stream (another thread's encrypted approval, a run of them) break a link there,
    which no writer without the keys can mend.

    Raises:
        BrokenChainError: An event is missing, or a link does not verify (or is not
            keyed above the stream's adoption point).
    """
    start, previous = trusted if trusted is not None else (0, None)
    if start == through and previous is not None:
        return previous
    mapper = app.mapper
    assert isinstance(mapper, MsgspecMapper)
    adoption = None if key is None else ChainAdoption(app, key)
    expected = start + 1 if trusted is not None else None
    problem: str | None = "it is missing: events were deleted"
    version = start
    for record in app.recorder.select_events(stream, gt=start, lte=through):
        version = record.originator_version
        if expected is not None and version != expected:
            version, problem = expected, "it is missing: events were deleted"
            break
        payload = mapper.payload_fields(record)
        stored = str(payload.get(CHAIN_FIELD, UNCHAINED))
        if previous is None:  # the stream's first: of a new thread, or a fork's
            previous = _before(app, mapper, record, payload)
        problem = link_problem(stored, previous, record.topic, version, payload, key)
        if problem is None and adoption is not None and not scheme_of(stored).keyed:
            problem = adoption.problem(stream, version, stored)
        if problem is not None:
            break
        previous, expected = stored, version + 1
    else:
        if version == through and previous is not None:
            return previous
        version = through
    under = "the store's chain key" if key is not None else "its public hash"
    msg = (
        f"thread {thread_id!r}: its stored event at version {version} does not verify "
        f"under {under} ({problem}); nothing was sealed after it. Run verify on the thread "
        "and restore it from a backup"
    )
    raise BrokenChainError(msg, thread_id=thread_id, version=version)


def _before(
    app: Application[UUID], mapper: MsgspecMapper, record: StoredEvent, payload: Mapping[str, Any]
) -> str:
    """The chain hash a stream's first stored event was sealed after: none, unless it is
    a fork's, which is sealed after its parent's event at the fork's version."""
    if full_topic(record.topic) != AgentThread.Forked.TOPIC:
        return UNCHAINED
    parent, at = payload.get("parent_thread_id"), payload.get("parent_version")
    if not isinstance(parent, str) or not isinstance(at, int):
        return UNCHAINED  # the link then fails to verify
    found = app.recorder.select_events(thread_aggregate_id(parent), gt=at - 1, lte=at)
    return chain_in(mapper.plain_payload(found[0])) if found else UNCHAINED
