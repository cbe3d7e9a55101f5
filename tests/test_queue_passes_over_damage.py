"""One record that does not decode never stops the reviewer queue of every thread: the
projection passes over it with a warning naming its position, and lists every pause of
every thread that loads and verifies (ADR 0070)."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from eventsourcing.utils import get_topic
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ReviewQueue,
    ScriptedProvider,
    Store,
    Tool,
    Worker,
    create_cipher_key,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.errors import CovonautError, NewerSchemaError, NotAStoreError
from covonaut_es.projections._items import QUEUE_EVENT_TYPES, pending_from
from covonaut_es.store._application import AgentApplication
from covonaut_es.store._topic_codes import compact, stored_forms
from covonaut_es.store._urls import persistence_env
from covonaut_es.workers import NoticeSender
from support import append_raw_event, call, review_tool, sqlite_key

NOW = datetime(2026, 1, 1, tzinfo=UTC)
THREADS = ("a", "b", "c")
QUEUE_TOPICS = sorted(stored_forms(QUEUE_EVENT_TYPES))
PAUSE = compact(get_topic(AgentThread.Interrupted))
STARTED = compact(get_topic(AgentThread.Started))
REVIEW_REQUESTED = compact(get_topic(AgentThread.ReviewRequested))
PASSED_OVER = "passing over the record at log position"
FIRST_EVENT_PASSED_OVER = "of the threads' first events it read"


def _paused(store: Store) -> None:
    """a and b paused on a review of ``pay``, c on a tool's interrupt."""
    pay = Tool("pay", "Pay", {"type": "object"}, lambda ctx, args: "paid", requires_approval=True)
    for thread_id in THREADS:
        tool = "review" if thread_id == "c" else "pay"
        Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("k1", tool, '{"amount": 40}'))]),
                tools=[pay, review_tool()],
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            )
        ).run(f"go {thread_id}")


def _expected(store: Store) -> set[tuple[str, str]]:
    """Every pause of every thread that loads and verifies, as queue items name them."""
    found = set()
    for thread_id in THREADS:
        if not store.verify(thread_id).ok:
            continue
        with contextlib.suppress(CovonautError):
            for pause in store.load(thread_id).pauses:
                found.add((thread_id, pending_from(pause.interrupt, thread_id, NOW).item_id))
    return found


def _listed(store: Store, queue: ReviewQueue | None = None) -> set[tuple[str, str]]:
    """What the queue (a new one in memory by default) lists once current."""
    queue = queue or ReviewQueue(store.url, view_url="memory://")
    try:
        with queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
        return {(item.thread_id, item.item_id) for item in queue.pending()}
    finally:
        queue.close()


@contextlib.contextmanager
def _warnings(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="covonaut_es"):
        yield


def _rewrite(
    path: Path, thread_id: str, nth: int, topic: str | None, state: bytes | None
) -> tuple[int, str, int]:
    """Give the ``nth`` of the records of the thread the queue reads (modulo their
    number: its first event and its queue records) another topic or payload, behind the
    library's back; its log position, topic and version."""
    stream = sqlite_key(thread_aggregate_id(thread_id))
    marks = ",".join("?" * len(QUEUE_TOPICS))
    with closing(sqlite3.connect(path)) as conn, conn:
        rows = conn.execute(
            f"SELECT rowid, topic, state, originator_version FROM stored_events "
            f"WHERE originator_id = ? AND (topic IN ({marks}) OR originator_version = 1) "
            "ORDER BY rowid",
            (stream, *QUEUE_TOPICS),
        ).fetchall()
        rowid, old_topic, old_state, version = rows[nth % len(rows)]
        conn.execute(
            "UPDATE stored_events SET topic = ?, state = ? WHERE rowid = ?",
            (topic or old_topic, old_state if state is None else state, rowid),
        )
    return int(rowid), topic or old_topic, version


