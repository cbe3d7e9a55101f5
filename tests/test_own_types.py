"""The application's own types and versions, the eventsourcing way: transcodings
registered on the application, ``class_version`` with ``upcast_vN_vN+1`` methods, and
eventsourcing's own example application test case on an ``AgentApplication``, configured
by environment variables as an eventsourcing user configures it."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import psycopg
import pytest
from eventsourcing.application import Repository
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import JSONTranscoder, Mapper, StoredEvent, Transcoder, Transcoding
from eventsourcing.tests import application as es_application
from eventsourcing.tests.domain import BankAccount, EmailAddress

from covonaut_es import AgentApplication, Store, UnreadableEventError
from covonaut_es.errors import ConfigurationError, MissingUpcasterError
from covonaut_es.store._mapper import MsgspecMapper
from parcels import Parcels
from support import agent_on, answer


class AgentBankAccounts(AgentApplication, es_application.BankAccounts):
    """eventsourcing's example application, holding agent threads too."""

    aggregate_classes = (BankAccount,)


@pytest.fixture(autouse=True, scope="class")
def _postgres_server(request: pytest.FixtureRequest) -> None:
    """Give the PostgreSQL test class the session's server (unittest classes take no
    fixture arguments)."""
    if request.cls is not None and getattr(request.cls, "BACK_END", None) == "postgres":
        request.cls.server_url = request.getfixturevalue("postgres_url")


class EnvironmentConfigured(es_application.ExampleApplicationTestCase):
    """eventsourcing's ``ExampleApplicationTestCase``, its ``BankAccounts`` an
    ``AgentApplication``, persistence set in ``os.environ`` for each test."""

    __test__ = False
    BACK_END: ClassVar[str]
    server_url: ClassVar[str]

    def setUp(self) -> None:
        saved_env, saved_app = dict(os.environ), es_application.BankAccounts
        self.addCleanup(os.environ.update, saved_env)
        self.addCleanup(os.environ.clear)  # runs first: cleanups are last in, first out
        self.addCleanup(setattr, es_application, "BankAccounts", saved_app)
        es_application.BankAccounts = AgentBankAccounts  # the name the test case uses
        os.environ.update(self.persistence_env())

    def persistence_env(self) -> dict[str, str]:
        if self.BACK_END == "sqlite":
            directory = tempfile.mkdtemp(prefix="covonaut-bank-")
            self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
            return {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": f"{directory}/bank.db",
            }
        name = f"bank_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        self.addCleanup(self._drop, name)
        return user_env(self.server_url.rsplit("/", 1)[0] + f"/{name}")

    def _drop(self, name: str) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def test_the_agent_threads_live_beside_the_accounts(self) -> None:
        """An agent's thread and an account share the application's store and log."""
        app = AgentBankAccounts()
        try:
            account_id = app.open_account("Alice", "alice@example.com")
            store = Store.from_application(app)
            agent_on(store, "t1", [answer("Balance noted.")]).run("Check the balance.")
            assert app.get_account(account_id).email_address == EmailAddress("alice@example.com")
            assert store.load("t1").version > 1
        finally:
            app.close()


class TestBankAccountsOnSQLite(EnvironmentConfigured):
    __test__ = True
    BACK_END = "sqlite"
    # Named by PERSISTENCE_MODULE=eventsourcing.sqlite, the library's subclass of its
    # factory, whose recorder anchors threads' heads.
    expected_factory_topic = "covonaut_es.store._backends.sqlite:Factory"


@pytest.mark.postgres
class TestBankAccountsOnPostgres(EnvironmentConfigured):
    __test__ = True
    BACK_END = "postgres"
    expected_factory_topic = "covonaut_es.store._backends.postgres:Factory"


GOLDEN = Path(__file__).parent / "fixtures" / "golden"


class Plain(AgentApplication):
    """eventsourcing's bank account without the example's transcoding."""

    aggregate_classes = (BankAccount,)


def sqlite_env(path: Path) -> dict[str, str]:
    """The environment an eventsourcing user sets for a SQLite file."""
    return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}


