"""Forged page cursors: a cursor that decodes but names no place a view could hold (empty
keys, a NUL, a time that is no timestamp as a view writes it, another spelling of a
cursor's bytes) is refused with InvalidPageRequestError, by the queue and by the inbox
with 400, on every back end; one that names such a place lists only items after it."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import ReviewQueue, open_store
from covonaut_es.errors import InvalidPageRequestError
from covonaut_es.projections._paging import QueueKey, encode_cursor
from inbox_support import current, inbox_client
from test_approvals import ALICE
from test_review_queue_pages import Reviews, key_of

FORGED = [
    encode_cursor(QueueKey("", "", "")),
    base64.b64encode(b'["","",""]').decode(),  # padded, and not the URL-safe alphabet
    base64.urlsafe_b64encode(b'["","",""]').decode(),
    base64.urlsafe_b64encode(b'[ "2026-01-01T00:00:00+00:00", "t0", "c0" ]').decode(),
    encode_cursor(QueueKey("2026-01-01T00:00:00+00:00", "t0\x00", "c0")),
    encode_cursor(QueueKey("2026-01-01 00:00:00+00:00", "t0", "c0")),
    encode_cursor(QueueKey("yesterday", "t0", "c0")),
]


@pytest.fixture
def queue(shared_url: str) -> Iterator[ReviewQueue]:
    """A queue following a store that holds six pending reviews."""
    with open_store(shared_url) as store:
        reviews = Reviews(store)
        for minute in range(3):
            reviews.open(minute, ("pay", "ask"), deadline=False)
        queue = ReviewQueue(store.url)
        with queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
            yield queue
        queue.close()


@pytest.mark.parametrize("cursor", FORGED)
def test_a_forged_cursor_is_refused_on_every_back_end(queue: ReviewQueue, cursor: str) -> None:
    """A cursor no page gave, which decodes to a position, is refused with the typed
    error: never a page from the start, nor the database's own error."""
    with pytest.raises(InvalidPageRequestError, match="ask for page one"):
        queue.page(after=cursor, limit=2)


def _could_be_a_position(key: QueueKey) -> bool:
    """The test's own reading of a place a view could hold."""
    try:
        canonical = datetime.fromisoformat(key.requested_at).isoformat() == key.requested_at
    except ValueError:
        return False
    return canonical and all(k and "\x00" not in k for k in (key.thread_key, key.item_key))


_TIMES = st.datetimes(timezones=st.sampled_from([UTC, None])).map(datetime.isoformat) | st.text(
    max_size=30
)
_KEYS = st.sampled_from(["", "t0", "t1", "c0", "c1", "\x00", "t0\x00"]) | st.text(max_size=12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.builds(QueueKey, _TIMES, _KEYS, _KEYS),
    newest_first=st.booleans(),
)
def test_a_structurally_valid_cursor_lists_after_its_place_or_is_refused(
    queue: ReviewQueue, key: QueueKey, newest_first: bool
) -> None:
    """Property: a cursor in the form a page gives lists only items past the place it
    names when that place is one a view could hold, and is refused with the typed error
    when it is not; nothing else ever comes out."""
    try:
        page = queue.page(after=encode_cursor(key), limit=10, newest_first=newest_first)
    except InvalidPageRequestError:
        assert not _could_be_a_position(key)
        return
    assert _could_be_a_position(key)
    bound = (key.requested_at, key.thread_key, key.item_key)
    for item in page.items:
        assert (key_of(item) < bound) if newest_first else (key_of(item) > bound)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cursor=st.text(max_size=80)
    | st.binary(max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode().rstrip("="))
    | st.lists(st.text(max_size=8), max_size=4).map(
        lambda parts: base64.urlsafe_b64encode(msgspec.json.encode(parts)).decode()
    )
)
def test_any_text_as_a_cursor_gives_a_page_or_the_typed_error(
    queue: ReviewQueue, cursor: str
) -> None:
    """Property: whatever text comes as a cursor, on a back end on disk, the queue
    refuses it with InvalidPageRequestError, or it is a cursor in the form a page gives,
    naming a place a view could hold, and the page lists only items past it."""
    try:
        page = queue.page(after=cursor, limit=2)
    except InvalidPageRequestError:
        return
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    key = msgspec.json.decode(raw, type=QueueKey)
    assert encode_cursor(key) == cursor
    assert _could_be_a_position(key)
    bound = (key.requested_at, key.thread_key, key.item_key)
    assert all(key_of(item) > bound for item in page.items)


@pytest.mark.parametrize("cursor", FORGED[:2] + FORGED[4:5])
def test_the_inbox_answers_400_to_a_forged_cursor(shared_url: str, cursor: str) -> None:
    """GET /api/reviews?after= with a forged cursor answers 400 with the error, on every
    back end: never the first page, nor a 500."""
    with open_store(shared_url) as store:
        Reviews(store).open(0, ("pay",), deadline=False)
        with inbox_client(store) as client:
            current(client)
            response = client.get(
                "/api/reviews",
                params={"after": cursor},
                headers={"Authorization": f"Bearer {ALICE}"},
            )
            assert response.status_code == 400, response.text
            assert "page one" in response.json()["error"]
