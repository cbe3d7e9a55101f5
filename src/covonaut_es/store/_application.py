"""The eventsourcing applications that hold agent threads.

:class:`AgentApplication` is the base for the user's own application, which then stores
:class:`~covonaut_es.AgentThread` aggregates beside its own: ``app.save(claim, thread)``
writes both in one transaction, and ``Store.from_application(app)`` lets an
:class:`~covonaut_es.Agent` run on the threads it holds. :func:`open_application` opens
the one behind :func:`~covonaut_es.open_store`.
"""

from __future__ import annotations

import binascii
import contextlib
import logging
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.application import Application, ProcessingEvent
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    Cipher,
    EventStore,
    InfrastructureFactory,
    PersistenceError,
    Recording,
)
from eventsourcing.utils import Environment, EnvType, TopicError, strtobool

from covonaut_es import _logs
from covonaut_es.domain import AgentThread, ThreadSnapshot
from covonaut_es.domain._integrity import CHAIN_KEY, UNCHAINED, seal_all
from covonaut_es.errors import (
    ConfigurationError,
    CovonautError,
    NotAStoreError,
    ReadOnlyStoreError,
    SchemaVersionError,
    SerializationError,
    StaleSnapshotError,
    StoreUnavailableError,
)
from covonaut_es.migrations import Upcaster
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store._heads import HEADS, NEW_STREAMS, anchor_heads, close_writer
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._postgres_rows import insert_rows_as_json
from covonaut_es.store._settings import as_recorded, check_settings, check_sqlite_file
from covonaut_es.store._sqlite_connections import keep_statements
from covonaut_es.store._urls import SQLITE_PATH, postgres_params

logger = _logs.logger("covonaut_es")


class AgentApplication(Application[UUID]):
    """An eventsourcing ``Application`` whose mapper reads and writes agent threads.

    Its mapper is covonaut_es's msgspec mapper, so the thread's events come back with
    their types; compression and encryption settings (``COMPRESSOR_TOPIC``,
    ``CIPHER_TOPIC``) apply as usual. Your own aggregates' events go through the same
    mapper, which decodes every field into its declared type: annotate each field of
    an event class, and each parameter of an ``@event`` method (``Decimal``,
    ``datetime``, enums and msgspec Structs all come back as themselves). Snapshots
    are written for agent threads only: leave your aggregates out of
    ``snapshotting_intervals``.

    Use it as the base class of your application, or as a mixin before another
    ``Application`` subclass.

    List your aggregate classes in ``aggregate_classes``: the mapper reads and writes
    only the events of those and of agent threads. A stored topic is looked up in that
    list and never imported, so a record naming some other module cannot run its code.
    """

    aggregate_classes: ClassVar[tuple[type, ...]] = ()
    """The application's own aggregate classes, whose events its mapper may read."""

    def construct_factory(self, env: Environment) -> InfrastructureFactory[Any]:
        """eventsourcing's factory for ``env``, passing on a PostgreSQL store's further
        URL parameters (see :func:`with_connection_params`)."""
        return with_connection_params(super().construct_factory(env), env)

    def construct_mapper(self) -> MsgspecMapper:
        """covonaut_es's msgspec mapper, with the configured compressor and cipher."""
        return MsgspecMapper(
            compressor=self.factory.compressor(),
            cipher=_cipher(self.factory),
            aggregate_classes=self.aggregate_classes,
        )

    def construct_snapshot_store(self) -> SnapshotCache:
        """The snapshot store, read as a cache: see :class:`SnapshotCache`."""
        assert isinstance(self.mapper, MsgspecMapper)
        recorder = self.factory.aggregate_recorder(purpose="snapshots")
        insert_rows_as_json(recorder)
        return SnapshotCache(self.mapper, recorder)


def _cipher(factory: InfrastructureFactory[Any]) -> Cipher | None:
    """The factory's cipher. eventsourcing reports a missing ``cryptography`` package as
    a failure to resolve its cipher's topic, which no ``except ImportError`` sees: this
    says which extra to install instead.

    Raises:
        ConfigurationError: The cipher's package is missing.
    """
    try:
        return factory.cipher()
    except TopicError as exc:
        if not isinstance(exc.__cause__, ImportError):
            raise
        msg = (
            f"an encrypted store needs the 'cryptography' package ({exc.__cause__}); "
            "install it with: pip install 'covonaut-es[encryption]'"
        )
        raise ConfigurationError(msg) from exc


def with_connection_params(
    factory: InfrastructureFactory[Any], env: Mapping[str, str]
) -> InfrastructureFactory[Any]:
    """``factory``, with a PostgreSQL store's further URL parameters (``sslmode`` and
    the like) given to every connection of its pool, which opens only on first use."""
    params = postgres_params(env)
    if params:
        from eventsourcing.postgres import PostgresDatastore

        datastore = getattr(factory, "datastore", None)
        kwargs = datastore.pool.kwargs if isinstance(datastore, PostgresDatastore) else None
        if isinstance(kwargs, dict):
            kwargs.update(params)
    return factory


