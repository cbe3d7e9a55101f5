"""Export a thread's stream as JSON Lines, and import it into another store.

One line per event: the thread id, version, topic and the payload exactly as stored
(decrypted and decompressed), so that an imported thread keeps its hash chain and an
audit of the copy verifies; then a trailer line that counts them
(:mod:`covonaut_es.audit._trailer`). A line is one line to every reader: the
characters ``str.splitlines`` or a terminal would act on are written as JSON escapes.
Importing checks every line, the versions, the chain and the trailer before it writes
anything, and then writes all its threads in one transaction, so that an import cut
short (a full disk, a kill, another writer creating one of its threads) writes none.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgspec
from eventsourcing.persistence import StoredEvent

from covonaut_es._arguments import check_whole, refuse
from covonaut_es._text import json_printable
from covonaut_es.audit._trailer import ExportTrailer, Tally, missing_trailer, read_trailer
from covonaut_es.domain import AgentThread, check_thread_id, thread_aggregate_id
from covonaut_es.errors import (
    ConfigurationError,
    CovonautError,
    IncompleteExportError,
    SerializationError,
    ThreadConflictError,
    TransferError,
)
from covonaut_es.store import Store
from covonaut_es.store._chain import CHAIN_FIELD, UNCHAINED, link_problem, scheme_of
from covonaut_es.store._chain_key import ChainAdoption, head_problem
from covonaut_es.store._topic_codes import full_topic


class ExportedEvent(msgspec.Struct, frozen=True):
    """One line of an export."""

    thread_id: str
    version: int
    topic: str
    payload: dict[str, Any]


def export_thread(store: Store, thread_id: str, *, with_ancestors: bool = False) -> Iterator[str]:
    """The thread's own events as JSON lines, then the trailer that counts them.

    A fork's inherited events stay with its ancestors: without ``with_ancestors`` export
    those first, or the fork cannot be imported. With it, each ancestor's events up to
    the version the next thread branched at come first, under the ancestor's id, so
    the export imports alone into an empty store.
    """
    store.load(thread_id)  # a clear error for an unknown thread
    threads = store.path_to_root(thread_id) if with_ancestors else (thread_id,)
    owners: dict[object, str] = {thread_aggregate_id(owner): owner for owner in threads}
    tally = Tally()
    for record in store.log.stored_records(thread_id):
        owner = owners.get(record.originator_id)
        if owner is None:
            continue
        payload = store.log.mapper.payload_fields(record)
        topic = full_topic(record.topic)  # the form every version reads
        line = ExportedEvent(owner, record.originator_version, topic, payload)
        tally.add(owner, payload)
        yield json_printable(msgspec.json.encode(line).decode())
    yield tally.trailer_line()


def import_threads(
    store: Store,
    lines: Iterable[str],
    *,
    allow_unchained: bool = False,
    allow_untrailed: bool = False,
) -> list[str]:
    """Import exported lines, all in one transaction; returns the thread ids written,
    in order.

    Args:
        store: The store to write to.
        lines: The export's lines.
        allow_unchained: Accept lines without a chain hash, as exports of threads
            written before tamper evidence existed have. Off by default: an export whose
            hashes were removed would otherwise import as if it were such a thread. Even
            with it, a line without a hash after one with a hash is refused.
        allow_untrailed: Accept an export that ends without a trailer, as exports
            written before trailers existed do. Off by default: such a file may have been
            cut short anywhere between two lines, and would import as a run that
            crashed. A trailer, when there is one, is checked all the same.

    Raises:
        IncompleteExportError: The export ends without a trailer (unless
            ``allow_untrailed``), or its trailer disagrees with its lines; nothing was
            written.
        TransferError: A line is malformed, a version is missing or repeated, a topic is
            unknown, a line has no chain hash (unless ``allow_unchained``), the hash
            chain does not verify, or the store seals its chain with a key and a
            thread's last line is not sealed with it (unkeyed lines are taken only
            before keyed ones, which seal over them); nothing was written.
        ThreadConflictError: A thread already exists in the store.
        InvalidThreadIdError: A thread id breaks the rule new threads follow.
        ConfigurationError: ``lines`` is the whole export as one str or bytes, not its
            lines.
    """
    threads, tally, (trailer, last) = _parsed(lines)
    chains: dict[str, dict[int, str]] = {}  # a fork's parent may come earlier in the file
    records: dict[str, list[StoredEvent]] = {}
    folds = _Folds(store, _forks_of(threads))
    adoption = store.log.chain_adoption()
    keyed = store.log.chain_key is not None and adoption.adopted
    for thread_id, events in threads.items():
        chains[thread_id] = _check(
            store, thread_id, events, chains=chains, keyed=keyed, allow_unchained=allow_unchained
        )
        read = [_readable(store, thread_id, number, e) for number, e in events]
        records[thread_id] = [record for record, _ in read]
        folds.add(thread_id, [event for _, event in read])
    # Last, so that a line's own problem is reported as such in any export.
    if trailer is not None:
        tally.check(trailer, last)
    elif not allow_untrailed:
        raise missing_trailer(last)
    if keyed:
        _grant_points(adoption, chains)
    try:
        store.log.insert_threads(records)
    except ThreadConflictError as exc:
        taken = next((t for t in threads if store.head_version(t) is not None), exc.thread_id)
        msg = (
            f"cannot import thread {taken!r}: another writer created it while the import "
            "checked the export; nothing was written"
        )
        raise ThreadConflictError(msg, thread_id=taken, expected_version=0) from exc
    return list(threads)


def _parsed(
    lines: Iterable[str],
) -> tuple[dict[str, list[tuple[int, ExportedEvent]]], Tally, tuple[ExportTrailer | None, int]]:
    """The export's event lines by thread and their tally, then its trailer (None
    without one) and the number of its last line.

    Raises:
        ConfigurationError: ``lines`` is one str or bytes, which iterates by character.
        TransferError: A line is malformed.
    """
    if isinstance(lines, str | bytes | bytearray):
        refuse("lines", "the export's lines (text.splitlines(), or an open file)", lines)
    numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        msg = "the export holds no lines; nothing was written"
        raise TransferError(msg)
    for number, line in numbered:
        _refuse_no_text(number, line)
    last = numbered[-1][0]
    trailer = read_trailer(numbered[-1][1])
    if trailer is not None:
        numbered.pop()
    threads: dict[str, list[tuple[int, ExportedEvent]]] = {}
    tally = Tally()
    for number, line in numbered:
        event = _event(number, line)
        threads.setdefault(event.thread_id, []).append((number, event))
        tally.add(event.thread_id, event.payload)
    if not threads:  # every export holds a thread's first event at least
        msg = f"the export holds no events, only the trailer at line {last}; nothing was written"
        raise TransferError(msg)
    return threads, tally, (trailer, last)


def _refuse_no_text(number: int, line: str) -> None:
    """Refuse a line that holds a lone surrogate: text read from bytes that are no UTF-8
    (Python reads standard input so), which no JSON reader can take as text.

    Raises:
        TransferError: Naming the line and the position.
    """
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as exc:
        msg = (
            f"line {number} is not UTF-8 text (bytes that are no UTF-8 at character "
            f"{exc.start}); an export is UTF-8 JSON Lines; nothing was written"
        )
        raise TransferError(msg) from None


def _event(number: int, line: str) -> ExportedEvent:
    """The event line ``number`` holds."""
    try:
        return msgspec.json.decode(line, type=ExportedEvent)
    except (msgspec.DecodeError, RecursionError) as exc:  # nested beyond msgspec's depth
        if read_trailer(line) is not None:
            msg = (
                f"line {number} is an export's trailer, but lines follow it: import one "
                "export at a time (nothing was written)"
            )
            raise IncompleteExportError(msg) from exc
        msg = (
            f"line {number} is neither an exported event nor an export's trailer ({exc}): "
            "the export was cut short or altered; nothing was written"
        )
        raise TransferError(msg) from exc


def _readable(
    store: Store, thread_id: str, number: int, event: ExportedEvent
) -> tuple[StoredEvent, Any]:
    """The record a line becomes, and the event the store's own read path decodes from
    it: a line that no read could decode would break every listing of the store
    afterwards."""
    where = f"line {number} (thread {thread_id!r} version {event.version})"
    try:
        msgspec.msgpack.encode(event.payload)  # refuses what no stored number can carry
    except OverflowError:
        msg = (
            f"{where} holds an integer beyond the 64 bits a stored number can carry (a "
            "listing of the store would fail on it); nothing was written"
        )
        raise TransferError(msg) from None
    record = StoredEvent(
        originator_id=thread_aggregate_id(thread_id),
        originator_version=event.version,
        topic=event.topic,
        state=msgspec.json.encode(event.payload),
    )
    try:
        return record, store.log.mapper.decode_plain(record, record.state)
    except SerializationError as exc:
        msg = f"{where} does not decode: {exc}"
        raise TransferError(msg) from exc


class _Folds:
    """The threads of an import, each folded as it is read by the store's one fold (each
    line decoding alone is not enough: events that do not fold into a thread would break
    every listing of the store, as a stored thread that does not load does), a fork onto
    its parent as of the version it branches from, found earlier in the file or in the
    store. A parent of the file is folded again up to that version from a copy of what
    it was itself grafted onto, kept from its own fold until its last fork in the file
    took it, so that a fork's fold costs its parent's own events, not its whole chain's:
    a chain of forks of any depth imports without recursion.

    Args:
        store: The store the threads are imported into.
        forks_of: How many threads of the file name each thread as their parent.
    """

    def __init__(self, store: Store, forks_of: Mapping[str, int]) -> None:
        self._store = store
        self._forks_left = dict(forks_of)
        self._events: dict[str, list[Any]] = {}
        self._bases: dict[str, AgentThread | None] = {}

    def add(self, thread_id: str, events: list[Any]) -> None:
        """Fold the thread's events, and keep them for its forks further in the file.

        Raises:
            TransferError: They do not fold into a thread; nothing was written.
        """
        kept = thread_id in self._forks_left
        grafted_onto: list[AgentThread | None] = [None]

        def parent(forked: AgentThread.Forked) -> AgentThread | None:
            base = self._parent(forked)
            if kept:
                grafted_onto[0] = _copied(base, thread_id)  # the fold changes base itself
            return base

        try:
            self._store.log.fold(events, thread_id, parent)
        except CovonautError as exc:
            msg = f"thread {thread_id!r} does not fold into a thread: {exc}; nothing was written"
            raise TransferError(msg) from exc
        if kept:
            self._events[thread_id], self._bases[thread_id] = events, grafted_onto[0]

    def _parent(self, forked: AgentThread.Forked) -> AgentThread | None:
        """The parent a fork's first event names, as of the version it branches from."""
        parent_id, version = forked.parent_thread_id, forked.parent_version
        if parent_id not in self._events:
            return self._store.find(parent_id, version=version)
        events = [e for e in self._events[parent_id] if e.originator_version <= version]
        base = self._bases[parent_id]
        self._forks_left[parent_id] -= 1
        if not self._forks_left[parent_id]:  # its last fork: its own base is taken
            del self._events[parent_id], self._bases[parent_id]
            return self._store.log.fold(events, parent_id, lambda _: base)
        return self._store.log.fold(events, parent_id, lambda _: _copied(base, parent_id))


