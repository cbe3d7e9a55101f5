"""The library's tools on an application of the user's own that embeds agent threads,
configured by environment variables as eventsourcing applications are: ``verify``, the
reviewer queue, ``migrate --check`` and the command line read the application's own
tables, with snapshotting on or off, and never create a store's tables beside them."""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, create_cipher_key
from covonaut_es.audit import check_store
from covonaut_es.cli._app import build_parser
from covonaut_es.cli._command import UsageError
from covonaut_es.cli._options import APPLICATION_ENV, STORE_ENV, application_spec, store_url
from covonaut_es.domain import AgentThread
from covonaut_es.errors import ConfigurationError
from covonaut_es.projections import ReviewQueue
from covonaut_es.store._codec import aggregate_event_classes
from covonaut_es.store._topic_codes import stored_forms
from shop_app import RenamedShop, Shop, reviewer
from support import postgres_database_of

QUEUE_TABLES = {
    "tracking",
    "review_queue_tracking",
    "covonaut_pauses",
    "covonaut_queue_threads",
    "covonaut_queue_given_up",
    "covonaut_sealed_pauses",
    "covonaut_sealed_queue_threads",
    "covonaut_sealed_queue_given_up",
}
"""The reviewer queue's own tables (a projection's, not a store's)."""

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def shop_env(
    where: str,
    *,
    snapshotting: bool = False,
    encrypted: bool = False,
) -> dict[str, str]:
    """The environment variables a shop is configured with: ``where`` is a SQLite file
    or a PostgreSQL URL."""
    if where.startswith("postgresql://"):
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(where)
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": str(params["dbname"]),
            "POSTGRES_HOST": str(params["host"]),
            "POSTGRES_PORT": str(params.get("port", "5432")),
            "POSTGRES_USER": str(params.get("user", "")),
            "POSTGRES_PASSWORD": str(params.get("password", "")),
        }
    else:
        env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": where}
    env["IS_SNAPSHOTTING_ENABLED"] = "y" if snapshotting else "n"
    if encrypted:
        env["CIPHER_TOPIC"] = "eventsourcing.cryptography:AESCipher"
        env["CIPHER_KEY"] = create_cipher_key()
    return env


@contextlib.contextmanager
def configured(env: dict[str, str]) -> Iterator[None]:
    """The process's environment holds ``env``, as the user's deployment sets it."""
    with mock.patch.dict(os.environ, env):
        yield


def tables(env: dict[str, str]) -> set[str]:
    """The tables of the shop's database."""
    if "SQLITE_DBNAME" in env:
        with contextlib.closing(sqlite3.connect(env["SQLITE_DBNAME"])) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {row[0] for row in rows}
    with _postgres(env) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {row[0] for row in rows}


@contextlib.contextmanager
def _postgres(env: dict[str, str]) -> Iterator[Any]:
    import psycopg

    with psycopg.connect(
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        dbname=env["POSTGRES_DBNAME"],
        user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"],
        autocommit=True,
    ) as conn:
        yield conn


THREAD_TOPICS = stored_forms(aggregate_event_classes(AgentThread))
"""What a thread event's row names in its topic column: a code, or a topic before codes."""


def events_table(env: dict[str, str], application: type[Shop]) -> str:
    """The table the shop's events are in: eventsourcing names it."""
    if "SQLITE_DBNAME" in env:
        return "stored_events"
    return f"{application.name.lower()}_events"


def tamper(env: dict[str, str], application: type[Shop]) -> None:
    """Write the thread's third event over with its second, as someone with access to
    the database could."""
    table = events_table(env, application)
    thread_row = "topic IN ({})".format(", ".join(f"'{t}'" for t in THREAD_TOPICS))
    statement = (
        f"UPDATE {table} SET state = (SELECT state FROM {table} WHERE {thread_row} "
        f"AND originator_version = 2) WHERE {thread_row} AND originator_version = 3"
    )
    if "SQLITE_DBNAME" in env:
        with contextlib.closing(sqlite3.connect(env["SQLITE_DBNAME"])) as conn, conn:
            assert conn.execute(statement).rowcount == 1
        return
    with _postgres(env) as conn:
        assert conn.execute(statement).rowcount == 1


