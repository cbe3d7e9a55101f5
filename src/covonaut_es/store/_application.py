"""The eventsourcing applications that hold agent threads.

:class:`AgentApplication` is the base for the user's own application, which then stores
:class:`~covonaut_es.AgentThread` aggregates beside its own: ``app.save(claim, thread)``
writes both in one transaction, and ``Store.from_application(app)`` lets an
:class:`~covonaut_es.Agent` run on the threads it holds. :func:`open_application` opens
the one behind :func:`~covonaut_es.open_store`.
"""

from __future__ import annotations

import binascii
import copy
import functools
import sqlite3
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.application import (
    Application,
    ProcessingEvent,
    ProjectorFunction,
    Repository,
    project_aggregate,
)
from eventsourcing.persistence import (
    InfrastructureFactory,
    Notification,
    PersistenceError,
    Recording,
    StoredEvent,
)
from eventsourcing.projection import EventSourcedProjection
from eventsourcing.utils import Environment, EnvType, strtobool

from covonaut_es import _logs
from covonaut_es._arguments import check_instance, refuse
from covonaut_es.domain import AgentThread, ThreadSnapshot
from covonaut_es.errors import (
    ConfigurationError,
    CovonautError,
    FollowerError,
    NotAStoreError,
    ReadOnlyStoreError,
    StoreUnavailableError,
)
from covonaut_es.store._backend import (
    TABLES_MADE,
    Backend,
    backend_for_env,
    backend_of,
    construct_factory,
)
from covonaut_es.store._backends._eventsourcing import (
    RebuildingRepository,
    RecordsProcessingEvents,
    notify,
    take_snapshots,
)
from covonaut_es.store._chain import UNCHAINED, chain_in, chain_of
from covonaut_es.store._chain_key import SEALS_NOTHING, SealedPoints, check_chain_key, sealed_tail
from covonaut_es.store._following import (
    ApplicationMapper,
    ApplicationTranscoder,
    cipher_of,
    follow_readable,
)
from covonaut_es.store._heads import HEADS, NEW_STREAMS, Head
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._own_snapshots import (
    AggregateSnapshot,
    check_annotated,
    check_intervals,
    declared_snapshots,
)
from covonaut_es.store._settings import as_recorded, check_settings, key_stream_ids
from covonaut_es.store._snapshot_cache import SnapshotCache
from covonaut_es.store._snapshot_seals import SealKey
from covonaut_es.store._topic_codes import with_codes
from covonaut_es.store._url_secrets import redact, secrets_hidden
from covonaut_es.store._urls import on_read_only_media
from covonaut_es.store._write_errors import database_error

logger = _logs.logger("covonaut_es")


def _check_aggregate_classes(application: str, classes: object) -> None:
    """Refuse ``aggregate_classes`` that is no iterable of classes, before anything is
    made of it (a topic given for a class failed with an AttributeError).

    Raises:
        ConfigurationError: Naming the application and what it holds.
    """
    where = f"{application}.aggregate_classes"
    if isinstance(classes, str | bytes) or not isinstance(classes, Iterable):
        refuse(where, "a tuple of aggregate classes", classes)
    for cls in classes:  # a topic such as 'shop:Order' is not resolved
        check_instance(f"an item of {where}", cls, type, "an aggregate class")


_UNSEALED: Mapping[UUID, str] = {}
"""No stream sealed into a chain: the bases of events that are no thread's."""


