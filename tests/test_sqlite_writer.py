"""A SQLite store's saves go through one connection of its own (ADR 0024): what that
must not change."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import ConnectionPoolClosedError
from eventsourcing.sqlite import SQLiteCursor
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Store,
    open_store,
)
from covonaut_es.domain import AgentThread
from covonaut_es.errors import (
    LeaseLostError,
    ReadOnlyStoreError,
    StoreFileReplacedError,
    StoreLockedError,
)
from covonaut_es.messages import Message, Role
from covonaut_es.service import ThreadService
from covonaut_es.store import _urls
from covonaut_es.store._writer import SNAPSHOT_MIN_VERSION
from support import WriteFaults, agent_on, echo_script, run_python

NOW = datetime(2026, 12, 1, tzinfo=UTC)
THREADS, SAVES = 6, 25


def user(text: str) -> Message:
    return Message(Role.USER, text)


def open_files(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                found += 1
        except FileNotFoundError:  # the listing's own descriptor, closed meanwhile
            continue
    return found


def test_closing_a_store_closes_the_connection_its_saves_went_through(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    thread = AgentThread.start("t", now=NOW)
    store.save(thread)
    assert open_files(path) > 0
    store.close()
    assert open_files(path) == 0
    thread.append_message(user("after close"), now=NOW)
    with pytest.raises(ConnectionPoolClosedError):
        store.save(thread)
    assert open_files(path) == 0


def test_an_in_memory_sqlite_store_saves_into_its_own_database() -> None:
    store = open_store("sqlite:///:memory:")
    thread = AgentThread.start("t", now=NOW)
    thread.append_message(user("kept"), now=NOW)
    store.save(thread)
    assert [m.content for m in store.load("t").state.messages] == ["kept"]
    assert store.verify("t").ok
    store.close()


def test_a_read_only_store_refuses_a_save_with_its_own_error(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    writable = open_store(f"sqlite:///{path}")
    writable.save(AgentThread.start("t", now=NOW))
    writable.close()
    store = open_store(f"sqlite:///{path}?mode=ro")
    thread = store.load("t")
    thread.append_message(user("refused"), now=NOW)
    with pytest.raises(ReadOnlyStoreError, match="read-only"):
        store.save(thread)
    assert store.load("t").state.messages == ()
    store.close()


def test_closing_a_store_while_a_thread_saves_leaves_no_connection_open(tmp_path: Path) -> None:
    for round_ in range(5):  # the close has to fall between two saves: bounded retries
        path = tmp_path / f"threads{round_}.db"
        store = open_store(f"sqlite:///{path}")
        saved = threading.Event()

        def talk(store: Store = store, saved: threading.Event = saved) -> None:
            thread = AgentThread.start("t", now=NOW)
            with contextlib.suppress(ConnectionPoolClosedError):
                while True:
                    thread.append_message(user("until closed"), now=NOW)
                    store.save(thread)
                    saved.set()

        worker = threading.Thread(target=talk)
        worker.start()
        saved.wait()
        store.close()
        worker.join()
        assert open_files(path) == 0


def test_a_store_whose_file_was_replaced_before_its_first_save_refuses_it(
    tmp_path: Path,
) -> None:
    """A file deleted and made anew before the first save: the save is refused, and
    lands in neither file."""
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    for file in tmp_path.glob("threads.db*"):  # removed under the open store, and made anew
        file.unlink()
    other = open_store(f"sqlite:///{path}")
    with pytest.raises(StoreFileReplacedError, match=r"threads\.db"):
        store.save(AgentThread.start("t", now=NOW))
    assert not other.exists("t")
    store.close()
    other.close()


def backup(path: Path, to: Path) -> None:
    """Copy a live SQLite file whole, as an operator's backup does."""
    with (
        contextlib.closing(sqlite3.connect(path)) as source,
        contextlib.closing(sqlite3.connect(to)) as target,
    ):
        source.backup(target)


def test_a_save_after_a_backup_was_restored_over_the_file_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    """An operator restores a backup with ``mv`` under a running process: its next save
    fails with a typed error naming the file, and neither file holds it."""
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    thread = AgentThread.start("t", now=NOW)
    store.save(thread)
    backup(path, tmp_path / "backup.db")
    thread.append_message(user("after the backup"), now=NOW)
    store.save(thread)
    os.replace(tmp_path / "backup.db", path)
    thread.append_message(user("after the restore"), now=NOW)
    with pytest.raises(StoreFileReplacedError, match=str(path)) as raised:
        store.save(thread)
    assert isinstance(raised.value, ConnectionError)
    store.close()
    with open_store(f"sqlite:///{path}") as again:
        # The refused event is nowhere (the old file's log, left beside the restored
        # file, may still hold the save made after the backup).
        assert (again.head_version("t") or 0) < thread.version


