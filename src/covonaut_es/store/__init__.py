"""Thread stores: where threads' event streams, snapshots and named states live.

This package owns every persistence detail: :func:`open_store` and its URLs, the
eventsourcing applications and recorders (SQLite, PostgreSQL, in-memory), the msgspec
mapper with compression and encryption, the hash chain (sealed once, at save, with
the chain key the store adopted), forks by reference, named states, and the audit of a
thread's own records (``Store.replay`` and ``Store.verify``). It may import
the domain and the migrations, never the runtime or a layer above.

Its modules (ADR 0028):

- ``_backends/``: one eventsourcing persistence module per back end, what
  ``PERSISTENCE_MODULE`` names: ``memory``, ``sqlite`` (with ``_sqlite_connections``,
  the pool and the saves' writer; ``_sqlite_polling``, subscriptions by polling;
  ``_sqlite_leases``, ``flock`` leases) and ``postgres`` (with ``_postgres_rows``,
  records sent as JSON; ``_postgres_leases``, advisory-lock leases). Each has one
  factory, its own recorder classes, and a ``BACKEND``: its side of the port. Only
  they use eventsourcing's private names, and nothing outside this package imports
  them.
- ``_backend``: the port (:class:`~covonaut_es.store._backend.Backend`), and the one
  place a back end is chosen, from an environment or an open application's factory.
- ``_rows``: the check that turns a stored row into a ``StoredEvent``, or a typed
  error, shared by every back end's recorders.
- ``_urls``: store URLs to eventsourcing environments, and redaction of passwords.
- ``_open``: :func:`open_store`, and the log a follower (the reviewer queue) opens, a
  store's or an application's of the user's own by its own settings; ``_application``:
  the eventsourcing applications, the snapshot cache and the save that seals chains;
  ``_settings`` (with ``_settings_tables``): the key and compression a store records
  and each open checks.
- ``_store``: :class:`Store`, composed of collaborators (ADR 0037): ``_records``
  (stored records, the log, head anchors), ``_reader`` (loads, histories, replays),
  ``_writer`` (saves, the snapshot schedule), ``_forks``, ``_leasing`` (with
  ``_leases``, the lease protocol and the in-memory leases), ``_submissions``,
  ``_positions`` (how far a consumer of the log got) and ``_states`` (named
  states); ``_read_only`` refuses writes to a store opened read-only.
- ``_tracking``: what the projections' views extend to be tracking recorders, from
  the back ends' ``_eventsourcing`` (the store's uses of eventsourcing's private names
  outside the recorders).
- ``_listing`` (with ``_summaries``, the back ends' table of summaries): threads
  listed a page at a time, from summaries checked against the head anchors.
- ``_heads``: head anchors and lease fences, as the back ends write and check them.
- ``_mapper`` (with ``_zstd``, and ``_dictionary``: event payloads compressed with the
  shipped zstd dictionary): the msgspec mapper; ``_following``: an application's
  mapper class, which its followers in an eventsourcing ``System`` make theirs of it
  from, and :func:`event_mapper` for applications that are none;
  ``_own_snapshots``: snapshots of an application's own aggregates; ``_audit``:
  replay and verify.
"""

from covonaut_es.store._application import AgentApplication
from covonaut_es.store._audit import AuditEntry, AuditFinding, AuditReport
from covonaut_es.store._following import event_mapper
from covonaut_es.store._leases import CallRunning, Lease, WorkerRecord
from covonaut_es.store._listing import ThreadPage, ThreadSummary
from covonaut_es.store._open import create_cipher_key, open_store
from covonaut_es.store._own_snapshots import AggregateSnapshot
from covonaut_es.store._states import FileStateStore, MemoryStateStore, StateStore
from covonaut_es.store._store import Store
from covonaut_es.store._urls import Compression

__all__ = [
    "AgentApplication",
    "AggregateSnapshot",
    "AuditEntry",
    "AuditFinding",
    "AuditReport",
    "CallRunning",
    "Compression",
    "FileStateStore",
    "Lease",
    "MemoryStateStore",
    "StateStore",
    "Store",
    "ThreadPage",
    "ThreadSummary",
    "WorkerRecord",
    "create_cipher_key",
    "event_mapper",
    "open_store",
]
