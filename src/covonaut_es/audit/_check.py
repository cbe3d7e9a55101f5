"""Check that everything a store holds upgrades to this code's schemas, writing nothing.

:func:`check_store` reads every stored event, snapshot and named state, upgrades each
in memory exactly as a read would, and reports counts per type and stored schema
version and every record that does not upgrade. It is what ``covonaut-es migrate
--check`` runs before an upgrade is rolled out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from uuid import UUID

import attrs
from eventsourcing.persistence import StoredEvent

from covonaut_es._text import printable
from covonaut_es.domain import AgentThread
from covonaut_es.domain._named_states import StateSaved
from covonaut_es.errors import SerializationError, StaleSnapshotError
from covonaut_es.migrations import Schema, schema_for, stored_version
from covonaut_es.migrations._registry import state_document_schema
from covonaut_es.store import FileStateStore, Store
from covonaut_es.store._states import decode_state_document


@attrs.frozen
class Failure:
    """A stored record that does not upgrade to this code's schema.

    Attributes:
        owner: Whose record it is: a thread, a named state, or a stream id.
        position: Where it is: an event's version, a snapshot's version, a file.
        type_name: The stored type.
        stored_version: The schema version it was written at, if readable.
        error: The error reading it raised: its type and message.
    """

    owner: str
    position: str
    type_name: str
    stored_version: int | None
    error: str

    def __str__(self) -> str:
        version = "?" if self.stored_version is None else self.stored_version
        owner, position, type_name, error = map(
            printable, (self.owner, self.position, self.type_name, self.error)
        )
        return f"{owner}, {position} ({type_name}, schema v{version}): {error}"


@attrs.define
class MigrationReport:
    """What :func:`check_store` found.

    Attributes:
        counts: Records by (type name, stored schema version), failures included.
        current: The version this code reads and writes, by type name.
        stale_snapshots: Snapshots that cannot be upgraded and will be rebuilt from
            their threads' events when read (not a failure: snapshots are a cache).
        failures: Every record that does not upgrade.
    """

    counts: Counter[tuple[str, int | None]] = attrs.field(factory=Counter)
    current: dict[str, int] = attrs.field(factory=dict)
    stale_snapshots: Counter[int | None] = attrs.field(factory=Counter)
    failures: list[Failure] = attrs.field(factory=list)

    @property
    def records(self) -> int:
        """How many records were read."""
        return self.counts.total()

    @property
    def ok(self) -> bool:
        """Whether every record upgrades."""
        return not self.failures


Progress = Callable[[int, int], None]
"""Called after each record with the records done and the events the store holds."""


def check_store(
    store: Store,
    *,
    state_files: FileStateStore | None = None,
    progress: Progress | None = None,
) -> MigrationReport:
    """Upgrade every record of ``store`` (and of ``state_files``) in memory and report.

    Args:
        store: The thread store; nothing is written to it.
        state_files: A directory of named states to check as well.
        progress: Told after each record how far the check has come.

    Returns:
        The counts per type and version, and every failure.
    """
    checker = _Checker(store)
    total = store.log.end()
    for done, record in enumerate(store.log.all_stored_records(), start=1):
        checker.check(record)
        if progress is not None:
            progress(done, total)
    if state_files is not None:
        checker.check_files(state_files)
    return checker.report


class _Checker:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.report = MigrationReport()
        self.owners: dict[UUID, str] = {}  # stream id -> "thread 'x'" or "state 'k'"

    def check(self, record: StoredEvent) -> None:
        stream = UUID(str(record.originator_id))
        owner = self.owners.get(stream, f"stream {stream}")
        schema = self._schema_of(record.topic)
        snapshot = schema is not None and schema.snapshot
        kind = "snapshot at version" if snapshot else "event"
        position = f"{kind} {record.originator_version}"
        version = self._stored_version(record)
        name = self._count(schema, record.topic, version)
        try:
            decoded = self.store.log.read_record(record)
        except Exception as exc:  # any failure is reported; the check goes on
            if snapshot and isinstance(exc, StaleSnapshotError):
                self.report.stale_snapshots[version] += 1  # a cache: rebuilt when read
            else:
                self._fail(owner, position, name, version, exc)
            return
        if isinstance(decoded, AgentThread.Started | AgentThread.Forked):
            self.owners[stream] = f"thread {decoded.thread_id!r}"
        elif isinstance(decoded, StateSaved):
            self.owners[stream] = f"state {decoded.key!r}"
            self._check_document(decoded.document, f"state {decoded.key!r}", position)

    def check_files(self, states: FileStateStore) -> None:
        for key in states.state_keys():
            owner = f"state file {key!r}"
            try:
                document = states.read_state(key)
            except Exception as exc:
                name = self._count(state_document_schema(), "", None)
                self._fail(owner, str(states.path), name, None, exc)
                continue
            assert document is not None
            self._check_document(document, owner, str(states.path))

    def _check_document(self, document: dict[str, object], owner: str, position: str) -> None:
        version = stored_version(document)
        readable = version if isinstance(version, int) and not isinstance(version, bool) else None
        name = self._count(state_document_schema(), "", readable)
        try:
            decode_state_document(document, where=owner)
        except Exception as exc:  # any failure is reported; the check goes on
            self._fail(owner, position, name, readable, exc)

    def _count(self, schema: Schema | None, unknown_name: str, version: int | None) -> str:
        name = unknown_name if schema is None else schema.name
        self.report.counts[name, version] += 1
        if schema is not None:
            self.report.current[name] = schema.version
        return name

    def _fail(
        self, owner: str, position: str, name: str, version: int | None, exc: Exception
    ) -> None:
        error = f"{type(exc).__name__}: {exc}"
        self.report.failures.append(Failure(owner, position, name, version, error))

    def _schema_of(self, topic: str) -> Schema | None:
        """The schema of a stored topic, looked up in the store's allowlist: a row names
        a module, and reading it must not import that module."""
        try:
            return schema_for(self.store.log.mapper.event_class(topic, where=topic))
        except SerializationError:  # a type this code does not know: decoding reports it
            return None

    def _stored_version(self, record: StoredEvent) -> int | None:
        try:
            version = stored_version(self.store.log.mapper.payload_fields(record))
        except Exception:  # unreadable: decoding it reports why
            return None
        return version if isinstance(version, int) and not isinstance(version, bool) else None


def format_report(report: MigrationReport, *, source: str) -> Iterable[str]:
    """The report as lines of text, as ``migrate --check`` prints it."""
    yield f"Checked {report.records} records in {printable(source)}; nothing was written."
    rows = sorted(report.counts.items(), key=lambda item: (item[0][0], item[0][1] or -1))
    width = max((len(printable(name)) for (name, _), _ in rows), default=4)
    yield f"  {'type':<{width}}  stored  current  records"
    for (stored_name, version), count in rows:
        name = printable(stored_name)
        stored = "?" if version is None else f"v{version}"
        current = f"v{report.current[stored_name]}" if stored_name in report.current else "?"
        yield f"  {name:<{width}}  {stored:<6}  {current:<7}  {count:>7}"
    for version, count in sorted(report.stale_snapshots.items(), key=lambda i: i[0] or -1):
        yield (
            f"{count} snapshot(s) at schema v{version} cannot be upgraded and will be "
            "rebuilt from their threads' events when read (snapshots are a cache)."
        )
    if report.ok:
        yield f"OK: all {report.records} records upgrade to this code's schemas."
        return
    yield f"{len(report.failures)} record(s) do not upgrade:"
    for failure in report.failures:
        yield f"  {failure}"
    yield f"FAILED: {len(report.failures)} of {report.records} records do not upgrade."