def test_a_save_after_the_file_was_deleted_is_refused(tmp_path: Path) -> None:
    """A store file deleted under a running process: saves fail, not vanish."""
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    thread = AgentThread.start("t", now=NOW)
    store.save(thread)
    path.unlink()
    thread.append_message(user("into the void"), now=NOW)
    with pytest.raises(StoreFileReplacedError, match="deleted"):
        store.save(thread)
    store.close()


def _long_thread(store: Store) -> AgentThread:
    thread = AgentThread.start("t", now=NOW)
    for n in range(3):
        thread.append_message(user(f"message {n}"), now=NOW)
    store.save(thread)
    return thread


def _save(store: Store) -> None:
    thread = store.load("t")
    thread.append_message(user("one more"), now=NOW)
    store.save(thread)


def _snapshot(store: Store) -> None:
    thread = store.load("t")
    for n in range(SNAPSHOT_MIN_VERSION):
        thread.append_message(user(f"more {n}"), now=NOW)
    store.snapshot_if_due(thread)  # the snapshot alone, through the pool's writer


def _lease(store: Store) -> None:
    with store.lease("t"):
        pass


WRITES: dict[str, Any] = {
    "save": _save,
    "start": lambda store: store.save(AgentThread.start("new", now=NOW)),
    "fork": lambda store: store.fork("t", new_thread_id="f", now=NOW),
    "label": lambda store: ThreadService(store, clock=lambda: NOW).label("t", "here"),
    "abandon": lambda store: ThreadService(store, clock=lambda: NOW).abandon("t", "gone"),
    "write_state": lambda store: store.write_state("k", {"a": 1}),
    "submit": lambda store: store.submit("t", "do it"),
    "lease": _lease,
    "snapshot": _snapshot,
}


def _restore_backup(path: Path, spare: Path) -> None:
    os.replace(spare, path)


def _delete(path: Path, spare: Path) -> None:
    path.unlink()


def _new_store(path: Path, spare: Path) -> None:
    spare.unlink()
    with open_store(f"sqlite:///{spare}"):
        pass
    os.replace(spare, path)


@settings(max_examples=40, deadline=None)
@given(
    write=st.sampled_from(sorted(WRITES)),
    replace=st.sampled_from([_restore_backup, _delete, _new_store]),
)
def test_no_write_is_swallowed_by_a_replaced_file(write: str, replace: Any) -> None:
    """Whatever writes after the file was replaced (by a restored backup, a new store,
    or nothing), it fails with the typed error naming the file, and no reopened store
    shows a write that went astray."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "threads.db"
        store = open_store(f"sqlite:///{path}")
        saved = _long_thread(store).version
        backup(path, Path(directory) / "spare.db")
        replace(path, Path(directory) / "spare.db")
        with pytest.raises(StoreFileReplacedError, match=r"threads\.db"):
            WRITES[write](store)
        store.close()
        if path.exists():
            with open_store(f"sqlite:///{path}") as again:
                versions = {t: again.head_version(t) for t in again.thread_ids()}
                assert versions in ({"t": saved}, {}), versions
                assert again.read_state("k") is None


READS: dict[str, Any] = {
    "load": lambda store: store.load("t"),
    "exists": lambda store: store.exists("t"),
    "head_version": lambda store: store.head_version("t"),
    "history": lambda store: store.history("t"),
    "state_at": lambda store: store.state_at("t", 2),
    "thread_ids": lambda store: list(store.thread_ids()),
    "verify": lambda store: store.verify("t"),
    "forks": lambda store: store.forks(),
    "read_state": lambda store: store.read_state("k"),
    "checkpoints": lambda store: store.checkpoints("t"),
}


@settings(max_examples=30, deadline=None)
@given(
    read=st.sampled_from(sorted(READS)),
    replace=st.sampled_from([_restore_backup, _delete, _new_store]),
)
def test_no_read_shows_the_old_file_once_it_was_replaced(read: str, replace: Any) -> None:
    """Whatever reads after the file was replaced (a long-running server or follower
    would otherwise go on showing the unlinked file's threads, never the new ones), it
    fails with the typed error naming the file."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "threads.db"
        store = open_store(f"sqlite:///{path}")
        _long_thread(store)
        READS[read](store)  # it worked before
        backup(path, Path(directory) / "spare.db")
        replace(path, Path(directory) / "spare.db")
        with pytest.raises(StoreFileReplacedError, match=r"threads\.db"):
            READS[read](store)
        store.close()


def test_a_save_interrupted_just_after_its_transaction_began_leaves_the_writer_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'threads.db'}")
    thread = AgentThread.start("t", now=NOW)
    store.save(thread)
    execute = SQLiteCursor.execute

    def interrupted_after_begin(cursor: SQLiteCursor, *args: Any, **kwargs: Any) -> None:
        execute(cursor, *args, **kwargs)
        if args[0] == "BEGIN":  # where a Ctrl-C lands, the statement just run
            monkeypatch.undo()
            raise KeyboardInterrupt

    monkeypatch.setattr(SQLiteCursor, "execute", interrupted_after_begin)
    thread.append_message(user("interrupted"), now=NOW)
    with pytest.raises(KeyboardInterrupt):
        store.save(thread)
    thread = store.load("t")
    thread.append_message(user("saved"), now=NOW)
    store.save(thread)
    assert [m.content for m in store.load("t").state.messages] == ["saved"]
    store.close()