class AgentApplication(RecordsProcessingEvents, Application[UUID]):
    """An eventsourcing ``Application`` whose mapper reads and writes agent threads.

    Its mapper is covonaut_es's msgspec mapper, so the thread's events come back with
    their types; compression and encryption settings (``COMPRESSOR_TOPIC``,
    ``CIPHER_TOPIC``) apply as usual. Your own aggregates' events go through the same
    mapper, which decodes every field into its declared type: annotate each field of
    an event class, and each parameter of an ``@event`` method (``Decimal``,
    ``datetime``, enums and msgspec Structs all come back as themselves). Values of
    your own types go through the transcodings of ``register_transcodings``, and your
    events' ``class_version`` and ``upcast_vN_vN+1`` methods upgrade older ones, as in
    eventsourcing. To snapshot one of your aggregates (``snapshotting_intervals``,
    ``take_snapshot``), annotate its attributes on the class (a snapshot's state is
    decoded by those annotations) and nest a
    ``class Snapshot(covonaut_es.store.AggregateSnapshot)`` in it.

    Use it as the base class of your application, or as a mixin before another
    ``Application`` subclass: in an ``eventsourcing.system.System`` it leads, and,
    mixed into a ``ProcessApplication``, follows, under the stock runners; threads
    its policy saves are sealed into their chains as ``save`` seals them.

    List your aggregate classes in ``aggregate_classes``: the mapper reads and writes
    only the events of those and of agent threads (a follower lists those of its
    leaders whose events it reads too, and is given only those, ADR 0129). A stored
    topic is looked up in that list and never imported, so a record naming some other
    module cannot run its code.

    Raises:
        ConfigurationError: ``snapshotting_intervals`` names a class the application
            does not list, one without such a snapshot class, or one that annotates
            none of its attributes.
    """

    aggregate_classes: ClassVar[tuple[type, ...]] = ()
    """The application's own aggregate classes, whose events its mapper may read."""
    backend: Backend
    """The port of its database's back end (ADR 0028)."""

    def __init__(self, env: EnvType | None = None) -> None:
        _check_aggregate_classes(type(self).__qualname__, self.aggregate_classes)
        check_intervals(self.snapshotting_intervals, self.aggregate_classes, (AgentThread,))
        self.sealed_points = SealedPoints()
        """Where each thread object's stream is known to be its own."""
        super().__init__(env)
        # Named the eventsourcing way (get_topic), a library class's records are stored
        # under its code (ADR 0064): a leader notified of none of them.
        self.notify_topics = with_codes(self.notify_topics)
        if isinstance(self, EventSourcedProjection):
            assert isinstance(self.mapper, MsgspecMapper)
            follow_readable(self, self.mapper)
        # Its recorder writes each saved thread's head anchor too where it can (ADR
        # 0052), creating the head table unless CREATE_TABLE is off.
        create = bool(strtobool(self.env.get("CREATE_TABLE") or "yes"))
        store = isinstance(self, ThreadsApplication)
        try:
            self.backend.anchor_heads(self.recorder, create=create, summaries=store)
        except BaseException:
            self.close()
            raise

    def construct_factory(self, env: Environment) -> InfrastructureFactory[Any]:
        """The factory ``PERSISTENCE_MODULE`` names; for eventsourcing's SQLite or
        PostgreSQL module, the library's factory of that database, whose recorder
        anchors each saved thread's head with its events (ADR 0052)."""
        factory = construct_factory(env)
        self.backend = backend_of(factory)  # chosen once, when the application opens
        return factory

    def close(self) -> None:
        """Close the application's connections, the one its saves are written through
        too."""
        try:
            self.backend.close_connections(self.recorder)
        finally:
            super().close()

    def construct_mapper(self) -> MsgspecMapper:
        """covonaut_es's msgspec mapper, with the configured compressor and cipher,
        reading ``aggregate_classes``."""
        return ApplicationMapper(
            self.construct_transcoder(),
            compressor=self.factory.compressor(),
            cipher=cipher_of(self.factory),
        )

    def construct_transcoder(self) -> ApplicationTranscoder:
        """eventsourcing's JSON transcoder with the application's transcodings
        (``register_transcodings``), carrying ``aggregate_classes`` to the mappers made
        with it: this application's, and a follower's of it in a ``System``."""
        transcoder = ApplicationTranscoder(self.aggregate_classes)
        self.register_transcodings(transcoder)
        return transcoder

    def construct_repository(self) -> Repository[UUID]:
        """eventsourcing's repository, whose loads give each thread the chain hash of
        its newest event (the head the next save seals after)."""
        maxsize = self.env.get(self.AGGREGATE_CACHE_MAXSIZE)
        return ChainedRepository(
            event_store=self.events,
            snapshot_store=self.snapshots,
            cache_maxsize=int(maxsize) if maxsize else None,
            fastforward=strtobool(self.env.get(self.AGGREGATE_CACHE_FASTFORWARD, "y")),
            fastforward_skipping=strtobool(
                self.env.get(self.AGGREGATE_CACHE_FASTFORWARD_SKIPPING, "n")
            ),
            deepcopy_from_cache=strtobool(self.env.get(self.DEEPCOPY_FROM_AGGREGATE_CACHE, "y")),
        )

    @property
    def chain_key(self) -> bytes | None:
        """The key the threads' chains are sealed with; None: the public hash."""
        return None

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """As eventsourcing's ``save``, collecting threads' events without its two
        runtime protocol checks per save (a fifth of a turn's persistence cost)."""
        processing_event = _ThreadsProcessingEvent()
        processing_event.collect_events(*objs, **kwargs)
        recordings = self.record_processing_event(processing_event)
        take_snapshots(self, processing_event)
        notify(self, recordings)
        return recordings

    def record_processing_event(
        self, processing_event: ProcessingEvent[UUID]
    ) -> list[Recording[UUID]]:
        """Store the events of a save or of a process application's policy, and its
        tracking, in one transaction, sealing the threads' new events into their hash
        chains as they are encoded, once (ADR 0029).

        Raises:
            SerializationError: An aggregate due for a snapshot could not be
                snapshotted; nothing is stored.
        """
        events = processing_event.events
        first: dict[UUID, int] = {}
        stream: Any = None
        for event in events:
            if event.originator_id is not stream:  # a stream's events come together
                stream = event.originator_id
                first.setdefault(stream, event.originator_version)
        aggregates = processing_event.aggregates
        saved = [
            (a, first[a.id])
            for a in aggregates.values()
            if type(a) is AgentThread and a.id in first
        ]
        self._check_snapshots_due(processing_event)
        bases = {thread.id: self.chain_base(thread, version) for thread, version in saved}
        recordings, heads = self.put_sealed(
            events, bases, tracking=processing_event.tracking, **processing_event.saved_kwargs
        )
        for thread, _ in saved:
            _, version, chain = heads[thread.id]
            thread.chain_head = chain
            self.sealed_points.note(thread, (version, chain))
        if self.repository.cache and not self.repository.fastforward:
            # A copy, as eventsourcing's repository copies what it gives: the caller goes
            # on changing the object it saved, while other threads copy the cached one.
            for aggregate_id, aggregate in aggregates.items():
                self.repository.cache.put(aggregate_id, copy.deepcopy(aggregate))
        return recordings

    def _check_snapshots_due(self, processing_event: ProcessingEvent[UUID]) -> None:
        """Refuse, before anything is stored, a save after which eventsourcing would take
        a snapshot of one of the application's aggregates that cannot be written."""
        intervals = self.snapshotting_intervals
        if not (self.snapshots and intervals):
            return
        for event in processing_event.events:
            aggregate = processing_event.aggregates.get(event.originator_id)
            interval = intervals.get(type(aggregate)) if aggregate is not None else None
            if (
                interval
                and event.originator_version % interval == 0
                and self._declared_snapshot(type(aggregate)) is not None
            ):
                check_annotated(aggregate)

    def _declared_snapshot(self, cls: type) -> type[AggregateSnapshot] | None:
        """The snapshot class one of ``aggregate_classes`` declares, which decodes its
        state by its class's annotations; None for a class snapshotted as eventsourcing
        does (a stock snapshot, which needs none)."""
        declared = declared_snapshots([cls]) if cls in self.aggregate_classes else []
        return declared[0] if declared else None

    def take_snapshot(
        self,
        aggregate_id: UUID,
        version: int | None = None,
        projector_func: ProjectorFunction[Any, Any] = project_aggregate,
    ) -> None:
        """As eventsourcing's, taking a snapshot of one of ``aggregate_classes`` with
        the ``Snapshot`` class it declares (an
        :class:`~covonaut_es.store.AggregateSnapshot`), bound to it.

        Raises:
            SerializationError: The aggregate has attributes its class does not
                annotate.
        """
        if self.snapshots is None or projector_func is not project_aggregate:
            super().take_snapshot(aggregate_id, version, projector_func)
            return
        aggregate: Any = self.repository.get(aggregate_id, version=version)
        declared = self._declared_snapshot(type(aggregate))
        if declared is None:
            super().take_snapshot(aggregate_id, version, projector_func)
            return
        self.snapshots.put([declared.take(aggregate)])

    def chain_base(self, thread: AgentThread, first: int) -> str:
        """The chain hash the thread's new event at version ``first`` is sealed after:
        the one its load or last save gave it; with a chain key or a cipher key, the one
        stored before that version, once every link since the point of the thread this
        process knows to be its own verifies
        (:func:`~covonaut_es.store._chain_key.sealed_tail`, ADR 0144)."""
        if first == 1:
            return UNCHAINED
        key = self.chain_key
        if key is not None or self.mapper.cipher is not None:
            trusted = self.sealed_points.get(thread)
            return sealed_tail(self, key, thread.thread_id, thread.id, first - 1, trusted)
        if thread.chain_head is not None:
            return thread.chain_head
        return self.stored_chain(thread.id, first - 1)

    def stored_chain(self, stream: UUID, version: int) -> str:
        """The chain hash stored with ``stream``'s event at ``version``."""
        assert isinstance(self.mapper, MsgspecMapper)
        for record in self.recorder.select_events(stream, gt=version - 1, lte=version):
            return chain_in(self.mapper.plain_payload(record))
        return UNCHAINED

    def put_sealed(
        self,
        events: list[Any],
        bases: Mapping[UUID, str],
        *,
        new_streams: Set[UUID] = frozenset(),
        **kwargs: Any,
    ) -> tuple[list[Recording[UUID]], dict[UUID, Head]]:
        """Encode and insert ``events`` in one transaction, sealing those of the
        streams in ``bases`` into their chains, each after the hash its stream maps to.
        ``new_streams`` must hold no events yet (a fork's). Returns the recordings and
        each sealed stream's new head."""
        mapper, key = self.mapper, self.chain_key
        assert isinstance(mapper, MsgspecMapper)
        heads: dict[UUID, Head] = {}
        stored: list[StoredEvent] = []
        # A thread saved from version 1 must not land in a fork's stream, which starts above.
        new: set[UUID] = set()
        stream: Any = None
        previous: str | None = None
        version = 0
        for event in events:
            if event.originator_id is not stream:  # a stream's events come together
                if previous is not None:
                    heads[stream] = (stream, version, previous)
                stream = event.originator_id
                previous = heads[stream][2] if stream in heads else bases.get(stream)
            version = event.originator_version
            if previous is None:
                stored.append(mapper.to_stored_event(event))
                continue
            if version == 1:
                new.add(stream)
            record, previous = mapper.to_sealed_event(event, previous, key)
            stored.append(record)
        if previous is not None:
            heads[stream] = (stream, version, previous)
        anchoring = self._anchoring(heads, new | new_streams)
        ids = self.recorder.insert_events(stored, **anchoring, **kwargs)
        # None or nothing: a recorder that keeps no log (an aggregate recorder's)
        return _recordings(events, stored, ids or []), heads

    def put_and_tell(
        self,
        events: list[Any],
        bases: Mapping[UUID, str] = _UNSEALED,
        /,
        **kwargs: Any,
    ) -> list[Recording[UUID]]:
        """Store ``events`` outside a save (a fork's, a named state's, a submission's,
        an input taken), as :meth:`put_sealed` does, and tell the application's
        followers of them as a save does: a system's runner that trusts each notice's
        account of the log (eventsourcing's ``NewSingleThreadedRunner``) passed over
        events stored without one for good.

        Raises:
            IntegrityError: A stream already holds an event at a version given.
            FollowerError: A follower failed on the events, which are stored.
        """
        recordings, _ = self.put_sealed(events, bases, **kwargs)
        self._tell(recordings)
        return recordings

    def _tell(self, recordings: list[Recording[UUID]]) -> None:
        """Tell the followers of ``recordings``, stored already.

        Raises:
            FollowerError: A follower failed on them (its error the cause): never its
                own ``IntegrityError``, which a caller retrying a write on another
                writer's conflict would take for one, and write again.
        """
        try:
            notify(self, recordings)
        except Exception as exc:
            msg = f"a follower of {self.name} failed on events stored: {exc}"
            raise FollowerError(msg) from exc

    def insert_and_tell(self, stored: list[StoredEvent], **kwargs: Any) -> None:
        """Insert records stored elsewhere (an import's), and tell the application's
        followers of them as :meth:`put_and_tell` does, each decoded before any is
        written.

        Raises:
            IntegrityError: A stream already holds an event at a record's version.
            SerializationError: A record does not decode; nothing was written.
            FollowerError: A follower failed on the events, which are stored.
        """
        events = [self.mapper.to_domain_event(record) for record in stored]
        ids = self.recorder.insert_events(stored, **kwargs)
        self._tell(_recordings(events, stored, ids or []))

    def _anchoring(self, heads: Mapping[UUID, Head], new: Set[UUID]) -> dict[str, Any]:
        """What ``insert_events`` is given to anchor the saved threads' heads and keep
        ``new`` streams new, written with the events (a recorder that keeps no anchors
        ignores them)."""
        return {HEADS: list(heads.values()), NEW_STREAMS: new}

    def construct_snapshot_store(self) -> SnapshotCache:
        """The snapshot store, read as a cache: see :class:`SnapshotCache`."""
        assert isinstance(self.mapper, MsgspecMapper)
        recorder = self.factory.aggregate_recorder(purpose="snapshots")
        cipher_key = self.env.get("CIPHER_KEY") if self.mapper.cipher else None
        chain_key = self.chain_key
        key = SealKey(chain_key=chain_key.decode() if chain_key else None, cipher_key=cipher_key)
        return SnapshotCache(self.mapper, recorder, events=self.recorder, key=key)


