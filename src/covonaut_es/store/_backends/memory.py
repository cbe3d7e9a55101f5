"""The in-memory back end: stores that several applications of one process can share
by name (ADR 0028).

eventsourcing's POPO recorders belong to the application that made them. A store's
projections run in applications of their own, so ``memory://NAME`` stores keep their
recorders here, by name, for as long as some application uses them (then they go, as
in-memory data does). Selected with
``PERSISTENCE_MODULE=covonaut_es.store._backends.memory``. Its application recorder keeps
head anchors and lease tokens in dictionaries beside the events. Its recorders store
stream ids as the store records (:mod:`covonaut_es.store._stream_ids`).

Private names of eventsourcing's POPO recorder used here (``_assert_uniqueness``,
``_update_table``, ``_stored_events_index``, ``_database_lock``) were checked against
eventsourcing 9.5.6.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing import popo
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    StoredEvent,
)
from eventsourcing.popo import POPOAggregateRecorder, POPOApplicationRecorder, POPOTrackingRecorder

from covonaut_es.domain import ThreadSnapshot
from covonaut_es.store._backend import BackendName
from covonaut_es.store._backends._memory_leases import MemoryLeases
from covonaut_es.store._heads import (
    FENCES,
    HEADS,
    NEW_STREAMS,
    HeadAnchor,
    RecorderAnchors,
    anchor_in,
    check_fences,
    check_heads_follow,
    taken,
)
from covonaut_es.store._leases import LeaseBackend
from covonaut_es.store._openings import Openings
from covonaut_es.store._outstanding import OutstandingTable
from covonaut_es.store._review_index_table import ReviewIndexTable
from covonaut_es.store._settings_tables import MemorySettings, SettingsTable
from covonaut_es.store._snapshot_cache import SnapshotCache
from covonaut_es.store._stream_ids import KeyedEvents, KeyedLog
from covonaut_es.store._summaries import SummaryTable
from covonaut_es.store._thread_rows import ThreadRows

MEMORY_STORE_NAME = "MEMORY_STORE_NAME"


class _AnchoringRecorder(POPOApplicationRecorder):
    """eventsourcing's POPO application recorder that, once :meth:`anchor_heads` is
    called (by the store's application), keeps head anchors and lease tokens and
    honours the store's ``insert_events`` keywords."""

    def __init__(self) -> None:
        super().__init__()
        self.anchoring = False
        self.thread_heads: dict[UUID, tuple[int, str]] = {}
        self.lease_tokens: dict[UUID, int] = {}

    def anchor_heads(self, *, create: bool = True) -> None:
        """Write head anchors from now on (every save of the store's application); an
        in-memory store has no table to create."""
        self.anchoring = True

    def _assert_uniqueness(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        super()._assert_uniqueness(stored_events, **kwargs)  # under the database lock
        if not self.anchoring:
            return
        for stream in kwargs.get(NEW_STREAMS, ()):
            if self._stored_events_index.get(str(stream)):
                raise taken(stream)
        check_fences(kwargs.get(FENCES, ()), self.lease_tokens.get)

    def advance_lease_token(self, stream: UUID) -> int:
        """Record a new run lease of ``stream``: its token, one more than the last."""
        with self._database_lock:
            token = self.lease_tokens.get(stream, 0) + 1
            self.lease_tokens[stream] = token
            return token

    def lease_token(self, stream: UUID) -> int | None:
        """The token of ``stream``'s newest run lease; None before its first."""
        with self._database_lock:
            return self.lease_tokens.get(stream)

    def _update_table(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        if self.anchoring:  # before the events: this back end has no transaction to undo
            check_heads_follow(kwargs.get(HEADS, ()), stored_events, self._anchored)
        ids = super()._update_table(stored_events, **kwargs)  # under the database lock
        if self.anchoring:
            for stream, version, chain in kwargs.get(HEADS, ()):
                self.thread_heads[stream] = (version, chain)
        return ids

    def _anchored(self, stream: UUID) -> int | None:
        head = self.thread_heads.get(stream)
        return None if head is None else head[0]

    def read_head(self, stream: UUID) -> HeadAnchor:
        """What the head anchors say of ``stream``."""
        if not self.anchoring:
            return HeadAnchor(store_anchors=False)
        with self._database_lock:
            return anchor_in(self.thread_heads.get(stream), anchors=bool(self.thread_heads))


class MemoryApplicationRecorder(KeyedLog, _AnchoringRecorder):
    """The store's application recorder, storing stream ids as the store records."""


class MemorySnapshotRecorder(KeyedEvents, POPOAggregateRecorder):
    """The snapshots' recorder, storing stream ids as the store records."""


class _SharedMemory:
    """The recorders of one named in-memory store."""

    def __init__(self) -> None:
        self.events = MemoryApplicationRecorder()
        self.aggregates: dict[str, AggregateRecorder] = {}
        self.trackers: dict[type[POPOTrackingRecorder], POPOTrackingRecorder] = {}
        self.settings: dict[str, str] = {}  # the store's recorded options (see _settings)
        self.lock = threading.Lock()


_stores: weakref.WeakValueDictionary[str, _SharedMemory] = weakref.WeakValueDictionary()
_stores_lock = threading.Lock()


# eventsourcing looks for exactly one factory class in a persistence module.
class Factory(popo.POPOFactory):
    """A POPO factory whose recorders are shared by every application of one name."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        name = self.env.get(MEMORY_STORE_NAME) or ""
        with _stores_lock:
            memory = _stores.get(name)
            if memory is None:
                memory = _stores[name] = _SharedMemory()
        self._memory = memory  # held by the factory, so by each application using it

    @property
    def settings(self) -> dict[str, str]:
        """The options the store was created with, as :mod:`._settings` records them."""
        return self._memory.settings

    def application_recorder(self) -> ApplicationRecorder:
        return self._memory.events

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        with self._memory.lock:
            return self._memory.aggregates.setdefault(purpose, MemorySnapshotRecorder())

    def tracking_recorder(
        self, tracking_recorder_class: type[POPOTrackingRecorder] | None = None
    ) -> POPOTrackingRecorder:
        # eventsourcing's factory decides the class (None: the one TRACKING_RECORDER_TOPIC
        # names, or its own); the first recorder made of each class is the one kept.
        made = super().tracking_recorder(tracking_recorder_class)
        with self._memory.lock:
            return self._memory.trackers.setdefault(type(made), made)


class _MemoryBackend(RecorderAnchors):
    """The port of the in-memory back end (see :class:`~covonaut_es.store._backend.Backend`)."""

    name: BackendName = "memory"
    keeps_one_snapshot = False
    anchoring_recorder = MemoryApplicationRecorder

    def owns(self, factory: InfrastructureFactory[Any]) -> bool:
        return isinstance(factory, popo.POPOFactory)

    def check_file(self, env: Mapping[str, str], shown: str) -> None:
        return

    def check_projection_file(self, env: Mapping[str, str], where: str) -> None:
        return

    def opening(
        self, env: Mapping[str, str], shown: str
    ) -> contextlib.AbstractContextManager[Mapping[str, str]]:
        return contextlib.nullcontext(env)

    def tables_lock(
        self, factory: InfrastructureFactory[Any]
    ) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def canonical_url(self, url: str, env: Mapping[str, str]) -> str:
        # An anonymous store gets the name it was given, so that projections in this
        # process can follow it.
        return f"memory://{env[MEMORY_STORE_NAME]}"

    def close_connections(self, recorder: ApplicationRecorder) -> None:
        return

    def ping(self, recorder: ApplicationRecorder, timeout: float) -> None:
        # This process's memory, or a user's persistence module this port stands in for.
        recorder.max_notification_id()

    def database_now(self, recorder: ApplicationRecorder) -> datetime | None:
        return None  # this process's memory: its clock is the only one

    def select_thread(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        stream: UUID,
        lte: int,
    ) -> ThreadRows | None:
        return None  # no round trips to save: read one recorder after the other

    def select_openings(
        self, events: ApplicationRecorder, streams: Sequence[UUID], topics: Sequence[str]
    ) -> Openings | None:
        return None  # no round trips to save: read each stream's first record

    def settings_table(
        self, factory: InfrastructureFactory[Any], recorder: ApplicationRecorder, table: str
    ) -> SettingsTable:
        return MemorySettings(factory.settings if isinstance(factory, Factory) else {}, table)

    def replace_snapshot(self, snapshots: SnapshotCache, snapshot: ThreadSnapshot) -> None:
        snapshots.put([snapshot])  # the data dies with the process: all are kept

    def lease_backend(
        self, factory: InfrastructureFactory[Any], recorder: ApplicationRecorder, holder: str
    ) -> LeaseBackend:
        tokens = recorder if self.guards_new_streams(recorder) else None
        return MemoryLeases(holder, recorder, tokens)  # type: ignore[arg-type]

    def summary_table(self, recorder: ApplicationRecorder) -> SummaryTable | None:
        return None  # a listing reads the threads in memory themselves

    def outstanding_table(self, recorder: ApplicationRecorder) -> OutstandingTable | None:
        return None  # a worker folds the log in memory, which dies with the process too

    def review_index_table(self, recorder: ApplicationRecorder) -> ReviewIndexTable | None:
        return None  # a lookup reads the log in memory

    def make_tables(self, recorder: ApplicationRecorder) -> None:
        return  # this process's memory, or a module it stands in for: made on first use


BACKEND = _MemoryBackend()
"""This back end's port."""
