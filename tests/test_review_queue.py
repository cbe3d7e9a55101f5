"""The reviewer queue projection: in process, as a separate process that is killed,
and rebuilt from zero."""

from __future__ import annotations

import contextlib
import gzip
import json
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    InterruptError,
    MemoryStateStore,
    ReviewQueue,
    ScriptedProvider,
    Store,
    Tool,
    create_cipher_key,
    open_store,
)
from covonaut_es.projections._items import QUEUE_EVENT_TYPES
from covonaut_es.projections._views import SQLReviewQueueView
from covonaut_es.service import ThreadService
from covonaut_es.store._codec import aggregate_event_classes
from support import answer, call, review_tool


def pause(store: Store, thread_id: str, *call_ids: str) -> Agent:
    """Run a thread until its review tools interrupt it."""
    script = [call(*((c, "review", "{}") for c in call_ids)), answer("done")]
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[review_tool()],
            parallel_tools=True,
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    )
    agent.run("go")
    return agent


def expected_queue(store: Store) -> set[tuple[str, str]]:
    """The queue computed from the threads' states: the independent oracle."""
    return {
        (thread_id, interrupt.tool_call_id)
        for thread_id in store.thread_ids()
        for state in [store.state_at(thread_id)]
        if state.status.value != "abandoned"
        for interrupt in state.interrupts
    }


def keys(queue: ReviewQueue) -> set[tuple[str, str]]:
    return {(item.thread_id, item.item_id) for item in queue.pending()}


def test_the_queue_follows_every_subclass_of_an_event_it_follows() -> None:
    """The projection subscribes by topic, and a subclass has a topic of its own."""
    for cls in aggregate_event_classes(AgentThread):
        if issubclass(cls, QUEUE_EVENT_TYPES):
            assert cls in QUEUE_EVENT_TYPES, cls


def test_queue_follows_interrupts_resumes_forks_and_abandons(store: Store) -> None:
    """Interrupts enter the queue; resuming, abandoning remove them; a fork adds the
    interrupts it inherited, naming its parent."""
    queue = ReviewQueue(store.url)
    with queue.follow():
        pause(store, "a", "r1", "r2")
        resumed = pause(store, "b", "r3")
        pause(store, "c", "r4")
        resumed.steer("approved")
        resumed.resume()
        store.fork("a", new_thread_id="a-branch")
        ThreadService(store).abandon("c", "customer left")
        queue.wait_until_current(store)
    items = {(i.thread_id, i.item_id): i for i in queue.pending()}
    assert set(items) == {("a", "r1"), ("a", "r2"), ("a-branch", "r1"), ("a-branch", "r2")}
    assert set(items) == expected_queue(store)
    assert items["a-branch", "r1"].branch_parent == "a"
    first = items["a", "r1"]
    assert (first.tool_name, first.reason, first.data) == (
        "review",
        "human review required",
        {"request_id": "r1"},
    )
    assert not store._records.has_events_after(queue.position(), *QUEUE_EVENT_TYPES, follower="q")


def test_queue_restarts_where_it_stopped(store: Store) -> None:
    """A second runner continues from the view's tracking position: nothing twice."""
    queue = ReviewQueue(store.url)
    with queue.follow():
        pause(store, "a", "r1")
        queue.wait_until_current(store)
    pause(store, "b", "r2")  # while nobody follows
    with queue.follow():
        queue.wait_until_current(store)
    assert keys(queue) == {("a", "r1"), ("b", "r2")}


