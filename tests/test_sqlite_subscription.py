"""A SQLite store's subscription (what the queue and the workers follow the log by):
every notification after the start, of the topics asked for, once and in order,
however reads and writes interleave; a stop ends a reader waiting for more."""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from eventsourcing.persistence import ConnectionPoolClosedError, Notification, StoredEvent
from eventsourcing.sqlite import SQLiteDatastore
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from covonaut_es.store._backends._sqlite_polling import (
    PollingSQLiteApplicationRecorder,
    PollingSubscription,
)

TOPICS = ("a", "b", "c")


def _recorder(path: Path) -> PollingSQLiteApplicationRecorder:
    recorder = PollingSQLiteApplicationRecorder(SQLiteDatastore(str(path)))
    recorder.create_table()
    return recorder


def _append(recorder: PollingSQLiteApplicationRecorder, topics: list[str]) -> None:
    stream = uuid.uuid4()
    recorder.insert_events(
        [StoredEvent(stream, version, topic, b"{}") for version, topic in enumerate(topics, 1)]
    )


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[PollingSQLiteApplicationRecorder]:
    found = _recorder(tmp_path / "log.db")
    yield found
    found.datastore.close()


class Interleaved(RuleBasedStateMachine):
    """Writes and reads in any order: what was read is exactly the log's notifications
    of the wanted topics after the start, in order, up to the last one read."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp())
        self.recorder = _recorder(self.directory / "log.db")
        self.subscription: PollingSubscription | None = None
        self.read: list[Notification] = []
        self.wanted: tuple[str, ...] = ()
        self.start = 0

    @rule(topics=st.lists(st.sampled_from(TOPICS), min_size=1, max_size=7))
    def write(self, topics: list[str]) -> None:
        _append(self.recorder, topics)

    @rule(
        wanted=st.lists(st.sampled_from(TOPICS), unique=True, max_size=2),
        back=st.integers(0, 3),
        page_size=st.integers(1, 4),
    )
    def subscribe(self, wanted: list[str], back: int, page_size: int) -> None:
        if self.subscription is not None:
            self.subscription.stop()
        last = self.recorder.max_notification_id() or 0
        self.start, self.wanted, self.read = max(0, last - back), tuple(wanted), []
        self.subscription = PollingSubscription(self.recorder, gt=self.start, topics=wanted)
        self.subscription.page_size = page_size

    @rule(most=st.integers(1, 9))
    def take(self, most: int) -> None:
        if self.subscription is None:
            return
        after = self.read[-1].id if self.read else self.start
        for _ in range(min(most, len(self.expected(after)))):
            self.read.append(next(self.subscription))

    def expected(self, after: int) -> list[Notification]:
        found = self.recorder.select_notifications(
            after, 10_000, topics=self.wanted, inclusive_of_start=False
        )
        return list(found)

    @invariant()
    def read_is_the_log_in_order(self) -> None:
        expected = self.expected(self.start)[: len(self.read)]
        assert [n.id for n in self.read] == [n.id for n in expected]
        assert [n.topic for n in self.read] == [n.topic for n in expected]

    @invariant()
    def buffered_never_blocks(self) -> None:
        if self.subscription is not None and self.subscription.buffered():
            after = self.read[-1].id if self.read else self.start
            assert self.expected(after), "buffered() with nothing left to read"

    def teardown(self) -> None:
        if self.subscription is not None:
            self.subscription.stop()
        self.recorder.datastore.close()
        shutil.rmtree(self.directory)


Interleaved.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
test_reads_every_wanted_notification_once_in_order = Interleaved.TestCase


def test_a_reader_waiting_at_the_end_of_the_log_takes_what_is_written_next(
    recorder: PollingSQLiteApplicationRecorder,
) -> None:
    _append(recorder, ["a"])
    subscription = PollingSubscription(recorder, topics=["b"])
    taken: list[Notification] = []
    reader = threading.Thread(target=lambda: taken.append(next(subscription)))
    reader.start()
    _append(recorder, ["a", "b"])
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert [n.topic for n in taken] == ["b"]
    subscription.stop()


def test_a_stop_ends_a_reader_waiting_for_more(
    recorder: PollingSQLiteApplicationRecorder,
) -> None:
    subscription = PollingSubscription(recorder)
    ended = threading.Event()

    def read() -> None:
        for _ in subscription:
            pass
        ended.set()

    reader = threading.Thread(target=read)
    reader.start()
    subscription.stop()
    reader.join(timeout=10)
    assert ended.is_set()


def test_nothing_is_taken_after_a_stop(recorder: PollingSQLiteApplicationRecorder) -> None:
    _append(recorder, ["a", "a", "a"])
    with PollingSubscription(recorder) as subscription:
        assert next(subscription).id == 1
        assert subscription.buffered()
    assert not subscription.buffered()
    with pytest.raises(StopIteration):
        next(subscription)


def test_a_failed_select_is_raised_to_the_reader(
    recorder: PollingSQLiteApplicationRecorder,
) -> None:
    subscription = PollingSubscription(recorder)
    recorder.datastore.close()
    with pytest.raises(ConnectionPoolClosedError):
        next(subscription)
