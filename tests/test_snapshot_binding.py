"""Snapshots are a cache that cannot lie: a snapshot forged by someone who can write the
database is never trusted over the events where a key protects the store, and `verify`
names every field in which a snapshot differs from the replay, on every store."""

from __future__ import annotations

import contextlib
import enum
import hashlib
import logging
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    CovonautError,
    Store,
    ThreadStatus,
    ToolContext,
    create_cipher_key,
    open_store,
)
from covonaut_es.domain import AgentThread, Label, ThreadSnapshot
from covonaut_es.domain._snapshot import differing_fields
from covonaut_es.messages import Message
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._snapshot_cache import SnapshotCache
from covonaut_es.store._snapshot_seals import SEALED, Seal, SealKey, unsealed
from support import answer, call, put_raw_snapshot, snapshotted_thread, start_bare_run
from test_approvals import ALICE, PAY_40, make_agent, review_id
from test_migrations import GOLDEN

CHAIN_KEY = "a chain key of thirty-two chars!"
PAY_50 = '{"amount": 50, "to": "carol"}'


@pytest.fixture(params=["unkeyed", "keyed"])
def keying(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The options of a store without a key, and of one with a chain key."""
    return {"chain_key": CHAIN_KEY} if request.param == "keyed" else {}


@pytest.fixture
def open_bare(store_url: str) -> Iterator[Callable[..., Store]]:
    """Open stores on ``store_url`` with no replay-law check at teardown: these tests
    leave forged snapshots behind on purpose."""
    opened: list[Store] = []

    def open_(**options: Any) -> Store:
        store = open_store(store_url, **options)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def forge_snapshot(store: Store, thread_id: str, change: Callable[[AgentThread], None]) -> int:
    """Write a snapshot of the thread's head that ``change`` altered, in the public
    format (the library's mapper alone, no key), as a database writer would; return
    its version."""
    thread = store._reader.replay(thread_id)
    assert thread is not None
    change(thread)
    record = MsgspecMapper().to_stored_event(ThreadSnapshot.take(thread))
    put_raw_snapshot(store, record)
    return thread.version


def lapsed_approval(store: Store, runs: list[ToolContext]) -> None:
    """Thread ``t``: pay 40 to bob was approved but never used, new user input made the
    approval lapse, and the thread now waits for a review of pay 50 to carol."""
    script = [
        call(("c1", "pay", PAY_40)),
        answer("I will not pay after all."),
        call(("c2", "pay", PAY_50)),
    ]
    agent = make_agent(store, script, runs)
    agent.run("Pay bob 40.")
    agent.approve(review_id(agent), reviewer=ALICE)
    assert agent.resume() == "I will not pay after all."
    agent.run("Pay carol 50 instead.")
    assert agent.status is ThreadStatus.INTERRUPTED
    assert runs == []


def unlapse(thread: AgentThread) -> None:
    """Make every decision stand again, as if no user input had come since."""
    thread.reviews = msgspec.structs.replace(thread.reviews, standing_from=0)


def approve_carol_and_call_bob_again(store: Store, runs: list[ToolContext]) -> Agent:
    """A fresh process approves the review of pay 50 to carol and resumes; the model
    then calls pay 40 to bob again."""
    script = [call(("c3", "pay", PAY_40)), answer("Done.")]
    agent = make_agent(store, script, runs)
    agent.approve(store.state_at("t").pauses[0].interrupt.data["review_id"], reviewer=ALICE)
    agent.resume()
    return agent


def test_a_forged_snapshot_never_makes_a_lapsed_approval_pay_again(
    open_bare: Callable[..., Store],
) -> None:
    """In a store with a chain key, a snapshot rewinding which approvals stand is
    passed over: the lapsed approval of pay 40 authorizes nothing, and the call asks
    for a new review."""
    store = open_bare(chain_key=CHAIN_KEY)
    runs: list[ToolContext] = []
    lapsed_approval(store, runs)
    forge_snapshot(store, "t", unlapse)
    agent = approve_carol_and_call_bob_again(store, runs)
    assert runs == []
    assert agent.status is ThreadStatus.INTERRUPTED
    assert agent.interrupted is not None and agent.interrupted.tool_call_id == "c3"


def test_a_forged_snapshot_never_makes_a_spent_approval_pay_again(
    open_bare: Callable[..., Store],
) -> None:
    """In a store with a chain key, a snapshot marking a used approval unused is passed
    over: the second call of the operation does not run."""
    store = open_bare(chain_key=CHAIN_KEY)
    runs: list[ToolContext] = []
    script = [call(("c2", "pay", PAY_40)), call(("c3", "pay", PAY_50))]
    agent = make_agent(store, [call(("c1", "pay", PAY_40)), *script], runs)
    agent.run("Pay bob 40, then carol 50.")
    agent.approve(review_id(agent), reviewer=ALICE)
    agent.resume()
    assert [r.tool_call_id for r in runs] == ["c2"]

    def unspend(thread: AgentThread) -> None:
        thread.reviews = msgspec.structs.replace(
            thread.reviews,
            reviews=tuple(
                msgspec.structs.replace(r, used_by=None, used_by_key=None)
                for r in thread.reviews.reviews
            ),
        )

    forge_snapshot(store, "t", unspend)
    approve_carol_and_call_bob_again(store, runs)
    assert [r.tool_call_id for r in runs] == ["c2"]


def test_verify_reports_a_snapshot_that_rewinds_which_approvals_stand(
    open_bare: Callable[..., Store], keying: dict[str, Any]
) -> None:
    """On every store, keyed or not, verify reports the forged snapshot and names the
    reviews as what differs."""
    store = open_bare(**keying)
    lapsed_approval(store, [])
    version = forge_snapshot(store, "t", unlapse)
    report = store.verify("t")
    assert not report.ok
    assert any(f.version == version and "reviews" in f.problem for f in report.findings)


def _next_sequence(thread: AgentThread) -> None:
    thread.next_checkpoint_sequence = 1


def _chain_head(thread: AgentThread) -> None:
    thread.chain_head = "forged"


def _open_call_key(thread: AgentThread) -> None:
    thread.open_calls = {
        call_id: msgspec.structs.replace(pending, idempotency_key="forged")
        for call_id, pending in thread.open_calls.items()
    }


def _messages(thread: AgentThread) -> None:
    thread.messages = thread.messages[:-1]


def _pending_reviews(thread: AgentThread) -> None:
    thread.reviews = msgspec.structs.replace(thread.reviews, reviews=thread.reviews.reviews[:-1])


def _labels(thread: AgentThread) -> None:
    thread.labels = [*thread.labels, Label("forged", None)]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_next_sequence, "next_checkpoint_sequence"),
        (_chain_head, "chain_head"),
        (_open_call_key, "open_calls"),
        (_messages, "messages"),
        (_pending_reviews, "reviews"),
        (_labels, "labels"),
    ],
)
def test_verify_names_the_field_a_forged_snapshot_changed(
    open_bare: Callable[..., Store],
    keying: dict[str, Any],
    change: Callable[[AgentThread], None],
    field: str,
) -> None:
    """Whatever field of the aggregate a forged snapshot changes, verify reports the
    snapshot at its version and names the field."""
    store = open_bare(**keying)
    lapsed_approval(store, [])
    version = forge_snapshot(store, "t", change)
    report = store.verify("t")
    assert any(f.version == version and field in f.problem for f in report.findings), (
        report.findings
    )


# The family of forgeries: any field of the aggregate, any way of sealing ------------------


class Template:
    """A SQLite store holding the lapsed-approval thread ``t``."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return f"Template({self.db.parent.name})"


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Template]:
    """The thread of :func:`lapsed_approval`, in an unkeyed and in a keyed store."""
    made = {}
    for keyed in (False, True):
        db = tmp_path_factory.mktemp("keyed" if keyed else "unkeyed") / "threads.db"
        with open_store(f"sqlite:///{db}", **({"chain_key": CHAIN_KEY} if keyed else {})) as store:
            lapsed_approval(store, [])
        made[keyed] = Template(db)
    return made


def mutated(value: Any, data: st.DataObject) -> Any:
    """``value`` changed in one place that ``data`` chooses, keeping its type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, enum.Enum):
        return data.draw(st.sampled_from([m for m in type(value) if m is not value]))
    if isinstance(value, int):
        return value + data.draw(st.sampled_from([-2, -1, 1, 7]))
    if isinstance(value, str):
        return value + data.draw(st.sampled_from(["x", " forged", "\n"]))
    if isinstance(value, datetime):
        return value + timedelta(seconds=data.draw(st.integers(1, 10**6)))
    if isinstance(value, msgspec.Struct):
        name = data.draw(st.sampled_from(value.__struct_fields__))
        return msgspec.structs.replace(value, **{name: mutated(getattr(value, name), data)})
    if isinstance(value, list | tuple) and value:
        index = data.draw(st.integers(0, len(value) - 1))
        items = list(value)
        if data.draw(st.booleans()):
            del items[index]
        else:
            items[index] = mutated(items[index], data)
        return type(value)(items)
    if isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value)))
        changed = dict(value)
        if data.draw(st.booleans()):
            del changed[key]
        else:
            changed[key] = mutated(value[key], data)
        return changed
    reject()  # nothing to change in None or an empty container
    return value


FORGERIES = {
    "unsealed": None,
    "sealed in public": SealKey(),
    "sealed claiming the chain key": SealKey(chain_key="not the key, but as long as it"),
}


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(keyed=st.booleans(), forgery=st.sampled_from(sorted(FORGERIES)), data=st.data())
def test_a_snapshot_forged_in_any_field_is_reported_and_never_trusted_under_a_key(
    templates: dict[bool, Template],
    tmp_path_factory: pytest.TempPathFactory,
    keyed: bool,
    forgery: str,
    data: st.DataObject,
) -> None:
    """A snapshot of the head with any one field of the aggregate changed, unsealed or
    sealed without the store's key: verify reports it at its version naming the field,
    on every store; under a key, a load gives the replay's state, and the lapsed
    approval never pays."""
    db = tmp_path_factory.mktemp("forged") / "threads.db"
    shutil.copy(templates[keyed].db, db)
    with open_store(f"sqlite:///{db}", **({"chain_key": CHAIN_KEY} if keyed else {})) as store:
        replayed = store._reader.replay("t")
        assert replayed is not None
        fields = sorted(ThreadSnapshot.take(replayed).state)
        field = data.draw(st.sampled_from(fields))
        forged = store._reader.replay("t")
        setattr(forged, field, mutated(getattr(forged, field), data))
        assume(differing_fields(forged, replayed))
        snapshot = ThreadSnapshot.take(forged)
        record = MsgspecMapper().to_stored_event(snapshot)
        key = FORGERIES[forgery]
        if key is not None:
            body = unsealed(record.state)[1]
            seal = str(replayed.chain_head)
            state = key.sealed(body, replayed.id, replayed.version, seal)
            record = StoredEvent(
                record.originator_id, record.originator_version, record.topic, state
            )
        put_raw_snapshot(store, record)

        report = store.verify("t")
        name = field.lstrip("_")
        assert any(f.version == replayed.version and name in f.problem for f in report.findings), (
            report.findings
        )
        if not keyed:
            return
        assert differing_fields(store.load("t"), replayed) == ()
        runs: list[ToolContext] = []
        approve_carol_and_call_bob_again(store, runs)
        assert runs == []


# Seals under each key, snapshots from before seals, and the golden stores ---------------

KEYS = {
    "no key": {},
    "a chain key": {"chain_key": CHAIN_KEY},
    "a cipher key": {"cipher_key": create_cipher_key()},
}


def unsnapshotted(store: Store, thread_id: str, messages: int = 70) -> AgentThread:
    """A thread long enough for a snapshot, saved without one."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    thread = AgentThread.start(thread_id, now=now)
    start_bare_run(thread, now=now)
    for i in range(messages):
        thread.append_message(Message(role="user", content=f"{thread_id} {i}"), now=now)
    store.save(thread)
    return thread


@pytest.mark.parametrize("keys", sorted(KEYS))
def test_a_sealed_snapshot_moved_to_another_thread_or_version_is_passed_over(
    open_bare: Callable[..., Store], keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot the store sealed, copied byte for byte to another thread or to a later
    version (which needs no key), is passed over with a warning naming it; both threads
    load as their events make them, and verify reports the copies."""
    store = open_bare(**KEYS[keys])
    source = snapshotted_thread(store, "source")
    assert store._app.snapshots is not None
    [record] = store._app.snapshots.recorder.select_events(source.id)
    target = unsnapshotted(store, "target", messages=source.version - 2)
    assert target.version == source.version
    source.append_message(Message(role="user", content="one more"), now=datetime.now(UTC))
    store.save(source)
    for thread in (target, source):
        put_raw_snapshot(store, StoredEvent(thread.id, thread.version, record.topic, record.state))
    with caplog.at_level(logging.WARNING, logger="covonaut_es"):
        for thread in (target, source):
            assert differing_fields(store.load(thread.thread_id), thread) == ()
            [finding] = [f for f in store.verify(thread.thread_id).findings if "seal" in f.problem]
            assert finding.version == thread.version
            assert f"{thread.id} at version {thread.version} passed over" in caplog.text


@pytest.mark.parametrize("keys", sorted(KEYS))
def test_a_snapshot_whose_digest_does_not_match_is_passed_over_by_every_load(
    open_bare: Callable[..., Store], keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot sealed to the right event but with another digest is passed over on
    load with a warning, on every store (a public digest, being cheap, is checked too),
    and verify reports it."""
    store = open_bare(**KEYS[keys])
    thread = snapshotted_thread(store, "long")
    thread.append_message(Message(role="user", content="one more"), now=datetime.now(UTC))
    store.save(thread)
    snapshots = store._app.snapshots
    assert isinstance(snapshots, SnapshotCache)
    record = snapshots.stored(ThreadSnapshot.take(thread))
    seal, body = unsealed(store._records.mapper.plain_payload(record))
    assert seal is not None
    header = msgspec.msgpack.encode(Seal(seal.scheme, seal.seal, "A" * len(seal.digest)))
    forged = SEALED + len(header).to_bytes(4, "little") + header + bytes(body)
    put_raw_snapshot(
        store,
        StoredEvent(
            thread.id, thread.version, record.topic, store._records.mapper.stored_payload(forged)
        ),
    )
    with caplog.at_level(logging.WARNING, logger="covonaut_es"):
        assert differing_fields(store.load("long"), thread) == ()
    assert f"{thread.id} at version {thread.version} passed over" in caplog.text
    [finding] = store.verify("long").findings
    assert finding.version == thread.version and "digest does not match" in finding.problem


@pytest.mark.parametrize("keys", sorted(KEYS))
def test_a_snapshot_from_before_seals_is_used_only_by_a_store_without_a_key(
    open_bare: Callable[..., Store], keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot written as before seals (the store's own mapper, its own cipher) is
    used by a store with no key; a store with a key passes it over with an INFO line
    and verify notes it, as no writer needs the key to write one."""
    store = open_bare(**KEYS[keys])
    thread = unsnapshotted(store, "long")
    put_raw_snapshot(store, store._records.mapper.to_stored_event(ThreadSnapshot.take(thread)))
    with caplog.at_level(logging.INFO, logger="covonaut_es"):
        loaded = store.load("long")
    assert differing_fields(loaded, thread) == ()
    report = store.verify("long")
    assert report.ok, report.findings
    passed_over = "written before snapshots were sealed" in caplog.text
    assert passed_over == (keys != "no key")
    assert passed_over == any("before snapshots were sealed" in n for n in report.notes)


def test_the_golden_snapshot_written_before_seals_is_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The v2 golden store's snapshot, written before seals, restores its thread in a
    store without a key: nothing is passed over, and verify finds it intact. (The v3
    store's snapshot is one its upcasters rebuild from the events.)"""
    db, thread_id = tmp_path / "threads.db", "golden-long"
    shutil.copyfile(GOLDEN / "v2" / "threads.db", db)
    with open_store(f"sqlite:///{db}") as store, caplog.at_level(logging.INFO, "covonaut_es"):
        thread = store.load(thread_id)
        assert store._writer.snapshot_versions[thread.id] < thread.version  # restored from one
        assert "passed over" not in caplog.text
        report = store.verify(thread_id)
        assert report.ok and report.snapshots_checked == 1, report.findings


def test_a_snapshot_sealed_before_the_store_had_its_key_is_passed_over_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that adopts a chain key passes over the snapshots it sealed without one
    with an INFO line, and verify notes them instead of reporting them; their next
    snapshot is sealed with the key."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        thread = snapshotted_thread(store)
    with open_store(url, chain_key=CHAIN_KEY) as store:
        with caplog.at_level(logging.INFO, logger="covonaut_es"):
            loaded = store.load("long")
        assert differing_fields(loaded, thread) == ()
        assert "sealed with no key, but the store is open with the store's chain key" in (
            caplog.text
        )
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        report = store.verify("long")
        assert not [f for f in report.findings if "snapshot" in f.problem], report.findings
        assert any("sealed with no key" in note for note in report.notes)


@pytest.mark.parametrize("keys", sorted(KEYS))
def test_the_store_restores_from_the_snapshots_it_sealed_under_each_key(
    open_bare: Callable[..., Store], keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot the store sealed itself, with no key, its chain key or its cipher key,
    is trusted: the restore starts from it, nothing is passed over, verify finds it
    intact."""
    store = open_bare(**KEYS[keys])
    thread = snapshotted_thread(store)
    store._writer.snapshot_versions.clear()  # what a restore in a fresh process knows
    with caplog.at_level(logging.INFO, logger="covonaut_es"):
        assert differing_fields(store.load("long"), thread) == ()
    assert store._writer.snapshot_versions == {thread.id: thread.version}
    assert "passed over" not in caplog.text
    report = store.verify("long")
    assert report.ok and report.snapshots_checked == 1, report.findings


# Damage to a snapshot's bytes in a store without a key -----------------------------------


class DamageTemplate:
    """A SQLite store without a key holding thread ``long``, snapshotted with one event
    after its snapshot: the stored snapshot, and what each read gives without it."""

    def __init__(self, db: Path, snapshot: bytes, version: int, without: dict[str, Any]) -> None:
        self.db, self.snapshot, self.version, self.without = db, snapshot, version, without

    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return f"DamageTemplate({self.db.parent.name})"


def damage_reads(db: Path, version: int) -> dict[str, Any]:
    """What a load of the head, a state at the snapshot's version and the history give
    on the store at ``db``: each result, or the type of its error."""
    reads: dict[str, Callable[[Store], object]] = {
        "load": lambda s: s.load("long").state,
        "state_at": lambda s: s.state_at("long", version),
        "history": lambda s: s.history("long"),
    }
    found: dict[str, Any] = {}
    with open_store(f"sqlite:///{db}") as store:
        for name, read in reads.items():
            try:
                found[name] = read(store)
            except CovonautError as exc:
                found[name] = type(exc)
    return found


@pytest.fixture(scope="module")
def damage_template(tmp_path_factory: pytest.TempPathFactory) -> DamageTemplate:
    """A thread whose messages are hashes, so that most of its snapshot's frame is
    literal bytes, where a changed bit decodes to other text unless a checksum says so."""
    db = tmp_path_factory.mktemp("undamaged") / "threads.db"
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with open_store(f"sqlite:///{db}") as store:
        thread = AgentThread.start("long", now=now)
        start_bare_run(thread, now=now)
        for i in range(70):
            text = hashlib.sha256(str(i).encode()).hexdigest()
            thread.append_message(Message(role="user", content=text), now=now)
        store.save(thread)
        assert store.snapshot_if_due(thread)
        version = thread.version
        thread.append_message(Message(role="user", content="after the snapshot"), now=now)
        store.save(thread)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        [(snapshot,)] = conn.execute("SELECT state FROM stored_snapshots").fetchall()
    bare = db.with_name("without-snapshots.db")
    shutil.copyfile(db, bare)
    with contextlib.closing(sqlite3.connect(bare)) as conn, conn:
        conn.execute("DELETE FROM stored_snapshots")
    return DamageTemplate(db, snapshot, version, damage_reads(bare, version))


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    position=st.integers(0, 10**6),
    change=st.tuples(st.just("flip bit"), st.integers(0, 7))
    | st.tuples(st.just("set byte"), st.integers(0, 255)),
)
def test_one_damaged_byte_of_a_snapshot_in_a_store_without_a_key_is_never_served(
    damage_template: DamageTemplate,
    tmp_path_factory: pytest.TempPathFactory,
    position: int,
    change: tuple[str, int],
) -> None:
    """One bit flipped or one byte set anywhere in a new snapshot's stored bytes (its
    seal, its frame's header, data or checksum), in a store with no key, as a failing
    disk would: a load, a state at the snapshot's version and the history each give what
    they give with no snapshot at all, or a typed error; never another thread. (A store
    without a key trusts a forgery, which anyone can seal; damage its frame's checksum
    finds.)"""
    template = damage_template
    stored = bytearray(template.snapshot)
    index = position % len(stored)
    kind, value = change
    stored[index] = stored[index] ^ (1 << value) if kind == "flip bit" else value
    db = tmp_path_factory.mktemp("damaged") / "threads.db"
    shutil.copyfile(template.db, db)
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE stored_snapshots SET state = ?", (bytes(stored),))
    found = damage_reads(db, template.version)
    assert found == template.without, [n for n in found if found[n] != template.without[n]]