def test_queue_in_its_own_database(tmp_path: Path) -> None:
    """The view can live in another database than the store."""
    store = open_store(f"sqlite:///{tmp_path / 'threads.db'}")
    queue = ReviewQueue(store.url, view_url=f"sqlite:///{tmp_path / 'queue.db'}")
    with queue.follow():
        pause(store, "a", "r1")
        queue.wait_until_current(store)
    assert keys(queue) == {("a", "r1")}
    with sqlite3.connect(tmp_path / "queue.db") as conn:
        assert conn.execute("SELECT count(*) FROM covonaut_pauses").fetchone() == (1,)
    with sqlite3.connect(tmp_path / "threads.db") as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "covonaut_pauses" not in tables


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_listing_the_queue_is_one_indexed_query(tmp_path: Path, sealed: bool) -> None:
    """SQLite plans the listing as a scan of the queue's index, not of the streams, for
    a plain queue and for the sealed queue of an encrypted store alike."""
    key = create_cipher_key() if sealed else None
    store = open_store(f"sqlite:///{tmp_path / 'threads.db'}", cipher_key=key)
    view = ReviewQueue(store.url, cipher_key=key).view()
    assert isinstance(view, SQLReviewQueueView)
    listing = view.rows().select_pending
    with sqlite3.connect(tmp_path / "threads.db") as conn:
        plan = " ".join(str(row) for row in conn.execute("EXPLAIN QUERY PLAN " + listing))
    index = "covonaut_sealed_pauses_by_time" if sealed else "covonaut_pauses_by_time"
    assert index in plan
    assert "stored_events" not in plan


actions = st.lists(
    st.tuples(st.sampled_from(["pause", "resume", "fork", "abandon"]), st.integers(0, 3)),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=actions)
def test_rebuilding_from_zero_equals_following_incrementally(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[str, int]]
) -> None:
    """Property: a view built from position zero after the fact equals the view that
    followed every step as it happened, and both equal the oracle."""
    folder = tmp_path_factory.mktemp("queue")
    store = open_store(f"sqlite:///{folder / 'threads.db'}")
    incremental = ReviewQueue(store.url)
    agents: dict[str, Agent] = {}
    with incremental.follow():
        for step, (action, n) in enumerate(plan):
            thread_id = f"t{n}"
            state = store.find(thread_id)
            if action == "pause" and (state is None or state.status.value == "finished"):
                agents[thread_id] = pause(store, thread_id, f"r{step}")
            elif action == "resume" and state is not None and state.interrupts:
                agent = agents.get(thread_id) or Agent(agents_config(store, thread_id))
                if state.status.value != "abandoned":
                    agent.restore_latest_checkpoint(thread_id)
                    agent.steer("decided")
                    agent.resume()
            elif action == "fork" and state is not None and state.status.value != "abandoned":
                store.fork(thread_id)
            elif action == "abandon" and state is not None and state.status.value != "abandoned":
                ThreadService(store).abandon(thread_id)
            incremental.wait_until_current(store)
    rebuilt = ReviewQueue(store.url, view_url=f"sqlite:///{folder / 'rebuilt.db'}")
    with rebuilt.follow():
        rebuilt.wait_until_current(store)
    assert rebuilt.pending() == incremental.pending()
    assert keys(incremental) == expected_queue(store)


def agents_config(store: Store, thread_id: str) -> AgentConfig:
    return AgentConfig(
        provider=ScriptedProvider([answer("done")]),
        tools=[review_tool()],
        checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
    )


FOLLOWER = "from covonaut_es import ReviewQueue; import sys; ReviewQueue(sys.argv[1]).run_forever()"


