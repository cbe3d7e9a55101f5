"""The application's own types and versions, the eventsourcing way: transcodings
registered on the application, ``class_version`` with ``upcast_vN_vN+1`` methods, and
eventsourcing's own example application test case on an ``AgentApplication``, configured
by environment variables as an eventsourcing user configures it."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import json
import logging
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import msgspec
import psycopg
import pytest
from eventsourcing import utils
from eventsourcing.application import Application, Repository
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import JSONTranscoder, Mapper, StoredEvent, Transcoder, Transcoding
from eventsourcing.tests import application as es_application
from eventsourcing.tests.domain import BankAccount, EmailAddress
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import AgentApplication, Store, UnreadableEventError
from covonaut_es.audit import check_store
from covonaut_es.errors import (
    ConfigurationError,
    MissingUpcasterError,
    NewerSchemaError,
    SerializationError,
    StaleSnapshotError,
    UpcasterError,
)
from covonaut_es.migrations import schema_for
from covonaut_es.store import AggregateSnapshot
from covonaut_es.store._codec import codec_for, payload_type
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._own_snapshots import snapshot_class
from parcels import Parcels
from support import agent_on, answer, golden_database


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


GIVING_UP = """
from covonaut_es.errors import StaleSnapshotError


def _give_up(state: dict[str, Any]) -> None:
    raise StaleSnapshotError("grams cannot be converted")


Parcel.Registered.upcast_v1_v2 = staticmethod(_give_up)
"""
"""Appended to the parcels application: its ``Registered`` upcaster gives up on
version-1 data with a StaleSnapshotError, as though the event were a snapshot."""


def test_migrate_check_fails_on_an_event_whose_upcaster_raises_stale_snapshot(
    tmp_path: Path,
) -> None:
    """``migrate --check --application`` on the golden parcels, read by code whose
    event upcaster raises StaleSnapshotError, names each such event as a record that
    does not upgrade (an UpcasterError, as a load raises) and exits non-zero; it
    counted them as stale snapshots, to be rebuilt, and reported OK (helper-183)."""
    copy = tmp_path / "parcels.db"
    shutil.copy(GOLDEN / "own-v1" / "parcels.db", copy)
    code = tmp_path / "code"
    code.mkdir()
    parcels = Path(sys.modules[Parcels.__module__].__file__ or "")
    (code / "parcels.py").write_text(parcels.read_text() + GIVING_UP)
    manifest = json.loads((GOLDEN / "own-v1" / "manifest.json").read_text())
    command = ("migrate", "--check", "--application", "parcels:Parcels")
    result = subprocess.run(
        [sys.executable, "-m", "covonaut_es", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **os.environ,
            **sqlite_env(copy),
            "PYTHONPATH": os.pathsep.join([str(code), *sys.path]),
        },
    )
    assert result.returncode == 1, result.stdout + result.stderr
    failed = "(Parcel.Registered, schema v1): UpcasterError:"
    assert result.stdout.count(failed) == len(manifest["parcels"]), result.stdout
    assert "grams cannot be converted" in result.stdout
    assert "cannot be upgraded and will be rebuilt" not in result.stdout


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


@settings(max_examples=50, deadline=None)
@given(version=st.integers(1, 4), step=st.integers(1, 6))
def test_an_upcast_method_beyond_the_class_version_is_refused(version: int, step: int) -> None:
    """An ``upcast_vN_vN+1`` method for a step at or beyond the class's
    ``class_version`` (a version not raised with it) is a ConfigurationError naming
    the class, as the application opens; one below it is the class's upcaster."""
    upcast = staticmethod(lambda state: None)
    cls = type("Crated", (), {"class_version": version, f"upcast_v{step}_v{step + 1}": upcast})
    if step < version:
        assert step in schema_for(cls).upcasters
        return
    with pytest.raises(ConfigurationError, match=rf"{step} is not a step of Crated.*class_version"):
        schema_for(cls)


