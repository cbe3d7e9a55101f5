"""A store opened read-only (``?mode=ro``) refuses every writing command with
``ReadOnlyStoreError`` before it does anything, and the inbox answers such a refusal
with 503: the store is unavailable for writing, the request was not at fault."""

from __future__ import annotations

import asyncio
import inspect
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent

from covonaut_es import Message, Store, open_store
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import NotAStoreError, ReadOnlyStoreError, StoreUnavailableError
from covonaut_es.service import Settlement, ThreadService, review_submission
from covonaut_es.store import _settings
from covonaut_es.store._leases import WorkerRecord
from inbox_support import current, in_doubt, inbox_client, paused_on_tool
from test_approvals import ALICE
from test_review_deadlines import Clock
from test_review_deadlines import paused as paused_with_deadline
from test_service import RITA, VERIFIER, paused


def _entered(context: Callable[[], AbstractAsyncContextManager[object]]) -> None:
    """Enter and leave the asynchronous context ``context`` makes."""

    async def run() -> None:
        async with context():
            pass

    asyncio.run(run())


def _session(service: ThreadService) -> None:
    with service.session("review"):
        pass


COMMANDS: dict[str, Callable[[ThreadService, Any, str], object]] = {
    "decide": lambda s, who, review: s.decide(
        review, review_submission("approve"), reviewer=who, thread_id="review"
    ),
    "decide_together": lambda s, who, review: s.decide_together(
        "review", decisions={review: review_submission("approve")}, reviewer=who
    ),
    "answer": lambda s, who, _: s.answer("tool", "c1", "yes", reviewer=who),
    "settle": lambda s, who, _: s.settle("doubt", "c1", Settlement.not_run(), reviewer=who),
    "pause_calls_in_doubt": lambda s, who, _: s.pause_calls_in_doubt("doubt", "stopped"),
    "request_retry": lambda s, who, _: s.request_retry("doubt", "c1", reviewer=who),
    "abandon": lambda s, who, _: s.abandon("review", "gone", reviewer=who),
    "label": lambda s, who, _: s.label("review", "seen"),
    "take_input": lambda s, who, _: s.take_input(
        "tool", s.store.submissions.submitted("tool"), thread_version=0
    ),
    "expire_reviews": lambda s, who, _: s.expire_reviews("late"),
    "note_deadlines_near": lambda s, who, _: s.note_deadlines_near("near", timedelta(days=2)),
    "session": lambda s, who, _: _session(s),
    "asession": lambda s, who, _: _entered(lambda: s.asession("review")),
}
"""Every command of ThreadService that writes, run on a thread it would act on."""

READERS = {"reviewer", "find_review", "review_time"}


def test_the_commands_cover_every_writing_method_of_the_service() -> None:
    """Each public method of ThreadService is either a reader or in COMMANDS, so a new
    command cannot escape the read-only test."""
    public = {n for n, _ in inspect.getmembers(ThreadService) if not n.startswith("_")}
    assert public - READERS == set(COMMANDS)


def _save(store: Store) -> None:
    thread = store.load("tool")
    thread.append_message(Message(role="user", content="more"), now=datetime.now(UTC))
    store.save(thread)


def _snapshot(store: Store) -> None:
    thread = store.load("tool")
    for n in range(70):
        thread.append_message(Message(role="user", content=f"more {n}"), now=datetime.now(UTC))
    store.snapshot_if_due(thread)


def _lease(store: Store) -> None:
    with store.lease("tool"):
        pass


def _take(store: Store) -> None:
    submitted = store.submissions.submitted("tool")
    assert submitted.waiting() is not None
    store.submissions.take("tool", submitted, 0)


