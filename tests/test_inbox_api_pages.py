"""``GET /api/reviews`` and ``GET /api/pauses`` in pages: a bounded page by default, the
next page named by a cursor in the ``Link`` and ``X-Next-Cursor`` headers, the pages
together the whole listing in order; a cursor or size that no page gave answers 400."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import open_store
from covonaut_es.inbox._api import REVIEWS_PAGE_SIZE
from covonaut_es.projections import MAX_PAGE_SIZE
from inbox_support import current, inbox_client
from test_approvals import ALICE
from test_review_queue_pages import Reviews

LISTINGS = ["/api/reviews", "/api/pauses"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def key(item: dict[str, Any]) -> tuple[str, str]:
    """What names one listed item: its thread and its call (a review's call)."""
    return item["thread_id"], item.get("tool_call_id") or item["review_id"]


def walked(client: Any, url: str, size: int) -> tuple[list[dict[str, Any]], int]:
    """Every item of the listing at ``url``, read page by page by the ``Link`` headers,
    each page at most ``size`` long; and the number of pages."""
    found, pages = [], 0
    while url:
        response = client.get(url, headers=bearer(ALICE))
        assert response.status_code == 200, response.text
        assert len(response.json()) <= size
        found.extend(response.json())
        pages += 1
        link = response.headers.get("link")
        named = re.fullmatch(r'<([^>]+)>; rel="next"', link) if link else None
        url = named.group(1) if named else ""
        assert (named is None) == ("x-next-cursor" not in response.headers)
    return found, pages


@pytest.mark.parametrize("listing", LISTINGS)
def test_the_items_come_in_pages_that_together_are_the_whole_listing(
    tmp_path: Path, listing: str
) -> None:
    """Walking the pages by their Link headers lists every item once, oldest first,
    as one page of the largest size does; the last page has no next link."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        reviews = Reviews(store)
        for minute in range(7):
            reviews.open(minute % 3, ("pay", "ask"), deadline=False)
        with inbox_client(store) as client:
            current(client)
            whole = client.get(f"{listing}?limit={MAX_PAGE_SIZE}", headers=bearer(ALICE))
            assert whole.status_code == 200, whole.text
            assert "link" not in whole.headers
            assert len(whole.json()) == 14
            found, pages = walked(client, f"{listing}?limit=3", 3)
            assert pages == 5
            assert found == whole.json()
            assert len({key(item) for item in found}) == 14


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    threads=st.lists(st.integers(min_value=0, max_value=3), min_size=0, max_size=8),
    size=st.integers(min_value=1, max_value=6),
    listing=st.sampled_from(LISTINGS),
)
def test_pages_of_any_size_list_every_item_once_in_order(
    tmp_path_factory: pytest.TempPathFactory, threads: list[int], size: int, listing: str
) -> None:
    """Over any queue (threads opening reviews at tied or distinct times) and any page
    size, the pages walked by their links are the whole listing, each item once."""
    path = tmp_path_factory.mktemp("pages") / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        reviews = Reviews(store)
        for minute in threads:
            reviews.open(minute, ("pay", "ask", "pay")[: minute % 3 + 1], deadline=False)
        with inbox_client(store) as client:
            current(client)
            whole = client.get(f"{listing}?limit={MAX_PAGE_SIZE}", headers=bearer(ALICE)).json()
            found, pages = walked(client, f"{listing}?limit={size}", size)
            assert found == whole
            assert len({key(item) for item in found}) == len(found)
            assert pages == max(1, -(-len(whole) // size))


@pytest.mark.parametrize("listing", LISTINGS)
def test_the_default_page_is_bounded(tmp_path: Path, listing: str) -> None:
    """Without ?limit=, a page holds at most the default size, and names the next."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        reviews = Reviews(store)
        for minute in range(REVIEWS_PAGE_SIZE // 3 + 1):
            reviews.open(minute, ("pay", "ask", "pay"), deadline=False)
        with inbox_client(store) as client:
            current(client)
            response = client.get(listing, headers=bearer(ALICE))
            assert len(response.json()) == REVIEWS_PAGE_SIZE
            assert response.headers["x-next-cursor"]


@pytest.mark.parametrize(
    "query",
    [
        "?after=not-a-cursor",
        "?after=" + "A" * 5000,
        "?limit=0",
        f"?limit={MAX_PAGE_SIZE + 1}",
        "?limit=ten",
        "?limit=%EF%BC%91",  # a fullwidth digit one
        "?limit=1&limit=2",
        "?after=a&after=b",
    ],
)
@pytest.mark.parametrize("listing", LISTINGS)
def test_a_cursor_or_size_no_page_gave_answers_400(
    tmp_path: Path, query: str, listing: str
) -> None:
    """A refused page request says what was wrong, with 400, and lists nothing."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        Reviews(store).open(0, ("pay",), deadline=False)
        with inbox_client(store) as client:
            current(client)
            response = client.get(f"{listing}{query}", headers=bearer(ALICE))
            assert response.status_code == 400, response.text
            assert "error" in response.json()