@settings(max_examples=50, deadline=None)
@given(
    version=st.integers(1, 4),
    step=st.integers(1, 6),
    attribute=st.one_of(
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=3),
        st.booleans(),
        st.binary(max_size=3),
        st.lists(st.integers(), max_size=2),
        st.tuples(st.integers()),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    ),
)
def test_an_upcast_attribute_that_is_not_callable_is_refused(
    version: int, step: int, attribute: object
) -> None:
    """An ``upcast_vN_vN+1`` attribute that is no method (a number, text, a list) is
    a ConfigurationError naming the class, the attribute and its type, as the
    application opens, for a step below the class's version and beyond it alike;
    it never waits for old data to be read."""
    name = f"upcast_v{step}_v{step + 1}"
    cls = type("Crated", (), {"class_version": version, name: attribute})
    named = rf"Crated\.{name} is not callable \(it is of type {type(attribute).__name__}\)"
    with pytest.raises(ConfigurationError, match=named):
        schema_for(cls)


@settings(max_examples=50, deadline=None)
@given(
    returned=st.one_of(
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        st.integers(),
        st.text(max_size=3),
        st.booleans(),
    )
)
def test_an_upcast_method_that_returns_a_value_is_refused(returned: object) -> None:
    """An ``upcast_vN_vN+1`` method changes the state in place: one that returns
    anything but None (the upgraded state, say, which would be dropped) is an
    UpcasterError naming the record and the method."""
    upcast = staticmethod(lambda state: returned)
    cls = type("Crated", (), {"class_version": 2, "upcast_v1_v2": upcast})
    named = r"record 7: the Crated upcaster for 1 -> 2 failed: .*Crated.upcast_v1_v2 returned a"
    with pytest.raises(UpcasterError, match=named):
        schema_for(cls).upgrade({"_v": 1}, where="record 7")


UPCAST: list[dict[str, Any]] = []
"""The states the upcasters of ``Bill.Raised`` were given."""


class Bill(Aggregate):
    """Issued at version 1 of its event, raised at version 3 of another."""

    class Raised(Aggregate.Event):
        class_version = 3
        amount: Decimal
        upcast_v1_v2 = staticmethod(UPCAST.append)
        upcast_v2_v3 = staticmethod(UPCAST.append)

    @event("Issued")
    def __init__(self, amount: Decimal) -> None:
        self.amount = amount

    @event(Raised)
    def raise_by(self, amount: Decimal) -> None:
        self.amount += amount


class Bills(AgentApplication):
    """The application the bills' stock one became."""

    aggregate_classes = (Bill,)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.decimals(places=2, min_value=-1000, max_value=1000), min_size=1, max_size=4))
def test_a_record_eventsourcings_own_mapper_wrote_is_named_as_such(amounts: list[Decimal]) -> None:
    """A record eventsourcing's stock mapper wrote (an application that became an
    AgentApplication), at any class version, is refused with a SerializationError saying
    so and what to do, before any upcaster runs: it keeps its version under
    "class_version", not "_v", and a version-3 record was called "schema version 0"
    and would have been upcast from 1 again."""
    UPCAST.clear()
    bill = Bill(amounts[0])
    for amount in amounts[1:]:
        bill.raise_by(amount)
    stock = Application[uuid.UUID]().mapper
    mapper = Bills().mapper
    for domain_event in bill.collect_events():
        record = stock.to_stored_event(domain_event)
        with pytest.raises(SerializationError) as refused:
            mapper.to_domain_event(record)
        message = str(refused.value)
        assert f"{type(domain_event).__qualname__} data was written by eventsourcing's" in message
        assert "docs/embedding.md" in message
        assert "schema version 0" not in message
    assert UPCAST == []


def test_the_stock_mapper_upcasts_a_thread_event_of_version_1() -> None:
    """eventsourcing's stock ``Mapper`` reads a thread event stored at version 1 through
    our upcaster (as an ``upcast_v1_v2`` method), as plain JSON values."""
    with golden_database(GOLDEN / "v1" / "threads.db") as conn:
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


