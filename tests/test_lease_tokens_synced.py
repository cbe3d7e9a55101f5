"""A SQLite run lease's token is committed without waiting for the disk, and synced by
the first save under the lease or before anything outside the store can see it (ADR
0062): every connection sees it at once, so a lost lease is refused from the moment
another runner takes the thread, and a power loss can only forget a token nobody saw."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import ExitStack, closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import AgentThread, Message, Role, Store, open_store
from covonaut_es.errors import LeaseLostError
from lease_faults import THREAD, PaymentFlow, head, lock_file

NOW = datetime(2026, 12, 3, tzinfo=UTC)

# Takes the thread's lease in another process, reading nothing of it (so not its token),
# says so, and holds it until a line arrives.
_TAKER = textwrap.dedent(
    """
    import sys
    from covonaut_es import open_store

    with open_store(f"sqlite:///{sys.argv[1]}") as store, store.lease(sys.argv[2]):
        print("taken", flush=True)
        sys.stdin.readline()
    """
)


class Commits:
    """The commits of a SQLite store's saves' connection, as its trace shows them: how
    many were not synced since the last one that was (a synced commit syncs the
    write-ahead log, and with it every commit appended before it)."""

    def __init__(self, store: Store) -> None:
        self.synced_later = 0
        self.made = 0
        self.unsynced = 0
        self.token_syncs = 0
        self._mode = "FULL"
        # The saves' own connection (ADR 0024): the one that writes the tokens too.
        store._app.recorder.writer._connection._sqlite_conn.set_trace_callback(self._seen)  # type: ignore[attr-defined]

    def _seen(self, statement: str) -> None:
        if statement.startswith("PRAGMA synchronous = "):
            self._mode = "NORMAL" if statement.endswith("NORMAL") else "FULL"
        elif statement == "COMMIT":
            self.made += 1
            synced = self._mode == "FULL"
            self.unsynced += not synced
            self.synced_later = 0 if synced else self.synced_later + 1
        elif "SET token = token WHERE" in statement:
            self.token_syncs += 1


def seeded(store: Store) -> AgentThread:
    """The thread, saved with one message."""
    thread = AgentThread.start(THREAD, now=NOW)
    thread.append_message(Message(Role.USER, "hello"), now=NOW)
    store.save(thread)
    return thread


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "threads.db"


@pytest.fixture
def store(database: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{database}") as opened:
        yield opened


def test_a_lease_taken_in_another_process_refuses_the_old_holders_save_at_once(
    database: Path, store: Store
) -> None:
    """The first holder's lock file is removed and another process takes the thread,
    reading nothing of its lease: its token, not yet synced, already refuses the first
    holder's save and check, and the save writes nothing."""
    seeded(store)
    with store.lease(THREAD) as lease:
        thread = store.load(THREAD)
        thread.append_message(Message(Role.USER, "from the first holder"), now=NOW)
        lock_file(database, THREAD).unlink()
        taker = subprocess.Popen(
            [sys.executable, "-c", _TAKER, str(database), THREAD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert taker.stdout is not None
            assert taker.stdout.readline().strip() == "taken"
            with pytest.raises(LeaseLostError):
                store.save(thread)
            with pytest.raises(LeaseLostError):
                lease.check()
            assert head(store, THREAD) == thread.version - 1
        finally:
            taker.communicate("\n", timeout=30)
    assert taker.returncode == 0


def test_a_run_commits_its_lease_token_once_and_syncs_it_with_its_first_save(
    store: Store,
) -> None:
    """A run of two tool calls commits its token unsynced, then only its saves, each
    synced: the first save makes the token durable, and no commit is added to sync it."""
    commits = Commits(store)
    saved: list[int] = []
    save = store.save

    def counting(thread: AgentThread) -> None:
        saved.append(commits.made)
        save(thread)
        assert commits.synced_later == 0

    store.save = counting  # type: ignore[method-assign]
    PaymentFlow().agent(store, THREAD, "a").run("Pay twice.")
    assert saved[0] == 1  # the token's commit, before the first save
    assert commits.made == len(saved) + 1
    assert commits.unsynced == 1
    assert commits.token_syncs == 0


STEPS = st.lists(st.sampled_from(["token", "check", "save", "retake"]), max_size=8)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS)
def test_a_lease_token_is_synced_before_anything_outside_the_store_sees_it(
    steps: list[str],
) -> None:
    """Whatever a lease's holder does (reads its token, checks it before a side effect,
    saves under it, or lets it go and takes the thread again), the token is durable
    whenever it is read or a check passes, and it is synced once at most."""
    with (
        tempfile.TemporaryDirectory() as directory,
        closing(open_store(f"sqlite:///{directory}/t.db")) as store,
        ExitStack() as held,
    ):
        thread = seeded(store)
        commits = Commits(store)
        lease = held.enter_context(store.lease(THREAD))
        takes = 1
        for step in steps:
            if step == "token":
                assert lease.token == lease.fence_token
            elif step == "check":
                lease.check()
            elif step == "save":
                thread.append_message(Message(Role.USER, "again"), now=NOW)
                store.save(thread)
            else:
                held.close()
                lease = held.enter_context(store.lease(THREAD))
                takes += 1
                assert commits.synced_later > 0  # the new token is not synced yet
                continue
            assert commits.synced_later == 0, step
        assert commits.token_syncs <= takes


def test_a_token_commit_that_fails_leaves_the_saves_connection_synced(store: Store) -> None:
    """A commit not synced that raises is rolled back, and the commits after it, the
    saves', wait for the disk again."""
    writer = store._app.recorder.writer  # type: ignore[attr-defined]
    with pytest.raises(ZeroDivisionError), writer.transaction(synced=False) as cursor:
        cursor.execute("SELECT 1")
        _ = 1 / 0
    with writer.statement() as cursor:
        cursor.execute("PRAGMA synchronous")
        assert cursor.fetchone()[0] == 2  # FULL, the file's own
    commits = Commits(store)
    seeded(store)
    assert commits.made == 1
    assert commits.unsynced == 0