def _copied(thread: AgentThread | None, thread_id: str) -> AgentThread | None:
    """A copy of ``thread`` that a fold may change.

    Raises:
        TransferError: It holds values nested deeper than a copy can go.
    """
    try:
        return copy.deepcopy(thread)
    except RecursionError:
        msg = (
            f"thread {thread_id!r} holds values nested too deeply to fold its forks from "
            "this file: import it alone first; nothing was written"
        )
        raise TransferError(msg) from None


def _forks_of(threads: Mapping[str, list[tuple[int, ExportedEvent]]]) -> dict[str, int]:
    """How many threads of an export name each thread as their parent in their first
    line (read before the lines are checked: a count too high keeps a copy longer)."""
    parents = (lines[0][1].payload.get("parent_thread_id") for lines in threads.values() if lines)
    return collections.Counter(parent for parent in parents if isinstance(parent, str))


def _check(
    store: Store,
    thread_id: str,
    events: list[tuple[int, ExportedEvent]],
    *,
    chains: dict[str, dict[int, str]],
    keyed: bool,
    allow_unchained: bool,
) -> dict[int, str]:
    """Check a thread's lines, into a store that seals with a key when ``keyed``;
    returns the chain hash after each version. A fork's parent is found among
    ``chains``, the threads checked before it, or in the store."""
    check_thread_id(thread_id)
    if store.exists(thread_id):
        msg = f"cannot import thread {thread_id!r}: the store already has it"
        raise ThreadConflictError(msg, thread_id=thread_id, expected_version=0)
    first = events[0][1]
    start, previous = 1, UNCHAINED
    if full_topic(first.topic) == AgentThread.Forked.TOPIC:
        parent = first.payload.get("parent_thread_id")
        at: Any = first.payload.get("parent_version")  # any JSON value until checked
        exported = chains.get(str(parent), {})
        try:
            check_whole("parent_version", at)  # no bool: True would stand for version 1
        except ConfigurationError as exc:
            raise _no_parent(events[0][0], thread_id, parent, at) from exc
        base = store.find(str(parent), version=at)
        if base is None and at not in exported:
            raise _no_parent(events[0][0], thread_id, parent, at)
        start = at + 1
        previous = exported[at] if base is None else base.chain_head or UNCHAINED
    heads: dict[int, str] = {}
    for expected, (number, event) in enumerate(events, start=start):
        where = f"line {number} (thread {thread_id!r} version {event.version})"
        if event.version != expected:
            msg = f"{where}: expected version {expected}; versions must be contiguous"
            raise TransferError(msg)
        try:
            cls = store.log.mapper.event_class(event.topic, where=where)
        except SerializationError as exc:
            msg = f"{where}: unknown event type {event.topic!r}"
            raise TransferError(msg) from exc
        if not issubclass(cls, AgentThread.Event):
            # A snapshot, a named state, an input: a store's own records, never a
            # thread's events, which is all an export holds (a thread made of a snapshot
            # alone would take any state without one event).
            msg = f"{where}: {event.topic!r} is not an event of a thread"
            raise TransferError(msg)
        previous = _checked_link(
            where, previous, event, store.log.chain_key, allow_unchained=allow_unchained
        )
        heads[event.version] = previous
    named = first.payload.get("thread_id")
    if named != thread_id:
        # The first event says whose thread it is; a line naming another thread would
        # import one thread's history under another's id, its tools acting as the first.
        msg = (
            f"line {events[0][0]}: it names thread {thread_id!r}, but its events are those "
            f"of thread {named!r}; nothing was written"
        )
        raise TransferError(msg)
    # A link after a keyed one is keyed (link_problem); the head's seals over the rest.
    if keyed and (problem := head_problem(previous)) is not None:
        number, event = events[-1]
        msg = (
            f"line {number} (thread {thread_id!r} version {event.version}): {problem}. "
            "This store seals its chain with a key, and takes a thread's unkeyed lines only "
            "before one sealed with the key: open the store the thread comes from with "
            "this chain key, go on with the thread there and export it again (an ancestor "
            "exported up to a fork: export and import it whole first, then the fork "
            "without its ancestors); nothing was written"
        )
        raise TransferError(msg)
    return heads


