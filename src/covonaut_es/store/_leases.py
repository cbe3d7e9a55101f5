"""Run leases and the worker registry: the interface (ADR 0016). Each back end supplies
its own (:mod:`._backends._memory_leases`, :mod:`._backends._sqlite_leases`,
:mod:`._backends._postgres_leases`).

A run lease gives one runner at a time the right to run a thread. Each back end uses
a lock its operating system or database server releases by itself when the holder
dies, so a lease never has to time out:

* PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a dedicated
  connection; the server drops it when that connection ends.
* SQLite: an exclusive ``flock`` on a lock file per thread, in a directory named after
  the database file itself (its device and inode, beside its resolved path), so every
  name of the file shares the leases; the kernel drops it when the process ends. It
  excludes the processes of one machine (the machine a SQLite file can be shared on).
* Memory: a table in this process.

A lock can be lost while its holder lives (the PostgreSQL session ends; a lock file is
removed), so it protects nothing by itself: each acquisition also records a token, one
more than the thread's last, in the store's own database (ADR 0025). Every save under
the lease carries the token and the store refuses it in the save's own transaction once
a newer lease exists; and :meth:`LeaseBackend.check`, called before each tool call,
finds a lost lock or a newer token.

The registry of live workers sits beside the leases: a table on PostgreSQL (liveness
by the heartbeat, in the server's time), a record file per worker held under ``flock``
on SQLite (liveness by the lock), a table in this process for memory.
"""

from __future__ import annotations

import threading
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol
from uuid import UUID

import attrs
import msgspec

from covonaut_es import _logs
from covonaut_es._arguments import check_text
from covonaut_es._clock import utc_now
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import ConfigurationError, LeaseLostError, StoreClosedError
from covonaut_es.store._heads import FENCES, Fence

logger = _logs.logger("covonaut_es")

HEARTBEAT_INTERVAL = 2.0
"""Seconds between a worker's heartbeats."""
STALE_AFTER = timedelta(seconds=15)
"""A worker whose last heartbeat is older than this is not listed as live (PostgreSQL;
on SQLite and in memory liveness is known exactly)."""


