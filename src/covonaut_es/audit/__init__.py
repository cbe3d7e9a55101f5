"""Audits over whole stores: export and import of threads, and migration checks.

This package owns moving a thread's stream between stores as JSON Lines with its hash
chain intact (:func:`export_thread`, :func:`import_threads`) and checking that every
stored document upgrades to this code's schemas without writing anything
(:func:`check_store`, ``covonaut-es migrate --check``). The audit vocabulary of one
thread's records (:class:`AuditEntry`, :class:`AuditReport`) is defined with the
store, which replays and verifies its own records; it is re-exported here. This package
may import the store, the migrations and the domain, never the runtime or the command
line.
"""

from covonaut_es.audit._check import MigrationReport, check_store, format_report
from covonaut_es.audit._transfer import export_thread, import_threads
from covonaut_es.store import AuditEntry, AuditFinding, AuditReport

__all__ = [
    "AuditEntry",
    "AuditFinding",
    "AuditReport",
    "MigrationReport",
    "check_store",
    "export_thread",
    "format_report",
    "import_threads",
]