def start_follower(url: str) -> subprocess.Popen[Any]:
    return subprocess.Popen([sys.executable, "-c", FOLLOWER, url], stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_separate_process_projection_survives_sigkill(shared_url: str) -> None:
    """A projection process killed with SIGKILL mid-stream and started again ends with
    exactly the expected queue."""
    store = open_store(shared_url)
    queue = ReviewQueue(shared_url)
    follower = start_follower(shared_url)
    try:
        for n in range(12):
            agent = pause(store, f"t{n}", f"r{n}")
            if n % 3 == 0:
                agent.steer("ok")
                agent.resume()
            if n == 5:
                queue.wait_until_current(store, timeout=30)
                follower.send_signal(signal.SIGKILL)
                follower.wait(timeout=10)
        assert store._records.has_events_after(
            queue.position(), follower="q"
        )  # it really missed events
        follower = start_follower(shared_url)
        queue.wait_until_current(store, timeout=30)
    finally:
        follower.send_signal(signal.SIGKILL)
        follower.wait(timeout=10)
    assert keys(queue) == expected_queue(store)
    assert len(queue.pending()) == 8
    assert len({(i.thread_id, i.item_id) for i in queue.pending()}) == len(queue.pending())


def test_review_requests_carry_their_ids_and_leave_when_decided(store: Store) -> None:
    """A review request is listed under its review id with the operation digest, and
    leaves the queue as soon as it is decided, before any resume."""
    verifier = HmacReviewerVerifier(secrets.token_bytes(32))
    pay = Tool("pay", "Pay", {"type": "object"}, lambda ctx, args: "paid", requires_approval=True)
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("p1", "pay", '{"amount": 3}'))]),
            tools=[pay],
            reviewer_verifier=verifier,
            checkpoint=CheckpointSettings(store=store, thread_id="payer"),
        )
    )
    queue = ReviewQueue(store.url)
    with queue.follow():
        agent.run("pay 3")
        queue.wait_until_current(store)
        (item,) = queue.pending()
        request = agent.interrupted.data if agent.interrupted else {}
        assert (item.item_id, item.review_id, item.digest) == (
            request["review_id"],
            request["review_id"],
            request["digest"],
        )
        agent.approve(item.item_id, reviewer=verifier.issue_token("ann", ttl_seconds=60))
        queue.wait_until_current(store)
    assert queue.pending() == ()


@pytest.mark.parametrize("hostile", ["evil\x00id", "\x01evil", '\x01"\\u0000"'])
def test_a_thread_id_written_behind_the_rules_back_is_listed_as_it_is(
    store: Store, hostile: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A thread id with a NUL (which PostgreSQL's text cannot hold) or that starts like an
    escaped column, written behind the rule's back with a pause of the same text, is
    listed exactly, and leaves when abandoned; reviews of later threads appear, also
    after a restart, and nothing is passed over."""
    from datetime import UTC, datetime

    from covonaut_es.domain import AgentThread, Interrupt, thread_aggregate_id

    now = datetime.now(UTC)
    thread = AgentThread._create(
        AgentThread.Started, id=thread_aggregate_id(hostile), thread_id=hostile, timestamp=now
    )
    thread.interrupt(Interrupt(hostile, {hostile: hostile}, hostile, hostile), now=now)
    store.save(thread)
    queue = ReviewQueue(store.url)
    with caplog.at_level("WARNING", logger="covonaut_es.projections._queue"), queue.follow():
        pause(store, "before", "r1")
        queue.wait_until_current(store)
    assert "passing over" not in caplog.text
    (item,) = [i for i in queue.pending() if i.thread_id == hostile]
    assert (item.item_id, item.tool_name, item.reason, item.data) == (
        hostile,
        hostile,
        hostile,
        {hostile: hostile},
    )
    pause(store, "after", "r2")  # while nobody follows
    ThreadService(store).abandon(hostile)
    with queue.follow():
        queue.wait_until_current(store)
    assert keys(queue) == {("before", "r1"), ("after", "r2")} == expected_queue(store)


SECRET_THREAD_IDS = ("ann-account-7731", "bob-account-0042")
SECRET_REASON = "refund the disputed charge quietly"
PAYEE, IBAN = "Zebulon Quartermaine", "DE89370400440532013000"


def ask_a_person(ctx: Any, args: dict[str, Any]) -> str:
    raise InterruptError(SECRET_REASON, {"payee": args["payee"]})


def table_contents(url: str) -> dict[str, bytes]:
    """Every value of every table in the database of ``url``, as bytes, by table."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            names = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            return {name: _as_bytes(conn.execute(f"SELECT * FROM {name}")) for name in names}
    import psycopg

    with psycopg.connect(url) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ]
        return {name: _as_bytes(conn.execute(f'SELECT * FROM "{name}"')) for name in names}


def _as_bytes(rows: Any) -> bytes:
    return b"|".join(
        bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode()
        for row in rows
        for v in row
    )


def test_the_queue_of_an_encrypted_store_holds_no_secret_in_clear(shared_url: str) -> None:
    """With a cipher key no table of the store or its queue holds a thread id, reason or
    tool argument in clear, and the queue still lists items and drops decided ones."""
    key = create_cipher_key()
    store = open_store(shared_url, cipher_key=key)
    verifier = HmacReviewerVerifier(secrets.token_bytes(32))
    ask = Tool("ask", "Ask a person", {"type": "object"}, ask_a_person)
    pay = Tool("pay", "Pay", {"type": "object"}, lambda ctx, a: "paid", requires_approval=True)
    arguments = json.dumps({"payee": PAYEE, "iban": IBAN})
    agents = [
        Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("c1", tool.name, arguments)), answer("ok")]),
                tools=[tool],
                reviewer_verifier=verifier,
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            )
        )
        for tool, thread_id in zip((ask, pay), SECRET_THREAD_IDS, strict=True)
    ]
    queue = ReviewQueue(shared_url, cipher_key=key)
    with queue.follow():
        for agent in agents:
            agent.run(f"please pay {PAYEE}")
        queue.wait_until_current(store)
        items = {item.thread_id: item for item in queue.pending()}
        assert set(items) == set(SECRET_THREAD_IDS)
        asked = items[SECRET_THREAD_IDS[0]]
        assert (asked.reason, asked.data) == (SECRET_REASON, {"payee": PAYEE})
        review_id = items[SECRET_THREAD_IDS[1]].item_id
        agents[1].approve(review_id, reviewer=verifier.issue_token("ann", ttl_seconds=60))
        queue.wait_until_current(store)
        assert [item.thread_id for item in queue.pending()] == [SECRET_THREAD_IDS[0]]
    queue.close()
    store.close()
    contents = table_contents(shared_url)
    assert "covonaut_pauses" not in contents
    assert contents["covonaut_sealed_pauses"]  # the undecided item is there, sealed
    for secret in (*SECRET_THREAD_IDS, SECRET_REASON, PAYEE, IBAN, "disputed", "Zebulon"):
        leaks = [name for name, data in contents.items() if secret.encode() in data]
        assert leaks == [], f"{secret!r} in clear in {leaks}"


