"""Thread stores: where threads' event streams, snapshots and named states live.

This package owns every persistence detail: :func:`open_store` and its URLs, the
eventsourcing applications and recorders (SQLite, PostgreSQL, in-memory), the msgspec
mapper with compression and encryption, the hash chain (sealed once, at save, with
the chain key the store adopted), forks by reference, named states, and the audit of a
thread's own records (``Store.replay`` and ``Store.verify``). It may import
the domain and the migrations, never the runtime or a layer above.

Its modules (ADR 0028), one line each.

Back ends, and what each one's recorders share:

- ``_backends/``: one eventsourcing persistence module per back end, what
  ``PERSISTENCE_MODULE`` names; each has one factory, its own recorder classes and a
  ``BACKEND``, its side of the port, and nothing outside this package imports them:
    - ``memory``: stores in this process, which several applications can share;
    - ``_memory_leases``: the in-memory store's run leases and worker registry;
    - ``sqlite``: a store in one file;
    - ``_sqlite_connections``: the pool, its connections and the saves' writer;
    - ``_sqlite_polling``: the application recorder projections subscribe to, by polling;
    - ``_sqlite_leases``: run leases by ``flock`` on files beside the database;
    - ``_sqlite_keys``: whether a store's tables key streams as bytes or as hex;
    - ``postgres``: a store in a PostgreSQL database;
    - ``_postgres_rows``: records sent to PostgreSQL as one JSON document;
    - ``_postgres_leases``: run leases by session-level advisory locks;
    - ``_postgres_heads``: head anchors and lease fences, written with the events;
    - ``_postgres_reads``: one-statement reads on connections kept for them;
    - ``_postgres_schema``: its tables, indexes and columns, checked against the catalog
      at open, and the lock under which they are made;
    - ``_eventsourcing``: the private parts of eventsourcing the store and the views use.
- ``_backend``: the port (``Backend``), and the one place a back end is chosen.
- ``_rows``: the check that turns a stored row into a ``StoredEvent``, or a typed error.
- ``_stream_ids``: the stream ids a store writes, and the recorders' mapping to the domain's.
- ``_thread_rows``: a thread's rows for a load (its snapshot and the events after it).
- ``_openings``: the first record of several threads' streams, read in one statement.
- ``_write_errors``: the one mapping of a database's refusal to a typed error.

Opening a store:

- ``_urls``: store URLs to eventsourcing environments;
  ``_url_secrets``: what in a URL is secret, and its redaction.
- ``_open``: :func:`open_store`, and the log a follower (the reviewer queue) opens.
- ``_application``: the eventsourcing applications, and the save that seals chains.
- ``_settings``: the key and compression a store records and each open checks;
  ``_settings_tables``: where it records them.
- ``_cipher_keys``: a store's cipher key, read once and strictly.
- ``_chain_key``: the chain key a store adopted, and where its events must bear it.

The store and its collaborators (ADR 0037):

- ``_store``: :class:`Store`, composed of the modules below.
- ``_records``: stored records, the log and head anchors, read raw.
- ``_reader``: loads, histories and replays.
- ``_writer``: saves, fenced by the run lease, and the snapshot schedule.
- ``_forks``: forking, labelling and abandoning threads.
- ``_leasing``: run leases as a store hands them out;
  ``_leases``: the lease protocol, and the worker registry.
- ``_submissions``: input handed to threads for workers to run.
- ``_log``: the port the packages above read the log and its records through
  (``Store.log``, ADR 0121).
- ``_positions``: how far a consumer of the log got.
- ``_states``: named states and the stores that keep them.
- ``_read_only``: the check that refuses writes to a store opened read-only.

Tables beside the log:

- ``_side_tables``: where such a table is, how it is written and read, and its making.
- ``_listing``: threads listed a page at a time, checked against the head anchors;
  ``_summaries``: the table of summaries it reads.
- ``_outstanding``: the table of threads with work outstanding that workers keep.
- ``_review_index``: the threads that hold a review, looked up by key;
  ``_review_index_table``: its table.
- ``_heads``: head anchors and lease fences, as the back ends write and check them.
- ``_tracking``: what the projections' views extend to be tracking recorders.

Encoding, sealing and checking what is stored:

- ``_mapper``: the msgspec mapper behind eventsourcing's ``Mapper``;
  ``_codec``: each stored class's codec, generated from its annotations.
- ``_payload_types``: what the mapper asks of a payload type before it uses it.
- ``_read_back``: what an event holds that its reader would not read back as given.
- ``_transcodings``: the application's own value types, through its transcodings.
- ``_topic_codes``: the short code a stored row names a library class by.
- ``_zstd``: zstd frames, from the standard library or ``zstandard``;
  ``_dictionary``: payloads compressed with the shipped zstd dictionary.
- ``_following``: an application's mapper class for its followers, and :func:`event_mapper`.
- ``_own_snapshots``: snapshots of an application's own aggregates.
- ``_snapshot_cache``: the snapshot store, read as a cache that cannot lie;
  ``_snapshot_seals``: the seals that bind a snapshot to its events.
- ``_chain``: the hash chain of each thread's events.
- ``_audit``: replay and verify.

The store uses eventsourcing's private names in ``_backends/`` only, each naming the
version checked; its aggregate's are named in ``covonaut_es.domain._eventsourcing``.
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