class CallRunning(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call running in a worker's process, as its heartbeat reports it.

    Attributes:
        thread_id: The call's thread.
        tool_call_id: The call.
        tool_name: Its tool.
        started_at: When it started, by the worker's clock.
        deadline: When its timeout ran out or runs out, by the worker's clock; None
            without a timeout (or one past the range of a datetime).
        seconds_left: The seconds its timeout had left when the worker listed it (at
            its heartbeat), measured by the worker's monotonic clock; negative once
            past; None without a timeout, or from a worker too old to report it.
    """

    thread_id: str
    tool_call_id: str
    tool_name: str
    started_at: datetime
    deadline: datetime | None = None
    seconds_left: float | None = None

    def hung(self, now: datetime) -> bool:
        """Whether it runs on past its timeout (its thread was paused in doubt without
        it; Python cannot stop a blocking function), as of the worker's heartbeat: by
        ``seconds_left``, so that no reader compares its clock with the worker's; by
        ``deadline`` against ``now`` only for a worker too old to report it."""
        if self.seconds_left is not None:
            return self.seconds_left <= 0
        return self.deadline is not None and now >= self.deadline


class WorkerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A worker as the registry lists it.

    Attributes:
        worker_id: The worker's id, unique in the store.
        host: The machine it runs on.
        pid: Its process id there.
        started_at: When it started.
        heartbeat_at: Its last heartbeat.
        threads: The threads it holds leases on.
        calls: The tool calls running in its process, those past their timeout among
            them: a liveness probe can tell a hung tool from a live one.
    """

    worker_id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    threads: tuple[str, ...] = ()
    calls: tuple[CallRunning, ...] = ()


MAX_WORKER_ID_BYTES = 200
"""The longest worker id, in bytes of UTF-8: a SQLite store names files after it."""

_HIDDEN_IN_IDS = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def check_worker_id(name: str, worker_id: object) -> None:
    """``worker_id``, argument ``name``, is a worker id on every back end: text of 1 to
    :data:`MAX_WORKER_ID_BYTES` bytes of UTF-8, no control, format, surrogate or line
    separating character, no path separator (``/``, ``\\``), and not ``.`` or ``..``:
    a SQLite store names the worker's record and lock files after it, in its registry.

    Raises:
        ConfigurationError: It is not such an id, naming the argument and what is wrong.
    """
    check_text(name, worker_id)
    assert isinstance(worker_id, str)  # checked above, for mypy
    shown = repr(worker_id[:40]) + ("..." if len(worker_id) > 40 else "")
    for position, char in enumerate(worker_id):
        if unicodedata.category(char) in _HIDDEN_IN_IDS or char in "/\\":
            msg = (
                f"{name} {shown} has {char!r} at position {position}: a worker id is visible "
                "text without control, format, surrogate or separator characters, nor / or \\"
            )
            raise ConfigurationError(msg)
    if not 1 <= len(worker_id.encode()) <= MAX_WORKER_ID_BYTES or worker_id in (".", ".."):
        msg = (
            f"{name} {shown} is no worker id: one has 1 to {MAX_WORKER_ID_BYTES} bytes "
            f"of UTF-8 (found {len(worker_id.encode())}), and is neither '.' nor '..'"
        )
        raise ConfigurationError(msg)


class LeaseTokens(Protocol):
    """Where a store's database records each thread's newest lease (the store's
    recorder, which checks the tokens saves carry in the same table; PostgreSQL's
    leases write the table on their own connection instead, ADR 0057)."""

    def advance_lease_token(self, stream: UUID) -> int:
        """Record a new lease of ``stream``; its token."""
        ...

    def lease_token(self, stream: UUID) -> int | None:
        """The token of ``stream``'s newest lease; None before its first."""
        ...


@attrs.frozen(eq=False)
class Lease:
    """A run lease held on one thread.

    Attributes:
        thread_id: The thread.
        session: The database session holding the lease's lock, where a save can check
            that it still does (PostgreSQL's backend process id); 0 elsewhere.
    """

    thread_id: str
    _token: int = attrs.field(alias="token")
    _backend: LeaseBackend = attrs.field(repr=False, alias="backend")
    session: int = 0

    @property
    def token(self) -> int:
        """Greater than every earlier lease's on the thread: saves under the lease carry
        it, and the store refuses them once a newer lease exists. Hand it to an external
        system that can refuse a stale writer, too: it is durable once read (a SQLite
        store records it without waiting for the disk, and syncs it on its first read
        here, unless a save under the lease did). 0 when the store's database keeps no
        tokens (an application's own, see ADR 0025)."""
        self._backend.settle(self)
        return self._token

    @property
    def database(self) -> str:
        """Names the database the lease is held in, alike through every store of it
        (no credential is in the name): see :attr:`covonaut_es.Store.database`."""
        return self._backend.database

    @property
    def fence_token(self) -> int:
        """The token as the store records it, durable or not yet: what a save under the
        lease carries (its synced commit makes it durable) and a check compares. Never
        handed out: :attr:`token` is."""
        return self._token

    @property
    def fenced(self) -> bool:
        """Whether the store checks this lease's token when saving under it."""
        return self._token > 0

    @property
    def stream(self) -> UUID:
        """The thread's stream id."""
        return thread_aggregate_id(self.thread_id)

    def fences(self) -> dict[str, list[Fence]]:
        """What a write under the lease gives the store's insert, which then refuses it in
        its own transaction once a newer lease exists (and, on PostgreSQL, once the
        lease's session holds its lock no more): nothing for a lease the store keeps no
        token of."""
        return {FENCES: [(self.stream, self._token, self.session)]} if self.fenced else {}

    def check(self) -> None:
        """Raise unless the lease still stands (before a side effect: a tool call).

        Raises:
            LeaseLostError: Its lock was lost, or a newer lease of the thread exists.
        """
        self._backend.check(self)

    def check_before_save(self) -> None:
        """Raise if the lease is known lost in what a fenced save cannot check itself
        (the save checks the token, and on PostgreSQL that the session holds the lock):
        a runner that lost its lock stores nothing more, not even the intent of a call
        it will not make. Costs no round trip to the database.

        Raises:
            LeaseLostError: Its lock was lost.
        """
        self._backend.check(self, in_save=True)

    def saved(self) -> None:
        """Note that a save under the lease committed, synced: its token is durable."""
        self._backend.saved(self)


class LeaseBackend(ABC):
    """Leases and worker records in one database. Safe to share between threads."""

    _database: str | None = None  # a back end that knows its name at once sets it

    @property
    def database(self) -> str:
        """Names the database, so that a lease taken through one store is known to be
        held when another store of the same database asks again in the same task, and
        a running call is reported by its own database's workers only."""
        if self._database is None:
            self._database = self._named()
        return self._database

    def _named(self) -> str:
        """The database's name, asked of it once (a back end that sets none)."""
        raise NotImplementedError

    def __init__(self, holder: str, tokens: LeaseTokens | None) -> None:
        self.holder = holder
        self._tokens = tokens
        self._held: dict[str, Lease | None] = {}  # None while being taken
        # How to sync the token of each thread whose lease's token is not durable yet.
        self._unsynced: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self._shut = False

    def rename(self, holder: str) -> None:
        """Name the holder of the leases taken from now on."""
        self.holder = holder

    def try_acquire(self, thread_id: str) -> Lease | None:
        """Take the thread's lease if no runner holds it; None when another does."""
        with self._lock:
            if self._shut:
                raise _closed(thread_id)
            if thread_id in self._held:
                return None
            self._held[thread_id] = None
        try:
            token = self._take(thread_id)
        except BaseException as exc:
            self._forget(thread_id)
            if self._shut:  # its connection closed under it
                raise _closed(thread_id) from exc
            raise
        if token is None:
            self._forget(thread_id)
            return None
        lease = Lease(thread_id, token, backend=self, session=self._session_of(thread_id))
        with self._lock:
            closed = self._shut
            if not closed:
                self._held[thread_id] = lease
        if closed:  # while it was taken: no one else would let it go
            self.release(lease)
            raise _closed(thread_id)
        return lease

    def release(self, lease: Lease) -> None:
        """Give the lease back. A lease that was lost is only forgotten: the error of
        releasing it is logged, never raised, so that it cannot replace the outcome of
        the run that held it."""
        try:
            self._unlock(lease.thread_id)
        except Exception as exc:
            logger.warning(
                "the run lease of thread %r (token %d) was lost before its release: %s",
                lease.thread_id,
                lease.fence_token,
                exc,
            )
        finally:
            self._forget(lease.thread_id)

    def check(self, lease: Lease, *, in_save: bool = False) -> None:
        """Raise unless ``lease`` still stands: its lock held, its token the newest;
        ``in_save``: only what the fenced save it precedes cannot check itself.

        Raises:
            LeaseLostError: Saying which of the two failed.
        """
        with self._lock:
            held = self._held.get(lease.thread_id) is lease
        problem = self._problem(lease, in_save=in_save) if held else "it was released"
        if problem is not None:
            msg = (
                f"the run lease of thread {lease.thread_id!r} (token {lease.fence_token}) "
                f"was lost: {problem}; another runner may run the thread, so this runner "
                "stops before its next tool call"
            )
            raise LeaseLostError(msg, token=lease.fence_token)
        if not in_save:  # a side effect follows, which may hand the token out
            self.settle(lease)

    def settle(self, lease: Lease) -> None:
        """Make ``lease``'s token durable if it is not yet: a back end that records
        tokens without waiting for the disk leaves how to sync one in :attr:`_unsynced`
        (the others' tokens are durable when taken)."""
        with self._lock:
            sync = self._unsynced.get(lease.thread_id)
        if sync is not None:
            sync()
            self.saved(lease)

    def saved(self, lease: Lease) -> None:
        """Note that a synced save under ``lease`` made its token durable."""
        with self._lock:
            self._unsynced.pop(lease.thread_id, None)

    def held(self) -> tuple[str, ...]:
        """The threads whose leases this back end holds."""
        with self._lock:
            return tuple(sorted(t for t, lease in self._held.items() if lease is not None))

    def _session_of(self, thread_id: str) -> int:
        """The database session that holds the thread's lock, where saves can check it."""
        return 0

    def _take(self, thread_id: str) -> int | None:
        """Lock the thread and record a new lease of it: its token (0 without tokens),
        or None when another holder has the lock."""
        if not self._try_lock(thread_id):
            return None
        try:
            if self._tokens is None:
                return 0
            return self._advance(thread_id)
        except BaseException:
            self._unlock(thread_id)
            raise

    def _advance(self, thread_id: str) -> int:
        """Record a new lease of the thread, whose lock is taken: its token (called
        only where the database keeps tokens)."""
        assert self._tokens is not None
        return self._tokens.advance_lease_token(thread_aggregate_id(thread_id))

    def _problem(self, lease: Lease, *, in_save: bool) -> str | None:
        """Why ``lease``, held here, no longer stands: its lock lost, or (unless
        ``in_save``) a newer token recorded; None if it stands."""
        problem = self._lock_problem(lease.thread_id, in_save=in_save)
        if problem is None and lease.fenced and not in_save:
            assert self._tokens is not None  # a fenced lease came from tokens
            problem = newer_lease(lease, self._tokens.lease_token(lease.stream))
        return problem

    def _forget(self, thread_id: str) -> None:
        with self._lock:
            self._held.pop(thread_id, None)
            self._unsynced.pop(thread_id, None)

    @abstractmethod
    def _try_lock(self, thread_id: str) -> bool: ...

    @abstractmethod
    def _unlock(self, thread_id: str) -> None: ...

    @abstractmethod
    def _lock_problem(self, thread_id: str, *, in_save: bool) -> str | None:
        """Why this holder's lock on the thread no longer stands, or None if it does;
        ``in_save``: without asking the database what a fenced save asks it."""

    @abstractmethod
    def holder_of(self, thread_id: str) -> str | None:
        """Who holds the thread's lease, if the back end can tell."""

    @abstractmethod
    def publish(self, record: WorkerRecord) -> None:
        """Write (or refresh) a live worker's record: its heartbeat."""

    @abstractmethod
    def withdraw(self, worker_id: str) -> None:
        """Remove a worker's record: the one this back end published, or one whose
        worker is dead; never a live worker's.

        Raises:
            ConfigurationError: The worker lives, its record published elsewhere.
        """

    @abstractmethod
    def workers(self) -> tuple[WorkerRecord, ...]:
        """The live workers' records."""

    def close(self) -> None:
        """Release every lease and the back end's connection or files; a lease being
        taken meanwhile is let go as soon as it is taken."""
        with self._lock:
            self._shut = True
            leases = [lease for lease in self._held.values() if lease is not None]
        for lease in leases:
            self.release(lease)


def _closed(thread_id: str) -> StoreClosedError:
    msg = f"the store was closed: the run lease of thread {thread_id!r} was not taken"
    return StoreClosedError(msg)


def newer_lease(lease: Lease, stored: int | None) -> str | None:
    """What a check of ``lease`` finds when the store records ``stored`` as the thread's
    newest token: None when it is the lease's own."""
    if stored == lease.fence_token:
        return None
    return f"the store records a newer lease ({stored}) of the thread"


def now_record(
    record: WorkerRecord, threads: tuple[str, ...], calls: tuple[CallRunning, ...]
) -> WorkerRecord:
    """``record`` with a fresh heartbeat, the threads now held and the calls running."""
    return msgspec.structs.replace(record, heartbeat_at=utc_now(), threads=threads, calls=calls)
