"""The live status of an open review or pause page, over plain HTTP: what it tells a
page of a review someone else decided, a thread given up or a pause dealt with, to
signed-in reviewers only, as escaped text, naming no other thread's data."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import Store, open_store
from covonaut_es.service import ThreadService
from inbox_support import HOSTILE, current, inbox_client, paused, paused_on_tool, sign_in
from test_approvals import ALICE, BOB, VERIFIER
from test_review_deadlines import Clock
from test_review_deadlines import paused as paused_with_deadline

ORIGIN = {"Origin": "http://inbox.test"}


@pytest.fixture
def store(shared_url: str) -> Iterator[Store]:
    with open_store(shared_url) as opened:
        yield opened


def review_of(client: TestClient, thread_id: str) -> dict[str, Any]:
    current(client)
    listed = client.get("/api/reviews", headers={"Authorization": f"Bearer {ALICE}"}).json()
    (review,) = (r for r in listed if r["thread_id"] == thread_id)
    return dict(review)


def state_of(fragment: str) -> str:
    match = re.match(r'<div class="live-status" data-state="([a-z-]+)">', fragment)
    assert match is not None, fragment
    return match.group(1)


def test_the_review_status_says_who_decided_it_once_someone_did(store: Store) -> None:
    """Pending, the status shows nothing; decided over the API by another reviewer
    (whose name is hostile text), it names them and the decision, escaped, and links to
    the next review; the page it serves carries a live region pointing at it."""
    paused(store, "live-a", [], [])
    paused(store, "live-b", [], [])
    eve = VERIFIER.issue_token(HOSTILE, ttl_seconds=3600)
    with inbox_client(store) as client:
        review = review_of(client, "live-a")
        query = {"id": review["review_id"], "thread": "live-a"}
        sign_in(client, ALICE)
        page = client.get("/review", params=query)
        assert 'id="live-status" role="status" aria-live="polite"' in page.text
        assert "/review/status?id=" in page.text
        pending = client.get("/review/status", params=query)
        assert pending.status_code == 200 and state_of(pending.text) == "pending"
        assert "decided-elsewhere" not in pending.text
        decided = client.post(
            f"/api/reviews/{review['review_id']}/approve?thread=live-a",
            headers={"Authorization": f"Bearer {eve}"},
            json={},
        )
        assert decided.status_code == 200, decided.text
        shown = client.get("/review/status", params=query)
        assert shown.status_code == 200 and state_of(shown.text) == "decided"
        assert "This review was decided by" in shown.text and "(approved)" in shown.text
        assert "<script>document" not in shown.text and "<img src=x" not in shown.text
        assert "&lt;script&gt;" in shown.text
        assert "live-b" in shown.text  # the next review
        assert 'id="live-status"' not in client.get("/review", params=query).text


@pytest.mark.usefixtures("simulated_time")
def test_the_review_status_says_when_the_review_expired(store: Store) -> None:
    """A review past its deadline, expired by a sweep elsewhere: its open page learns
    it failed closed (an expiry has no reviewer to name)."""
    clock = Clock()
    _, review_id = paused_with_deadline(store, clock, thread_id="expiring")
    clock.advance(3600)
    ThreadService(store, clock=clock).expire_reviews("expiring")
    with inbox_client(store) as client:
        sign_in(client, ALICE)
        shown = client.get("/review/status", params={"id": review_id, "thread": "expiring"})
        assert state_of(shown.text) == "decided" and "expired before anyone" in shown.text


def test_a_stale_review_page_submit_is_refused_on_the_review_page(store: Store) -> None:
    """A page loaded before bob decided still posts alice's approval: the service
    refuses it (409), and the review page itself says so and shows bob's decision."""
    paused(store, "stale-submit", [], [])
    with inbox_client(store) as client:
        review = review_of(client, "stale-submit")
        csrf = sign_in(client, ALICE)
        page = client.get("/review", params={"id": review["review_id"], "thread": "stale-submit"})
        assert 'id="approve"' in page.text
        client.post(
            f"/api/reviews/{review['review_id']}/reject?thread=stale-submit",
            headers={"Authorization": f"Bearer {BOB}"},
            json={"reason": "unknown payee"},
        )
        fields = {
            "csrf": csrf,
            "review": review["review_id"],
            "thread": "stale-submit",
            "digest": review["digest"],
            "action": "approve",
        }
        refused = client.post("/decide", data=fields, headers=ORIGIN)
        assert refused.status_code == 409
        assert 'id="error" role="alert"' in refused.text and "already" in refused.text
        assert 'id="decision"' in refused.text and "bob" in refused.text
        assert 'id="approve"' not in refused.text