def test_a_save_waiting_behind_a_stuck_one_times_out_as_the_stuck_one_does(
    tmp_path: Path,
) -> None:
    """A save waiting for another thread's, which waits for the file's lock, waits as
    long as a save waits for that lock (here cut short), then is refused as locked."""
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    store._app.recorder.datastore.pool.lock_timeout = 0.3  # type: ignore[attr-defined]
    first, second = AgentThread.start("first", now=NOW), AgentThread.start("second", now=NOW)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process's write, holding the file
    stuck = threading.Thread(target=store.save, args=(first,))
    stuck.start()
    time.sleep(0.2)  # the first save now waits for SQLite's busy timeout, holding the writer
    with pytest.raises(StoreLockedError, match=r"locked by another writer.*try again"):
        store.save(second)
    blocker.execute("ROLLBACK")  # the first save then goes through
    stuck.join()
    blocker.close()
    assert store.load("first").version == 1
    assert store.find("second") is None
    store.save(second)
    store.close()


@settings(max_examples=5, deadline=None)
@given(savers=st.integers(2, 4), held=st.floats(0.3, 0.6))
def test_saves_from_many_threads_wait_for_a_writer_as_saves_one_after_another_do(
    tmp_path_factory: pytest.TempPathFactory, savers: int, held: float
) -> None:
    """Another connection holds the file's write lock for longer than the pool waits
    for a connection (cut short here), shorter than a save waits for the lock: saves
    from several threads at once all land once it lets go, as the same saves one after
    another do; none fails on another thread's save holding the process's writer."""
    path = tmp_path_factory.mktemp("writers") / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        store._app.recorder.datastore.pool.pool_timeout = 0.1  # type: ignore[attr-defined]
        threads = [AgentThread.start(f"t{n}", now=NOW) for n in range(savers)]
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        errors: list[BaseException] = []

        def save(thread: AgentThread) -> None:
            try:
                store.save(thread)
            except BaseException as exc:  # reported below
                errors.append(exc)

        running = [threading.Thread(target=save, args=(t,)) for t in threads]
        for each in running:
            each.start()
        time.sleep(held)
        blocker.execute("ROLLBACK")
        blocker.close()
        for each in running:
            each.join(30)
        assert not errors, errors[:1]
        assert all(store.load(f"t{n}").version == 1 for n in range(savers))