_DAMAGE = st.one_of(
    st.tuples(st.sampled_from(QUEUE_TOPICS), st.none()),  # retitled
    st.tuples(st.none(), st.binary(max_size=40)),  # another payload
    st.tuples(st.sampled_from(QUEUE_TOPICS), st.binary(max_size=40)),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    thread_id=st.sampled_from(THREADS),
    nth=st.integers(0, 7),
    damage=_DAMAGE,
    flip=st.none() | st.integers(0, 400),
)
# A thread's Interrupted retitled as a thread's first event (ADR 0067 left it open).
@example(thread_id="a", nth=1, damage=(STARTED, None), flip=None)
# A thread's first event given the payload of another (ADR 0076: the queue reads it).
@example(thread_id="b", nth=0, damage=(None, b'{"key": "b", "state": {}}'), flip=None)
def test_a_rewritten_record_leaves_every_thread_that_loads_listed(
    caplog: pytest.LogCaptureFixture,
    thread_id: str,
    nth: int,
    damage: tuple[str | None, bytes | None],
    flip: int | None,
) -> None:
    """Generated: one of a thread's records the queue reads (its first event, or a queue
    record) retitled as another queue event, its payload replaced, or one bit of it
    flipped: the rebuild finishes, every pause of every thread that loads and verifies
    is listed, and a record passed over is named (a thread's first event, by what it
    is: the queue reads it from its stream, not from the log)."""
    topic, state = damage
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            _paused(store)
        if flip is not None and state is None:
            with closing(sqlite3.connect(path)) as conn:
                stream = sqlite_key(thread_aggregate_id(thread_id))
                (state,) = conn.execute(
                    "SELECT state FROM stored_events WHERE originator_id = ? "
                    "ORDER BY originator_version LIMIT 1 OFFSET 1",
                    (stream,),
                ).fetchone()
            changed = bytearray(state)
            changed[flip % len(changed)] ^= 1 << (flip % 8)
            state = bytes(changed)
        position, stored_topic, version = _rewrite(path, thread_id, nth, topic, state)
        with open_store(f"sqlite:///{path}") as store, _warnings(caplog):
            expected = _expected(store)
            listed = _listed(store)
            unreadable = _decodes_not(store, position)
        assert expected <= listed
        assert len(expected) >= 2 * len(THREADS) // 3  # the other threads, at least
        if unreadable and stored_topic in QUEUE_TOPICS:
            assert f"{PASSED_OVER} {position} " in caplog.text
        if unreadable and version == 1 and stored_topic == STARTED:
            assert FIRST_EVENT_PASSED_OVER in caplog.text


def _decodes_not(store: Store, position: int) -> bool:
    (record,) = store._app.recorder.select_notifications(position, 1)
    try:
        store._app.mapper.to_domain_event(record)
    except CovonautError:
        return True
    return False


def test_a_record_appended_that_does_not_decode_is_passed_over_on_every_back_end(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A record of a pause whose payload is another's (a named state's, say) stops
    neither the queue nor the listing of the other threads' pauses."""
    with open_store(store_url) as store:
        _paused(store)
        append_raw_event(store, "b", PAUSE, b'{"key": "b", "state": {}}')
        with _warnings(caplog):
            listed = _listed(store)
        assert ("a", _item_of(store, "a")) in listed
        assert ("c", _item_of(store, "c")) in listed
        assert PASSED_OVER in caplog.text


def _item_of(store: Store, thread_id: str) -> str:
    (pause,) = store.load(thread_id).pauses
    return pending_from(pause.interrupt, thread_id, NOW).item_id


def test_a_queue_kept_in_the_store_lists_a_repaired_record_once_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store's own queue passes over a record damaged before it read it, and does not
    read it again once repaired, until rebuilt as the operations guide says."""
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as store:
        _listed(store, ReviewQueue(store.url))
        _paused(store)
    with closing(sqlite3.connect(path)) as conn, conn:
        position, state = conn.execute(
            "SELECT rowid, state FROM stored_events WHERE topic = '14' ORDER BY rowid LIMIT 1"
        ).fetchone()
        conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (b"\x00", position))
    with open_store(f"sqlite:///{path}") as store, _warnings(caplog):
        _listed(store, ReviewQueue(store.url))
    assert f"{PASSED_OVER} {position} " in caplog.text
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (state, position))
    with open_store(f"sqlite:///{path}") as store:
        item = (THREADS[0], _item_of(store, THREADS[0]))
        assert item not in _listed(store, ReviewQueue(store.url))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executescript(_REBUILD)
    with open_store(f"sqlite:///{path}") as store:
        assert item in _listed(store, ReviewQueue(store.url))


_REBUILD = """
DELETE FROM covonaut_pauses;
DELETE FROM covonaut_queue_threads;
DELETE FROM covonaut_queue_given_up;
DELETE FROM tracking WHERE application_name LIKE '%+pauses';
"""
"""The operations guide's rebuild of a queue kept in a SQLite store."""


class _TextIds(AgentApplication):
    """An application of one's own that keeps stream ids as text."""


def test_an_application_keeping_text_ids_passes_over_a_record_too(tmp_path: Path) -> None:
    env = {**persistence_env(f"sqlite:///{tmp_path / 'app.db'}"), "ORIGINATOR_ID_TYPE": "text"}
    with closing(_TextIds(env=env)) as app:
        store = Store.from_application(app)
        _paused(store)
        append_raw_event(store, "b", PAUSE, b'{"key": "b", "state": {}}')
        listed = _listed(store, ReviewQueue.from_application(app, view_url="memory://"))
        assert ("a", _item_of(store, "a")) in listed