class SnapshotCache(EventStore[UUID]):
    """The snapshot store, read as a cache (ADR 0007). Internal.

    A snapshot that cannot be upgraded to the current schema is passed over with a log
    line, so the repository rebuilds the thread from its events. A snapshot newer than
    the code is an error, as for events.

    Args:
        mapper: The application's mapper.
        recorder: The snapshots' recorder.
        migrators: The application's upcasters for snapshots, each replacing the
            library's own for its step.
    """

    def __init__(
        self,
        mapper: MsgspecMapper,
        recorder: AggregateRecorder,
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> None:
        super().__init__(mapper, recorder)
        self._decoder = mapper
        self._migrators = migrators

    def get(
        self,
        originator_id: UUID,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Iterator[DomainEventProtocol[UUID]]:
        records = self.recorder.select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        for record in records:
            try:
                yield self._decoder.decode(record, migrators=self._migrators)
            except SchemaVersionError:
                raise
            except SerializationError as exc:
                # Expected after an upgrade that snapshots cannot follow; else worth a look.
                level = logging.INFO if isinstance(exc, StaleSnapshotError) else logging.WARNING
                logger.log(level, "%s; rebuilding the thread from its events", exc)


CHAIN_KEY_ENV = "COVONAUT_CHAIN_KEY"
"""The setting holding a store's chain key (``open_store(chain_key=...)``)."""

_MIN_CHAIN_KEY = 16


def checked_chain_key(key: str) -> str:
    """``key`` if it is long enough to be a secret.

    Raises:
        ConfigurationError: It is shorter than 16 characters.
    """
    if len(key) < _MIN_CHAIN_KEY:
        msg = (
            f"chain_key: expected a secret of at least {_MIN_CHAIN_KEY} characters, found "
            f"{len(key)}; use e.g. secrets.token_urlsafe(32)"
        )
        raise ConfigurationError(msg)
    return key


STORE_APPLICATION_NAME = "covonaut"
"""Names a store's tables on PostgreSQL and its position in projections' tracking."""


class ThreadsApplication(AgentApplication):
    """The application behind every store that :func:`open_store` opens."""

    # Explicit and stable: PostgreSQL table names derive from it.
    name = STORE_APPLICATION_NAME
    snapshot_class = ThreadSnapshot

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        # Only what open_store() passed: variables in os.environ must not redirect a
        # store to another database behind the caller's back.
        return Environment(name, dict(env or {}))

    def construct_factory(self, env: Environment) -> InfrastructureFactory[Any]:
        """As :class:`AgentApplication`'s, with SQLite connections that keep their
        statements parsed (ADR 0024)."""
        factory = super().construct_factory(env)
        keep_statements(factory)
        return factory

    def construct_recorder(self) -> ApplicationRecorder:
        """The back end's recorder, writing each saved thread's head anchor too."""
        recorder = super().construct_recorder()
        anchor_heads(recorder, create=strtobool(self.env.get("CREATE_TABLE") or "yes"))
        return recorder

    def close(self) -> None:
        """Close the store's connections, the one its saves are written through too."""
        try:
            close_writer(self.recorder)
        finally:
            super().close()

    @property
    def chain_key(self) -> bytes | None:
        """The key the threads' chains are sealed with (``open_store(chain_key=...)``)."""
        key = self.env.get(CHAIN_KEY_ENV)
        return key.encode() if key else None

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """As eventsourcing's ``save``, collecting threads' events without its two
        runtime protocol checks per save (a fifth of a turn's persistence cost); with a
        chain key, the threads' new events are sealed with it (ADR 0013)."""
        processing_event = _ThreadsProcessingEvent()
        processing_event.collect_events(*objs, **kwargs)
        threads = [t for t in processing_event.aggregates.values() if type(t) is AgentThread]
        key = self.chain_key
        if key is not None:
            for thread in threads:
                self._seal_with_key(thread, processing_event.events, key)
        heads = [(t.id, t.version, t.chain_head or UNCHAINED) for t in threads]
        processing_event.saved_kwargs[HEADS] = heads  # written with the events
        # A thread saved from version 1 must not land in a fork's stream, which starts above.
        processing_event.saved_kwargs[NEW_STREAMS] = {
            e.originator_id for e in processing_event.events if e.originator_version == 1
        } & {t.id for t in threads}
        recordings = self._record(processing_event)
        self._take_snapshots(processing_event)
        self._notify(recordings)
        return recordings

    def _seal_with_key(self, thread: AgentThread, events: list[Any], key: bytes) -> None:
        """Seal the thread's new events again with ``key``, after the stored head."""
        new = [e for e in events if e.originator_id == thread.id]
        if not new:
            return
        previous = UNCHAINED
        if (base := new[0].originator_version - 1) > 0:
            stored = self.recorder.select_events(thread.id, lte=base, desc=True, limit=1)
            assert isinstance(self.mapper, MsgspecMapper)
            for record in stored:
                payload = self.mapper.payload_fields(record)
                previous = str(payload.get(CHAIN_KEY, UNCHAINED))
        thread.chain_head = seal_all(new, previous, key)


class _ThreadsProcessingEvent(ProcessingEvent[UUID]):
    def collect_events(self, *objs: Any, **kwargs: Any) -> None:
        threads = [obj for obj in objs if type(obj) is AgentThread]
        for thread in threads:
            self.events.extend(thread.collect_events())
            self.aggregates[thread.id] = thread
        others = [obj for obj in objs if type(obj) is not AgentThread]
        super().collect_events(*others, **kwargs)


_SCHEMA_LOCK_KEY = 0x636F766F  # "covo": serializes table creation across processes


@contextlib.contextmanager
def _schema_setup_lock(env: Mapping[str, str]) -> Iterator[None]:
    """Hold a PostgreSQL advisory lock while eventsourcing creates its tables: processes
    opening a new database at the same moment otherwise fail with "tuple concurrently
    updated"."""
    if env["PERSISTENCE_MODULE"] != "eventsourcing.postgres":
        yield
        return
    import psycopg
    from psycopg.conninfo import make_conninfo

    try:
        conn = psycopg.connect(
            make_conninfo(**postgres_params(env)),
            host=env["POSTGRES_HOST"],
            port=env["POSTGRES_PORT"],
            dbname=env["POSTGRES_DBNAME"],
            user=env["POSTGRES_USER"] or None,
            password=env["POSTGRES_PASSWORD"] or None,
            connect_timeout=int(env["POSTGRES_CONNECT_TIMEOUT"]),
            autocommit=True,
        )
    except psycopg.Error as exc:
        msg = (
            f"cannot connect to PostgreSQL at {env['POSTGRES_HOST']}:{env['POSTGRES_PORT']}: {exc}"
        )
        raise StoreUnavailableError(msg) from exc
    with conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_KEY,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK_KEY,))