def _recordings(
    events: Sequence[Any], stored: Sequence[StoredEvent], ids: Sequence[int]
) -> list[Recording[UUID]]:
    """What a save tells followers of: each event with its record's notification."""
    if not ids:
        return []
    return [
        Recording(
            event,
            Notification(
                id=n, originator_id=s.originator_id, originator_version=s.originator_version,
                topic=s.topic, state=s.state,
            ),
        )
        for event, s, n in zip(events, stored, ids, strict=True)
    ]  # fmt: skip


CHAIN_KEY_ENV = "COVONAUT_CHAIN_KEY"
"""The setting holding a store's chain key (``open_store(chain_key=...)``)."""

_MIN_CHAIN_KEY = 16


def checked_chain_key(key: object) -> str:
    """``key`` if it is text long enough to be a secret.

    Raises:
        ConfigurationError: It is no str, holds a lone surrogate (no text: bytes that
            are no UTF-8, read from a command line), or is shorter than 16 characters.
    """
    if type(key) is not str:
        refuse("chain_key", "a str", key)
    try:
        key.encode()
    except UnicodeEncodeError as exc:
        msg = (
            f"chain_key holds a lone surrogate at position {exc.start}, which is no text "
            "(bytes that are not UTF-8); use e.g. secrets.token_urlsafe(32)"
        )
        raise ConfigurationError(msg) from None
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

    def __init__(self, env: EnvType | None = None) -> None:
        super().__init__(env=env)
        try:
            key_stream_ids(self, "the store")  # as it records, for every open of it
        except BaseException:
            self.close()
            raise

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        # Only what open_store() passed: variables in os.environ must not redirect a
        # store to another database behind the caller's back.
        return Environment(name, dict(env or {}))

    @functools.cached_property
    def chain_key(self) -> bytes | None:
        """The key the threads' chains are sealed with (``open_store(chain_key=...)``),
        read once: the settings of an open store do not change."""
        key = self.env.get(CHAIN_KEY_ENV)
        return key.encode() if key else None


