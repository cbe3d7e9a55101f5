"""eventsourcing's own recorder contract tests, run on every recorder a store installs.

eventsourcing 9.5.6 ships the test cases its own back ends pass
(``eventsourcing.tests.persistence``). Each is subclassed here for the recorders that
:func:`~covonaut_es.open_store` installs on memory, SQLite and PostgreSQL, taken from a
fresh store as it opens them: the application recorder (the threads' log), the
snapshots' aggregate recorder, and the reviewer queue's tracking recorders (plain, and
sealed for an encrypted store); and the infrastructure factory the store's application
uses, and the one an ``AgentApplication`` of the user's own gets when it names
eventsourcing's SQLite or PostgreSQL module; and the process recorder its factory makes
for an ``AgentApplication`` that follows others in an eventsourcing ``System`` on the
store's back-end modules.

An inherited test is overridden only where it cannot run as written, with a docstring
that says why. The test cases are unittest classes; PostgreSQL classes get the session's
throwaway server through a class-scoped fixture.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
import threading
import uuid
from typing import Any, ClassVar
from unittest import TestCase

import psycopg
import pytest
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    ProcessRecorder,
    TrackingRecorder,
)
from eventsourcing.tests import persistence as cases  # a module: pytest collects no base
from eventsourcing.utils import get_topic

from covonaut_es import ReviewQueue, Store, create_cipher_key, open_store
from shop_app import Shop
from test_embedded_tools import shop_env

CIPHER_KEY = create_cipher_key()
CHAIN_KEY = "recorder-contracts-chain-key"


@pytest.fixture(autouse=True, scope="class")
def _postgres_server(request: pytest.FixtureRequest) -> None:
    """Give the PostgreSQL test classes the session's server (unittest classes take no
    fixture arguments)."""
    if request.cls is not None and getattr(request.cls, "BACK_END", None) == "postgres":
        request.cls.server_url = request.getfixturevalue("postgres_url")


class BackEnd(TestCase):
    """Fresh, empty stores of one back end, closed (and removed) after the test."""

    __test__ = False  # a base: only the concrete classes below (``Test...``) run

    BACK_END: ClassVar[str]
    STORE_OPTIONS: ClassVar[dict[str, Any]] = {}
    server_url: ClassVar[str]

    def fresh_url(self) -> str:
        if self.BACK_END == "memory":
            return f"memory://contracts-{uuid.uuid4().hex}"
        if self.BACK_END == "sqlite":
            directory = tempfile.mkdtemp(prefix="covonaut-contracts-")
            self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
            return f"sqlite:///{directory}/threads.db"
        name = f"c_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        self.addCleanup(self._drop_database, name)
        return self.server_url.rsplit("/", 1)[0] + f"/{name}"

    def _drop_database(self, name: str) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def fresh_store(self) -> Store:
        """A new empty store as ``open_store`` opens it."""
        store = open_store(self.fresh_url(), **self.STORE_OPTIONS)
        self.addCleanup(store.close)
        return store


class MemoryBackEnd(BackEnd):
    BACK_END = "memory"


class SQLiteBackEnd(BackEnd):
    BACK_END = "sqlite"


@pytest.mark.postgres
class PostgresBackEnd(BackEnd):
    BACK_END = "postgres"


class ProtectedBackEnd(BackEnd):
    """A store with every protection on: encrypted, compressed and chain-keyed."""

    STORE_OPTIONS: ClassVar[dict[str, Any]] = {
        "cipher_key": CIPHER_KEY,
        "compress": True,
        "chain_key": CHAIN_KEY,
    }


# The threads' log: the application recorder ----------------------------------------


class StoreApplicationRecorder(BackEnd, cases.ApplicationRecorderTestCase[ApplicationRecorder]):
    """The application recorder of a fresh store."""

    def create_recorder(self) -> ApplicationRecorder:
        return self.fresh_store()._app.recorder

    def test_insert_subscribe(self) -> None:
        """Subscriptions (which the reviewer queue's projection runs on) deliver new
        events in order, from a position, with topics, and stop when asked."""
        self.optional_test_insert_subscribe()

    def test_concurrent_no_conflicts(self, initial_position: int = 0) -> None:
        """The inherited test, then a join of the reader threads it started: it sets
        their stop event but returns without joining them, and closing the store under a
        reader still inside a query crashed the interpreter on SQLite (a segmentation
        fault in sqlite3, also with eventsourcing's own SQLite application)."""
        before = set(threading.enumerate())
        try:
            super().test_concurrent_no_conflicts(initial_position)
        finally:
            for thread in set(threading.enumerate()) - before:
                if not thread.daemon:
                    thread.join(timeout=10)
                    assert not thread.is_alive(), f"{thread.name} still runs"


class TestMemoryApplicationRecorder(MemoryBackEnd, StoreApplicationRecorder):
    __test__ = True


class TestSQLiteApplicationRecorder(SQLiteBackEnd, StoreApplicationRecorder):
    __test__ = True


class TestPostgresApplicationRecorder(PostgresBackEnd, StoreApplicationRecorder):
    __test__ = True


class TestProtectedMemoryApplicationRecorder(
    ProtectedBackEnd, MemoryBackEnd, StoreApplicationRecorder
):
    __test__ = True


class TestProtectedSQLiteApplicationRecorder(
    ProtectedBackEnd, SQLiteBackEnd, StoreApplicationRecorder
):
    __test__ = True


class TestProtectedPostgresApplicationRecorder(
    ProtectedBackEnd, PostgresBackEnd, StoreApplicationRecorder
):
    __test__ = True


class StoreNonInterleavingIds(BackEnd, cases.NonInterleavingNotificationIDsBaseCase):
    """Two inserts racing get blocks of notification ids that do not interleave: a
    projection reading the log never sees half of one insert."""

    def create_recorder(self) -> ApplicationRecorder:
        return self.fresh_store()._app.recorder


class TestMemoryNonInterleavingIds(MemoryBackEnd, StoreNonInterleavingIds):
    __test__ = True


class TestSQLiteNonInterleavingIds(SQLiteBackEnd, StoreNonInterleavingIds):
    __test__ = True


class TestPostgresNonInterleavingIds(PostgresBackEnd, StoreNonInterleavingIds):
    __test__ = True


# Snapshots: the aggregate recorder ---------------------------------------------------


class StoreSnapshotRecorder(BackEnd, cases.AggregateRecorderTestCase):
    """The snapshots' recorder of a fresh store."""

    def create_recorder(self) -> AggregateRecorder:
        snapshots = self.fresh_store()._app.snapshots
        assert snapshots is not None, "a store keeps snapshots"
        return snapshots.recorder


class TestMemorySnapshotRecorder(MemoryBackEnd, StoreSnapshotRecorder):
    __test__ = True


class TestSQLiteSnapshotRecorder(SQLiteBackEnd, StoreSnapshotRecorder):
    __test__ = True


class TestPostgresSnapshotRecorder(PostgresBackEnd, StoreSnapshotRecorder):
    __test__ = True


class TestProtectedPostgresSnapshotRecorder(
    ProtectedBackEnd, PostgresBackEnd, StoreSnapshotRecorder
):
    __test__ = True


# The reviewer queue's views: tracking recorders ----------------------------------------


class QueueTrackingRecorder(BackEnd, cases.TrackingRecorderTestCase):
    """The tracking recorder of a fresh store's reviewer queue (the view its projection
    writes with each position); sealed for an encrypted store."""

    def create_recorder(self) -> TrackingRecorder:
        url = self.fresh_store().url
        queue = ReviewQueue(url, cipher_key=self.STORE_OPTIONS.get("cipher_key"))
        self.addCleanup(queue.close)
        return queue.view()


class TestMemoryQueueTrackingRecorder(MemoryBackEnd, QueueTrackingRecorder):
    __test__ = True


class TestSQLiteQueueTrackingRecorder(SQLiteBackEnd, QueueTrackingRecorder):
    __test__ = True


class TestPostgresQueueTrackingRecorder(PostgresBackEnd, QueueTrackingRecorder):
    __test__ = True


class TestSealedSQLiteQueueTrackingRecorder(ProtectedBackEnd, SQLiteBackEnd, QueueTrackingRecorder):
    __test__ = True


class TestSealedPostgresQueueTrackingRecorder(
    ProtectedBackEnd, PostgresBackEnd, QueueTrackingRecorder
):
    __test__ = True


# A follower's log: the process recorder -----------------------------------------------


class FactoryProcessRecorder(BackEnd, cases.ProcessRecorderTestCase):
    """The process recorder a store's factory makes: an ``AgentApplication`` following
    others in a ``System`` on the store's back-end module records its events and its
    position in each leader's log with it."""

    def create_recorder(self) -> ProcessRecorder:
        return self.fresh_store()._app.factory.process_recorder()


class TestMemoryProcessRecorder(MemoryBackEnd, FactoryProcessRecorder):
    __test__ = True


class TestSQLiteProcessRecorder(SQLiteBackEnd, FactoryProcessRecorder):
    __test__ = True


class TestPostgresProcessRecorder(PostgresBackEnd, FactoryProcessRecorder):
    __test__ = True


# The infrastructure factory ----------------------------------------------------------


class StoreFactory(BackEnd, cases.InfrastructureFactoryTestCase[Any]):
    """The infrastructure factory of a fresh store's application: the store's settings
    construct it, and it makes the very recorders the store installs."""

    # eventsourcing's case expects a factory without a compressor but where its own
    # test configures one: a store without compression (a new store's is zstd).
    STORE_OPTIONS: ClassVar[dict[str, Any]] = {"compress": "none"}

    def setUp(self) -> None:
        self.store = self.fresh_store()
        self.env = self.store._app.factory.env
        super().setUp()  # constructs a factory from the store's settings, and checks it
        self.factory.close()
        self.factory = self.store._app.factory

    def tearDown(self) -> None:
        """Nothing to do: the store closes its own factory (a cleanup of the test)."""

    def expected_factory_class(self) -> type[Any]:
        return type(self.store._app.factory)

    def expected_aggregate_recorder_class(self) -> type[AggregateRecorder]:
        snapshots = self.store._app.snapshots
        assert snapshots is not None
        return type(snapshots.recorder)

    def expected_application_recorder_class(self) -> type[ApplicationRecorder]:
        return type(self.store._app.recorder)

    def expected_tracking_recorder_class(self) -> type[TrackingRecorder]:
        # The store's projections name their view's class; by default the factory makes
        # the back end's tracking recorder, which that view extends (through the
        # store's tracking bases for views).
        views = ("covonaut_es.projections", "covonaut_es.store._backends._eventsourcing")
        (default, *_) = [
            cls
            for cls in self.tracking_recorder_subclass().__mro__
            if issubclass(cls, TrackingRecorder)
            and not cls.__module__.startswith(views)
            and not inspect.isabstract(cls)
        ]
        return default

    def tracking_recorder_subclass(self) -> type[TrackingRecorder]:
        return ReviewQueue(self.store.url).view_class

    def expected_process_recorder_class(self) -> type[ProcessRecorder]:
        return type(self.factory.process_recorder())

    def test_create_process_recorder(self) -> None:
        """A store installs no process recorder, so there is no class of the store's to
        expect: the factory must still make one of eventsourcing's kind, with and
        without creating its tables."""
        assert isinstance(self.factory.process_recorder(), ProcessRecorder)
        self.env["CREATE_TABLE"] = "f"
        assert isinstance(self.factory.process_recorder(), ProcessRecorder)


class TestMemoryFactory(MemoryBackEnd, StoreFactory):
    __test__ = True

    def test_create_tracking_recorder(self) -> None:
        """The factory makes the default tracking recorder, one of a class passed to it,
        and one of the class its TRACKING_RECORDER_TOPIC setting names."""
        super().test_create_tracking_recorder()


class TestSQLiteFactory(SQLiteBackEnd, StoreFactory):
    __test__ = True

    def test_create_application_recorder(self) -> None:
        """The factory makes an application recorder of the class the store installs."""
        super().test_create_application_recorder()


class TestPostgresFactory(PostgresBackEnd, StoreFactory):
    __test__ = True

    def test_create_application_recorder(self) -> None:
        """The factory makes an application recorder of the class the store installs."""
        super().test_create_application_recorder()

    def test_create_aggregate_recorder(self) -> None:
        """The factory makes an aggregate recorder of the class of the store's snapshot
        recorder."""
        super().test_create_aggregate_recorder()


# The factory an application of the user's own is given --------------------------------


class ApplicationFactory(StoreFactory):
    """The infrastructure factory an ``AgentApplication`` gets when its environment
    names eventsourcing's own SQLite or PostgreSQL module: the back end's factory of
    that database, whose application recorder anchors threads' heads. Named by its
    topic, as eventsourcing's ``PERSISTENCE_MODULE`` may name a factory class, it makes
    the recorders the application installs."""

    def setUp(self) -> None:
        url = self.fresh_url()
        where = url.removeprefix("sqlite:///") if url.startswith("sqlite:") else url
        settings = {**shop_env(where, snapshotting=True), "CREATE_TABLE": "y"}
        self.app = Shop(env=settings)
        self.addCleanup(self.app.close)
        self.store = Store.from_application(self.app)
        self.addCleanup(self.store.close)
        self.env = self.app.factory.env  # the tests set keys on it that it must read
        self.env["PERSISTENCE_MODULE"] = get_topic(type(self.app.factory))
        TestCase.setUp(self)
        cases.InfrastructureFactoryTestCase.setUp(self)  # constructs one from the topic
        self.factory.close()
        self.factory = self.app.factory

    def tracking_recorder_subclass(self) -> type[TrackingRecorder]:
        return ReviewQueue.from_application(self.app).view_class

    def test_the_application_installs_an_anchoring_recorder(self) -> None:
        """Configured with eventsourcing's own module, the application gets the back
        end's factory of that database, and a recorder that anchors heads."""
        stock = self.app.factory.__class__.__mro__[1]
        assert stock.__module__ in {"eventsourcing.sqlite", "eventsourcing.postgres"}
        assert self.store._backend.guards_new_streams(self.app.recorder)


class TestSQLiteApplicationFactory(SQLiteBackEnd, ApplicationFactory):
    __test__ = True


class TestPostgresApplicationFactory(PostgresBackEnd, ApplicationFactory):
    __test__ = True