def open_application(url: str, env: Mapping[str, str]) -> AgentApplication:
    """Open the application behind :func:`~covonaut_es.open_store` for ``env``, creating
    its tables if needed.

    Raises:
        ConfigurationError: A package the settings need is missing, or the cipher key
            is invalid.
        StoreSettingsError: The cipher key or compression is not the store's.
        NotAStoreError: The database is not a store (``ForeignSchemaError``: another
            application's tables).
        ReadOnlyStoreError: The store's file is read-only and the open may write.
        StoreUnavailableError: The database cannot be reached.
    """
    sqlite_file = env.get(SQLITE_PATH, env.get("SQLITE_DBNAME"))
    if env["PERSISTENCE_MODULE"] == "eventsourcing.sqlite" and sqlite_file:
        check_sqlite_file(sqlite_file, url, writable=env.get("CREATE_TABLE") != "n")
    try:
        with _schema_setup_lock(env):
            app = ThreadsApplication(env=dict(env))
            try:
                settled = as_recorded(env, check_settings(app, env, url))
            except BaseException:
                app.close()
                raise
            if settled == env:
                return app
            app.close()  # the mapper takes its compressor when it is made
            return ThreadsApplication(env=settled)
    except CovonautError:
        raise  # e.g. a gap in the upcasters, found before any data is read
    except ImportError as exc:
        extra = "encryption" if "CIPHER_KEY" in env else "postgres"
        msg = f"store {url} needs a missing package ({exc}); install 'covonaut-es[{extra}]'"
        raise ConfigurationError(msg) from exc
    except (ValueError, binascii.Error) as exc:
        msg = (
            f"store {url}: invalid cipher key ({exc}); expected the base64 of 16, 24 or 32 "
            "bytes, as create_cipher_key() returns"
        )
        raise ConfigurationError(msg) from exc
    except (PersistenceError, sqlite3.DatabaseError) as exc:
        if "readonly" in str(exc):
            msg = f"store {url} is read-only ({exc}); make it writable, or add ?mode=ro to read it"
            raise ReadOnlyStoreError(msg) from exc
        if "not a database" in str(exc):
            msg = f"store {url} is not a SQLite database ({exc}); expected a store"
            raise NotAStoreError(msg) from exc
        msg = f"cannot open store {url}: {exc}"
        raise StoreUnavailableError(msg) from exc