def test_the_warning_names_no_stream_of_an_encrypted_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A record the queue or a worker passes over is named by its log position alone:
    the stream id, derived from the thread id, is what an encrypted store keeps out of
    clear text."""
    key = create_cipher_key()
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    with open_store(url, cipher_key=key) as store:
        _paused(store)
        append_raw_event(store, "b", PAUSE, b'{"key": "b", "state": {}}')
        with _warnings(caplog):
            _listed(store, ReviewQueue(url, view_url="memory://", cipher_key=key))
            worker = Worker(store, lambda thread_id: AgentConfig(ScriptedProvider([])))
            worker.run(once=True)
    assert f"review queue: {PASSED_OVER}" in caplog.text
    assert f"worker {worker.worker_id}: {PASSED_OVER}" in caplog.text
    stream = thread_aggregate_id("b")
    for shown in (str(stream), stream.hex, "'b'"):
        assert shown not in caplog.text


def test_a_first_event_the_queue_reads_from_its_stream_is_named_by_its_kind_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The queue reads a paused thread's first event from its stream, not from the log
    (ADR 0076): when it does not decode, the queue passes over it with a warning that
    names no stream of an encrypted store, lists no pause of that thread, and lists the
    others'."""
    key = create_cipher_key()
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    with open_store(url, cipher_key=key) as store:
        _paused(store)
        first_of_b = store._records.openings([thread_aggregate_id("b")]).records
    (record,) = first_of_b
    with closing(sqlite3.connect(tmp_path / "sealed.db")) as conn, conn:
        changed = conn.execute(
            "UPDATE stored_events SET state = ? WHERE originator_version = 1 AND state = ?",
            (b"\x00" + record.state[1:], record.state),
        ).rowcount
    assert changed == 1
    with open_store(url, cipher_key=key) as store, _warnings(caplog):
        listed = _listed(store, ReviewQueue(url, view_url="memory://", cipher_key=key))
        assert {thread_id for thread_id, _ in listed} == {"a", "c"}
    assert FIRST_EVENT_PASSED_OVER in caplog.text
    stream = thread_aggregate_id("b")
    for shown in (str(stream), stream.hex, "'b'"):
        assert shown not in caplog.text


_NEWER_RECORD = b'{"_v": 99, "key": "b"}'
"""A record as a newer version of the library might write it: only an upgrade reads it."""


def _run_worker(store: Store) -> None:
    Worker(store, lambda thread_id: AgentConfig(ScriptedProvider([]))).run(once=True)


def _send_notices(store: Store) -> None:
    NoticeSender(store, lambda notice: None).send_pending()


def _find_review(store: Store) -> None:
    # The index passes the record over; the lookup, finding no thread in it, reads the
    # log, which refuses it as every read of a thread does.
    with pytest.raises(NewerSchemaError, match="upgrade covonaut-es to read it"):
        store.threads_with_review("no such review")


@pytest.mark.parametrize(
    ("read", "topic"),
    [
        pytest.param(lambda store: _listed(store), PAUSE, id="queue in memory"),
        pytest.param(
            lambda store: _listed(store, ReviewQueue(store.url)), PAUSE, id="queue in store"
        ),
        pytest.param(_run_worker, PAUSE, id="worker"),
        pytest.param(_send_notices, REVIEW_REQUESTED, id="review notices"),
        pytest.param(_find_review, REVIEW_REQUESTED, id="review index"),
    ],
)
def test_a_record_a_newer_version_wrote_is_passed_over_saying_to_upgrade(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, read: Callable[[Store], object], topic: str
) -> None:
    """A record that does not decode because it says a newer version of the library wrote
    it is passed over as damage is (a row retitled reads alike, and must not stop a
    reader of every thread), by each reader that passes over records; the warning says
    to upgrade, not to repair the record."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url) as store:
        _paused(store)
        append_raw_event(store, "b", topic, _NEWER_RECORD)
    with open_store(url) as store, _warnings(caplog):
        read(store)
    assert "NewerSchemaError: a newer version of covonaut-es wrote it" in caplog.text
    assert "upgrade covonaut-es to read it" in caplog.text


@pytest.mark.parametrize("record", [_NEWER_RECORD, b'{"key": "b", "state": {}}'])
def test_a_listing_that_passed_over_a_record_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], record: bytes
) -> None:
    """A queue counts the records it passed over; the one-shot ``reviews`` lists what it
    could and exits 1, saying in one line that the list may lack what they hold (a
    record a newer version wrote, or a damaged one), where it exited 0 as if complete.
    A queue that passed over nothing counts none, and the command exits 0."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url) as store:
        _paused(store)
        queue = ReviewQueue(url, view_url="memory://")
        _listed(store, queue)
        assert queue.records_passed_over() == 0
        assert main(["reviews", "--store", url]) == 0
        append_raw_event(store, "b", PAUSE, record)
        queue = ReviewQueue(url, view_url="memory://")
        listed = _listed(store, queue)
        assert queue.records_passed_over() == 1
    assert ("a", _item_of_url(url, "a")) in listed
    capsys.readouterr()
    assert main(["reviews", "--store", url, "--json"]) == 1
    out, err = capsys.readouterr()
    assert '"thread_id":"a"' in out
    assert err.splitlines()[-1] == (
        "covonaut-es reviews: 1 record(s) of the log were passed over (see the warnings "
        "above): what waits in their threads may be missing from this list"
    )


