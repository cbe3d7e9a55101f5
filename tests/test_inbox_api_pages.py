"""``GET /api/reviews`` in pages: a bounded page by default, the next page named by a
cursor in the ``Link`` and ``X-Next-Cursor`` headers, the pages together the whole
listing in order; a cursor or size that no page gave answers 400."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from covonaut_es import open_store
from covonaut_es.inbox._api import REVIEWS_PAGE_SIZE
from covonaut_es.projections import MAX_PAGE_SIZE
from inbox_support import current, inbox_client
from test_approvals import ALICE
from test_review_queue_pages import Reviews


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_reviews_come_in_pages_that_together_are_the_whole_listing(tmp_path: Path) -> None:
    """Walking the pages by their Link headers lists every review once, oldest first,
    as one page of the largest size does; the last page has no next link."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        reviews = Reviews(store)
        for minute in range(7):
            reviews.open(minute % 3, ("pay", "ask"), deadline=False)
        with inbox_client(store) as client:
            current(client)
            whole = client.get(f"/api/reviews?limit={MAX_PAGE_SIZE}", headers=bearer(ALICE))
            assert whole.status_code == 200, whole.text
            assert "link" not in whole.headers
            assert len(whole.json()) == 14
            walked, url, pages = [], "/api/reviews?limit=3", 0
            while url:
                response = client.get(url, headers=bearer(ALICE))
                assert response.status_code == 200, response.text
                assert len(response.json()) <= 3
                walked.extend(response.json())
                pages += 1
                link = response.headers.get("link")
                found = re.fullmatch(r'<([^>]+)>; rel="next"', link) if link else None
                url = found.group(1) if found else ""
                assert (found is None) == ("x-next-cursor" not in response.headers)
            assert pages == 5
            assert walked == whole.json()
            assert len({(r["thread_id"], r["review_id"]) for r in walked}) == 14


def test_the_default_page_is_bounded(tmp_path: Path) -> None:
    """Without ?limit=, a page holds at most the default size, and names the next."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        reviews = Reviews(store)
        for minute in range(REVIEWS_PAGE_SIZE // 3 + 1):
            reviews.open(minute, ("pay", "ask", "pay"), deadline=False)
        with inbox_client(store) as client:
            current(client)
            response = client.get("/api/reviews", headers=bearer(ALICE))
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
def test_a_cursor_or_size_no_page_gave_answers_400(tmp_path: Path, query: str) -> None:
    """A refused page request says what was wrong, with 400, and lists nothing."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        Reviews(store).open(0, ("pay",), deadline=False)
        with inbox_client(store) as client:
            current(client)
            response = client.get(f"/api/reviews{query}", headers=bearer(ALICE))
            assert response.status_code == 400, response.text
            assert "error" in response.json()
