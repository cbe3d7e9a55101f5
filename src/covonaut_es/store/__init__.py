"""Thread stores: where threads' event streams, snapshots and named states live.

This package owns every persistence detail: :func:`open_store` and its URLs, the
eventsourcing applications and recorders (SQLite, PostgreSQL, in-memory), the msgspec
mapper with compression and encryption, the hash chain (sealed once, at save, with
the chain key the store adopted), forks by reference, named states, and the audit of a
thread's own records (``Store.replay`` and ``Store.verify``). It may import
the domain and the migrations, never the runtime or a layer above.
"""

from covonaut_es.store._application import AgentApplication
from covonaut_es.store._audit import AuditEntry, AuditFinding, AuditReport
from covonaut_es.store._leases import CallRunning, Lease, WorkerRecord
from covonaut_es.store._open import create_cipher_key, open_store
from covonaut_es.store._states import FileStateStore, MemoryStateStore, StateStore
from covonaut_es.store._store import Store

__all__ = [
    "AgentApplication",
    "AuditEntry",
    "AuditFinding",
    "AuditReport",
    "CallRunning",
    "FileStateStore",
    "Lease",
    "MemoryStateStore",
    "StateStore",
    "Store",
    "WorkerRecord",
    "create_cipher_key",
    "open_store",
]
