"""In-memory stores that several applications of one process can share by name.

eventsourcing's POPO recorders belong to the application that made them. A store's
projections run in applications of their own, so ``memory://NAME`` stores keep their
recorders here, by name, for as long as some application uses them (then they go, as
in-memory data does). Selected with ``PERSISTENCE_MODULE=covonaut_es.store._memory``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from eventsourcing import popo
from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder
from eventsourcing.popo import POPOAggregateRecorder, POPOApplicationRecorder, POPOTrackingRecorder

MEMORY_STORE_NAME = "MEMORY_STORE_NAME"


class _SharedMemory:
    """The recorders of one named in-memory store."""

    def __init__(self) -> None:
        self.events = POPOApplicationRecorder()
        self.aggregates: dict[str, AggregateRecorder] = {}
        self.trackers: dict[type[POPOTrackingRecorder], POPOTrackingRecorder] = {}
        self.settings: dict[str, str] = {}  # the store's recorded options (see _settings)
        self.lock = threading.Lock()


_stores: weakref.WeakValueDictionary[str, _SharedMemory] = weakref.WeakValueDictionary()
_stores_lock = threading.Lock()


# Referenced through its module: eventsourcing looks for exactly one factory class here.
class MemoryFactory(popo.POPOFactory):
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
            return self._memory.aggregates.setdefault(purpose, POPOAggregateRecorder())

    def tracking_recorder(
        self, tracking_recorder_class: type[POPOTrackingRecorder] | None = None
    ) -> POPOTrackingRecorder:
        recorder_class = tracking_recorder_class or POPOTrackingRecorder
        with self._memory.lock:
            if recorder_class not in self._memory.trackers:
                self._memory.trackers[recorder_class] = super().tracking_recorder(recorder_class)
            return self._memory.trackers[recorder_class]


Factory = MemoryFactory
