"""Run leases and the worker registry of an in-memory store: a table in this process
(ADR 0016), shared by the stores of one recorder."""

from __future__ import annotations

import threading
import weakref
from typing import Any

import attrs

from covonaut_es.errors import ConfigurationError
from covonaut_es.store._leases import LeaseBackend, LeaseTokens, WorkerRecord


@attrs.frozen(eq=False)
class _Mark:
    holder: str


class _MemoryTables:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.leases: dict[str, _Mark] = {}
        self.workers: dict[str, WorkerRecord] = {}
        self.publishers: dict[str, MemoryLeases] = {}  # the open back end of each record


_MEMORY: weakref.WeakKeyDictionary[Any, _MemoryTables] = weakref.WeakKeyDictionary()
_MEMORY_LOCK = threading.Lock()


class MemoryLeases(LeaseBackend):
    """Leases of an in-memory store: a table shared by the stores of its recorder."""

    def __init__(self, holder: str, recorder: Any, tokens: LeaseTokens | None) -> None:
        super().__init__(holder, tokens)
        self._taken: dict[str, object] = {}  # this holder's mark in the table, by thread
        with _MEMORY_LOCK:
            self._tables = _MEMORY.setdefault(recorder, _MemoryTables())
        self._database = f"memory:{id(self._tables)}"

    def _try_lock(self, thread_id: str) -> bool:
        with self._tables.lock:
            if thread_id in self._tables.leases:
                return False
            mark = _Mark(self.holder)
            self._tables.leases[thread_id] = mark
            self._taken[thread_id] = mark
            return True

    def _unlock(self, thread_id: str) -> None:
        with self._tables.lock:
            mark = self._taken.pop(thread_id, None)
            if self._tables.leases.get(thread_id) is mark:
                del self._tables.leases[thread_id]

    def _lock_problem(self, thread_id: str, *, in_save: bool) -> str | None:
        with self._tables.lock:
            if self._tables.leases.get(thread_id) is self._taken.get(thread_id):
                return None
        return "its entry in the store's lease table is gone"

    def holder_of(self, thread_id: str) -> str | None:
        with self._tables.lock:
            mark = self._tables.leases.get(thread_id)
            return None if mark is None else mark.holder

    def publish(self, record: WorkerRecord) -> None:
        with self._tables.lock:
            if self._tables.publishers.get(record.worker_id) not in (None, self):
                msg = f"worker id {record.worker_id!r} is taken by a live worker: choose another"
                raise ConfigurationError(msg)
            self._tables.workers[record.worker_id] = record
            self._tables.publishers[record.worker_id] = self

    def withdraw(self, worker_id: str) -> None:
        with self._tables.lock:
            publisher = self._tables.publishers.get(worker_id)
            if publisher not in (None, self):
                msg = (
                    f"worker {worker_id!r} is live (another open store published its "
                    "record): only that store withdraws it (nothing was removed)"
                )
                raise ConfigurationError(msg)
            self._tables.workers.pop(worker_id, None)
            self._tables.publishers.pop(worker_id, None)

    def workers(self) -> tuple[WorkerRecord, ...]:
        with self._tables.lock:
            return tuple(self._tables.workers.values())

    def close(self) -> None:
        super().close()
        with self._tables.lock:  # its workers' records stay listed, withdrawable by any
            for worker_id, publisher in list(self._tables.publishers.items()):
                if publisher is self:
                    del self._tables.publishers[worker_id]