def _no_parent(number: int, thread_id: str, parent: object, at: object) -> TransferError:
    msg = (
        f"line {number} (fork {thread_id!r}): it needs its parent {parent!r} at version "
        f"{at!r}: import the parent first, or export the fork with its ancestors"
    )
    return TransferError(msg)


def _grant_points(adoption: ChainAdoption, chains: Mapping[str, Mapping[int, str]]) -> None:
    """Record, as the store's adoption of its key would have, the adoption point of each
    thread whose first lines are unkeyed (a thread begun before its store adopted the
    key): the newest of them, which its keyed lines seal over, so that it verifies here
    as it did there. Recorded before the threads' events, so that an import cut short in
    between leaves no thread whose verify fails; a point whose events are missing lets
    nothing through, sealed as it is over the chain hash of the event it names.

    Raises:
        TransferError: The store holds another point for a thread's stream.
    """
    points = {}
    for thread_id, heads in chains.items():
        unkeyed = [
            (version, chain) for version, chain in heads.items() if not scheme_of(chain).keyed
        ]
        if unkeyed:
            points[thread_aggregate_id(thread_id)] = unkeyed[-1]
    held = adoption.grant(points)
    if held:
        thread_id = next(t for t in chains if thread_aggregate_id(t) in held)
        msg = (
            f"cannot import thread {thread_id!r}: the store holds another adoption point "
            "of the chain key for its stream (of another thread under that id, or written "
            "around the library), under which its unkeyed lines would not verify; no event "
            "was written"
        )
        raise TransferError(msg)


def _checked_link(
    where: str, previous: str, event: ExportedEvent, key: bytes | None, *, allow_unchained: bool
) -> str:
    """The chain hash after ``event``, which must link to ``previous``."""
    chain = str(event.payload.get(CHAIN_FIELD, UNCHAINED))
    if chain == UNCHAINED and previous == UNCHAINED and not allow_unchained:
        msg = (
            f"{where}: expected a chain hash, found none. If this is an export of a thread "
            "written before tamper evidence existed, and you trust where it comes from, "
            "import it with allow_unchained=True (the CLI's --allow-unchained)"
        )
        raise TransferError(msg)
    problem = link_problem(chain, previous, event.topic, event.version, event.payload, key)
    if problem is not None:
        msg = f"{where}: {problem}; the export was altered, or needs the source's chain key"
        raise TransferError(msg)
    return chain if chain != UNCHAINED else previous
