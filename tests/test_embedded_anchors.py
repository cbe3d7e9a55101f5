"""Head anchors in an application of the user's own: the shop, configured by
environment variables on eventsourcing's SQLite or PostgreSQL module, anchors each saved
thread's head in the save's own transaction, so ``verify`` (the API and the command line)
finds a truncated tail there as in a store; a shop that keeps no anchors is named
precisely; and a store opened by URL on the shop's database is refused before it makes
a table there."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import worker_app
from covonaut_es import AgentThread, Message, ReviewQueue, Role, Store, Worker, open_store
from covonaut_es.errors import (
    CovonautError,
    ForeignSchemaError,
    StoredRowError,
    StoreUnavailableError,
    ThreadConflictError,
)
from shop_app import NOW, Shop
from test_embedded_tools import (
    _postgres,
    cli,
    configured,
    events_table,
    fresh_database,
    shop_env,
    tables,
)
from test_workers import agent, decide, pause, payments

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

DELETED = "the newest events were deleted"


@pytest.fixture(params=BACKENDS)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The shop's database: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "shop.db")
    return str(request.getfixturevalue("postgres_database"))


def execute(env: dict[str, str], statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run one statement on the shop's database, as someone with access to it could."""
    if "SQLITE_DBNAME" in env:
        with contextlib.closing(sqlite3.connect(env["SQLITE_DBNAME"])) as conn, conn:
            return conn.execute(statement.replace("%s", "?"), params).fetchall()
    with _postgres(env) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def stream_of(env: dict[str, str], stream: Any) -> Any:
    """The stream id as the shop's database keeps it."""
    return stream.hex if "SQLITE_DBNAME" in env else stream


def truncate(env: dict[str, str], thread: AgentThread, keep: int) -> None:
    """Delete the thread's events after version ``keep``."""
    execute(
        env,
        f"DELETE FROM {events_table(env, Shop)} WHERE originator_id = %s "
        "AND originator_version > %s",
        (stream_of(env, thread.id), keep),
    )


def versions(env: dict[str, str], stream: Any) -> tuple[int, int | None]:
    """The stream's newest stored version and its anchored version."""
    table = events_table(env, Shop)
    stored = execute(
        env,
        f"SELECT MAX(originator_version) FROM {table} WHERE originator_id = %s",
        (stream_of(env, stream),),
    )
    anchored = execute(
        env,
        f"SELECT version FROM {table}_heads WHERE originator_id = %s",
        (stream_of(env, stream),),
    )
    return stored[0][0], anchored[0][0] if anchored else None


def steered(store: Store, thread_id: str, times: int) -> AgentThread:
    """The thread loaded and steered ``times`` times (unsaved)."""
    thread = store.load(thread_id)
    for n in range(times):
        thread.steer(Message(Role.USER, f"note {n}"), now=NOW)
    return thread


def started(app: Shop, thread_id: str) -> AgentThread:
    """A new thread, saved with a new order in one transaction."""
    thread = AgentThread.start(thread_id, now=NOW)
    from shop_app import Order

    app.save(Order("lamp", Decimal("19.90")), thread)
    return thread


@contextlib.contextmanager
def fault(env: dict[str, str], table: str, when: str = "") -> Iterator[None]:
    """Every write to ``table`` (of rows matching ``when``) fails in the database, as a
    full disk or a killed session would fail it."""
    if "SQLITE_DBNAME" in env:
        condition = f"WHEN {when}" if when else ""
        for action in ("INSERT", "UPDATE"):
            execute(
                env,
                f"CREATE TRIGGER fault_{action.lower()} BEFORE {action} ON {table} "
                f"{condition} BEGIN SELECT RAISE(ABORT, 'disk fault'); END",
            )
        yield
        for action in ("insert", "update"):
            execute(env, f"DROP TRIGGER fault_{action}")
        return
    execute(
        env,
        "CREATE FUNCTION fault() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'disk fault'; END $$",
    )
    condition = f"WHEN ({when})" if when else ""
    execute(
        env,
        f"CREATE TRIGGER fault BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW {condition} "
        "EXECUTE FUNCTION fault()",
    )
    yield
    execute(env, f"DROP TRIGGER fault ON {table}")
    execute(env, "DROP FUNCTION fault()")


