"""The reviewer queue read by pages and by index: after any sequence of reviews opened,
decided, expired, forked and given up (several reviews opening at one instant), every
way of paging the queue (any page size, filter and order) lists exactly the naive
listing (every pending item, sorted and filtered), each item once; a review's threads
are looked up exactly; and a batch applied in one transaction leaves the view as one
event at a time does. Cursors from outside are refused with a typed error."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Message,
    ReviewQueue,
    Role,
    Store,
    ThreadStatus,
    ToolCall,
    create_cipher_key,
    open_store,
)
from covonaut_es.domain import AgentThread, PauseKind
from covonaut_es.errors import CovonautError, InvalidPageRequestError
from covonaut_es.projections import MAX_PAGE_SIZE, PendingReview, QueueFilter
from covonaut_es.service import ThreadService, review_submission
from test_review_queue_property import expected, listed
from test_service import RITA, VERIFIER

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Reviews:
    """A store whose threads each open reviews on ``pay``/``ask`` calls, and the
    commands that decide, expire, fork and give them up."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.service = ThreadService(store, verifier=VERIFIER, clock=lambda: T0 + timedelta(1))
        self.rita = self.service.reviewer(RITA)
        self.threads: list[str] = []
        self.names = itertools.count()

    def pick(self, n: int) -> str | None:
        return self.threads[n % len(self.threads)] if self.threads else None

    def open(self, minute: int, tools: tuple[str, ...], deadline: bool) -> None:
        """A new thread holding a review of each call (at one instant: keys tie on time)."""
        thread_id = f"t{next(self.names)}"
        now = T0 + timedelta(minutes=minute)
        thread = AgentThread.start(thread_id, now=now)
        calls = [ToolCall(f"c{i}", tool, "{}") for i, tool in enumerate(tools)]
        thread.append_message(Message(Role.ASSISTANT, tool_calls=tuple(calls)), now=now)
        thread.call_tools(calls, now=now)
        for call in calls:
            due = now + timedelta(minutes=5) if deadline else None
            thread.request_review(call, {"n": minute}, now=now, deadline=due)
        self.store.save(thread)
        self.threads.append(thread_id)

    def decide(self, n: int) -> None:
        thread_id = self.pick(n)
        if thread_id is None:
            return
        for review in self.store.load(thread_id).reviews.pending:
            try:
                self.service.decide(
                    review.request.review_id,
                    review_submission("approve"),
                    reviewer=self.rita,
                    thread_id=thread_id,
                )
            except CovonautError:
                return  # expired, or the thread was given up
            return

    def expire(self, n: int) -> None:
        thread_id = self.pick(n)
        if thread_id is not None:
            self.service.expire_reviews(thread_id)

    def fork(self, n: int) -> None:
        thread_id = self.pick(n)
        if thread_id is None:
            return
        try:
            self.threads.append(self.store.fork(thread_id))
        except CovonautError:
            return  # given up by then

    def abandon(self, n: int) -> None:
        thread_id = self.pick(n)
        if thread_id is not None and self.store.state_at(thread_id).status is not (
            ThreadStatus.ABANDONED
        ):
            ThreadService(self.store).abandon(thread_id, "gone")


indexes = st.integers(0, 9)
steps = st.one_of(
    st.tuples(
        st.just("open"),
        st.integers(0, 3),
        st.lists(st.sampled_from(["pay", "ask"]), min_size=1, max_size=3).map(tuple),
        st.booleans(),
    ),
    st.tuples(st.just("decide"), indexes),
    st.tuples(st.just("expire"), indexes),
    st.tuples(st.just("fork"), indexes),
    st.tuples(st.just("abandon"), indexes),
)


def key_of(item: PendingReview) -> tuple[str, str, str]:
    return (item.requested_at.isoformat(), item.thread_id, item.item_id)


def walk(queue: ReviewQueue, limit: int, only: QueueFilter, newest_first: bool) -> Iterator[Any]:
    after = None
    while True:
        page = queue.page(after=after, limit=limit, only=only, newest_first=newest_first)
        assert len(page.items) <= limit
        yield from page.items
        if page.next_cursor is None:
            return
        assert len(page.items) == limit  # only the last page is short
        after = page.next_cursor