def test_an_old_plain_queue_is_left_as_it_was_and_the_sealed_one_built_from_zero(
    shared_url: str,
) -> None:
    """An encrypted store's plain queue table from an earlier version is never rewritten;
    the sealed queue builds itself from the start of the log in tables of its own."""
    from datetime import UTC, datetime

    from eventsourcing.persistence import Tracking

    from covonaut_es.projections._items import ItemAdded, PendingReview
    from covonaut_es.store._application import STORE_APPLICATION_NAME

    key = create_cipher_key()
    store = open_store(shared_url, cipher_key=key)
    pause(store, "a", "r1")
    earlier = ReviewQueue(shared_url)  # the plain layout, as if it had processed the log
    old_item = PendingReview(
        thread_id="a",
        item_id="r1",
        tool_name="review",
        reason="old",
        requested_at=datetime.now(UTC),
    )
    earlier.view().apply(
        [ItemAdded(old_item)], Tracking(STORE_APPLICATION_NAME, store._records.log_position())
    )
    earlier.close()
    before = table_contents(shared_url)["covonaut_pauses"]
    queue = ReviewQueue(shared_url, cipher_key=key)
    with queue.follow():
        queue.wait_until_current(store)
    assert keys(queue) == {("a", "r1")}
    assert queue.pending()[0].reason == "human review required"
    assert table_contents(shared_url)["covonaut_pauses"] == before
    queue.close()
    store.close()


def test_a_sealed_view_without_the_key_stops_instead_of_passing_records_over(
    tmp_path: Path,
) -> None:
    """A sealed view never given the store's key raises a ConfigurationError saying so,
    and the projection does not record the event as processed."""
    from datetime import UTC, datetime

    from eventsourcing.persistence import InfrastructureFactory, Tracking
    from eventsourcing.utils import Environment

    from covonaut_es.domain import AgentThread
    from covonaut_es.errors import ConfigurationError
    from covonaut_es.projections._names import ThreadNames
    from covonaut_es.projections._queue import ReviewQueueProjection
    from covonaut_es.projections._views_sqlite import SealedSQLiteReviewQueueView

    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "q.db")}
    factory = InfrastructureFactory.construct(env=Environment("review_queue", env))
    view = factory.tracking_recorder(SealedSQLiteReviewQueueView)
    started = AgentThread.start("a", now=datetime.now(UTC)).pending_events[0]
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    projection = ReviewQueueProjection(view, names=ThreadNames(store._records))
    with pytest.raises(ConfigurationError, match="seal_with"):
        projection.process_event(started, Tracking("ThreadsApplication", 1))
    assert view.max_tracking_id("ThreadsApplication") is None
    store.close()
    factory.close()