def test_a_lease_check_reads_the_token_in_one_statement_on_the_saves_connection(
    tmp_path: Path,
) -> None:
    """A check before a tool call reads the lease's token on the connection that wrote it
    and the run's saves, whose pages are current, in one statement (no BEGIN and
    ROLLBACK), and still finds a newer lease recorded by another store."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store, open_store(url) as other:
        store.save(AgentThread.start("t", now=NOW))
        run: list[str] = []
        connection = store._app.recorder.writer._connection._sqlite_conn  # type: ignore[attr-defined]
        connection.set_trace_callback(run.append)
        with store.lease("t") as lease:
            assert lease.token == 1  # read: synced now (ADR 0062), as a save would
            run.clear()
            lease.check()
            assert len(run) == 1
            assert run[0].startswith("SELECT token FROM")
            recorder = other._app.recorder  # type: ignore[attr-defined]
            recorder.advance_lease_token(lease.stream)  # a newer lease, as a taker records it
            with pytest.raises(LeaseLostError, match="newer lease"):
                lease.check()


def test_a_snapshot_a_runs_end_cannot_store_leaves_the_run_answered_and_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the file's write lock when a run ends: the snapshot due at
    its end is not stored, with a warning naming the thread, and the run returns its
    answer with every event stored (a snapshot is a cache; an error here would read as a
    run that failed, which a caller would send again). The next restore folds more."""
    monkeypatch.setattr(_urls, "SQLITE_LOCK_WAIT_S", 1)
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    blocker = sqlite3.connect(path, isolation_level=None)

    def hold_the_file(event: AgentThread.Event) -> None:
        if isinstance(event, AgentThread.RunFinished):  # committed: the run is stored
            blocker.execute("BEGIN IMMEDIATE")

    agent = agent_on(store, "t", echo_script(48), on_event=hold_the_file)
    with caplog.at_level(logging.WARNING, logger="covonaut_es.store._writer"):
        assert agent.run("go") == "done"
    blocker.execute("ROLLBACK")
    blocker.close()
    (warning,) = [r.getMessage() for r in caplog.records if "was not stored" in r.getMessage()]
    assert "thread 't'" in warning and "locked" in warning
    stored = store.load("t")
    assert stored.version == agent.state.version > SNAPSHOT_MIN_VERSION
    assert stored.state == agent.state == store.replay_state("t")
    assert store._writer.snapshot_versions[stored.id] < stored.version
    store.close()


FULL_DISK_CHILD = """
import os, resource, signal, sys
from covonaut_es.errors import CovonautError
from support import WriteFaults

faults = WriteFaults("sqlite:///" + sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, as on a full disk
size = max(os.path.getsize(p) for p in (sys.argv[1], sys.argv[1] + "-wal") if os.path.exists(p))
resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
for name in ("decide", "save"):
    try:
        faults.command(name)()
        print(name, "succeeded")
    except CovonautError as exc:
        print(name, type(exc).__name__, exc)
"""

FAULTED = ("INSERT", "UPDATE", "DELETE", "CREATE", "REPLACE")
"""The statements a fault fails (a failed read is another family)."""


class FailingStatement:
    """Fails the ``k``-th write statement of the store's connections while armed: SQLite
    interrupts it, raising its own ``OperationalError`` (a statement the disk has no
    room for fails as it does, but at a place a test cannot choose)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.k = 0
        self.seen = 0
        self.failing = False
        connect = sqlite3.connect

        def hooked(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            connection = connect(*args, **kwargs)
            connection.set_trace_callback(self._traced)
            connection.set_progress_handler(lambda: self.failing, 1)
            return connection

        monkeypatch.setattr(sqlite3, "connect", hooked)

    def arm(self, k: int) -> None:
        self.k, self.seen, self.failing = k, 0, False

    def disarm(self) -> None:
        self.k, self.failing = 0, False

    def _traced(self, statement: str) -> None:
        write = statement.lstrip().split(" ", 1)[0].upper() in FAULTED
        self.seen += write
        self.failing = write and self.seen == self.k


def test_a_save_that_finds_no_room_raises_a_store_error_and_keeps_the_store(
    tmp_path: Path,
) -> None:
    """A file size limit reached as a decision and a save are written (a full disk):
    each raises StoreUnavailableError saying what was not saved, not eventsourcing's
    OperationalError, and the store loads as before (found by helper-117)."""
    path = tmp_path / "threads.db"
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, *sys.path])}
    result = run_python("-c", FULL_DISK_CHILD, path, env=env, cwd=tmp_path)
    decide, save = result.stdout.splitlines()
    assert decide.startswith("decide StoreUnavailableError") and "failed (" in decide
    assert save.startswith("save StoreUnavailableError") and "thread 't' was not saved" in save
    with open_store(f"sqlite:///{path}") as store:
        assert store.load("t").reviews.pending
        assert store.verify("t").ok


@settings(max_examples=50, deadline=None)
@given(name=st.sampled_from(["save", "decide", "fork", "run", "queue"]), k=st.integers(1, 12))
def test_a_write_statement_that_fails_raises_a_store_error_and_a_retry_completes(
    name: str, k: int
) -> None:
    """Whichever write statement of a command SQLite fails (the ``k``-th), the command
    succeeds or raises a CovonautError, never a dependency's error; what was stored
    before stays stored, and the command run again completes."""
    with pytest.MonkeyPatch.context() as monkeypatch, tempfile.TemporaryDirectory() as tmp:
        fault = FailingStatement(monkeypatch)
        faults = WriteFaults(f"sqlite:///{os.path.join(tmp, 'threads.db')}")
        faults.survive_a_fault(name, lambda: fault.arm(k), fault.disarm)
        faults.store.close()