@pytest.fixture(params=["memory", "sqlite"])
def new_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    def open_() -> Store:
        if request.param == "memory":
            return open_store("memory://")
        return open_store(f"sqlite:///{tmp_path_factory.mktemp('pages') / 'threads.db'}")

    return open_


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=st.lists(steps, min_size=1, max_size=14),
    limit=st.integers(1, 4),
    thread=indexes,
    newest_first=st.booleans(),
)
def test_every_paging_of_the_queue_is_the_naive_listing(
    new_store: Any, plan: list[tuple[Any, ...]], limit: int, thread: int, newest_first: bool
) -> None:
    """Property: the queue's pages, walked by cursor at any size, with any filter and in
    either order, list the pending items the threads say wait, sorted, each once; and the
    index of review ids names the threads the naive listing does."""
    store = new_store()
    reviews = Reviews(store)
    queue = ReviewQueue(store.url)
    try:
        with queue.follow() as runner:
            for name, *args in plan:
                getattr(reviews, name)(*args)
            queue.wait_until_current(store, runner=runner)
        everything = sorted(queue.pending(), key=key_of)
        assert listed(queue) == expected(store)
        assert len(everything) == len(listed(queue))
        named = reviews.pick(thread)
        for only in (
            QueueFilter(),
            QueueFilter(thread_id=named),
            QueueFilter(tool_name="pay"),
            QueueFilter(kind=PauseKind.REVIEW, thread_id=named, tool_name="ask"),
        ):
            naive = [i for i in everything if only.matches(i)]
            if newest_first:
                naive.reverse()
            assert list(walk(queue, limit, only, newest_first)) == naive, only
        for review_id in {i.review_id for i in everything} | {"no-such-review"}:
            holders = [i.thread_id for i in everything if i.review_id == review_id]
            assert queue.threads_with_review(review_id or "", store) == tuple(
                dict.fromkeys(holders)
            )
    finally:
        queue.close()
        store.close()


def test_a_batch_in_one_transaction_leaves_the_view_as_events_one_at_a_time(
    shared_url: str,
) -> None:
    """A queue rebuilt from a long log, a batch per transaction, lists what a queue that
    followed the same events one at a time lists, and records the log's last position."""
    store = open_store(shared_url)
    reviews = Reviews(store)
    live = ReviewQueue(store.url, view_url="memory://")
    with live.follow() as runner:
        for index in range(40):
            reviews.open(index % 3, ("pay", "ask"), deadline=index % 2 == 0)
            reviews.fork(index * 7)
            live.wait_until_current(store, runner=runner)  # one event after another
            if index % 4 == 0:
                reviews.decide(index)
                reviews.expire(index + 1)
                reviews.abandon(index + 2)
        live.wait_until_current(store, runner=runner)
    rebuilt = ReviewQueue(store.url)  # in the store's own database
    with rebuilt.follow() as runner:  # the whole log at once: batches
        rebuilt.wait_until_current(store, runner=runner)
    assert rebuilt.pending() == live.pending()
    assert listed(rebuilt) == expected(store)
    assert rebuilt.position() > 0
    assert not store._records.has_events_after(rebuilt.position(), follower="q")
    live.close()
    rebuilt.close()
    store.close()


def test_a_page_after_an_item_decided_meanwhile_neither_repeats_nor_skips(
    shared_url: str,
) -> None:
    """A cursor names a position, not an offset: deciding an item already shown leaves
    the next page starting right after the last item shown."""
    store = open_store(shared_url)
    reviews = Reviews(store)
    queue = ReviewQueue(store.url)
    with queue.follow() as runner:
        for minute in range(6):
            reviews.open(minute, ("pay",), deadline=False)
        queue.wait_until_current(store, runner=runner)
        first = queue.page(limit=3)
        reviews.decide(0)  # the first item shown
        queue.wait_until_current(store, runner=runner)
        second = queue.page(after=first.next_cursor, limit=3)
    assert [i.thread_id for i in first.items] == ["t0", "t1", "t2"]
    assert [i.thread_id for i in second.items] == ["t3", "t4", "t5"]
    assert second.next_cursor is None
    queue.close()
    store.close()


