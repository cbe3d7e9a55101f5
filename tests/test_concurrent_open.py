"""Several processes opening one new store at the same moment."""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import open_racer
from covonaut_es import open_store

RACERS = 4
KEY = "a secret of thirty-two characters"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def new_store_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Make the URL of a store that does not exist yet, as often as asked."""
    made: list[str] = []
    if request.param == "sqlite":
        yield lambda: f"sqlite:///{tmp_path / f'{uuid.uuid4().hex}.db'}"
        return
    server: str = request.getfixturevalue("postgres_url")

    def database() -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return server.rsplit("/", 1)[0] + f"/{name}"

    yield database
    with psycopg.connect(server, autocommit=True) as conn:
        for name in made:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.slow
def test_processes_opening_a_new_store_at_once_all_succeed(new_store_urls: Any) -> None:
    """Processes that open the same new store at the same moment (tables, settings,
    head anchors and the chain key made by whichever comes first) all open it and
    save, with no option, a chain key or compression, and every thread verifies."""
    context = multiprocessing.get_context("spawn")
    for options in ({}, {"chain_key": KEY}, {"compress": True}):
        url = new_store_urls()
        barrier, queue = context.Barrier(RACERS), context.Queue()
        racers = [
            context.Process(
                target=open_racer.open_and_save, args=(url, racer, options, barrier, queue)
            )
            for racer in range(RACERS)
        ]
        for process in racers:
            process.start()
        outcomes = [queue.get(timeout=120) for _ in racers]
        for process in racers:
            process.join(timeout=60)
        assert [detail for kind, detail in outcomes if kind == "error"] == []
        with open_store(url, **options) as store:
            for racer in range(RACERS):
                report = store.verify(f"racer-{racer}")
                assert report.ok, report.findings


def failures_racing(
    target: Callable[[list[str], Any, Any], None], urls: list[str], racers: int = RACERS
) -> list[str]:
    """What ``racers`` processes running ``target(urls, barrier, results)`` at once put
    on ``results``: each a list of what failed."""
    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(racers), context.Queue()
    processes = [context.Process(target=target, args=(urls, barrier, queue)) for _ in range(racers)]
    for process in processes:
        process.start()
    failures = [failure for _ in processes for failure in queue.get(timeout=300)]
    for process in processes:
        process.join(timeout=60)
    return failures


def stores_made(new_store_urls: Any, count: int) -> list[str]:
    """The URLs of ``count`` new stores, opened once: their own tables are made."""
    urls = [new_store_urls() for _ in range(count)]
    for url in urls:
        with open_store(url) as store:
            store.exists("the store's own tables made before the race")
    return urls


@pytest.mark.slow
def test_every_open_succeeds_when_processes_race_to_create_many_stores(
    new_store_urls: Any, request: pytest.FixtureRequest
) -> None:
    """Racers that meet before opening each of many new stores all open every one.

    Opening a new store is where the racers fight for the file's or the database's
    first locks (the SQLite file's switch to WAL, the tables' creation), and losing
    such a fight is rare: a few stores in a hundred. So the test makes many of them."""
    stores = 60 if "sqlite" in request.node.name else 8
    urls = [new_store_urls() for _ in range(stores)]
    assert failures_racing(open_racer.open_each, urls, racers=RACERS + 2) == []


@pytest.mark.slow
def test_workers_starting_at_once_on_stores_no_worker_ran_on_all_register(
    new_store_urls: Any,
) -> None:
    """Worker processes that start at the same moment on a store no worker ran on
    before (its registry of workers not made yet) each publish their record, and the
    registry lists them all while they run: none fails for losing the race to make
    the registry.

    Like the tables' own creation, losing that race is rare, so the test makes many
    stores."""
    urls = stores_made(new_store_urls, 12)
    assert failures_racing(open_racer.register_on_each, urls) == []


@pytest.mark.slow
def test_reviewer_queues_starting_at_once_on_stores_no_queue_ran_on_all_open_their_view(
    new_store_urls: Any,
) -> None:
    """Reviewers' processes (``serve``, ``reviews --follow``) that start at the same
    moment on a store whose queue never ran (its view's tables not made yet) all open
    the view: none fails for losing the race to make its tables.

    Losing that race is rarer than winning it, so the test makes many stores."""
    urls = stores_made(new_store_urls, 12)
    assert failures_racing(open_racer.view_each, urls) == []


@pytest.mark.postgres
def test_an_open_waits_a_bounded_time_for_a_session_stuck_making_tables(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session that holds the lock under which a store's tables are made (a process
    stuck halfway through its open) makes another open fail with StoreLockedError after
    the store's wait, not hang; once it lets go, the open succeeds."""
    from covonaut_es.errors import StoreLockedError
    from covonaut_es.store._backends import _postgres_schema

    monkeypatch.setattr(_postgres_schema, "SCHEMA_LOCK_WAIT_S", 1)
    with psycopg.connect(postgres_database, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (_postgres_schema.SCHEMA_LOCK_KEY,))
        with pytest.raises(StoreLockedError, match="pg_locks gives its pid"):
            open_store(postgres_database)
    with open_store(postgres_database) as store:
        assert list(store.thread_ids()) == []


@pytest.mark.postgres
def test_an_open_whose_session_is_ended_while_it_waits_says_so(postgres_database: str) -> None:
    """The database ending the open's session (pg_terminate_backend, a restart) while it
    waits to make the tables is a StoreUnavailableError, not a driver's error."""
    import threading

    from covonaut_es.errors import StoreUnavailableError
    from covonaut_es.store._backends import _postgres_schema

    failures: list[BaseException] = []

    def opening() -> None:
        try:
            open_store(postgres_database).close()
        except BaseException as exc:  # reported below
            failures.append(exc)

    with psycopg.connect(postgres_database, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (_postgres_schema.SCHEMA_LOCK_KEY,))
        opener = threading.Thread(target=opening)
        opener.start()
        waiting: list[Any] = []
        for _ in range(200):
            waiting = holder.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event = 'advisory'"
            ).fetchall()
            if waiting or not opener.is_alive():
                break
            opener.join(0.05)
        assert waiting, failures
        holder.execute("SELECT pg_terminate_backend(%s)", (waiting[0][0],))
        opener.join(30)
    assert len(failures) == 1 and isinstance(failures[0], StoreUnavailableError), failures
    assert "connection to PostgreSQL" in str(failures[0])
