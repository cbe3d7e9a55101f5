"""The port every back end of a store supplies (ADR 0028).

A back end is an eventsourcing persistence module of :mod:`covonaut_es.store._backends`
(``memory``, ``sqlite``, ``postgres``): its factory builds its own recorder classes, and
its :data:`BACKEND` object answers the few questions the rest of the store asks of a
database (head anchors, the settings table, snapshot replacement, leases, the setup
lock, the canonical URL). Nothing outside the back-end modules asks which back end it
has: it asks the port, which :func:`backend_of` (an open application's factory) or
:func:`backend_for_env` (an environment, before anything is open) hands out, each in
this one place.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol
from uuid import UUID

from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, InfrastructureFactory
from eventsourcing.utils import Environment

if TYPE_CHECKING:
    from covonaut_es.domain import ThreadSnapshot
    from covonaut_es.store._heads import HeadAnchor
    from covonaut_es.store._leases import LeaseBackend
    from covonaut_es.store._openings import Openings
    from covonaut_es.store._outstanding import OutstandingTable
    from covonaut_es.store._review_index_table import ReviewIndexTable
    from covonaut_es.store._settings_tables import SettingsTable
    from covonaut_es.store._snapshot_cache import SnapshotCache
    from covonaut_es.store._summaries import SummaryTable
    from covonaut_es.store._thread_rows import ThreadRows

TABLES_MADE = "COVONAUT_TABLES_MADE"
"""Set ("y") by an open whose check of the database found every table of the store made
in the library's form: the open sends no DDL, which only the tables' owner may send
(ADR 0117)."""

POLL_INTERVAL = 0.05
"""Seconds between polls of a back end that cannot notify (SQLite): the added lag of its
projections, at most."""

BackendName = Literal["memory", "sqlite", "postgres"]

MODULES: Mapping[BackendName, str] = {
    "memory": "covonaut_es.store._backends.memory",
    "sqlite": "covonaut_es.store._backends.sqlite",
    "postgres": "covonaut_es.store._backends.postgres",
}
"""The persistence module (``PERSISTENCE_MODULE``) of each back end."""


class Backend(Protocol):
    """What a back end supplies to the store; see the back-end modules."""

    name: BackendName
    """Names the back end (views of the reviewer queue are chosen by it)."""

    keeps_one_snapshot: bool
    """Whether :meth:`replace_snapshot` drops a thread's older snapshots. Only where it
    does is a snapshot written when a run ends (ADR 0085): one kept beside every other
    would grow a thread of many short runs' memory in proportion to its square."""

    def owns(self, factory: InfrastructureFactory[Any]) -> bool:
        """Whether ``factory`` (ours, or eventsourcing's own that a user's application
        may name) is of this back end's database."""

    def check_file(self, env: Mapping[str, str], shown: str) -> None:
        """Check what ``env`` opens before eventsourcing opens (and writes) it; its
        errors name the store as ``shown`` (its URL, the password hidden)."""

    def opening(
        self, env: Mapping[str, str], shown: str
    ) -> AbstractContextManager[Mapping[str, str]]:
        """Held while an application of ``env`` opens and creates its tables, having
        checked what it opens as :meth:`check_file` does (on one connection, where the
        back end has connections); gives the settings to open it with: ``env``, and
        :data:`TABLES_MADE` where the check found every table made (ADR 0117)."""

    def check_projection_file(self, env: Mapping[str, str], where: str) -> None:
        """Check what ``env`` opens before a projection's tables are made or read there,
        as :meth:`check_file` checks the file, but never which tables it holds: a
        projection's tables live beside any. Its errors name it as ``where``."""

    def tables_lock(self, factory: InfrastructureFactory[Any]) -> AbstractContextManager[None]:
        """Held while ``factory`` makes a projection's tables: the lock of
        :meth:`opening`, taken with the factory's own connection settings."""

    def canonical_url(self, url: str, env: Mapping[str, str]) -> str:
        """The URL that opens the same store again."""

    def anchor_heads(self, recorder: ApplicationRecorder, *, create: bool, summaries: bool) -> None:
        """Have ``recorder`` write head anchors, creating their table if ``create``;
        ``summaries``: it keeps a table of thread summaries beside them (a store's, not
        an application's of the user's own, whose heads table holds its own
        aggregates' streams too)."""

    def anchors_heads(self, recorder: ApplicationRecorder) -> bool:
        """Whether ``recorder`` is of a class that writes head anchors (it does once
        :meth:`anchor_heads` found or made their table)."""

    def guards_new_streams(self, recorder: ApplicationRecorder) -> bool:
        """Whether ``recorder`` refuses events in a stream said to be new."""

    def read_head(self, recorder: ApplicationRecorder, stream: UUID) -> HeadAnchor:
        """What the head table says of ``stream``."""

    def close_connections(self, recorder: ApplicationRecorder) -> None:
        """Close the connections ``recorder`` keeps of its own, outside the pool: the one
        its saves are written through (SQLite), those its restores read through
        (PostgreSQL)."""

    def ping(self, recorder: ApplicationRecorder, timeout: float) -> None:
        """Raise unless the database ``recorder`` writes to answers one read of the log's
        end within about ``timeout`` seconds, tried once: a read through ``recorder`` may
        wait out its retries first.

        Raises:
            StoreUnavailableError: It did not answer.
        """

    def database_now(self, recorder: ApplicationRecorder) -> datetime | None:
        """The time by the database's own clock (the PostgreSQL server's; SQLite's, that
        of the machine the file is on), to check a process's clock against; None where
        there is no clock but the process's own (a store in memory)."""

    def select_thread(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        stream: UUID,
        lte: int,
    ) -> ThreadRows | None:
        """The rows a load of ``stream`` up to version ``lte`` reads, in one statement
        (:mod:`covonaut_es.store._thread_rows`); None where ``events`` and
        ``snapshots`` are not this back end's recorders of one database (a user's
        application), which are then read one after the other."""

    def select_openings(
        self, events: ApplicationRecorder, streams: Sequence[UUID], topics: Sequence[str]
    ) -> Openings | None:
        """The rows of ``streams`` at version 1 with a topic of ``topics``, each checked,
        in one statement per few hundred streams; None where ``events`` is not this back
        end's recorder of UUID stream ids (a user's application), whose streams are then
        read one at a time."""

    def settings_table(
        self, factory: InfrastructureFactory[Any], recorder: ApplicationRecorder, name: str
    ) -> SettingsTable:
        """The store's table of name and value pairs called ``name`` (its recorded
        settings, or its chain key's adoption)."""

    def replace_snapshot(self, snapshots: SnapshotCache, snapshot: ThreadSnapshot) -> None:
        """Store ``snapshot`` and drop its thread's older ones (ADR 0014)."""

    def lease_backend(
        self, factory: InfrastructureFactory[Any], recorder: ApplicationRecorder, holder: str
    ) -> LeaseBackend:
        """The run leases of the database (ADR 0016)."""

    def summary_table(self, recorder: ApplicationRecorder) -> SummaryTable | None:
        """The table of thread summaries beside ``recorder``'s head anchors (ADR 0050);
        None where it keeps no head anchors."""

    def outstanding_table(self, recorder: ApplicationRecorder) -> OutstandingTable | None:
        """The table of threads with work outstanding that workers keep beside
        ``recorder``'s head anchors (ADR 0054); None where it keeps no head anchors."""

    def review_index_table(self, recorder: ApplicationRecorder) -> ReviewIndexTable | None:
        """The table of the review index beside ``recorder``'s head anchors (ADR 0078);
        None where it keeps no head anchors."""

    def make_tables(self, recorder: ApplicationRecorder) -> None:
        """Make the tables beside ``recorder``'s log that are otherwise made on first
        use, for an open that made the store's tables: where only the tables' owner may
        make a table (PostgreSQL), the role that does not own them then never has to
        (ADR 0117)."""


