"""The tool calls running in this process: what a worker's heartbeat reports, and what
keeps a call in doubt from being settled or run again while its tool still runs.

Each call is listed under the database of the store its run holds the lease in
(:attr:`covonaut_es.store.Lease.database`): a process may serve many stores, and a
worker's records report only the calls of its own store's database. A call still refuses
a thread of the same id in every store of the process, and a fork of its thread that
holds it open: a refusal missed runs a call twice, where one made in excess only waits,
and where a PostgreSQL server keeps its identifier from the store's role, two URLs of one
database (``localhost`` and ``127.0.0.1``) name it differently (ADR 0145).

A call is listed from the moment its function starts until it returns, also after its
timeout ran out and its run went on without it (Python cannot stop a blocking function,
so such a call keeps its thread): a liveness probe then sees it past its deadline. The
runtime's drivers list the calls; :class:`~covonaut_es.service.ThreadService` refuses
to take the lease of a thread with a call listed (:func:`refuse_while_running`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import NamedTuple

import msgspec

from covonaut_es._arguments import check_instance
from covonaut_es._clock import utc_now
from covonaut_es.errors import ToolCallRunningError
from covonaut_es.store import CallRunning, Store

_LOCK = threading.Lock()


class _Running(NamedTuple):
    database: str
    call: CallRunning
    begun: float  # time.monotonic() when it began
    timeout: float | None


_RUNNING: dict[int, _Running] = {}


@contextlib.contextmanager
def listed(
    database: str, thread_id: str, tool_call_id: str, tool_name: str, timeout: float | None
) -> Iterator[None]:
    """List a call as running in ``database`` (its lease's) for the block."""
    started, begun = utc_now(), time.monotonic()
    call = CallRunning(
        thread_id=thread_id,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        started_at=started,
        deadline=None if timeout is None else _deadline(started, timeout),
    )
    key = id(call)
    with _LOCK:
        _RUNNING[key] = _Running(database, call, begun, timeout)
    try:
        yield
    finally:
        with _LOCK:
            del _RUNNING[key]


def running_calls(store: Store | None = None) -> tuple[CallRunning, ...]:
    """The calls running in this process now, oldest first, each with the seconds its
    timeout has left now.

    Args:
        store: Only the calls of threads of this store's database; None: of every store.

    Raises:
        ConfigurationError: ``store`` is neither a Store nor None.
    """
    if store is not None:
        check_instance("store", store, Store, "a Store")
    running = _listed_in(None if store is None else store.database)
    now = time.monotonic()
    calls = (
        entry.call
        if entry.timeout is None
        else msgspec.structs.replace(entry.call, seconds_left=entry.timeout - (now - entry.begun))
        for entry in running
    )
    return tuple(sorted(calls, key=lambda c: c.started_at))


def _listed_in(database: str | None) -> list[_Running]:
    """The calls listed in ``database``; None: in any."""
    with _LOCK:
        return [e for e in _RUNNING.values() if database is None or e.database == database]


def _deadline(started: datetime, timeout: float) -> datetime | None:
    """When a timeout started at ``started`` runs out; None past the range of a
    datetime (a timeout any finite number of seconds long is allowed)."""
    try:
        return started + timedelta(seconds=timeout)
    except OverflowError:
        return None


def refuse_while_running(store: Store, thread_id: str) -> None:
    """Raise if a tool call of the thread still runs, in this process or in a live
    worker's (as its heartbeat reports), or one of a thread it was forked from that it
    holds open too: one past its timeout is in doubt, and settling it ("did not run") or
    running it again before its tool returns could run it twice.

    Raises:
        ToolCallRunningError: A call of the thread runs; it names the oldest, and where.
    """
    held = _Held(store, thread_id)
    listed = [entry for entry in _listed_in(None) if held.by_thread(entry.call)]
    calls = [entry.call for entry in listed]
    where = "this process"
    if not calls:
        for worker in store.live_workers():
            calls = [call for call in worker.calls if held.by_thread(call)]
            if calls:
                where = f"worker {worker.worker_id!r} (pid {worker.pid} on {worker.host!r})"
                break
    if not calls:
        return
    call = min(calls, key=lambda c: c.started_at)
    if listed and not any(e.database == store.database for e in listed if e.call is call):
        what = f"a tool call of thread {call.thread_id!r} in another store of this process"
    else:
        what = f"call {call.tool_call_id!r} of tool {call.tool_name!r} of thread {call.thread_id!r}"
    msg = (
        f"{what} started at {call.started_at.isoformat()} and its tool still runs in "
        f"{where} (it may have outrun its timeout): nothing settles the call or runs it "
        f"again, and nothing else runs on thread {thread_id!r}, until it returns or that "
        "process is gone; running_calls() there lists it till then"
    )
    raise ToolCallRunningError(msg, thread_id=thread_id, tool_call_id=call.tool_call_id)


class _Held:
    """Whether a running call holds a thread: it is the thread's own, or one of a thread
    it was forked from that the thread holds open too (forked while the call ran). The
    thread's ancestors and open calls are read from the store only for a call of
    another thread."""

    def __init__(self, store: Store, thread_id: str) -> None:
        self._store = store
        self._thread_id = thread_id
        self._inherited: tuple[frozenset[str], frozenset[str]] | None = None

    def by_thread(self, call: CallRunning) -> bool:
        if call.thread_id == self._thread_id:
            return True
        if self._inherited is None:
            thread = self._store.find(self._thread_id)
            self._inherited = (
                (frozenset(self._store.path_to_root(self._thread_id)), frozenset(thread.open_calls))
                if thread is not None
                else (frozenset(), frozenset())
            )
        ancestors, open_calls = self._inherited
        return call.thread_id in ancestors and call.tool_call_id in open_calls