def _item_of_url(url: str, thread_id: str) -> str:
    with open_store(url) as store:
        return _item_of(store, thread_id)


_LOG_READERS: dict[str, tuple[type, Callable[[Store], object]]] = {
    "the fork index": (AgentThread.Forked, lambda store: store.children("a")),
    "the review index": (
        AgentThread.ReviewRequested,
        lambda store: store.threads_with_review(
            store.load("a").reviews_awaiting[0].request.review_id
        ),
    ),
}
"""Readers that index the whole log, each with an event type it reads and a call that
brings it up to date."""


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reader=st.sampled_from(sorted(_LOG_READERS)), payload=st.binary(max_size=40))
def test_every_reader_of_the_log_says_which_record_it_passed_over(
    caplog: pytest.LogCaptureFixture, reader: str, payload: bytes
) -> None:
    """Property: a record that does not decode, of an event type an index of the whole
    log reads, is passed over with a warning naming the reader and its log position,
    and the reader answers on. The fork index passed over such a record in silence, so
    a fork left every tree with nothing in the logs (helper-199)."""
    event_type, read = _LOG_READERS[reader]
    folder = tempfile.mkdtemp()  # a SQLite store keeps a review index; memory does not
    with open_store(f"sqlite:///{folder}/threads.db") as store:
        _paused(store)
        store.fork("a", new_thread_id="a-fork")
        append_raw_event(store, "b", compact(get_topic(event_type)), payload)
        position = store.log.end()
        with _warnings(caplog):
            read(store)
    assert f"{reader}: {PASSED_OVER} {position} " in caplog.text


@pytest.fixture(scope="module")
def kept_view(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A store's URL, and the file of a view kept apart that follows it, current and
    checkpointed into the file whole."""
    folder = tmp_path_factory.mktemp("kept")
    url, view = f"sqlite:///{folder / 's.db'}", folder / "view.db"
    with open_store(url) as store:
        _paused(store)
        queue = ReviewQueue(url, view_url=f"sqlite:///{view}")
        try:
            with queue.follow() as runner:
                queue.wait_until_current(store, runner=runner)
        finally:
            queue.close()
    with closing(sqlite3.connect(view)) as database:
        database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return url, view


_VIEW_READS: dict[str, Callable[[ReviewQueue, Store], object]] = {
    "pending": lambda queue, store: queue.pending(),
    "page": lambda queue, store: queue.page(limit=2),
    "position": lambda queue, store: queue.position(),
    "threads with review": lambda queue, store: queue.threads_with_review("r", store),
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    page=st.integers(1, 63), offset=st.integers(0, 4080), garbage=st.binary(min_size=1, max_size=16)
)
@example(page=1, offset=8, garbage=b"X" * 16)  # a tracking row's name read as None
@example(page=2, offset=0, garbage=b"X" * 16)  # "database disk image is malformed"
@example(page=10, offset=2865, garbage=b"\x80")  # a schema name no UTF-8, in its error
def test_a_damaged_page_of_a_view_kept_apart_gives_typed_errors_only(
    kept_view: tuple[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    page: int,
    offset: int,
    garbage: bytes,
) -> None:
    """Bytes of any page of a view's own file overwritten: every read of the queue
    either works or fails with the library's typed error, which says the view is built
    again from the log once deleted; never the driver's own error, nor one of
    eventsourcing's, nor a TypeError from a row read as None (helper-221)."""
    url, view = kept_view
    damaged = bytearray(view.read_bytes())
    start = (page % (len(damaged) // 4096)) * 4096 + offset
    damaged[start : start + len(garbage)] = garbage
    copy = tmp_path_factory.mktemp("damaged") / "view.db"
    copy.write_bytes(bytes(damaged))
    with open_store(url) as store:
        for name, read in _VIEW_READS.items():
            queue = ReviewQueue(url, view_url=f"sqlite:///{copy}")
            try:
                read(queue, store)
            except NotAStoreError:
                pass  # its header damaged: not a file to delete unseen
            except CovonautError as exc:
                assert "built again from the log" in str(exc), (name, exc)
            except Exception as exc:  # the point: nothing else
                raise AssertionError(f"{name}: {type(exc).__module__}.{exc!r}") from exc
            finally:
                queue.close()
