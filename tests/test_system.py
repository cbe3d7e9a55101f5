"""Agent applications in an eventsourcing ``System``, configured by environment variables
as an eventsourcing user configures one: a leader, a process application following it
under the stock runners, a follower that is no agent application, the stock repository,
and snapshots of the application's own aggregates."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from functools import singledispatchmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import UUID

import pytest
from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    ProcessingEvent,
    Repository,
)
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import EventStore
from eventsourcing.system import (
    MultiThreadedRunner,
    NewMultiThreadedRunner,
    NewSingleThreadedRunner,
    ProcessApplication,
    Runner,
    SingleThreadedRunner,
    System,
)
from eventsourcing.utils import get_topic
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import (
    AgentApplication,
    AgentThread,
    SerializationError,
    Store,
    create_cipher_key,
)
from covonaut_es.errors import ConfigurationError
from covonaut_es.store import AggregateSnapshot, event_mapper
from covonaut_es.store._chain import UNCHAINED, chain_in
from embedded_system import SYSTEM, ApprovedByReviewer, Payment, Payments, sqlite_env

TESTS = Path(__file__).parent
CIPHER_KEY = create_cipher_key()
WAIT = 30.0  # seconds a multi-threaded follower may take to catch up, at most


@pytest.fixture(
    params=[
        "eventsourcing-sqlite",
        "store-sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def configured(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """eventsourcing's settings in the environment, for eventsourcing's SQLite module,
    the store's SQLite back end, or eventsourcing's PostgreSQL module."""
    if request.param == "postgres":
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(str(request.getfixturevalue("postgres_database")))
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": str(params["dbname"]),
            "POSTGRES_HOST": str(params["host"]),
            "POSTGRES_PORT": str(params.get("port", "5432")),
            "POSTGRES_USER": str(params.get("user", "")),
            "POSTGRES_PASSWORD": str(params.get("password", "")),
        }
    else:
        env = sqlite_env(tmp_path)
        if request.param == "store-sqlite":
            env["PERSISTENCE_MODULE"] = "covonaut_es.store._backends.sqlite"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def caught_up(runner: Runner[UUID]) -> ApprovedByReviewer:
    """The follower, once it has processed everything its leader recorded."""
    leader, follower = runner.get(Payments), runner.get(ApprovedByReviewer)
    deadline = time.monotonic() + WAIT
    while follower.recorder.max_tracking_id(leader.name) != leader.recorder.max_notification_id():
        assert time.monotonic() < deadline, "the follower did not catch up"
        time.sleep(0.01)
    return follower


@pytest.mark.parametrize(
    "runner_class",
    [SingleThreadedRunner, MultiThreadedRunner, NewSingleThreadedRunner, NewMultiThreadedRunner],
)
def test_a_process_application_follows_an_agent_application(
    configured: dict[str, str], runner_class: type[Runner[UUID]]
) -> None:
    """Under each stock runner, the follower counts every approval once with its types,
    and the threads on both sides keep intact chains, the follower's sealed as its
    policy collected them."""
    runner = runner_class(SYSTEM)
    runner.start()
    try:
        payments = runner.get(Payments)
        first = payments.request("acme", Decimal("120.50"))
        second = payments.request("globex", Decimal("0.10"))
        payments.approve(first, "maria")
        payments.approve(second, "maria")
        approvals = caught_up(runner)
        total = approvals.total("maria")
        assert (total.count, total.total) == (2, Decimal("120.60"))
        assert type(total.total) is Decimal
        with Store.from_application(approvals) as ledger:
            notes = [m.content for m in ledger.state_at("ledger").messages]
            assert notes == [
                f"maria approved 120.50 ({first})",
                f"maria approved 0.10 ({second})",
            ]
            report = ledger.verify("ledger")
            assert report.ok, report.findings
            assert report.notes == ()  # its head anchored by the follower's recorder
            stream = ledger.load("ledger").id
        records = approvals.recorder.select_events(stream)
        assert all(chain_in(approvals.mapper.plain_payload(r)) for r in records)  # sealed
        with Store.from_application(payments) as reviews:
            assert reviews.verify(f"review-{first}").ok
    finally:
        runner.stop()


class FollowsFirst(ProcessApplication[UUID], AgentApplication):
    """A follower with the process application's bases before AgentApplication."""

    aggregate_classes = (Payment,)
    approved: ClassVar[list[tuple[str, Decimal]]] = []

    @singledispatchmethod
    def policy(self, domain_event: Any, processing_event: ProcessingEvent[UUID]) -> None:
        """Nothing but approvals."""

    @policy.register
    def _(self, domain_event: Payment.Approved, processing_event: ProcessingEvent[UUID]) -> None:
        self.approved.append((domain_event.reviewer, domain_event.amount))