# Versions of an aggregate, and its snapshots -------------------------------------------


def _times_ten(state: dict[str, Any]) -> None:
    state["weight"] = int(state["weight"]) * 10


def scaled(version: int, *, upcasters: bool, declared: bool) -> type[Aggregate]:
    """An aggregate at ``class_version`` ``version`` that holds a weight of ``grams``
    as ``grams * 10**version``: its events hold grams, so a replay is right at every
    version, and a snapshot of version ``v`` is right at ``w`` only once upcast, each
    step (``upcast_vN_vN+1``, when ``upcasters``) times ten. ``declared``: it declares
    an :class:`AggregateSnapshot`; else eventsourcing's stock snapshot holds it."""

    class Scaled(Aggregate):
        class_version = version
        weight: int

        if declared:

            class Snapshot(AggregateSnapshot):
                pass

        @event("Weighed")
        def __init__(self, grams: int) -> None:
            self.weight = grams * 10**version

        @event("Reweighed")
        def reweigh(self, grams: int) -> None:
            self.weight = grams * 10**version

    Scaled.__qualname__ = "Scaled"  # one topic at every version, importable by it
    for step in range(1, version) if upcasters else ():
        setattr(Scaled, f"upcast_v{step}_v{step + 1}", staticmethod(_times_ten))
    return Scaled


def scaled_app(cls: type[Aggregate], path: Path) -> AgentApplication:
    """An application snapshotting ``cls`` at its second event, on a SQLite file."""

    class ScaledApp(AgentApplication):
        aggregate_classes = (cls,)
        snapshotting_intervals: ClassVar[dict[type[Aggregate], int]] = {cls: 2}

    return ScaledApp(env=sqlite_env(path))