def test_threads_started_from_a_state_and_their_forks_are_listed(store: Store) -> None:
    """A thread started from a paused thread's saved state is listed on its pauses (as
    tools' pauses: the document holds no review), and so is a fork of it."""

    def agent(thread_id: str) -> Agent:
        return Agent(
            AgentConfig(
                provider=ScriptedProvider([]),
                tools=[review_tool()],
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                state_store=states,
            )
        )

    states = MemoryStateStore()
    queue = ReviewQueue(store.url)
    with queue.follow():
        original = pause(store, "a", "r1", "r2")
        saved = agent("a")
        saved.restore_latest_checkpoint("a")
        saved.save_state("paused")
        agent("unused").load_state("paused", thread_id="b")
        store.fork("b", new_thread_id="b-branch")
        original.steer("decided")
        original.resume()
        queue.wait_until_current(store)
    assert keys(queue) == {(t, r) for t in ("b", "b-branch") for r in ("r1", "r2")}
    assert keys(queue) == expected_queue(store)


@pytest.mark.parametrize("view", ["sqlite", "memory"])
def test_a_read_only_store_is_followed_into_a_view_kept_elsewhere(
    tmp_path: Path, view: str
) -> None:
    """A store opened read-only is followed into a view in another database, which makes
    its tables; a view in the read-only database itself is refused with a typed error
    saying what to do, before anything runs."""
    from covonaut_es.errors import ReadOnlyStoreError

    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as writable:
        pause(writable, "a", "r1")
    read_only = open_store(url + "?mode=ro")
    view_url = f"sqlite:///{tmp_path / 'queue.db'}" if view == "sqlite" else "memory://ro-view"
    queue = ReviewQueue(read_only.url, view_url=view_url)
    with queue.follow():
        queue.wait_until_current(read_only)
    assert keys(queue) == {("a", "r1")} == expected_queue(read_only)
    with pytest.raises(ReadOnlyStoreError, match="pass view_url="):  # noqa: SIM117
        with ReviewQueue(read_only.url).follow():
            pass
    queue.close()
    read_only.close()


_SQLITE_HEADER = b"SQLite format 3\x00"

NO_DATABASES = st.one_of(
    st.binary(min_size=2, max_size=600).filter(lambda data: not data.startswith(_SQLITE_HEADER)),
    st.text(min_size=2, max_size=200).map(str.encode),
    st.binary(max_size=200).map(gzip.compress),
    st.binary(max_size=5000).map(lambda data: _SQLITE_HEADER + data),
)
"""Files that are no SQLite database: text, any bytes, a compressed file, a header
followed by garbage. (SQLite reads a file of one byte as an empty database.)"""


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=NO_DATABASES, journal=st.sampled_from([None, "-wal", "-shm", "-journal"]))
def test_a_view_in_a_file_that_is_no_database_is_refused_as_a_store_there_is(
    tmp_path: Path, data: bytes, journal: str | None
) -> None:
    """A view URL naming a file that is no SQLite database, or a journal SQLite keeps
    beside the store's database (there or not yet): listing and following the queue
    raise NotAStoreError naming the file, as opening a store on it does, and the file is
    left as it was (no database is made in a journal's name). A view named as the
    store's journal was made a database there, after which the store no longer opened
    (helper-167)."""
    from covonaut_es.errors import NotAStoreError

    store_url = f"sqlite:///{tmp_path / 'threads.db'}"
    open_store(store_url).close()
    if journal is None:
        bad, problem = tmp_path / "view.db", "not a SQLite database"
        bad.write_bytes(data)
        with pytest.raises(NotAStoreError, match=problem):
            open_store(f"sqlite:///{bad}", create_tables=False)
    else:
        bad, problem = tmp_path / f"threads.db{journal}", f"the {journal} file of SQLite database"
        with pytest.raises(NotAStoreError, match=problem):
            open_store(f"sqlite:///{bad}")
    queue = ReviewQueue(store_url, view_url=f"sqlite:///{bad}")
    with pytest.raises(NotAStoreError, match=f"view sqlite:///{bad}: the file .*{problem}"):
        queue.pending()
    with pytest.raises(NotAStoreError, match=problem), queue.follow():
        pass
    queue.close()
    if journal is None:
        assert bad.read_bytes() == data
        view_files = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("view"))
        assert view_files == ["view.db"]
    else:
        assert not bad.exists() or not bad.read_bytes().startswith(_SQLITE_HEADER)
    with open_store(store_url, create_tables=False) as store:
        assert list(store.thread_ids()) == []