def test_the_bases_may_come_in_either_order() -> None:
    """A process application listing AgentApplication after ProcessApplication follows
    an agent application too."""
    FollowsFirst.approved.clear()
    runner: SingleThreadedRunner[UUID] = SingleThreadedRunner(System([[Payments, FollowsFirst]]))
    runner.start()
    try:
        payments = runner.get(Payments)
        payments.approve(payments.request("acme", Decimal("3.30")), "li")
    finally:
        runner.stop()
    assert FollowsFirst.approved == [("li", Decimal("3.30"))]


class Note(Aggregate):
    """One of a leader's aggregates."""

    @event("Written")
    def __init__(self, text: str) -> None:
        self.text = text


class Memo(Aggregate):
    """Another of a leader's aggregates."""

    @event("Filed")
    def __init__(self, text: str) -> None:
        self.text = text


class Tally(Aggregate):
    """A third, the one every follower below lists."""

    @event("Counted")
    def __init__(self, text: str) -> None:
        self.text = text


class Desk(AgentApplication):
    """A leader storing the events of three aggregate classes."""

    aggregate_classes = (Note, Memo, Tally)


LEADERS_CLASSES = {"note": Note, "memo": Memo, "tally": Tally}


def keep_text(self: Any, domain_event: Any, processing_event: ProcessingEvent[UUID]) -> None:
    """A policy keeping the text of every event it is given."""
    self.seen.append(domain_event.text)


@functools.cache
def reader_of(listed: tuple[type, ...], *, agent_first: bool) -> type[Any]:
    """A follower listing ``listed``, with AgentApplication before or after
    ProcessApplication in its bases, whose policy keeps every event it is given (one
    class each, as eventsourcing registers each class's topic once)."""
    bases = (AgentApplication, ProcessApplication)
    name = "_".join(["Reader", *(cls.__name__ for cls in listed), str(agent_first)])
    body = {"aggregate_classes": listed, "seen": [], "policy": keep_text, "__qualname__": name}
    return type(name, bases if agent_first else bases[::-1], body)


@settings(max_examples=30, deadline=None)
@given(
    saves=st.lists(st.sampled_from(sorted(LEADERS_CLASSES)), min_size=1, max_size=6),
    listed=st.sets(st.sampled_from(["note", "memo"])),
    agent_first=st.booleans(),
)
def test_a_follower_passes_over_the_leaders_records_of_classes_it_does_not_list(
    saves: list[str], listed: set[str], agent_first: bool
) -> None:
    """A follower listing some of its leader's aggregate classes is given the events of
    those, in order, and passes the others by: the leader's saves never fail (under a
    single-threaded runner they run the follower), and it follows to the log's end.
    Refused, the first record of a class it did not list stopped it there for good
    and failed every later save of the leader, though each was stored."""
    classes = (Tally, *(LEADERS_CLASSES[name] for name in sorted(listed)))
    reader = reader_of(classes, agent_first=agent_first)
    reader.seen.clear()
    runner: SingleThreadedRunner[UUID] = SingleThreadedRunner(System([[Desk, reader]]))
    runner.start()
    try:
        desk = runner.get(Desk)
        for number, name in enumerate(saves):
            desk.save(LEADERS_CLASSES[name](f"{name} {number}"))
        expected = [f"{n} {i}" for i, n in enumerate(saves) if LEADERS_CLASSES[n] in classes]
        assert runner.get(reader).seen == expected
    finally:
        runner.stop()