_STOCK_MODULES: Mapping[str, BackendName] = {
    "eventsourcing.sqlite": "sqlite",
    "eventsourcing.sqlite:SQLiteFactory": "sqlite",
    "eventsourcing.postgres": "postgres",
    "eventsourcing.postgres:PostgresFactory": "postgres",
}
"""eventsourcing's own persistence modules (and their factories' topics) that an
application embedding threads may name, and the back end of the same database."""


def names_stock_module(env: Environment) -> bool:
    """Whether ``env`` names eventsourcing's own persistence module (of a database that
    is a back end's), whose tables a back end's factory then makes as eventsourcing does."""
    return (env.get(InfrastructureFactory.PERSISTENCE_MODULE) or "") in _STOCK_MODULES


def construct_factory(env: Environment) -> InfrastructureFactory[Any]:
    """The infrastructure factory of an application that holds threads: for
    eventsourcing's own SQLite or PostgreSQL module, the back end's factory of that
    database (a subclass of eventsourcing's, with the same settings and tables), whose
    application recorder anchors each saved thread's head in the save's transaction
    (ADR 0052); for any other ``PERSISTENCE_MODULE``, what eventsourcing constructs."""
    name = _STOCK_MODULES.get(env.get(InfrastructureFactory.PERSISTENCE_MODULE) or "")
    if name is None:
        return InfrastructureFactory.construct(env)
    factory: InfrastructureFactory[Any] = importlib.import_module(MODULES[name]).Factory(env)
    return factory


def backend_for_env(env: Mapping[str, str]) -> Backend:
    """The back end whose module ``env``'s ``PERSISTENCE_MODULE`` names, as a store URL
    sets it (:mod:`._urls`); only these modules are ever imported.

    Raises:
        KeyError: The module is no back end of a store.
    """
    by_module = {module: name for name, module in MODULES.items()}
    return _load(by_module[env["PERSISTENCE_MODULE"]])


def backend_of(factory: InfrastructureFactory[Any]) -> Backend:
    """The back end of an open application's ``factory``: ours or eventsourcing's own
    factory of that database. Any other persistence module (a user's application may
    name one) gets the in-memory back end's parts, which ask nothing of its database:
    no head anchors, settings and leases kept in this process, snapshots all kept."""
    for name in MODULES:
        if name == "postgres" and "eventsourcing.postgres" not in sys.modules:
            continue  # not imported for nothing: it needs psycopg
        backend = _load(name)
        if backend.owns(factory):
            return backend
    return _load("memory")


def _load(name: BackendName) -> Backend:
    backend: Backend = importlib.import_module(MODULES[name]).BACKEND
    return backend