def run_as(cls: type[Aggregate], monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``cls`` the class its topic (and its events' topics) name, as a process
    running that code would: eventsourcing's stock snapshot imports its aggregate
    class by topic, and its topic caches refuse a second class under one topic."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "Scaled", cls, raising=False)

    def forgotten(topic: str) -> bool:
        return topic.startswith(f"{__name__}:") and "Scaled" in topic

    topics = {t: o for t, o in utils._topic_cache.items() if not forgotten(t)}
    types = {o: t for o, t in utils._type_cache.items() if not forgotten(t)}
    monkeypatch.setattr(utils, "_topic_cache", topics)
    monkeypatch.setattr(utils, "_type_cache", types)


VERSIONS = (1, 2, 3)


@pytest.mark.parametrize("declared", [False, True], ids=["stock", "declared"])
@pytest.mark.parametrize("upcasters", [True, False], ids=["upcasters", "no-upcasters"])
@pytest.mark.parametrize(("stored", "code"), list(itertools.product(VERSIONS, VERSIONS)))
def test_an_aggregates_snapshot_upcasts_or_is_refused_and_never_loads_wrong(
    stored: int,
    code: int,
    upcasters: bool,
    declared: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A snapshot taken at the aggregate's class_version ``stored``, read by code at
    ``code``: upcast by the aggregate's upcast methods and used when older, refused
    with NewerSchemaError (by a load and by migrate --check) when newer, and a version
    without its upcast methods stops the application from opening; what loads equals
    the aggregate's replay from its events."""
    path = tmp_path / "scaled.db"
    writer = scaled(stored, upcasters=True, declared=declared)
    run_as(writer, monkeypatch)
    app = scaled_app(writer, path)
    parcel = writer(3)
    parcel.reweigh(4)  # type: ignore[attr-defined]
    app.save(parcel)
    assert app.snapshots is not None and len(list(app.snapshots.get(parcel.id))) == 1
    app.close()

    monkeypatch.delattr(sys.modules[__name__], "Scaled")  # eventsourcing refuses a twin
    reader = scaled(code, upcasters=upcasters, declared=declared)
    run_as(reader, monkeypatch)
    if code > 1 and not upcasters:
        with pytest.raises(MissingUpcasterError, match=r"Scaled 1 -> 2.*upcast_vN_vN\+1"):
            scaled_app(reader, path)
        return
    app = scaled_app(reader, path)
    try:
        if stored > code:
            newer = f"schema version {stored}, but this code supports up to version {code}"
            with pytest.raises(NewerSchemaError, match=newer):
                app.repository.get(parcel.id)
            (failure,) = check_store(Store.from_application(app)).failures
            assert failure.error.startswith("NewerSchemaError:") and newer in failure.error
            return
        with caplog.at_level(logging.INFO, logger="covonaut_es"):
            loaded = app.repository.get(parcel.id)
        replayed = Repository(event_store=app.events).get(parcel.id)
        assert loaded.weight == replayed.weight == 4 * 10**code
        assert "passed over" not in caplog.text  # upcast and used, not rebuilt
        assert check_store(Store.from_application(app)).ok
    finally:
        app.close()


def test_a_declared_snapshot_from_before_aggregate_versions_reads_as_it_did() -> None:
    """A declared snapshot written before snapshots recorded their aggregate's
    class_version (its "_v" the snapshot class's, 1) reads as before for an aggregate at
    version 1; at a later version its state's version is unknown, so it is stale, to be
    passed over and the aggregate rebuilt."""
    legacy = msgspec.json.encode(
        {
            "timestamp": "2026-01-01T00:00:00Z",
            "topic": f"{__name__}:Scaled",
            "state": {
                "_created_on": "2026-01-01T00:00:00Z",
                "_modified_on": "2026-01-01T00:00:00Z",
                "weight": 40,
            },
            "_v": 1,
        }
    )
    for version in VERSIONS:
        snapshot_class = scaled_snapshot_class(version)
        codec = codec_for(snapshot_class)
        if version == 1:
            assert codec.decode(legacy, where="legacy")["state"]["weight"] == 40
            continue
        with pytest.raises(StaleSnapshotError, match="class_version, which is"):
            codec.decode(legacy, where="legacy")


def scaled_snapshot_class(version: int) -> type[AggregateSnapshot]:
    """The declared snapshot class of :func:`scaled` at ``version``, bound to it."""
    return snapshot_class(scaled(version, upcasters=True, declared=True))


@pytest.mark.parametrize("stale", [False, True], ids=["fails", "stale on purpose"])
def test_an_aggregate_upcaster_that_fails_names_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stale: bool
) -> None:
    """An aggregate's upcast method that fails on a stock snapshot, or raises
    ``StaleSnapshotError`` on purpose, passes the snapshot over at a load, as a declared
    one is (helper-221: the aggregate did not load), with a log line naming the record,
    the class and the step; migrate --check reports a failure as an UpcasterError and
    the stale snapshot as stale."""
    path = tmp_path / "scaled.db"
    writer = scaled(1, upcasters=True, declared=False)
    run_as(writer, monkeypatch)
    app = scaled_app(writer, path)
    parcel = writer(3)
    parcel.reweigh(4)  # type: ignore[attr-defined]
    app.save(parcel)
    app.close()
    monkeypatch.delattr(sys.modules[__name__], "Scaled")  # eventsourcing refuses a twin
    reader = scaled(2, upcasters=True, declared=False)

    def fails(state: dict[str, Any]) -> None:
        if stale:
            raise StaleSnapshotError("grams predate the new unit")
        state["weight"] = state["weight_g"]

    monkeypatch.setattr(reader, "upcast_v1_v2", staticmethod(fails))
    run_as(reader, monkeypatch)
    app = scaled_app(reader, path)
    try:
        failed = "grams predate the new unit" if stale else "failed: KeyError"
        named = rf"Snapshot' of stream .* at version 2: .*{failed}"
        with caplog.at_level(logging.INFO, logger="covonaut_es"):
            loaded = app.repository.get(parcel.id)
        assert loaded.version == parcel.version  # rebuilt from its events
        assert re.search(named, caplog.text), caplog.text
        report = check_store(Store.from_application(app))
        if stale:
            assert report.failures == [] and sum(report.stale_snapshots.values()) == 1
        else:
            (failure,) = report.failures
            assert failure.error.startswith("UpcasterError:")
    finally:
        app.close()


class MixedColor(enum.Enum):
    RED = "red"
    BLUE = 2


REFUSED_ANNOTATIONS = (
    str | datetime,
    str | date,
    datetime | date,
    MixedColor,
    list[str | datetime],
    dict[str, MixedColor | None],
)
"""Annotations msgspec refuses to decode, whatever the value."""


@settings(max_examples=50, deadline=None)
@given(
    annotation=st.sampled_from(REFUSED_ANNOTATIONS),
    name=st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True),
)
def test_a_field_msgspec_cannot_decode_is_named_with_its_class(annotation: Any, name: str) -> None:
    """An event field whose annotation msgspec cannot decode is a SerializationError
    naming the event class and the field, when its codec is made (before any save or
    read), not msgspec's bare TypeError naming neither."""
    cls = dataclasses.make_dataclass(
        "Shipped", [("when", int), (f"f_{name}", annotation)], bases=(Aggregate.Event,), frozen=True
    )
    with pytest.raises(
        SerializationError, match=rf"event Shipped: its field 'f_{name}' is annotated"
    ):
        payload_type(cls)


class Billed(Aggregate.Event):
    amount: Decimal


@pytest.mark.parametrize("amount", ["sNaN", "-sNaN", "sNaN12", "NaN"])
def test_a_decimal_that_is_not_equal_to_itself_is_refused_naming_its_field(amount: str) -> None:
    """A Decimal NaN, signalling or quiet, never reads back equal: its event is refused
    with an UnreadableEventError naming the field, not decimal.InvalidOperation."""
    billed = Billed(
        originator_id=uuid.uuid4(),
        originator_version=1,
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        amount=Decimal(amount),
    )
    with pytest.raises(UnreadableEventError) as refused:
        codec_for(Billed).encode(billed)
    assert (refused.value.event, refused.value.field) == ("Billed", "amount")


class _Meter(Aggregate):
    """An aggregate with an attribute named as the schema's version key, ``_v``."""

    _v: int
    count: int

    @event("Made")
    def __init__(self, n: int) -> None:
        self._v = n
        self.count = n

    @event("Bumped")
    def bump(self) -> None:
        self._v += 1
        self.count += 1


class _Gauge(_Meter):
    """The same, its snapshots declared, at a later version."""

    _v: int
    count: int
    class_version = 2

    class Snapshot(AggregateSnapshot):
        pass

    @event("Made")
    def __init__(self, n: int) -> None:  # annotated anew: its own, or a dataclass's
        self._v = n
        self.count = n

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state.setdefault("count", 0)


class _Gauges(AgentApplication):
    aggregate_classes = (_Meter, _Gauge)
    snapshotting_intervals: ClassVar[dict[type[Aggregate], int]] = {_Meter: 2, _Gauge: 2}


@pytest.mark.parametrize("cls", [_Meter, _Gauge], ids=["stock", "declared"])
def test_an_attribute_named_as_the_version_key_loads_from_a_snapshot_as_stored(
    tmp_path: Path, cls: type[_Meter]
) -> None:
    """An aggregate's own attribute ``_v`` comes back from its snapshot as its events
    make it: the snapshot's upgrade kept the version under that key and dropped it, so
    a stock snapshot loaded the aggregate without the attribute (helper-113)."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "a.db")}
    with contextlib.closing(_Gauges(env=env)) as app:
        made = cls(5)
        made.bump()
        app.save(made)
        assert list(app.snapshots.get(made.id))  # type: ignore[union-attr]
    with contextlib.closing(_Gauges(env=env)) as app:
        replayed = Repository(event_store=app.events).get(made.id)
        loaded = app.repository.get(made.id)
        assert vars(loaded)["_v"] == vars(replayed)["_v"] == 6