class Warnings(logging.Handler):
    """The messages of the warnings logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@settings(max_examples=30, deadline=None)
@given(
    tallies=st.integers(1, 5),
    retitled=st.dictionaries(st.integers(0, 4), st.sampled_from(["no class", "unlisted"])),
    agent_first=st.booleans(),
)
def test_a_follower_warns_of_each_record_it_passes_over(
    tallies: int, retitled: dict[int, str], agent_first: bool
) -> None:
    """A leader's rows whose topics a database writer changed, to one that names no
    class or to one of a class the follower does not list, are passed over with a
    warning naming the first notification of each such topic, and every other record
    reaches the policy; the follower follows to the log's end. Filtered in the
    database's select, they were passed over unseen (helper-183)."""
    retitled = {row: kind for row, kind in retitled.items() if row < tallies}
    topics = {
        row: f"hostile:Gone{row}" if kind == "no class" else get_topic(Note.Written)
        for row, kind in retitled.items()
    }
    reader = reader_of((Tally,), agent_first=agent_first)
    reader.seen.clear()
    warnings, log = Warnings(), logging.getLogger("covonaut_es")
    with tempfile.TemporaryDirectory() as directory:
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": f"{directory}/reader.db",
            "DESK_SQLITE_DBNAME": f"{directory}/desk.db",
        }
        desk = Desk(env=env)
        desk.save(*(Tally(f"tally {row}") for row in range(tallies)))
        desk.close()
        with contextlib.closing(sqlite3.connect(env["DESK_SQLITE_DBNAME"])) as db, db:
            for row, topic in topics.items():
                update = "UPDATE stored_events SET topic = ? WHERE rowid = ?"
                assert db.execute(update, (topic, row + 1)).rowcount == 1
        runner: SingleThreadedRunner[UUID] = SingleThreadedRunner(System([[Desk, reader]]), env=env)
        log.addHandler(warnings)
        runner.start()
        try:
            desk = runner.get(Desk)
            desk.save(Tally("woken"))  # the follower pulls what its leader holds
            kept = [f"tally {row}" for row in range(tallies) if row not in retitled]
            assert runner.get(reader).seen == [*kept, "woken"]
            position = runner.get(reader).recorder.max_tracking_id(desk.name)
            assert position == desk.recorder.max_notification_id()
        finally:
            runner.stop()
            log.removeHandler(warnings)
    named = {topic: min(r for r in topics if topics[r] == topic) + 1 for topic in topics.values()}
    assert len(warnings.messages) == len(named), warnings.messages
    for topic, notification in named.items():
        assert any(
            f"notification {notification}," in message and repr(topic) in message
            for message in warnings.messages
        ), (topic, warnings.messages)


class NotesOnly(AgentApplication, ProcessApplication[UUID]):
    """A follower listing two of the leader's classes and following one's topic."""

    aggregate_classes = (Note, Tally)
    follow_topics: ClassVar[list[str]] = [get_topic(Note.Written)]
    seen: ClassVar[list[str]] = []
    policy = keep_text


def test_a_follower_that_names_its_topics_keeps_them() -> None:
    """A follower naming the topics it follows (eventsourcing's ``follow_topics``) is
    given those only, as eventsourcing gives them."""
    NotesOnly.seen.clear()
    runner: SingleThreadedRunner[UUID] = SingleThreadedRunner(System([[Desk, NotesOnly]]))
    runner.start()
    try:
        runner.get(Desk).save(Note("kept"), Tally("not followed"), Memo("not listed"))
        assert NotesOnly.seen == ["kept"]
    finally:
        runner.stop()


class StockAudit(ProcessApplication[UUID]):
    """A follower that is no agent application: it reads the leader's events with
    ``event_mapper``."""

    seen: ClassVar[list[Any]] = []

    def follow(self, name: str, log: Any) -> None:
        super().follow(name, log)
        self.mappers[name] = event_mapper(self.env, name=name, aggregate_classes=(Payment,))

    @singledispatchmethod
    def policy(self, domain_event: Any, processing_event: ProcessingEvent[UUID]) -> None:
        self.seen.append(domain_event)