def test_the_review_status_needs_a_session_and_names_no_other_thread(store: Store) -> None:
    """Without a session: 401 and nothing shown; an unknown review, or a review named
    with another thread: 404, naming nothing of the review's own thread."""
    paused(store, "mine", [], [])
    paused(store, "theirs", [], [])
    with inbox_client(store) as client:
        review = review_of(client, "theirs")
        query = {"id": review["review_id"], "thread": "theirs"}
        anonymous = client.get("/review/status", params=query)
        assert anonymous.status_code == 401 and "live-status" not in anonymous.text
        sign_in(client, ALICE)
        assert client.get("/review/status", params={"id": "no-such"}).status_code == 404
        crossed = client.get("/review/status", params={**query, "thread": "mine"})
        assert crossed.status_code == 404
        assert "theirs" not in crossed.text and "amount" not in crossed.text


def test_the_review_status_says_when_the_thread_was_given_up(store: Store) -> None:
    """A review whose thread someone gave up: its page learns nothing can be decided."""
    paused(store, "given-up", [], [])
    with inbox_client(store) as client:
        review = review_of(client, "given-up")
        abandoned = client.post(
            "/api/threads/given-up/abandon",
            headers={"Authorization": f"Bearer {BOB}"},
            json={"reason": "wrong supplier"},
        )
        assert abandoned.status_code == 200, abandoned.text
        sign_in(client, ALICE)
        shown = client.get(
            "/review/status", params={"id": review["review_id"], "thread": "given-up"}
        )
        assert state_of(shown.text) == "abandoned" and "given up" in shown.text


def test_the_pause_status_says_when_the_pause_was_dealt_with(store: Store) -> None:
    """The pause page's live status: pending while the pause it was loaded for waits;
    dealt with once answered (and for a thread no one made); without a session 401."""
    paused_on_tool(store, "asked-live", data={"question": HOSTILE})
    with inbox_client(store) as client:
        current(client)
        query = {"thread": "asked-live", "call": "c1", "pause": ""}
        assert client.get("/pause/status", params=query).status_code == 401
        csrf = sign_in(client, ALICE)
        page = client.get("/pause", params={"thread": "asked-live", "call": "c1"})
        token = re.search(r'name="pause" value="([^"]+)"', page.text)
        assert token is not None and 'id="live-status"' in page.text
        query["pause"] = token.group(1)
        assert state_of(client.get("/pause/status", params=query).text) == "pending"
        stale = client.get("/pause/status", params={**query, "pause": "another"})
        assert state_of(stale.text) == "dealt-with"
        fields = {"csrf": csrf, "thread": "asked-live", "call": "c1", "pause": query["pause"],
                  "action": "answer", "answer": "Account 9."}  # fmt: skip
        assert client.post("/pause", data=fields, headers=ORIGIN).status_code == 200
        shown = client.get("/pause/status", params=query)
        assert state_of(shown.text) == "dealt-with" and "dealt with elsewhere" in shown.text
        assert "<script>document" not in shown.text
        # A thread no one made reads as a pause dealt with, as one whose thread moved on
        # to what the reviewer may not see does: neither tells them which it is.
        missing = client.get("/pause/status", params={**query, "thread": "no-such-thread"})
        assert missing.status_code == 200 and state_of(missing.text) == "dealt-with"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(review_id=st.text(max_size=40), thread_id=st.text(max_size=40))
def test_generated_status_queries_never_show_another_threads_review(
    store: Store, review_id: str, thread_id: str
) -> None:
    """Whatever a page asks the status of, the answer is a status of that review or a
    refusal: never a server error, and never the other thread's review's content."""
    if not store.exists("secret-live"):
        paused(store, "secret-live", [], [])
    with inbox_client(store) as client:
        sign_in(client, ALICE)
        answered = client.get("/review/status", params={"id": review_id, "thread": thread_id})
        assert answered.status_code in (200, 400, 404), answered.text
        if answered.status_code == 200:
            assert state_of(answered.text) in ("pending", "decided", "abandoned")
        else:
            assert "secret-live" not in answered.text or "secret-live" in thread_id + review_id