@settings(max_examples=30, deadline=None)
@given(cursor=st.text(max_size=60) | st.binary(max_size=40).map(lambda b: b.hex()))
def test_a_cursor_that_no_page_gave_is_refused_with_a_typed_error(cursor: str) -> None:
    """Property: whatever text comes as a cursor, the queue lists a page after a
    position it names, or refuses it with InvalidPageRequestError; never anything else."""
    with open_store("memory://") as store:
        queue = ReviewQueue(store.url)
        try:
            queue.page(after=cursor, limit=2)
        except InvalidPageRequestError:
            pass
        finally:
            queue.close()


@pytest.mark.parametrize("limit", [0, -1, MAX_PAGE_SIZE + 1, True])
def test_a_page_size_out_of_bounds_is_refused(limit: Any) -> None:
    """A page holds 1 to MAX_PAGE_SIZE items; any other size is refused, naming the bound."""
    with open_store("memory://") as store:
        queue = ReviewQueue(store.url)
        with pytest.raises(InvalidPageRequestError, match=str(MAX_PAGE_SIZE)):
            queue.page(limit=limit)
        queue.close()


def test_finding_a_reviews_thread_uses_the_index_and_the_log_when_it_cannot(
    shared_url: str,
) -> None:
    """With the queue as its index, the service decides a review named by id alone on
    its thread; a review a fork inherited is ambiguous until the thread is named; a
    review already decided is found in the log and refused as decided."""
    store = open_store(shared_url)
    reviews = Reviews(store)
    queue = ReviewQueue(store.url)
    service = ThreadService(store, verifier=VERIFIER, reviews=queue)
    rita = service.reviewer(RITA)
    with queue.follow() as runner:
        for minute in range(3):
            reviews.open(minute, ("pay",), deadline=False)
        queue.wait_until_current(store, runner=runner)
        [review] = store.load("t1").reviews.pending
        review_id = review.request.review_id
        decision = service.decide(review_id, review_submission("approve"), reviewer=rita)
        assert decision.thread_id == "t1"
        with pytest.raises(CovonautError, match="already"):
            service.decide(review_id, review_submission("approve"), reviewer=rita)
        [inherited] = store.load("t2").reviews.pending
        store.fork("t2", new_thread_id="t2-fork")
        queue.wait_until_current(store, runner=runner)
        inherited_id = inherited.request.review_id
        assert queue.threads_with_review(inherited_id, store) == ("t2", "t2-fork")
        with pytest.raises(CovonautError, match="several threads"):
            service.decide(inherited_id, review_submission("approve"), reviewer=rita)
    queue.close()
    store.close()


def test_the_sealed_queue_of_an_encrypted_store_pages_and_finds_reviews_alike(
    shared_url: str,
) -> None:
    """The sealed queue (no thread, tool or review id in clear) pages by its keyed
    columns (items requested at one instant in the order of their keyed digests),
    filters by tool and kind after opening the items, and finds a review's threads by
    the keyed digest of its id: each as the naive listing says."""
    key = create_cipher_key()
    store = open_store(shared_url, cipher_key=key)
    reviews = Reviews(store)
    queue = ReviewQueue(store.url, cipher_key=key)
    with queue.follow() as runner:
        for minute in range(5):
            reviews.open(minute % 2, ("pay", "ask", "pay"), deadline=False)
        reviews.fork(1)
        reviews.decide(2)
        queue.wait_until_current(store, runner=runner)
    everything = sorted(queue.pending(), key=key_of)
    assert len(everything) == 17
    for only in (QueueFilter(), QueueFilter(tool_name="ask"), QueueFilter(thread_id="t1")):
        for newest_first in (False, True):
            naive = [i for i in everything if only.matches(i)]
            walked = list(walk(queue, 2, only, newest_first))
            times = [i.requested_at for i in walked]
            assert times == sorted(times, reverse=newest_first)
            assert sorted(walked, key=key_of) == naive
    for item in everything:
        holders = {i.thread_id for i in everything if i.review_id == item.review_id}
        found = queue.threads_with_review(item.review_id or "", store)
        assert found is not None and sorted(found) == sorted(holders)
    queue.close()
    store.close()
