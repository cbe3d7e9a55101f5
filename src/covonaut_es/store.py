"""Thread stores: where threads' event streams and snapshots live.

A :class:`Store` wraps one eventsourcing ``Application`` configured for one back end
(in memory, a SQLite file, PostgreSQL) with the msgspec mapper. It is the only module
that talks to eventsourcing's persistence; the runtime loads and saves threads through
it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import secrets
import threading
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError, PersistenceError
from eventsourcing.utils import Environment, EnvType, get_topic

from covonaut_es.domain import (
    AgentThread,
    ThreadSnapshot,
    project_thread,
    thread_aggregate_id,
)
from covonaut_es.errors import (
    ConfigurationError,
    StoreUnavailableError,
    ThreadConflictError,
    ThreadNotFoundError,
)
from covonaut_es.serialization import MsgspecMapper
from covonaut_es.store_urls import persistence_env, redact
from covonaut_es.values import Checkpoint, ThreadState

_LOG_BATCH = 500

SNAPSHOT_MIN_VERSION = 64
"""No snapshot is written for a thread shorter than this: replaying it is cheap."""


class _ThreadsApplication(Application[UUID]):
    # Explicit and stable: PostgreSQL table names derive from it.
    name = "covonaut"
    snapshot_class = ThreadSnapshot

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        # Only what open_store() passed: variables in os.environ must not redirect a
        # store to another database behind the caller's back.
        return Environment(name, dict(env or {}))

    def construct_mapper(self) -> MsgspecMapper:
        return MsgspecMapper(compressor=self.factory.compressor(), cipher=self.factory.cipher())


class Store:
    """Threads' event streams, snapshots and checkpoints in one back end.

    Create one with :func:`open_store`. A store is safe to share between agents and
    threads of one process (B9); several processes may open the same SQLite file or
    PostgreSQL database, and optimistic concurrency keeps each thread's stream whole.
    """

    def __init__(
        self,
        url: str,
        env: Mapping[str, str],
        *,
        max_checkpoints_per_thread: int = 0,
    ) -> None:
        if max_checkpoints_per_thread < 0:
            msg = (
                "max_checkpoints_per_thread must be 0 (no cap) or more, "
                f"got {max_checkpoints_per_thread}"
            )
            raise ConfigurationError(msg)
        self.url = redact(url)
        self.max_checkpoints_per_thread = max_checkpoints_per_thread
        self._app = _open_application(self.url, env)
        self._snapshot_versions: dict[UUID, int] = {}
        self._lock = threading.Lock()

    # Threads ----------------------------------------------------------------------

    def load(self, thread_id: str, *, version: int | None = None) -> AgentThread:
        """Rebuild a thread from its newest snapshot at or below ``version`` and the
        events after it.

        Raises:
            ThreadNotFoundError: The thread has no events (at that version).
        """
        thread = self.find(thread_id, version=version)
        if thread is None:
            at = "" if version is None else f" at version {version}"
            msg = f"thread {thread_id!r} not found{at} in store {self.url}"
            raise ThreadNotFoundError(msg)
        return thread

    def find(self, thread_id: str, *, version: int | None = None) -> AgentThread | None:
        """Like :meth:`load`, but None when the thread does not exist."""
        aggregate_id = thread_aggregate_id(thread_id)
        snapshot_seen: list[int] = []

        def project(thread: AgentThread | None, events: Any) -> AgentThread | None:
            for event in events:
                if isinstance(event, ThreadSnapshot):
                    snapshot_seen.append(event.originator_version)
                thread = event.mutate(thread)
            return thread

        if version is not None and version < 1:
            return None
        try:
            thread = self._app.repository.get(aggregate_id, version=version, projector_func=project)
        except AggregateNotFoundError:
            return None
        if snapshot_seen and version is None:
            self._remember_snapshot(aggregate_id, snapshot_seen[0])
        return thread

    def exists(self, thread_id: str) -> bool:
        """Whether the thread has any events."""
        events = self._app.events.get(thread_aggregate_id(thread_id), limit=1)
        return any(True for _ in events)

    def save(self, thread: AgentThread) -> None:
        """Append the thread's pending events atomically.

        Raises:
            ThreadConflictError: Another writer appended to the thread first; nothing
                of this save was stored.
        """
        pending = thread.pending_events
        if not pending:
            return
        expected = pending[0].originator_version - 1
        try:
            self._app.save(thread)
        except IntegrityError as exc:
            # Put the events back: the caller may want to inspect what was refused.
            msg = (
                f"thread {thread.thread_id!r} was changed by another writer: this writer "
                f"started from version {expected} but that version is no longer the head; "
                "reload the thread and try again"
            )
            raise ThreadConflictError(
                msg, thread_id=thread.thread_id, expected_version=expected
            ) from exc

    def save_checkpoint_snapshot(self, thread: AgentThread) -> bool:
        """Store a snapshot of a just-saved thread if it pays (ADR 0003).

        A snapshot is written when the thread has at least doubled in versions since
        its last snapshot, so all snapshots together stay within about twice the event
        bytes and a restore reads at most about twice the state's size.

        Returns:
            Whether a snapshot was written.
        """
        aggregate_id = thread.id
        with self._lock:
            last = self._snapshot_versions.get(aggregate_id, 0)
        if thread.version < max(SNAPSHOT_MIN_VERSION, 2 * last):
            return False
        assert self._app.snapshots is not None
        with contextlib.suppress(IntegrityError):  # another writer stored this very one
            self._app.snapshots.put([ThreadSnapshot.take(thread)])
        self._remember_snapshot(aggregate_id, thread.version)
        return True

    def thread_ids(self) -> Iterator[str]:
        """The ids of all threads, oldest first, read from the store's event log."""
        started_topic = get_topic(AgentThread.Started)
        recorder = self._app.recorder
        position: int | None = None
        while True:
            batch = recorder.select_notifications(
                position, _LOG_BATCH, topics=[started_topic], inclusive_of_start=False
            )
            for notification in batch:
                started = self._app.mapper.to_domain_event(notification)
                assert isinstance(started, AgentThread.Started)
                yield started.thread_id
            if len(batch) < _LOG_BATCH:
                return
            position = batch[-1].id

    def checkpoints(self, thread_id: str) -> tuple[Checkpoint, ...]:
        """The thread's retained checkpoints, oldest first."""
        return tuple(self.load(thread_id).checkpoints)

    def history(self, thread_id: str) -> tuple[AgentThread.Event, ...]:
        """Every event of the thread in order; each has ``originator_version`` and
        ``timestamp``."""
        events = tuple(self._app.events.get(thread_aggregate_id(thread_id)))
        if not events:
            msg = f"thread {thread_id!r} not found in store {self.url}"
            raise ThreadNotFoundError(msg)
        return events  # type: ignore[return-value]

    def state_at(self, thread_id: str, version: int | None = None) -> ThreadState:
        """The thread's state as of ``version`` (default: the head), read-only."""
        return self.load(thread_id, version=version).state

    def replay_state(self, thread_id: str) -> ThreadState:
        """The thread's state rebuilt from its events alone, ignoring snapshots."""
        thread = project_thread(None, self.history(thread_id))
        assert isinstance(thread, AgentThread)
        return thread.state

    # Lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Release connections. The store cannot be used afterwards."""
        self._app.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def _remember_snapshot(self, aggregate_id: UUID, version: int) -> None:
        with self._lock:
            if version > self._snapshot_versions.get(aggregate_id, 0):
                self._snapshot_versions[aggregate_id] = version


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

    try:
        conn = psycopg.connect(
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


def _open_application(url: str, env: Mapping[str, str]) -> _ThreadsApplication:
    try:
        with _schema_setup_lock(env):
            return _ThreadsApplication(env=dict(env))
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
    except PersistenceError as exc:
        msg = f"cannot open store {url}: {exc}"
        raise StoreUnavailableError(msg) from exc


def create_cipher_key(num_bytes: int = 32) -> str:
    """A new random AES key for ``open_store(..., cipher_key=...)``: base64 text.

    Keep it secret and safe: without it the store cannot be read.
    """
    if num_bytes not in (16, 24, 32):
        msg = f"an AES key has 16, 24 or 32 bytes, not {num_bytes}"
        raise ConfigurationError(msg)
    return base64.b64encode(secrets.token_bytes(num_bytes)).decode()


def open_store(
    url: str,
    *,
    max_checkpoints_per_thread: int = 0,
    cipher_key: str | None = None,
    compress: bool = False,
) -> Store:
    """Open a thread store.

    Args:
        url: ``memory://`` (this process only, lost at exit), ``sqlite:///path.db``
            (a file; ``sqlite:////abs/path.db`` for an absolute path) or
            ``postgresql://user:password@host:port/dbname`` (needs the ``postgres`` extra).
        max_checkpoints_per_thread: Keep only this many newest checkpoints per thread;
            0 keeps all (B11). Evicting a checkpoint never deletes events.
        cipher_key: Encrypt stored events and snapshots with AES-GCM under this key
            (base64 of 16, 24 or 32 bytes; see :func:`create_cipher_key`). Needs the
            ``encryption`` extra.
        compress: Compress stored events and snapshots with zlib.

    Raises:
        StoreURLError: The URL's scheme is unknown or the URL is malformed.
        ConfigurationError: An option is invalid or its optional package is missing.
        StoreUnavailableError: The database cannot be reached.
    """
    env = persistence_env(url)
    if cipher_key is not None:
        env["CIPHER_TOPIC"] = "eventsourcing.cryptography:AESCipher"
        env["CIPHER_KEY"] = cipher_key
    if compress:
        env["COMPRESSOR_TOPIC"] = "eventsourcing.compressor:ZlibCompressor"
    return Store(url, env, max_checkpoints_per_thread=max_checkpoints_per_thread)