def test_a_follower_without_the_mapper_reads_typed_events() -> None:
    """A stock follower given event_mapper gets the leader's events and the threads'
    as their classes, with datetimes, decimals and enums in their types."""
    StockAudit.seen.clear()
    runner: SingleThreadedRunner[UUID] = SingleThreadedRunner(System([[Payments, StockAudit]]))
    runner.start()
    try:
        payments = runner.get(Payments)
        payments.approve(payments.request("acme", Decimal("7.25")), "li")
    finally:
        runner.stop()
    kinds = [type(e).__qualname__ for e in StockAudit.seen]
    assert kinds == [
        "Payment.Requested",
        "AgentThread.Started",
        "AgentThread.MessageAppended",
        "Payment.Approved",
        "AgentThread.Steered",
    ]
    requested, started, appended, approved, _ = StockAudit.seen
    assert requested.amount == Decimal("7.25") and type(requested.amount) is Decimal
    assert approved.timestamp.tzinfo is not None
    assert appended.message.role.value == "user" and type(started.timestamp) is type(
        approved.timestamp
    )


def test_event_mapper_refuses_a_type_it_was_not_given(configured: dict[str, str]) -> None:
    """A record of an aggregate class the reader did not list is refused, naming its
    topic; nothing is imported."""
    payments = Payments()
    payments.request("acme", Decimal("1"))
    (record, *_) = payments.recorder.select_notifications(start=None, limit=1)
    with pytest.raises(SerializationError, match=r"Payment\.Requested"):
        event_mapper(os.environ, name=payments.name).to_domain_event(record)
    payments.close()


def test_the_stock_repository_rebuilds_a_thread(configured: dict[str, str]) -> None:
    """eventsourcing's own Repository, on a stock application's recorder of the same
    database, rebuilds a thread equal to the one stored, through event_mapper."""

    class Reader(Application[UUID]):
        name = Payments.name  # the same settings, so the same tables

    payments = Payments()
    payment_id = payments.request("acme", Decimal("2"))
    payments.approve(payment_id, "li")
    with Store.from_application(payments) as threads:
        stored = threads.load(f"review-{payment_id}")
    reader = Reader()
    events = EventStore(event_mapper(os.environ, name=Payments.name), reader.recorder)
    rebuilt = Repository(event_store=events).get(stored.id)
    assert isinstance(rebuilt, AgentThread) and rebuilt.state == stored.state
    reader.close()
    payments.close()


# Snapshots of the application's own aggregates ---------------------------------------


def test_own_aggregates_are_snapshotted_as_eventsourcing_does(configured: dict[str, str]) -> None:
    """With snapshotting_intervals, a payment is snapshotted at its second event, its
    state in its types, and loads equal to its replay; take_snapshot works too."""
    payments = Payments()
    payment_id = payments.request("acme", Decimal("99.95"))
    payments.approve(payment_id, "maria")
    assert payments.snapshots is not None
    (snapshot,) = payments.snapshots.get(payment_id)
    assert type(snapshot).__qualname__ == "Payment.Snapshot"
    assert (
        snapshot.state["amount"] == Decimal("99.95") and type(snapshot.state["amount"]) is Decimal
    )
    loaded = payments.repository.get(payment_id)
    replayed = Repository(event_store=payments.events).get(payment_id)
    assert vars(loaded) == vars(replayed)
    payments.take_snapshot(payment_id, version=1)
    assert [s.originator_version for s in payments.snapshots.get(payment_id)] == [1, 2]
    payments.close()