def cli(*args: str, application: str = "shop_app:Shop") -> subprocess.CompletedProcess[str]:
    """Run the command line on the shop, as its operator would, in the environment
    that configures the shop."""
    return subprocess.run(
        [sys.executable, "-m", "covonaut_es", *args, "--application", application],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def app_tables(env: dict[str, str], application: type[Shop]) -> set[str]:
    """The tables the shop itself has: eventsourcing's, and beside its events table
    the head anchors and run leases of its threads."""
    events = events_table(env, application)
    own = {events, f"{events}_heads", f"{events}_leases"}
    snapshots = "stored_snapshots" if "SQLITE_DBNAME" in env else f"{events[:-7]}_snapshots"
    return own | ({snapshots} if env["IS_SNAPSHOTTING_ENABLED"] == "y" else set())


def paused_order(app: Shop, store: Store) -> tuple[Any, str]:
    """An order whose reviewing agent paused for a manager: (order id, thread id)."""
    order_id = app.place("lamp", Decimal("19.90"))
    agent = reviewer(store, order_id)
    agent.run("Review the order.")
    assert agent.interrupted is not None
    return order_id, agent.thread_id


def ship_and_finish(app: Shop, store: Store, order_id: Any, thread_id: str) -> None:
    """The shop's own writes: the order shipped and the agent told in one save, then
    the agent resumed to its answer."""
    app.ship(order_id, store.load(thread_id), "ups")
    agent = reviewer(store, order_id)
    agent.restore_latest_checkpoint()
    assert agent.resume() == "Order reviewed."


@pytest.fixture(params=BACKENDS)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The shop's database: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "shop.db")
    return str(request.getfixturevalue("postgres_database"))


def test_verify_without_snapshots_is_intact_and_checks_the_anchored_head(where: str) -> None:
    """With snapshotting off, eventsourcing's default, verify, the migration check and a
    load given snapshot upcasters read the shop's thread and all its records, and the
    thread's head, anchored by the shop's own saves, is checked (no note)."""
    env = shop_env(where)
    with configured(env), Shop() as app, Store.from_application(app) as store:
        order_id, thread_id = paused_order(app, store)
        ship_and_finish(app, store, order_id, thread_id)

        report = store.verify(thread_id)
        checked = check_store(store)
        migrated = store.load(thread_id, snapshot_migrators={1: lambda document: document})

    assert report.ok, report.findings
    assert report.events == report.chained > 0
    assert report.notes == ()
    assert checked.ok
    assert migrated.version == report.events
    assert {"Order.Placed", "Order.Shipped"} <= {type_name for type_name, _ in checked.counts}


def test_the_review_queue_follows_the_applications_own_tables(where: str) -> None:
    """``ReviewQueue.from_application`` lists the shop's pause from the shop's own log
    (on PostgreSQL, its tables are named after the application), and adds only the
    queue's tables: no store's events or settings beside the shop's."""
    env = shop_env(where)
    with configured(env), RenamedShop() as app, Store.from_application(app) as store:
        _, thread_id = paused_order(app, store)
        before = tables(env)
        queue = ReviewQueue.from_application(app)
        with queue, queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
            pending = queue.pending()

    assert [(item.thread_id, item.reason) for item in pending] == [
        (thread_id, "manager approval needed")
    ]
    assert before == app_tables(env, RenamedShop)
    assert tables(env) - before <= QUEUE_TABLES


def test_the_command_line_opens_the_application_by_its_own_settings(where: str) -> None:
    """``--application shop_app:Shop`` reads the shop as its environment configures it,
    snapshotting off: its threads, its pause, its verified history and its migration
    check, creating no table at all."""
    env = shop_env(where)
    with configured(env), Shop() as app, Store.from_application(app) as store:
        _, thread_id = paused_order(app, store)
        before = tables(env)

        listed = cli("threads")
        reviews = cli("reviews")
        replayed = cli("replay", thread_id, "--verify")
        migrated = cli("migrate", "--check")

    for result in (listed, reviews, replayed, migrated):
        assert result.returncode == 0, result.stderr
    assert thread_id in listed.stdout
    assert "manager approval needed" in reviews.stdout
    assert "intact" in replayed.stdout
    assert "Order.Placed" in migrated.stdout
    assert tables(env) == before


def test_the_applications_writes_after_the_queue_followed_it_are_not_tampering(
    where: str,
) -> None:
    """Once the queue has followed the shop (and made its tables), the shop's normal
    writes, its own aggregate's and the thread's, still verify intact, through the API
    and the command line."""
    env = shop_env(where)
    with configured(env), Shop() as app, Store.from_application(app) as store:
        order_id, thread_id = paused_order(app, store)
        queue = ReviewQueue.from_application(app)
        with queue, queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
            ship_and_finish(app, store, order_id, thread_id)
            queue.wait_until_current(store, runner=runner)
            assert queue.pending() == ()
        report = store.verify(thread_id)
        replayed = cli("replay", thread_id, "--verify")

    assert report.ok, report.findings
    assert replayed.returncode == 0, replayed.stderr
    assert "intact" in replayed.stdout


def test_the_queue_of_an_application_opened_without_creating_tables_makes_its_own(
    where: str,
) -> None:
    """An application opened with ``CREATE_TABLE=n`` (as the command line opens it to
    read) still gets a queue that makes its own tables, as ``reviews --follow`` needs."""
    env = shop_env(where)
    with configured(env), Shop() as app, Store.from_application(app) as store:
        _, thread_id = paused_order(app, store)
    with (
        configured({**env, "CREATE_TABLE": "n"}),
        Shop() as reader,
        Store.from_application(reader) as store,
    ):
        queue = ReviewQueue.from_application(reader)
        with queue, queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
            assert [item.thread_id for item in queue.pending()] == [thread_id]


def test_the_command_line_refuses_store_options_with_an_application(tmp_path: Path) -> None:
    """``--application`` takes the application's own settings: a ``--store`` given
    with it is refused by name, and so is a name that is no application class; nothing
    is opened."""
    env = shop_env(str(tmp_path / "shop.db"))
    with configured(env):
        result = cli("threads", "--store", f"sqlite:///{tmp_path / 'other.db'}")
        not_one = cli("threads", application="shop_app:Order")
        missing = cli("threads", application="shop_app")
    assert result.returncode == not_one.returncode == missing.returncode == 2
    assert "--store cannot be given with it" in result.stderr
    assert "is not a subclass of covonaut_es.AgentApplication" in not_one.stderr
    assert "takes MODULE:CLASS" in missing.stderr
    assert not (tmp_path / "other.db").exists()
    assert not (tmp_path / "shop.db").exists()


_GIVEN = ("typed", "exported", "absent")
"""How ``--store`` or ``--application`` may be given: on the command line, by its
variable in the environment, or not at all."""


@pytest.mark.parametrize(("store", "application"), list(itertools.product(_GIVEN, _GIVEN)))
def test_what_is_typed_wins_over_the_environment(
    store: str, application: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of ``--store`` and ``--application`` typed, exported or absent: a typed one
    is read whatever the other's variable holds; both typed are refused; neither typed,
    the one variable set is read, and both set are refused naming the two variables.
    ``--application`` typed with ``$COVONAUT_ES_STORE`` exported was refused as though
    ``--store`` had been typed."""
    url, spec = "sqlite:///elsewhere.db", "shop_app:Shop"
    words = ["threads"]
    for how, option, variable, value in (
        (store, "--store", STORE_ENV, url),
        (application, "--application", APPLICATION_ENV, spec),
    ):
        monkeypatch.delenv(variable, raising=False)
        if how == "typed":
            words += [option, value]
        elif how == "exported":
            monkeypatch.setenv(variable, value)
    args = build_parser().parse_args(words)
    if store == application == "typed":
        with pytest.raises(UsageError, match="--store cannot be given with it"):
            application_spec(args)
    elif store == application == "exported":
        with pytest.raises(UsageError, match=rf"both \${STORE_ENV} and \${APPLICATION_ENV}"):
            application_spec(args)
    elif store == "typed" or (store == "exported" and application == "absent"):
        assert (application_spec(args), store_url(args)) == (None, url)
    elif application != "absent":
        assert application_spec(args) == spec
    else:
        with pytest.raises(UsageError, match="no store"):
            store_url(args)


def test_an_exported_store_leaves_a_typed_application_to_be_read(tmp_path: Path) -> None:
    """An operator whose shell exports ``$COVONAUT_ES_STORE`` lists an application's
    threads with ``--application``: it is read, and the store the variable names is
    neither refused nor created."""
    env = shop_env(str(tmp_path / "shop.db"))
    with configured(env), Shop() as app, Store.from_application(app) as store:
        _, thread_id = paused_order(app, store)
    with configured({**env, STORE_ENV: f"sqlite:///{tmp_path / 'other.db'}"}):
        listed = cli("threads")
    assert listed.returncode == 0, listed.stderr
    assert thread_id in listed.stdout
    assert not (tmp_path / "other.db").exists()


def test_a_queue_by_url_of_an_applications_store_names_the_way_to_open_it(
    tmp_path: Path,
) -> None:
    """``ReviewQueue(store.url)`` of a store made from an application (as the inbox's
    default queue would be) is refused with the call that opens it."""
    with (
        configured(shop_env(str(tmp_path / "shop.db"))),
        Shop() as app,
        Store.from_application(app) as store,
        pytest.raises(ConfigurationError) as info,
    ):
        ReviewQueue(store.url)
    assert "ReviewQueue.from_application(app)" in str(info.value)


@contextlib.contextmanager
def fresh_database(backend: str, postgres_url: str | None) -> Iterator[str]:
    """A new, empty database for one generated example."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield str(Path(directory) / "shop.db")
        return
    assert postgres_url is not None
    with postgres_database_of(postgres_url) as url:
        yield url


def check_configuration(
    where: str, application: type[Shop], *, snapshotting: bool, encrypted: bool
) -> None:
    """The invariants on one embedded configuration: the tools add no store beside the
    application, its own writes verify intact, and an event written over is found."""
    env = shop_env(where, snapshotting=snapshotting, encrypted=encrypted)
    with configured(env), application() as app, Store.from_application(app) as store:
        order_id, thread_id = paused_order(app, store)
        queue = ReviewQueue.from_application(app)
        with queue, queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
            assert [item.thread_id for item in queue.pending()] == [thread_id]
            ship_and_finish(app, store, order_id, thread_id)
        intact = store.verify(thread_id)
        assert tables(env) - app_tables(env, application) <= QUEUE_TABLES
        tamper(env, application)
        with application() as reopened, Store.from_application(reopened) as again:
            tampered = again.verify(thread_id)

    assert intact.ok, intact.findings
    assert intact.events == intact.chained
    assert [finding.version for finding in tampered.findings][:1] == [3]


_CONFIGURATIONS = {
    "application": st.sampled_from([Shop, RenamedShop]),
    "snapshotting": st.booleans(),
    "encrypted": st.booleans(),
}


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(**_CONFIGURATIONS)
def test_any_embedded_sqlite_configuration_keeps_one_store_and_finds_tampering(
    application: type[Shop], snapshotting: bool, encrypted: bool
) -> None:
    """Generated over SQLite configurations (snapshotting on or off, the application's
    name, encrypted or not): no parallel store, the application's own writes verify
    intact, and tampering is still found."""
    with fresh_database("sqlite", None) as where:
        check_configuration(where, application, snapshotting=snapshotting, encrypted=encrypted)


@pytest.mark.postgres
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(**_CONFIGURATIONS)
def test_any_embedded_postgres_configuration_keeps_one_store_and_finds_tampering(
    postgres_url: str, application: type[Shop], snapshotting: bool, encrypted: bool
) -> None:
    """As on SQLite, on PostgreSQL, where the application's name names its tables."""
    with fresh_database("postgres", postgres_url) as where:
        check_configuration(where, application, snapshotting=snapshotting, encrypted=encrypted)