@pytest.mark.parametrize("snapshotting", [False, True])
def test_a_save_stores_its_events_and_their_anchor_together_or_neither(
    where: str, snapshotting: bool
) -> None:
    """A save whose anchor cannot be written stores none of its events (the order's
    included), and one whose thread events cannot be written leaves the anchor where it
    was; after both, the thread verifies intact, and a save that succeeds moves the
    anchor to the stream's end."""
    env = shop_env(where, snapshotting=snapshotting)
    table = events_table(env, Shop)
    with configured(env), Shop() as app, Store.from_application(app) as store:
        thread = started(app, "t")
        assert versions(env, thread.id) == (1, 1)
        rows = len(execute(env, f"SELECT 1 FROM {table}"))

        with fault(env, f"{table}_heads"), pytest.raises(Exception, match="disk fault"):
            app.save(steered(store, "t", 2))
        assert len(execute(env, f"SELECT 1 FROM {table}")) == rows
        assert versions(env, thread.id) == (1, 1)

        with (
            fault(env, table, "NEW.originator_version = 2"),
            pytest.raises(Exception, match="disk fault"),
        ):
            app.save(steered(store, "t", 1))
        assert versions(env, thread.id) == (1, 1)

        app.save(steered(store, "t", 3))
        assert versions(env, thread.id) == (4, 4)
        report = store.verify("t")

    assert report.ok, report.findings
    assert report.notes == ()


def test_verify_on_the_command_line_finds_a_truncated_tail_of_the_application(
    where: str,
) -> None:
    """``replay --verify --application`` checks the shop's anchored heads: intact after
    its saves, and a tail deleted in the database is found (exit 1), on either back end,
    snapshotting off."""
    env = shop_env(where)
    with configured(env), Shop() as app, Store.from_application(app) as store:
        thread = started(app, "t")
        app.save(steered(store, "t", 3))
        intact = cli("replay", "t", "--verify")
        truncate(env, thread, 2)
        truncated = cli("replay", "t", "--verify")

    assert intact.returncode == 0, intact.stderr
    assert "intact" in intact.stdout
    assert truncated.returncode == 1, truncated.stderr
    assert DELETED in truncated.stdout + truncated.stderr


def test_an_application_without_anchors_is_named_thread_by_thread_until_it_keeps_them(
    where: str,
) -> None:
    """A shop that names eventsourcing's own recorder keeps no anchors, and verify says
    which thread has none and why; opened without creating tables, it says the table is
    not there yet; opened once as configured, every thread is anchored at its present
    head (the shop's events left as they were), and a tail deleted afterwards is found."""
    env = shop_env(where)
    stock = (
        "eventsourcing.sqlite:SQLiteApplicationRecorder"
        if "SQLITE_DBNAME" in env
        else "eventsourcing.postgres:PostgresApplicationRecorder"
    )
    with (
        configured({**env, "APPLICATION_RECORDER_TOPIC": stock}),
        Shop() as app,
        Store.from_application(app) as store,
    ):
        thread = started(app, "older")
        app.save(steered(store, "older", 2))
        opted_out = store.verify("older")
    assert tables(env) == {events_table(env, Shop)}
    with (
        configured({**env, "CREATE_TABLE": "n"}),
        Shop() as app,
        Store.from_application(app) as store,
    ):
        unopened = store.verify("older")
    table = events_table(env, Shop)
    rows = execute(env, f"SELECT * FROM {table} ORDER BY originator_id, originator_version")
    with configured(env), Shop() as app, Store.from_application(app) as store:
        assert (
            execute(env, f"SELECT * FROM {table} ORDER BY originator_id, originator_version")
            == rows
        )
        anchored = store.verify("older")
        truncate(env, thread, 2)
        truncated = store.verify("older")

    assert opted_out.ok
    [note] = opted_out.notes
    assert "no head anchor for thread 'older'" in note
    assert "application Shop's recorder" in note
    assert stock.replace(":", ".") in note
    [note] = unopened.notes
    assert "no head anchor for thread 'older'" in note
    assert "no head table yet" in note
    assert anchored.ok
    assert anchored.notes == ()
    assert [f.version for f in truncated.findings] == [2]
    assert DELETED in truncated.findings[0].problem


_OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["save", "truncate"]), st.integers(0, 1), st.integers(1, 3)),
    min_size=1,
    max_size=8,
)


def check_truncations(
    where: str, operations: list[tuple[str, int, int]], snapshotting: bool
) -> None:
    """After saves and tail deletions of two threads in any order, verify finds exactly
    the threads whose tail was deleted; a save after a deletion is refused, since its
    anchor would hide the deletion (helper-222), and stores nothing."""
    env = shop_env(where, snapshotting=snapshotting)
    names = ("a", "b")
    truncated = {name: False for name in names}
    with configured(env), Shop() as app, Store.from_application(app) as store:
        threads = {name: started(app, name) for name in names}
        for operation, which, count in operations:
            name = names[which]
            if operation == "save":
                thread = steered(store, name, count)
                if truncated[name]:
                    with pytest.raises(StoredRowError, match="newest events were removed"):
                        app.save(thread)
                else:
                    app.save(thread)
                continue
            head = store.head_version(name) or 1
            keep = max(1, head - count)
            if keep < head:
                truncate(env, threads[name], keep)
                truncated[name] = True
        reports = {name: store.verify(name) for name in names}

    for name in names:
        found = [f.problem for f in reports[name].findings]
        assert bool(found) == truncated[name], (name, found)
        assert all(DELETED in problem for problem in found)
        assert reports[name].notes == ()


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=_OPERATIONS, snapshotting=st.booleans())
def test_verify_finds_every_truncated_tail_of_an_embedded_sqlite_application(
    operations: list[tuple[str, int, int]], snapshotting: bool
) -> None:
    """Generated sequences of saves and tail deletions on SQLite: each deleted tail not
    saved over is found, and no other thread is reported."""
    with fresh_database("sqlite", None) as where:
        check_truncations(where, operations, snapshotting)


@pytest.mark.postgres
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=_OPERATIONS, snapshotting=st.booleans())
def test_verify_finds_every_truncated_tail_of_an_embedded_postgres_application(
    postgres_url: str, operations: list[tuple[str, int, int]], snapshotting: bool
) -> None:
    """As on SQLite, on PostgreSQL."""
    with fresh_database("postgres", postgres_url) as where:
        check_truncations(where, operations, snapshotting)


def store_url(where: str) -> str:
    """The URL a store would be opened with on the shop's database."""
    return where if where.startswith("postgresql://") else f"sqlite:///{where}"