def test_own_snapshots_are_read_back_compressed_and_encrypted(
    configured: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With eventsourcing's compressor and cipher configured, a payment's snapshot is
    read back and used; one whose stored bytes were altered is passed over."""
    monkeypatch.setenv("COMPRESSOR_TOPIC", "eventsourcing.compressor:ZlibCompressor")
    monkeypatch.setenv("CIPHER_TOPIC", "eventsourcing.cipher:AESCipher")
    monkeypatch.setenv("CIPHER_KEY", create_cipher_key())
    payments = Payments()
    payment_id = payments.request("acme", Decimal("5.50"))
    payments.approve(payment_id, "maria")
    assert payments.snapshots is not None
    (snapshot,) = payments.snapshots.get(payment_id)
    assert snapshot.state["approved_by"] == "maria"

    recorder = payments.snapshots.recorder
    (record,) = recorder.select_events(payment_id)
    state = bytearray(record.state)
    state[-1] ^= 1
    altered = dataclasses.replace(record, originator_version=3, state=bytes(state))
    recorder.insert_events([altered])
    assert [s.originator_version for s in payments.snapshots.get(payment_id)] == [2]
    assert payments.repository.get(payment_id).approved_by == "maria"
    payments.close()


class Unannotated(Aggregate):
    """An aggregate whose class annotates nothing, yet declares a typed snapshot class."""

    class Snapshot(AggregateSnapshot):
        pass

    @event("Made")
    def __init__(self, name: str) -> None:
        self.name = name


class PartlyAnnotated(Aggregate):
    """An aggregate with an attribute its class does not annotate."""

    name: str

    class Snapshot(AggregateSnapshot):
        """Its snapshots."""

    @event("Made")
    def __init__(self, name: str) -> None:
        self.name = name
        self.nickname = name[:2]


def test_snapshotting_an_aggregate_without_annotations_is_refused_at_construction() -> None:
    """snapshotting_intervals naming a class that declares a typed snapshot class but
    annotates nothing, or one not listed, is refused when the application is made,
    saying what to do."""

    class Bare(AgentApplication):
        aggregate_classes = (Unannotated,)
        snapshotting_intervals: ClassVar[dict[type, int]] = {Unannotated: 1}

    class Unlisted(AgentApplication):
        snapshotting_intervals: ClassVar[dict[type, int]] = {Payment: 1}

    with pytest.raises(
        ConfigurationError, match=r"Unannotated, whose class annotates none of its attributes"
    ):
        Bare()
    with pytest.raises(ConfigurationError, match=r"Payment.*aggregate_classes"):
        Unlisted()


def test_an_attribute_without_annotation_is_refused_before_its_events_are_stored() -> None:
    """A save after which a snapshot would be due, of an aggregate with an attribute its
    class does not annotate, fails naming it, and stores nothing."""

    class Partly(AgentApplication):
        aggregate_classes = (PartlyAnnotated,)
        snapshotting_intervals: ClassVar[dict[type, int]] = {PartlyAnnotated: 1}

    app = Partly()
    aggregate = PartlyAnnotated("maria")
    with pytest.raises(SerializationError, match=r"\['nickname'\].*annotate them"):
        app.save(aggregate)
    with pytest.raises(AggregateNotFoundError):
        app.repository.get(aggregate.id)
    app.close()


class Counter(Aggregate):
    """An aggregate of an eventsourcing application, annotating nothing, snapshotted as
    eventsourcing snapshots it (no ``Snapshot`` class of ours)."""

    @event("Started")
    def __init__(self, name: str) -> None:
        self.name, self.count = name, 0

    @event("Counted")
    def count_one(self) -> None:
        self.count += 1


@settings(max_examples=10, deadline=None)
@given(interval=st.integers(1, 3), counts=st.integers(0, 6))
def test_an_aggregate_snapshotted_as_eventsourcing_does_needs_no_annotations(
    interval: int, counts: int
) -> None:
    """An existing eventsourcing application moved onto AgentApplication keeps its
    stock snapshots of aggregates that annotate nothing: every save at a snapshot's
    interval is stored (each was refused for the annotations a declared snapshot
    needs: helper-221), and the aggregate loads as it was saved."""

    class Counters(AgentApplication):
        aggregate_classes = (Counter,)
        snapshotting_intervals: ClassVar[dict[type, int]] = {Counter: interval}

    app = Counters()
    try:
        counter = Counter("visits")
        app.save(counter)
        for _ in range(counts):
            counter.count_one()
            app.save(counter)
        loaded = app.repository.get(counter.id)
        assert (loaded.name, loaded.count, loaded.version) == ("visits", counts, counts + 1)
        assert app.snapshots is not None
        taken = list(app.snapshots.get(counter.id))
        assert len(taken) == (counts + 1) // interval
    finally:
        app.close()


if TYPE_CHECKING:
    from decimal import Decimal as OnlyWhenChecked  # not there when the code runs


class Refund(Aggregate):
    """An aggregate whose event annotates a type imported for the type checker only."""

    @event("Asked")
    def __init__(self, amount: OnlyWhenChecked) -> None:
        self.amount = amount


@pytest.mark.parametrize("classes", [("shop:Order",), "shop:Order", 3, (Payment, None)], ids=repr)
def test_aggregate_classes_that_are_no_classes_are_refused_naming_them(classes: object) -> None:
    """aggregate_classes holding a topic, or being one, or no iterable, is refused when
    the application is made, saying what it holds (an AttributeError before)."""
    listed = type("Listed", (AgentApplication,), {"aggregate_classes": classes})
    with pytest.raises(ConfigurationError, match=r"Listed\.aggregate_classes"):
        listed()


def test_an_event_annotation_that_does_not_resolve_is_refused_naming_it() -> None:
    """An event class annotating a type imported only under TYPE_CHECKING is refused
    with a SerializationError naming the event and the name, before anything is stored
    (a bare NameError before)."""

    class Refunds(AgentApplication):
        aggregate_classes = (Refund,)

    with pytest.raises(SerializationError, match=r"Refund\.Asked .*OnlyWhenChecked"):
        Refunds().save(Refund(Decimal(1)))  # type: ignore[arg-type]


def test_a_snapshot_moved_to_another_aggregate_is_passed_over(configured: dict[str, str]) -> None:
    """A payment's snapshot copied into another payment's stream is not trusted: that
    payment still loads as its events say."""
    payments = Payments()
    first = payments.request("acme", Decimal("1"))
    second = payments.request("globex", Decimal("2"))
    payments.approve(first, "maria")
    payments.approve(second, "li")
    assert payments.snapshots is not None
    recorder = payments.snapshots.recorder
    (record,) = recorder.select_events(first)
    moved = dataclasses.replace(record, originator_id=second, originator_version=3)
    recorder.insert_events([moved])
    loaded = payments.repository.get(second)
    assert (loaded.payee, loaded.approved_by) == ("globex", "li")
    payments.close()


@settings(max_examples=15, deadline=None)
@given(
    amounts=st.lists(
        st.decimals(
            allow_nan=False, allow_infinity=False, places=2, min_value=-(10**9), max_value=10**9
        ),
        min_size=1,
        max_size=4,
    ),
    reviewer=st.text(min_size=1, max_size=12),
)
def test_a_payment_loaded_from_its_snapshot_equals_its_replay(
    amounts: list[Decimal], reviewer: str
) -> None:
    """Whatever the amounts and reviewer, the payments loaded through their snapshots
    equal those rebuilt from their events alone."""
    payments = Payments()
    for amount in amounts:
        payment_id = payments.request("payee", amount)
        payments.approve(payment_id, reviewer)
        loaded = payments.repository.get(payment_id)
        assert vars(loaded) == vars(Repository(event_store=payments.events).get(payment_id))
        assert type(loaded.amount) is Decimal
    payments.close()


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_an_altered_snapshot_never_changes_what_loads(data: st.DataObject) -> None:
    """Whatever bytes of a payment's stored snapshot are changed, in a store with a
    cipher key, the payment loads as its events alone rebuild it."""
    with tempfile.TemporaryDirectory() as directory:
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": f"{directory}/payments.db",
            "CIPHER_TOPIC": "eventsourcing.cipher:AESCipher",
            "CIPHER_KEY": CIPHER_KEY,
        }
        payments = Payments(env=env)
        payment_id = payments.request("acme", Decimal("5.50"))
        payments.approve(payment_id, "maria")
        payments.close()
        with contextlib.closing(sqlite3.connect(env["SQLITE_DBNAME"])) as db, db:
            (state,) = db.execute("SELECT state FROM stored_snapshots").fetchone()
            altered = bytearray(state)
            for _ in range(data.draw(st.integers(1, 3))):
                at = data.draw(st.integers(0, 2**16)) % len(altered)
                altered[at] ^= data.draw(st.integers(1, 255))
            db.execute("UPDATE stored_snapshots SET state = ?", (bytes(altered),))
        payments = Payments(env=env)
        loaded = payments.repository.get(payment_id)
        assert vars(loaded) == vars(Repository(event_store=payments.events).get(payment_id))
        payments.close()


class Invoice(Aggregate):
    """A payment whose id its payee decides (uuid5, as eventsourcing documents), so that
    two stores, or a store and its backup, hold an invoice under the same id."""

    payee: str
    amount: Decimal
    approved_by: str | None

    class Snapshot(AggregateSnapshot):
        """Its snapshots."""

    @staticmethod
    def create_id(payee: str, amount: Decimal) -> UUID:
        """The same id for a payee in every store."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"invoice/{payee}")

    @event("Requested")
    def __init__(self, payee: str, amount: Decimal) -> None:
        self.payee, self.amount, self.approved_by = payee, amount, None

    @event("Approved")
    def approve(self, reviewer: str) -> None:
        """Record the reviewer's approval."""
        self.approved_by = reviewer


class Invoices(AgentApplication):
    """Invoices, snapshotted at their second event."""

    aggregate_classes = (Invoice,)
    snapshotting_intervals: ClassVar[dict[type, int]] = {Invoice: 2}


class ChainKeyedInvoices(Invoices):
    """Invoices in an application whose seals are keyed by a chain key."""

    @property
    def chain_key(self) -> bytes | None:
        """The same chain key for every store of the test."""
        return b"chain key shared by both stores"


def invoice_env(path: Path, key: str) -> dict[str, str]:
    """eventsourcing's SQLite settings for one store, with a cipher key if ``key`` says."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}
    if key == "cipher":
        env |= {"CIPHER_TOPIC": "eventsourcing.cipher:AESCipher", "CIPHER_KEY": CIPHER_KEY}
    return env


def invoices(path: Path, key: str) -> Invoices:
    """The invoices stored at ``path``, under ``key``: "cipher", "chain" or "none"."""
    return (ChainKeyedInvoices if key == "chain" else Invoices)(env=invoice_env(path, key))


def write_invoice(path: Path, key: str, amount: Decimal, reviewer: str | None) -> UUID:
    """Request an invoice of ``amount`` to acme in the store at ``path``, approved by
    ``reviewer`` if one is given (its second event: a snapshot is taken)."""
    app = invoices(path, key)
    try:
        if reviewer is None:
            invoice = Invoice("acme", amount)
        else:
            invoice = app.repository.get(Invoice.create_id("acme", amount))
            invoice.approve(reviewer)
        app.save(invoice)
        return invoice.id
    finally:
        app.close()


def snapshot_row(path: Path) -> tuple[Any, ...]:
    """The one snapshot row of the store at ``path``."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        (row,) = db.execute("SELECT * FROM stored_snapshots").fetchall()
        return tuple(row)


def put_snapshot_row(path: Path, row: tuple[Any, ...]) -> None:
    """Replace the snapshots of the store at ``path`` with ``row``."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DELETE FROM stored_snapshots")
        db.execute("INSERT INTO stored_snapshots VALUES (?, ?, ?, ?)", row)


amounts = st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=0, max_value=10**6)


@settings(max_examples=30, deadline=None)
@given(
    key=st.sampled_from(["cipher", "chain", "none"]),
    source=st.sampled_from(["its own", "another store", "an older backup"]),
    amount=amounts,
    other_amount=amounts,
    reviewers=st.lists(st.sampled_from(["maria", "li", "mallory"]), min_size=2, max_size=2),
)
def test_an_invoices_snapshot_is_trusted_only_by_the_store_whose_events_it_summarizes(
    key: str, source: str, amount: Decimal, other_amount: Decimal, reviewers: list[str]
) -> None:
    """A store's own snapshot of an invoice is trusted; one sealed by another store under
    the same key (the same invoice id), or by the same store before it was restored from
    an older backup and written differently, is passed over: whatever the key, the
    invoice loads as its events fold."""
    mine, theirs = reviewers
    with tempfile.TemporaryDirectory() as directory:
        here, there = Path(directory, "here.db"), Path(directory, "there.db")
        if source == "an older backup":
            write_invoice(there, key, other_amount, None)
            shutil.copy(there, here)  # the backup, before the approval
            write_invoice(there, key, other_amount, theirs)
        elif source == "another store":
            write_invoice(there, key, other_amount, None)
            write_invoice(there, key, other_amount, theirs)
        if source != "an older backup":
            write_invoice(here, key, amount, None)
        invoice_id = write_invoice(here, key, amount, mine)
        if source != "its own":
            put_snapshot_row(here, snapshot_row(there))
        app = invoices(here, key)
        assert app.snapshots is not None
        trusted = list(app.snapshots.get(invoice_id))
        loaded = app.repository.get(invoice_id)
        replayed = Repository(event_store=app.events).get(invoice_id)
        app.close()
    assert vars(loaded) == vars(replayed)
    assert len(trusted) == (source == "its own")


def test_an_invoices_snapshot_sealed_before_it_was_bound_is_taken_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot sealed to its stream and version only (as before ADR 0115) is passed
    over with an INFO line, the invoice rebuilt from its events, until its next
    snapshot, which is bound to its event and trusted."""
    path = tmp_path / "invoices.db"
    write_invoice(path, "cipher", Decimal("10.00"), None)
    invoice_id = write_invoice(path, "cipher", Decimal("10.00"), "maria")
    app = invoices(path, "cipher")
    assert app.snapshots is not None
    (snapshot,) = app.snapshots.get(invoice_id)
    legacy = app.snapshots._sealed(snapshot, get_topic(type(snapshot)), UNCHAINED)
    put_snapshot_row(path, (invoice_id.hex, 2, legacy.topic, legacy.state))
    with caplog.at_level(logging.INFO, logger="covonaut_es"):
        assert list(app.snapshots.get(invoice_id)) == []
        assert app.repository.get(invoice_id).approved_by == "maria"
    passed_over = [r for r in caplog.records if "passed over" in r.getMessage()]
    assert len(passed_over) == 2  # the snapshots' read, and the repository's
    for record in passed_over:
        assert record.levelno == logging.INFO
        assert "sealed to its stream and version only" in record.getMessage()
    invoice = app.repository.get(invoice_id)
    invoice.approve("li")
    invoice.approve("ming")
    app.save(invoice)  # its fourth event: a snapshot is taken
    (retaken,) = app.snapshots.get(invoice_id, gt=2)
    assert retaken.state["approved_by"] == "ming"
    app.close()


# Durability through kills ---------------------------------------------------------------


def test_each_approval_is_counted_once_through_kills(tmp_path: Path) -> None:
    """A follower killed while processing, then restarted, ends with every approval
    counted exactly once and its ledger thread intact: the policy's events and its
    position in the leader's log are one transaction."""
    path = os.pathsep.join(str(TESTS.parent / part) for part in ("src", "tests", "examples"))
    env = {**os.environ, **sqlite_env(tmp_path), "PYTHONPATH": path}
    os.environ.update(sqlite_env(tmp_path))
    try:
        payments = Payments()
        expected = Decimal(0)
        for n in range(30):
            amount = Decimal(n) + Decimal("0.01")
            payments.approve(payments.request(f"payee-{n}", amount), "maria")
            expected += amount
        last = payments.recorder.max_notification_id()
        payments.close()

        kills = 0
        for kill_after in (1, 3, 5, 2, 4):  # policies run before each kill
            worker = subprocess.Popen(
                [sys.executable, str(TESTS / "system_follower.py")],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert worker.stdout is not None
            lines = [worker.stdout.readline() for _ in range(kill_after)]
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=60)
            worker.stdout.close()
            assert set(lines) <= {"processing\n", "done\n"}, lines
            kills += "done\n" not in lines
        assert kills >= 3, "the follower finished before most kills"
        result = subprocess.run(
            [sys.executable, str(TESTS / "system_follower.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert result.stdout.splitlines()[-1] == "done"

        approvals = ApprovedByReviewer()
        total = approvals.total("maria")
        assert (total.count, total.total) == (30, expected)
        assert approvals.recorder.max_tracking_id(Payments.name) == last
        with Store.from_application(approvals) as ledger:
            assert len(ledger.state_at("ledger").messages) == 30
            report = ledger.verify("ledger")
            assert report.ok, report.findings  # each kill left events and anchor alike
            assert report.notes == ()
        approvals.close()
    finally:
        for name in sqlite_env(tmp_path):
            os.environ.pop(name, None)