STORE_WRITERS: dict[str, Callable[[Store], object]] = {
    "save": _save,
    "snapshot_if_due": _snapshot,
    "fork": lambda store: store.fork("tool"),
    "abandon": lambda store: store.abandon("tool", "gone"),
    "label": lambda store: store.label("tool", "seen"),
    "submit": lambda store: store.submit("tool", "and more"),
    "asubmit": lambda store: asyncio.run(store.asubmit("tool", "and more")),
    "submissions": _take,
    "lease": _lease,
    "alease": lambda store: _entered(lambda: store.alease("tool")),
    "write_state": lambda store: store.write_state("key", {}),
    "record_log_position": lambda store: store.record_log_position("consumer", 1),
    "withdraw_worker": lambda store: store.withdraw_worker("w1"),
    "publish_worker": lambda store: store.publish_worker(
        WorkerRecord(
            worker_id="w1",
            host="here",
            pid=1,
            started_at=datetime.now(UTC),
            heartbeat_at=datetime.now(UTC),
        )
    ),
}
"""Every method of Store that writes (or, for ``submissions``, whose object does),
run on a thread it would act on."""

STORE_READERS = {
    "acheckpoints", "aexists", "afind", "ahistory", "aload", "areplay_state", "astate_at",
    "branch_points", "checkpoints", "children", "close", "database", "database_now",
    "events_after",
    "exists", "find", "forks", "from_application", "head_version", "held_lease", "history",
    "last_log_position", "lease_holder", "leaves", "list_threads", "live_workers", "load",
    "log_position", "parent", "path_to_root", "ping", "read_state", "replay",
    "replay_state", "session_tree", "state_at", "thread_ids", "threads_held",
    "threads_with_review", "tree", "tree_stats", "verify", "outstanding_threads",
    "name_lease_holder",  # in this process only: a worker's name for its leases
}  # fmt: skip


def test_every_writing_method_of_the_store_is_tried_read_only() -> None:
    """Each public name of Store is a reader or in STORE_WRITERS, so a new writing
    method cannot escape the read-only test."""
    public = {n for n, _ in inspect.getmembers(Store) if not n.startswith("_")}
    assert public - STORE_READERS == set(STORE_WRITERS)


@pytest.mark.parametrize("write", list(STORE_WRITERS))
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # abandon and label, as before
def test_a_read_only_store_refuses_every_write_of_its_own_typed(
    read_only: tuple[Store, str], tmp_path: Path, write: str
) -> None:
    """Every writing method of the store raises ReadOnlyStoreError naming the store's
    mode, and writes nothing: no event, no submission taken, no file beside it."""
    store, _ = read_only
    before = {t: store.history(t) for t in ("review", "tool", "doubt")}
    submitted = store.submissions.submitted("tool")
    files = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(ReadOnlyStoreError, match=r"read-only.*without \?mode=ro"):
        STORE_WRITERS[write](store)
    assert {t: store.history(t) for t in before} == before
    assert store.submissions.submitted("tool") == submitted
    assert sorted(p.name for p in tmp_path.rglob("*")) == files