def command(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line without ``--application``."""
    return subprocess.run(
        [sys.executable, "-m", "covonaut_es", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def test_a_store_opened_by_url_on_an_applications_database_is_refused(where: str) -> None:
    """``open_store``, ``ReviewQueue`` and the command line's ``--store`` on the shop's
    database (its own aggregates' events and no store) refuse it with the way to open the shop, and
    create no table there, read-only commands included."""
    env = shop_env(where)
    with configured(env), Shop() as app, Store.from_application(app):
        started(app, "t")
    before = tables(env)
    url = store_url(where)

    with pytest.raises(ForeignSchemaError) as info:
        open_store(url)
    with pytest.raises(ForeignSchemaError):
        open_store(url, create_tables=False)
    with pytest.raises(ForeignSchemaError):
        ReviewQueue(url)
    results = [
        command("threads", "--store", url),
        command("replay", "t", "--verify", "--store", url),
        command("migrate", "--check", "--store", url),
        command("reviews", "--store", url),
    ]

    assert "--application MODULE:CLASS" in str(info.value)
    assert "COVONAUT_ES_APPLICATION" in str(info.value)
    for result in results:
        assert result.returncode != 0
        assert "--application MODULE:CLASS" in result.stderr, result.stderr
    assert tables(env) == before
    assert not {table for table in tables(env) if table.startswith("covonaut")}


def test_a_new_store_on_an_empty_database_is_still_created(where: str) -> None:
    """On an empty database (a new SQLite file, a fresh PostgreSQL database) a store is
    created as before, and opens again."""
    url = store_url(where)
    with open_store(url) as store:
        store.save(AgentThread.start("t", now=NOW))
    with open_store(url, create_tables=False) as again:
        assert again.verify("t").ok


def test_a_save_killed_at_any_moment_leaves_events_and_anchor_alike(where: str) -> None:
    """The shop's process, killed (SIGKILL) while it saves orders with their reviewing
    thread, leaves the thread's stream and its anchor at the same version every time,
    and the thread verifies intact with its head checked."""
    env = shop_env(where)
    path = os.pathsep.join(sys.path)
    for lines in (1, 7, 3, 12, 5):  # saves begun before each kill
        saver = subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "shop_saver.py")],
            env={**os.environ, **env, "PYTHONPATH": path},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert saver.stdout is not None
        for _ in range(lines):
            assert saver.stdout.readline() == "saving\n"
        saver.send_signal(signal.SIGKILL)
        saver.wait(timeout=60)
        saver.stdout.close()
        with configured(env), Shop() as app, Store.from_application(app) as store:
            stream = store.load("t").id
            stored, anchored = versions(env, stream)
            report = store.verify("t")
        assert stored == anchored
        assert report.ok, report.findings
        assert report.notes == ()
    assert stored > 1


# A save stores exactly its rows or fails whole (ADR 0109): a trigger that drops an
# insert (or, on PostgreSQL, changes its row's id) makes each writing command raise; so
# does one that refuses the row ("abort": a trigger's RAISE; "check": a CHECK constraint
# added on PostgreSQL), and that refusal is no conflict with another writer.

_WRITTEN = {
    "sqlite": ("stored_events", "stored_events_heads", "stored_events_leases"),
    "postgres": ("covonaut_events", "covonaut_events_heads", "covonaut_events_leases"),
}
# "negative id" and "same id" change a row of PostgreSQL's log; "rule" is a PostgreSQL
# rule that does nothing instead of the insert (helper-137: an untyped NotSupportedError)
_DROPS = ("drop", "negative id", "same id", "rule", "abort", "check")


def _intercept(url: str, table: str, how: str) -> None:
    """A trigger on ``table`` that drops each insert, gives the row another id, or
    refuses it; or a rule, or a constraint, that does."""
    if url.startswith("sqlite"):  # a CHECK cannot be added to a SQLite table: a RAISE
        raised = "IGNORE" if how == "drop" else "ABORT, 'disk quota'"
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db, db:
            db.execute(
                f"CREATE TRIGGER intercept BEFORE INSERT ON {table} "
                f"BEGIN SELECT RAISE({raised}); END"
            )
        return
    if how in ("rule", "check"):
        added = {
            "rule": f"CREATE RULE intercept AS ON INSERT TO {table} DO INSTEAD NOTHING",
            "check": f"ALTER TABLE {table} ADD CONSTRAINT intercept CHECK (false) NOT VALID",
        }[how]
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(added)
        return
    body = {
        "abort": "RAISE EXCEPTION 'disk quota';",
        "drop": "RETURN NULL;",
        "negative id": "NEW.notification_id := -NEW.notification_id; RETURN NEW;",
        "same id": "NEW.notification_id := 1; RETURN NEW;",
    }[how]

    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "CREATE OR REPLACE FUNCTION intercept() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN {body} END $$"
        )
        db.execute(f"DROP TRIGGER IF EXISTS intercept ON {table}")
        db.execute(
            f"CREATE TRIGGER intercept BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION intercept()"
        )


def _command(store: Store, command: str, ledger: Path) -> None:
    """Run ``command`` of the worker tests' application on ``store``."""

    if command == "run":
        agent(store, "new").run("Pay 5.")
    elif command == "decide":
        decide(store, "paused")
    elif command == "fork":
        store.fork("paused", at_version=1, new_thread_id="forked")
    else:  # a worker's step of the approved thread
        done = threading.Event()
        failed: list[BaseException] = []

        def step() -> None:
            try:
                Worker(store, worker_app.make_config).run(once=True)
            except BaseException as exc:
                failed.append(exc)
            done.set()

        threading.Thread(target=step, daemon=True).start()
        assert done.wait(30), "the worker's step never ended"
        if failed:
            raise failed[0]


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
@settings(
    max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    table=st.integers(0, 2),
    how=st.sampled_from(_DROPS),
    command=st.sampled_from(("run", "decide", "worker", "fork")),
)
@example(table=0, how="rule", command="decide")
@example(table=1, how="rule", command="run")
@example(table=2, how="rule", command="run")
def test_a_write_a_trigger_drops_or_changes_fails_whole(
    backend: str,
    table: int,
    how: str,
    command: str,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trigger that drops the inserts of a table a write makes (the log, the heads,
    the leases), or changes the id of a row of the log, or a trigger or constraint that
    refuses them: each command that writes the table raises a CovonautError and stores
    nothing, never a conflict with another writer unless the id it gave is another
    row's; a worker's step ends, its failure logged, with the thread as it was; no
    payment runs."""

    tmp = tmp_path_factory.mktemp("dropped")
    if backend == "sqlite":
        url = f"sqlite:///{tmp / 'threads.db'}"
    else:
        url = str(request.getfixturevalue("postgres_database"))

        with psycopg.connect(url, autocommit=True) as db:  # each example on a fresh store
            db.execute("DROP SCHEMA public CASCADE")
            db.execute("CREATE SCHEMA public")
    ledger = tmp / "ledger"
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(ledger))
    with open_store(url) as store:
        pause(store, "paused")
        if command == "worker":
            decide(store, "paused")
        before = {t: store.load(t).version for t in store.thread_ids()}
        name = _WRITTEN[backend][table]
        log_only = ("negative id", "same id")
        _intercept(url, name, "drop" if how in log_only and not name.endswith("_events") else how)
        try:
            _command(store, command, ledger)
        except CovonautError as exc:
            assert how == "same id" or not isinstance(exc, ThreadConflictError), exc
            assert {t: store.load(t).version for t in store.thread_ids()} == before
        else:  # a worker logs its step's failure; decide and fork take no lease
            assert command == "worker" or (name.endswith("_leases") and command != "run")
        if command == "worker":
            assert {t: store.load(t).version for t in store.thread_ids()} == before
    assert payments(ledger) == {}


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_unique_index_added_to_the_log_refuses_a_write_as_no_conflict(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A unique index an operator adds to the log (helper-153) refuses a new thread's
    first save with StoreUnavailableError naming it, not as a conflict with another
    writer: that said "reload and try again", and the reload found no thread at all."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'threads.db'}"
    else:
        url = str(request.getfixturevalue("postgres_database"))
    table = _WRITTEN[backend][0]
    with open_store(url) as store:
        pause(store, "paused")
        before = {t: store.load(t).version for t in store.thread_ids()}
        added = f"CREATE UNIQUE INDEX intercept ON {table} (originator_version, topic)"
        if backend == "sqlite":
            with contextlib.closing(sqlite3.connect(tmp_path / "threads.db")) as db, db:
                db.execute(added)
        else:
            with psycopg.connect(url, autocommit=True) as db:
                db.execute(added)
        with pytest.raises(StoreUnavailableError, match=r"intercept|originator_version, "):
            agent(store, "new").run("Pay 5.")
        assert {t: store.load(t).version for t in store.thread_ids()} == before