def project_chained(aggregate: Any, events: Iterable[Any]) -> Any:
    """eventsourcing's projection of an aggregate, giving a thread the chain hash of
    each event it folds (a snapshot brings its own)."""
    for event in events:
        aggregate = event.mutate(aggregate)
        if type(aggregate) is AgentThread and not isinstance(event, ThreadSnapshot):
            aggregate.chain_head = chain_of(event)
    return aggregate


class ChainedRepository(RebuildingRepository, Repository[UUID]):
    """eventsourcing's repository, projecting with :func:`project_chained` unless told
    otherwise, and rebuilding as a :class:`~covonaut_es.store._backends._eventsourcing.Rebuilt`
    projection says when given one."""

    def get(self, aggregate_id: UUID, *, version: int | None = None, **kwargs: Any) -> Any:
        if kwargs.get("projector_func", project_aggregate) is project_aggregate:
            kwargs["projector_func"] = project_chained
        return super().get(aggregate_id, version=version, **kwargs)


class _ThreadsProcessingEvent(ProcessingEvent[UUID]):
    def collect_events(self, *objs: Any, **kwargs: Any) -> None:
        for obj in objs:  # in order: the log keeps the order of the objects saved
            if type(obj) is not AgentThread:
                super().collect_events(obj)
                continue
            self.events.extend(obj.collect_events())
            self.aggregates[obj.id] = obj
        self.saved_kwargs.update(kwargs)


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
        StorePrivilegeError: PostgreSQL's role may not read or make the store's tables.
        StoreLockedError: Another connection held the file's write lock too long.
        StoreDamagedError: The store's SQLite file is damaged, or its tables were
            changed around the library.
        StoreUnavailableError: The database cannot be reached.
    """
    backend, shown = backend_for_env(env), redact(url)  # no message shows a password,
    with secrets_hidden(url):  # nor a driver's, about what it read from a malformed URL
        try:
            with backend.opening(env, shown) as opened:
                env = opened
                app = ThreadsApplication(env=dict(env))
                try:
                    settled = as_recorded(env, check_settings(app, env, shown))
                    if settled != env:
                        # The mapper takes its compressor when it is made, and the chain
                        # key's check reads events with it.
                        app.close()
                        app = ThreadsApplication(env=settled)
                    key_stream_ids(app, f"store {shown}")  # as a new store has just recorded
                    writes = env.get("CREATE_TABLE") != "n" and env.get(SEALS_NOTHING) != "y"
                    check_chain_key(app, app.chain_key, shown, writes=writes)
                    if env.get("CREATE_TABLE") != "n" and env.get(TABLES_MADE) != "y":
                        app.backend.make_tables(app.recorder)
                except BaseException:
                    app.close()
                    raise
                return app
        except CovonautError:
            raise  # e.g. a gap in the upcasters, found before any data is read
        except ImportError as exc:
            extra = "encryption" if "CIPHER_KEY" in env else "postgres"
            msg = f"store {shown} needs a missing package ({exc}); install 'covonaut-es[{extra}]'"
            raise ConfigurationError(msg) from exc
        except (ValueError, binascii.Error) as exc:
            msg = (
                f"store {shown}: invalid cipher key ({exc}); expected the base64 of 16, 24 or 32 "
                "bytes, as create_cipher_key() returns"
            )
            raise ConfigurationError(msg) from exc
        except (PersistenceError, sqlite3.DatabaseError) as exc:
            if "readonly" in str(exc) or on_read_only_media(env):
                msg = (
                    f"store {shown} is read-only ({exc}); make it and its directory "
                    "writable, or add ?mode=ro to read it"
                )
                raise ReadOnlyStoreError(msg) from exc
            if "not a database" in str(exc):
                msg = f"store {shown} is not a SQLite database ({exc}); expected a store"
                raise NotAStoreError(msg) from exc
            typed = database_error(exc, f"store {shown}", "it was not opened")
            if typed is not None and type(typed) is not StoreUnavailableError:
                raise typed from exc  # a kind of its own: refused, locked, damaged
            msg = f"cannot open store {shown}: {exc}"
            raise StoreUnavailableError(msg) from exc