@pytest.fixture
def read_only(tmp_path: Path, simulated_time: None) -> Iterator[tuple[Store, str]]:
    """A SQLite store with a review, a tool's pause, a call in doubt, a review past its
    deadline and one a day from it, opened read-only; and the first review's id."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as writable:
        _, review_id = paused(writable, "review")
        paused_on_tool(writable, "tool")
        writable.submit("tool", "and then?")  # input waiting, for a runner to take
        in_doubt(writable, "doubt")
        paused_with_deadline(writable, Clock(), thread_id="late")
        now = Clock(datetime.now(UTC))
        paused_with_deadline(writable, now, deadline=timedelta(days=1), thread_id="near")
    with open_store(url + "?mode=ro") as store:
        yield store, review_id


def files_in(folder: Path) -> dict[str, float]:
    return {
        str(path.relative_to(folder)): path.stat().st_mtime
        for path in folder.rglob("*")
        if path.is_file()
    }


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_read_only_store_refuses_every_writing_command_before_doing_anything(
    read_only: tuple[Store, str], tmp_path: Path, command: str
) -> None:
    """Every writing command raises ReadOnlyStoreError naming the store's mode and what
    to do; no thread changes and no lease file is taken beside the database."""
    store, review_id = read_only
    service = ThreadService(store, verifier=VERIFIER)
    histories = {t: store.history(t) for t in ("review", "tool", "doubt")}
    leases = [p for p in tmp_path.iterdir() if p.is_dir()]
    before = {str(p): files_in(p) for p in leases}
    with pytest.raises(ReadOnlyStoreError, match=r"read-only.*without \?mode=ro"):
        COMMANDS[command](service, service.reviewer(RITA), review_id)
    assert {t: store.history(t) for t in histories} == histories
    assert {str(p): files_in(p) for p in leases} == before
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == leases
    assert os.listdir(tmp_path)  # the database is still there, untouched by the refusal


def test_the_inbox_answers_a_write_to_a_read_only_store_with_503(
    read_only: tuple[Store, str],
) -> None:
    """Deciding, answering, settling, asking for a retry and giving up through the inbox
    API on a read-only store are each answered 503, with the reason, not 500."""
    store, review_id = read_only
    headers = {"Authorization": f"Bearer {ALICE}"}
    posts = {
        f"/api/reviews/{review_id}/approve?thread=review": {},
        "/api/pauses/tool/c1/answer": {"answer": "yes"},
        "/api/pauses/doubt/c1/settle": {"ran": False, "note": "checked"},
        "/api/pauses/doubt/c1/retry": {},
        "/api/threads/review/abandon": {"reason": "gone"},
    }
    with inbox_client(store) as client:
        current(client)
        for path, body in posts.items():
            response = client.post(path, headers=headers, json=body)
            assert response.status_code == 503, (path, response.text)
            assert "read-only" in response.json()["error"], path


@pytest.mark.parametrize(
    ("code", "refused"),
    [
        ("SQLITE_IOERR", StoreUnavailableError),
        ("SQLITE_FULL", StoreUnavailableError),
        ("SQLITE_NOMEM", StoreUnavailableError),
        ("SQLITE_CANTOPEN", StoreUnavailableError),
        ("SQLITE_NOTADB", NotAStoreError),
    ],
)
def test_a_file_that_fails_to_open_is_named_by_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, refused: type[Exception]
) -> None:
    """A store's file that SQLite cannot read now (a full disk, an I/O error) is named
    as such, never as no SQLite database: an operator told that a good store is none
    might replace it; only a file that is not a database is said to be one."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    open_store(url).close()

    def failing(*args: object, **kwargs: object) -> sqlite3.Connection:
        error = sqlite3.OperationalError(code.lower())
        error.sqlite_errorcode = getattr(sqlite3, code)
        raise error

    monkeypatch.setattr(_settings.sqlite3, "connect", failing)
    with pytest.raises(refused) as raised:
        open_store(url, create_tables=False)
    assert ("not a SQLite database" in str(raised.value)) is (refused is NotAStoreError)


@pytest.mark.parametrize("create_tables", [True, False])
def test_a_read_only_open_of_a_missing_file_names_the_file(
    tmp_path: Path, create_tables: bool
) -> None:
    """``?mode=ro`` on a file that does not exist is refused naming the store and the
    file, as an open that creates no tables is, whether or not tables may be created
    (``import`` may): it gave SQLite's bare "unable to open database file"."""
    url = f"sqlite:///{tmp_path / 'missing.db'}?mode=ro"
    with pytest.raises(StoreUnavailableError) as raised:
        open_store(url, create_tables=create_tables)
    assert str(raised.value) == (
        f"store {url}: there is no SQLite file {str(tmp_path / 'missing.db')!r} to open; "
        "check its name"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_store_refuses_the_imports_write_typed(
    read_only: tuple[Store, str],
) -> None:
    """The import's write through ``store.log`` raises ReadOnlyStoreError, not the
    database's raw OperationalError, and writes nothing (helper-167)."""
    store, _ = read_only
    end = store.last_log_position()
    record = StoredEvent(thread_aggregate_id("new"), 1, "covonaut.x", b"{}")
    with pytest.raises(ReadOnlyStoreError, match=r"read-only.*without \?mode=ro"):
        store.log.insert_threads({"new": [record]})
    assert store.last_log_position() == end


def test_a_read_only_store_that_never_recorded_a_position_reads_0(tmp_path: Path) -> None:
    """A consumer's position on a read-only store whose database has no tracking table
    yet (none was ever recorded) is 0, as on a writable one, not a raw
    OperationalError "no such table" (helper-167)."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as writable:
        writable.submit("t", "hi")
    with open_store(url + "?mode=ro") as store:
        assert store.log_position("notices") == 0
        assert store.log.position_and_end("notices") == (0, store.last_log_position())