def user_env(url: str) -> dict[str, str]:
    """The environment an eventsourcing user sets for a SQLite file or a PostgreSQL
    database, from its URL."""
    if url.startswith("sqlite:///"):
        return sqlite_env(Path(url.removeprefix("sqlite:///")))
    parts = urlsplit(url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": parts.path.lstrip("/"),
        "POSTGRES_HOST": parts.hostname or "",
        "POSTGRES_PORT": str(parts.port),
        "POSTGRES_USER": parts.username or "",
        "POSTGRES_PASSWORD": parts.password or "",
    }


def test_a_type_without_its_transcoding_is_refused_naming_the_field(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``EmailAddressAsStr`` the account's opening holds an ``EmailAddress`` its
    ``str`` field would not read back: refused, typed, and nothing is stored."""
    for name, value in user_env(shared_url).items():
        monkeypatch.setenv(name, value)
    app = Plain()
    try:
        with pytest.raises(UnreadableEventError) as raised:
            app.save(BankAccount.open("Alice", "alice@example.com"))
        assert (raised.value.event, raised.value.field) == ("BankAccount.Opened", "email_address")
        assert app.recorder.max_notification_id() in (None, 0)
    finally:
        app.close()


class Point:
    """A value type msgspec does not encode, equal by value."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and other.x == self.x

    def __hash__(self) -> int:
        return hash(self.x)


class Map(Aggregate):
    @event("Marked")
    def mark(self, where: Point) -> None:
        self.where = where


class Maps(AgentApplication):
    aggregate_classes = (Map,)


def test_a_value_of_a_type_nothing_encodes_is_a_typed_error(tmp_path: Path) -> None:
    """A value msgspec cannot encode and no transcoding names is refused, naming the
    field and the type, before anything is stored."""
    app = Maps(env=sqlite_env(tmp_path / "maps.db"))
    try:
        chart = Map()
        app.save(chart)
        chart.mark(Point(1))
        with pytest.raises(UnreadableEventError) as raised:
            app.save(chart)
        assert (raised.value.field, raised.value.found) == ("where", "Point")
        assert app.repository.get(chart.id).version == 1
    finally:
        app.close()


class PointAsList(Transcoding):
    type = Point
    name = "point"

    def encode(self, obj: Point) -> list[int]:
        return [obj.x]

    def decode(self, data: list[int]) -> Point:
        return Point(data[0])


class TranscodedMaps(Maps):
    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        transcoder.register(PointAsList())


def test_a_registered_transcoding_carries_a_type_of_its_own(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its transcoding registered on the application, the same value is stored in
    eventsourcing's tagged form and read back as itself."""
    for name, value in user_env(shared_url).items():
        monkeypatch.setenv(name, value)
    app = TranscodedMaps()
    try:
        chart = Map()
        chart.mark(Point(7))
        app.save(chart)
        where = app.repository.get(chart.id).where
        assert isinstance(where, Point) and where.x == 7
        (record,) = app.recorder.select_events(chart.id, gt=1)
        assert b'"where":{"_type_":"point","_data_":[7]}' in record.state
    finally:
        app.close()


def test_the_mapper_takes_transcodings_from_a_json_transcoder_only() -> None:
    """``transcoder=`` as eventsourcing passes it; another kind is a typed refusal."""
    MsgspecMapper(transcoder=JSONTranscoder())
    with pytest.raises(ConfigurationError, match="JSONTranscoder"):
        MsgspecMapper(transcoder=JsonTranscoderOfAnotherKind())


class JsonTranscoderOfAnotherKind(Transcoder):
    """A transcoder that is not a ``JSONTranscoder``."""

    def encode(self, obj: Any) -> bytes:
        return b""

    def decode(self, data: bytes) -> Any:
        return None


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def golden_parcels(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The environment of an application holding the golden parcels as version-1 code
    stored them: a copy of the fixture's SQLite file, or its rows inserted unchanged into
    a new PostgreSQL database (the fixture stays as it is)."""
    copy = tmp_path / "parcels.db"
    shutil.copy(GOLDEN / "own-v1" / "parcels.db", copy)
    if request.param == "sqlite":
        return sqlite_env(copy)
    env = user_env(str(request.getfixturevalue("postgres_database")))
    with sqlite3.connect(copy) as golden:
        rows = golden.execute(
            "SELECT originator_id, originator_version, topic, state"
            " FROM stored_events ORDER BY rowid"
        ).fetchall()
    app = Parcels(env=env)
    try:
        app.recorder.insert_events(
            [StoredEvent(uuid.UUID(str(i)), v, topic, state) for i, v, topic, state in rows]
        )
    finally:
        app.close()
    return env


def test_version_1_parcels_read_through_their_upcasters(
    golden_parcels: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parcels stored in grams by version-1 code read as kilograms once their events are
    version 2, upcast by their ``upcast_v1_v2`` methods; new events are written at v2."""
    for name, value in golden_parcels.items():
        monkeypatch.setenv(name, value)
    manifest = json.loads((GOLDEN / "own-v1" / "manifest.json").read_text())
    app = Parcels()
    try:
        for parcel_id, stored in manifest["parcels"].items():
            parcel = app.repository.get(uuid.UUID(parcel_id))
            assert parcel.sender == stored["sender"]
            assert parcel.weight_kg == Decimal(stored["weights_grams"][-1]) / 1000
            assert parcel.version == len(stored["weights_grams"])
        parcel.weigh(Decimal("0.5"))
        app.save(parcel)
        assert app.repository.get(parcel.id).weight_kg == Decimal("0.5")
        (newest,) = app.recorder.select_events(parcel.id, desc=True, limit=1)
        assert b'"_v":2' in newest.state
    finally:
        app.close()


class Crate(Aggregate):
    class Packed(Aggregate.Created):
        class_version = 3
        label: str

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["label"] = state.pop("name")

    @event(Packed)
    def __init__(self, label: str) -> None:
        self.label = label


class Crates(AgentApplication):
    aggregate_classes = (Crate,)


def test_a_version_without_its_upcast_method_fails_when_the_application_opens(
    tmp_path: Path,
) -> None:
    """A ``class_version`` of 3 with no ``upcast_v2_v3`` stops the application from
    opening, naming the class and the step, before any data is read."""
    with pytest.raises(MissingUpcasterError, match=r"Crate.Packed 2 -> 3.*upcast_vN_vN\+1"):
        Crates(env=sqlite_env(tmp_path / "crates.db"))


def test_the_stock_mapper_upcasts_a_thread_event_of_version_1() -> None:
    """eventsourcing's stock ``Mapper`` reads a thread event stored at version 1 through
    our upcaster (as an ``upcast_v1_v2`` method), as plain JSON values."""
    with sqlite3.connect(GOLDEN / "v1" / "threads.db") as conn:
        row = conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "WHERE topic = ? AND CAST(state AS TEXT) LIKE ? LIMIT 1",
            ("covonaut.thread.MessageAppended", '%"usage":{%'),
        ).fetchone()
    record = StoredEvent(uuid.UUID(row[0]), row[1], row[2], row[3])
    stock = Mapper(transcoder=JSONTranscoder())
    read = stock.to_domain_event(record)
    assert read.message["usage"] == {"input_tokens": 10, "output_tokens": 1}  # type: ignore[attr-defined]
    assert "usage" not in vars(read)


def test_the_stock_repository_rebuilds_a_thread(tmp_path: Path) -> None:
    """eventsourcing's own ``Repository`` on the application's event store rebuilds a
    thread to the state the library loads."""
    app = Plain(env=sqlite_env(tmp_path / "bank.db"))
    try:
        store = Store.from_application(app)
        agent_on(store, "t1", [answer("Hello.")]).run("Hi")
        thread = store.load("t1")
        rebuilt = Repository(event_store=app.events).get(thread.id)
        assert (rebuilt.version, rebuilt.messages) == (thread.version, thread.messages)
    finally:
        app.close()
