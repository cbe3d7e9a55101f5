"""Schema migrations: versions of stored documents and the upcasters between them.

This package owns the rules for upgrading stored data one checked step at a time
(:class:`Upcaster`, :class:`Schema`) and the library's registry of the current version
and the upcasters of every stored type (events, snapshots, state documents). It reads
nothing from disk: the store applies it when it decodes, and ``covonaut-es migrate
--check`` (in :mod:`covonaut_es.audit`) applies it to a whole store. It may import the
domain, never the store or a layer above.
"""

from covonaut_es.migrations._registry import aggregate_schema, check_upcasters, schema_for
from covonaut_es.migrations._upcasting import VERSION_KEY, Schema, Upcaster, stored_version

__all__ = [
    "VERSION_KEY",
    "Schema",
    "Upcaster",
    "aggregate_schema",
    "check_upcasters",
    "schema_for",
    "stored_version",
]