_NOW = datetime(2026, 1, 1, tzinfo=UTC)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    journal=st.sampled_from(["-wal", "-journal"]),  # no database is made at a -shm name
    first=st.sampled_from(["store", "view"]),
    link=st.booleans(),
    there=st.sampled_from(["nothing", "one byte", "a database copied in"]),
)
def test_a_store_or_view_whose_journal_would_be_a_database_is_refused(
    tmp_path: Path, journal: str, first: str, link: bool, there: str
) -> None:
    """The reverse order: a store, or a view, made first at ``threads.db-wal`` (or
    ``-journal``); then a store or a view at ``threads.db`` (absent, a file of
    one byte, which SQLite reads as an empty database, or a database copied in), named
    as given or through a link, is refused naming the database its journal would be,
    and nothing is made or changed there. SQLite took the first file as the second
    store's journal and deleted it on close: a store lost (helper-170; with a file at
    ``threads.db``, helper-188)."""
    from covonaut_es.errors import NotAStoreError

    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # hypothesis may run an example again
    kept = folder / f"threads.db{journal}"
    if first == "store":
        with open_store(f"sqlite:///{kept}") as store:
            store.save(AgentThread.start("kept", now=_NOW))
    else:
        ReviewQueue(f"sqlite:///{folder / 'source.db'}", view_url=f"sqlite:///{kept}").close()
        with contextlib.closing(sqlite3.connect(kept)) as view:
            view.execute("CREATE TABLE IF NOT EXISTS marker (id INTEGER)")
            view.commit()
    before = kept.read_bytes()
    target = folder / "threads.db"
    if there == "one byte":
        target.write_bytes(b"\0")
    elif there == "a database copied in":
        with contextlib.closing(sqlite3.connect(folder / "copied.db")) as copied:
            copied.execute("CREATE TABLE copied (id INTEGER)")
        shutil.copyfile(folder / "copied.db", target)
    placed = target.read_bytes() if target.exists() else None
    if link:
        (folder / "sub").mkdir()
        (folder / "sub" / "link.db").symlink_to(target)
        target = folder / "sub" / "link.db"
    problem = f"named so that its {journal} file is SQLite database"
    with pytest.raises(NotAStoreError, match=problem):
        open_store(f"sqlite:///{target}")
    queue = ReviewQueue(f"sqlite:///{folder / 'source.db'}", view_url=f"sqlite:///{target}")
    with pytest.raises(NotAStoreError, match=problem):
        queue.pending()
    queue.close()
    assert (folder / "threads.db").exists() is (placed is not None)
    if placed is not None:
        assert (folder / "threads.db").read_bytes() == placed
        (folder / "threads.db").unlink()  # beside it, the kept store is its journal's name
    assert kept.read_bytes() == before
    if first == "store":
        with open_store(f"sqlite:///{kept}", create_tables=False) as store:
            assert list(store.thread_ids()) == ["kept"]


def test_a_store_opens_beside_its_own_journals(tmp_path: Path) -> None:
    """A live store's own -wal and -shm hold no database header: the rule that refuses
    a database as another's journal opens a second store and a view on the store while
    they are there."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        store.save(AgentThread.start("t", now=_NOW))
        assert (tmp_path / "threads.db-wal").stat().st_size > 0
        assert (tmp_path / "threads.db-shm").exists()
        with open_store(url) as again:
            assert list(again.thread_ids()) == ["t"]
        queue = ReviewQueue(url, view_url=f"sqlite:///{tmp_path / 'view.db'}")
        assert list(queue.pending()) == []
        queue.close()


def test_checking_a_views_file_keeps_the_locks_this_process_holds_on_a_database(
    tmp_path: Path,
) -> None:
    """Checking a view's file named as a database's journal reads that database through
    SQLite, never ``open()``: closing a descriptor of the file drops every POSIX lock
    this process's connections hold on it (a follower, its store open, then never
    caught up), so another process reading it meanwhile would not wait for this one's
    transaction."""
    from covonaut_es.errors import NotAStoreError

    database = tmp_path / "other.db"  # in rollback mode: its locks keep readers out
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("CREATE TABLE parcels (id INTEGER PRIMARY KEY)")
    holder.execute("BEGIN EXCLUSIVE")
    probe = (
        "import sqlite3, sys\n"
        "try:\n"
        f"    sqlite3.connect({str(database)!r}, timeout=0).execute('SELECT * FROM parcels')\n"
        "except sqlite3.OperationalError:\n"
        "    sys.exit(3)\n"
    )
    try:
        store_url = f"sqlite:///{tmp_path / 'threads.db'}"
        open_store(store_url).close()
        queue = ReviewQueue(store_url, view_url=f"sqlite:///{database}-journal")
        with pytest.raises(NotAStoreError, match="the -journal file of SQLite database"):
            queue.pending()
        queue.close()
        assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 3
    finally:
        holder.close()


def test_a_queue_that_creates_no_table_reads_the_store_and_creates_no_file(
    tmp_path: Path,
) -> None:
    """``create_tables=False`` follows an existing store into a view kept elsewhere, as
    ``open_store(create_tables=False)`` reads it; a mistyped path is refused naming it,
    and no file appears there."""
    from covonaut_es.errors import StoreUnavailableError

    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        pause(store, "a", "r1")
        queue = ReviewQueue(url, view_url="memory://", create_tables=False)
        with queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
        assert keys(queue) == {("a", "r1")}
        queue.close()
    missing = tmp_path / "mistyped.db"
    with pytest.raises(StoreUnavailableError, match="there is no SQLite file"):
        ReviewQueue(f"sqlite:///{missing}", view_url="memory://", create_tables=False)
    assert not missing.exists()


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_queue_given_no_compression_follows_a_compressed_store(
    shared_url: str, encrypted: bool
) -> None:
    """A queue opened without ``compress`` reads a compressed store's log as the store
    records it (encrypted too), and lists what waits."""
    key = create_cipher_key() if encrypted else None
    with open_store(shared_url, cipher_key=key, compress=True) as store:
        pause(store, "t", "r1")
        queue = ReviewQueue(shared_url, view_url="memory://", cipher_key=key)
        with queue.follow():
            queue.wait_until_current(store)
            assert keys(queue) == expected_queue(store) == {("t", "r1")}
        queue.close()


def test_following_a_store_opens_its_application_once_and_closes_it_when_stopped(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower follows the very application it opened to create the store's tables
    and check its settings, opens no second one, and closes it when it stops."""
    from covonaut_es.store._application import ThreadsApplication

    with open_store(shared_url) as store:
        pause(store, "t", "r1")
        opened: list[ThreadsApplication] = []
        construct = ThreadsApplication.__init__

        def counted(app: ThreadsApplication, env: Any = None) -> None:
            opened.append(app)
            construct(app, env)

        monkeypatch.setattr(ThreadsApplication, "__init__", counted)
        queue = ReviewQueue(shared_url, view_url="memory://")
        with queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
            assert keys(queue) == expected_queue(store) == {("t", "r1")}
            assert opened == [runner.app]
            assert not runner.app.closing.is_set()
        assert runner.app.closing.is_set()
        queue.close()
