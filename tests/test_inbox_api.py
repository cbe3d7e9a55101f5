"""The inbox's JSON API and its web-security rules, over plain HTTP, on SQLite and
PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from covonaut_es import (
    AgentThread,
    HmacReviewerVerifier,
    Store,
    ToolContext,
    create_cipher_key,
    open_store,
)
from covonaut_es.domain import operation_digest
from covonaut_es.inbox import create_app
from covonaut_es.projections import ReviewQueue
from inbox_support import (
    HOSTILE,
    ask_tool,
    current,
    inbox_client,
    paused,
    paused_on_tool,
    resume,
    sign_in,
)
from support import answer, call
from test_approvals import ALICE, BOB, SECRET, VERIFIER, make_agent

PAY_20 = '{"amount": 20, "to": "bob"}'


@pytest.fixture
def store(shared_url: str) -> Iterator[Store]:
    with open_store(shared_url) as opened:
        yield opened


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def decisions(store: Store, thread_id: str) -> list[AgentThread.ReviewDecided]:
    return [e for e in store.history(thread_id) if isinstance(e, AgentThread.ReviewDecided)]


def only_review(client: TestClient, thread_id: str) -> dict[str, Any]:
    listed = client.get("/api/reviews", headers=bearer(ALICE)).json()
    (review,) = (r for r in listed if r["thread_id"] == thread_id)
    return dict(review)


def test_list_get_approve_with_edits_runs_exactly_the_edit(store: Store) -> None:
    """The listed review carries what a reviewer needs; an edited approval over the API
    lets the tool run with exactly the edit, and the history names who edited."""
    runs: list[ToolContext] = []
    paused(store, "t", [], runs)
    with inbox_client(store) as client:
        current(client)
        review = only_review(client, "t")
        assert review["tool_name"] == "pay" and review["status"] == "pending"
        assert review["arguments"] == {"amount": 40, "to": "bob"}
        assert review["digest"] == operation_digest("pay", {"amount": 40, "to": "bob"})
        assert review["reason"] and review["requested_at"]
        url = f"/api/reviews/{review['review_id']}"
        assert client.get(url, headers=bearer(BOB)).json() == review
        edit = {"amount": 20, "to": "bob"}
        decided = client.post(
            f"{url}/approve", headers=bearer(ALICE), json={"comment": "halved", "arguments": edit}
        )
        assert decided.status_code == 200, decided.text
        body = decided.json()
        assert (body["reviewer"], body["arguments"]) == ("alice", edit)
        assert body["digest"] == operation_digest("pay", edit)
        got = client.get(f"{url}?thread=t", headers=bearer(BOB)).json()
        assert got["status"] == "approved" and got["decision"]["arguments"] == edit
    assert resume(store, "t", [call(("c2", "pay", PAY_20)), answer("Paid 20.")], runs) == "Paid 20."
    (ran,) = runs
    assert ran.approval is not None and ran.approval.arguments == edit
    (event,) = decisions(store, "t")
    assert isinstance(event, AgentThread.ReviewApprovedWithEdits) and event.reviewer == "alice"


def test_respond_reject_and_a_second_decision_is_409(store: Store) -> None:
    """respond answers in the tool's place (it never runs); reject records the reason;
    deciding a decided review answers 409 and records nothing."""
    runs: list[ToolContext] = []
    paused(store, "a", [], runs)
    paused(store, "r", [], runs)
    with inbox_client(store) as client:
        current(client)
        first, second = only_review(client, "a"), only_review(client, "r")
        responded = client.post(
            f"/api/reviews/{first['review_id']}/respond",
            headers=bearer(BOB),
            json={"answer": "Paid on Monday."},
        )
        assert responded.status_code == 200 and responded.json()["decision"] == "responded"
        rejected = client.post(
            f"/api/reviews/{second['review_id']}/reject", headers=bearer(BOB), json={"reason": "no"}
        )
        assert rejected.json()["comment"] == "no"
        for action, body in (("approve", {}), ("respond", {"answer": "x"})):
            again = client.post(
                f"/api/reviews/{first['review_id']}/{action}?thread=a",
                headers=bearer(ALICE),
                json=body,
            )
            assert again.status_code == 409 and "already" in again.json()["error"]
        current(client)
        assert client.get("/api/reviews", headers=bearer(ALICE)).json() == []
    assert resume(store, "a", [answer("Already paid, then.")], runs) == "Already paid, then."
    assert runs == []
    assert len(decisions(store, "a")) == 1 and len(decisions(store, "r")) == 1


@pytest.mark.parametrize(
    "headers",
    [{}, bearer("not-a-token"), {"Authorization": f"Basic {ALICE}"}, bearer(ALICE + "x")],
    ids=["none", "garbage", "basic", "tampered"],
)
def test_no_valid_bearer_token_is_401(store: Store, headers: dict[str, str]) -> None:
    """Without a verified token, nothing is listed and nothing decided."""
    paused(store, "t", [], [])
    with inbox_client(store) as client:
        current(client)
        (review,) = client.get("/api/reviews", headers=bearer(ALICE)).json()
        assert client.get("/api/reviews", headers=headers).status_code == 401
        posted = client.post(
            f"/api/reviews/{review['review_id']}/approve", headers=headers, json={}
        )
        assert posted.status_code == 401 and posted.headers["www-authenticate"] == "Bearer"
    assert decisions(store, "t") == []


def test_bad_bodies_are_refused_with_400(store: Store) -> None:
    """Unknown fields, non-object arguments, empty reasons and non-JSON are refused."""
    paused(store, "t", [], [])
    with inbox_client(store) as client:
        current(client)
        (review,) = client.get("/api/reviews", headers=bearer(ALICE)).json()
        url = f"/api/reviews/{review['review_id']}"
        for action, body in [
            ("approve", {"reviewer": "ceo"}),
            ("approve", {"arguments": [1]}),
            ("reject", {"reason": "  "}),
            ("respond", {"answer": 7}),
        ]:
            refused = client.post(f"{url}/{action}", headers=bearer(ALICE), json=body)
            assert refused.status_code == 400, (action, body, refused.text)
        not_json = client.post(f"{url}/approve", headers=bearer(ALICE), content=b"{")
        assert not_json.status_code == 400
    assert decisions(store, "t") == []


def test_cross_site_posts_riding_on_the_cookie_are_refused(store: Store) -> None:
    """A signed-in browser's cookie alone decides nothing: another origin, another
    site's fetch metadata, a missing or foreign CSRF token are each refused."""
    paused(store, "t", [], [])
    with inbox_client(store) as client, inbox_client(store) as other:
        current(client)
        csrf = sign_in(client, ALICE)
        foreign_csrf = sign_in(other, BOB)
        (review,) = client.get("/api/reviews").json()  # the session may read
        form = {"action": "approve", "review": review["review_id"], "thread": "t"}
        own = {"Origin": "http://inbox.test"}
        forged: list[tuple[dict[str, str], dict[str, str]]] = [
            ({"Origin": "http://evil.test"}, {**form, "csrf": csrf}),
            ({"Origin": "null"}, {**form, "csrf": csrf}),
            ({"Sec-Fetch-Site": "cross-site"}, {**form, "csrf": csrf}),
            ({"Sec-Fetch-Site": "same-site"}, {**form, "csrf": csrf}),
            (own, form),
            (own, {**form, "csrf": foreign_csrf}),
        ]
        for headers, data in forged:
            refused = client.post("/decide", data=data, headers=headers)
            assert refused.status_code == 403, (headers, refused.text)
        api = f"/api/reviews/{review['review_id']}/approve"
        assert client.post(api, json={}, headers=own).status_code == 403
        assert client.post(api, json={}, headers={"X-CSRF-Token": csrf, **own}).status_code == 200
        assert client.get(f"/decide?action=reject&review={review['review_id']}").status_code == 405
    (event,) = decisions(store, "t")
    assert event.reviewer == "alice"


def test_pages_escape_hostile_values_under_a_strict_csp(store: Store) -> None:
    """Arguments and thread ids from a model are shown as text; no page runs inline
    script; a bad sign-in token is refused."""
    thread_id = "t<b>x</b>"
    runs: list[ToolContext] = []
    hostile = json.dumps({"amount": 40, "to": HOSTILE})
    agent = make_agent(store, [call(("c1", "pay", hostile))], runs, thread_id=thread_id)
    agent.run("pay")
    with inbox_client(store) as client:
        current(client)
        assert client.post("/login", data={"token": "forged"}).status_code == 401
        sign_in(client, ALICE)
        pages = [client.get("/"), client.get("/thread", params={"id": thread_id})]
        (review,) = client.get("/api/reviews").json()
        pages.append(client.get("/review", params={"id": review["review_id"], "thread": thread_id}))
        for page in pages:
            assert page.status_code == 200
            assert "<script>document" not in page.text and "<img src=x" not in page.text
            assert "<b>x</b>" not in page.text
            assert "&lt;script&gt;" in page.text or "t&lt;b&gt;x" in page.text
            csp = page.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        cookie = pages[0].request.headers.get("cookie", "")
        assert cookie.startswith("covonaut_inbox=")


def test_session_cookie_is_httponly_and_samesite_strict(store: Store) -> None:
    """The sign-in sets an HttpOnly, SameSite=Strict cookie (Secure under https)."""
    for base, secure in (("http://inbox.test", False), ("https://inbox.test", True)):
        with TestClient(create_app(store, VERIFIER), base_url=base) as client:
            response = client.post(
                "/login", data={"token": ALICE}, headers={"Origin": base}, follow_redirects=False
            )
            assert response.status_code == 303
            cookie = response.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie
            assert ("secure" in cookie.split("; ")) is secure


def test_healthz_answers_200_while_the_store_answers(store: Store, tmp_path: Path) -> None:
    """healthz is 200 with a reachable store and 503 once it is not."""
    with inbox_client(store) as client:
        assert client.get("/healthz").status_code == 200
    gone = open_store(f"sqlite:///{tmp_path / 'gone.db'}")
    with inbox_client(gone) as client:
        (tmp_path / "gone.db").unlink()
        gone.close()
        assert client.get("/healthz").status_code == 503


def test_two_decisions_at_once_one_wins_the_other_is_409(store: Store) -> None:
    """Two reviewers approve the same review at the same moment: one decision is
    recorded, the other answers 409."""
    paused(store, "t", [], [])
    with inbox_client(store) as client:
        current(client)
        (review,) = client.get("/api/reviews", headers=bearer(ALICE)).json()
        url = f"/api/reviews/{review['review_id']}/approve"
        barrier = threading.Barrier(2)

        def approve(token: str) -> int:
            barrier.wait()
            return client.post(url, headers=bearer(token), json={}).status_code

        with ThreadPoolExecutor(2) as pool:
            statuses = sorted(pool.map(approve, (ALICE, BOB)))
    assert statuses == [200, 409]
    assert len(decisions(store, "t")) == 1


def test_an_encrypted_store_is_read_with_the_key_given(tmp_path: Path) -> None:
    """The inbox of an encrypted store lists and decides with the store's key; its
    queue holds no argument in clear."""
    key = create_cipher_key()
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    with open_store(url, cipher_key=key) as sealed:
        paused(sealed, "secret-thread", [], [])
        with inbox_client(sealed, cipher_key=key) as client:
            current(client)
            (review,) = client.get("/api/reviews", headers=bearer(ALICE)).json()
            assert review["arguments"] == {"amount": 40, "to": "bob"}
            decided = client.post(
                f"/api/reviews/{review['review_id']}/reject",
                headers=bearer(ALICE),
                json={"reason": "no"},
            )
            assert decided.status_code == 200
    assert b"secret-thread" not in (tmp_path / "sealed.db").read_bytes()


def test_mounted_under_a_path_with_its_lifespan(store: Store) -> None:
    """Mounted in another application (given the inbox's lifespan), links, static
    files and the session cookie stay under the mount's path."""
    paused(store, "t", [], [])
    inbox = create_app(store, VERIFIER)
    outer = Starlette(routes=[Mount("/inbox", inbox)], lifespan=inbox.router.lifespan_context)
    with TestClient(outer, base_url="http://host.test") as client:
        signed = client.post(
            "/inbox/login",
            data={"token": ALICE},
            headers={"Origin": "http://host.test"},
            follow_redirects=False,
        )
        assert signed.headers["location"] == "http://host.test/inbox/"
        assert "Path=/inbox" in signed.headers["set-cookie"]
        inbox.state.inbox.desk.queue.wait_until_current(store)
        page = client.get("/inbox/")
        assert "/inbox/static/inbox.js" in page.text and "/inbox/review?id=" in page.text
        assert client.get("/inbox/static/inbox.js").status_code == 200


def test_an_expired_token_ends_the_session_and_decides_nothing(store: Store) -> None:
    """The session's token is verified again at every request: once it expires, pages
    send the reviewer to sign in, and a posted decision is not recorded."""
    now = [1_000_000.0]
    verifier = HmacReviewerVerifier(SECRET, clock=lambda: now[0])
    paused(store, "t", [], [])
    app = create_app(store, verifier)
    with TestClient(app, base_url="http://inbox.test") as client:
        current(client)
        csrf = sign_in(client, verifier.issue_token("ann", ttl_seconds=60))
        (review,) = client.get("/api/reviews").json()
        now[0] += 61
        assert client.get("/", follow_redirects=False).headers["location"].endswith("/login")
        form = {"action": "approve", "review": review["review_id"], "thread": "t", "csrf": csrf}
        posted = client.post("/decide", data=form, headers={"Origin": "http://inbox.test"})
        assert posted.url.path == "/login"
    assert decisions(store, "t") == []


def test_bodies_must_be_bounded(store: Store) -> None:
    """A body without a length (chunked) or over 64 KiB is refused before it is read."""
    paused(store, "t", [], [])
    with inbox_client(store) as client:
        current(client)
        (review,) = client.get("/api/reviews", headers=bearer(ALICE)).json()
        url = f"/api/reviews/{review['review_id']}/approve"
        chunked = client.post(url, headers=bearer(ALICE), content=iter([b"{}"]))
        assert chunked.status_code == 411
        huge = {"comment": "x" * (70 * 1024)}
        assert client.post(url, headers=bearer(ALICE), json=huge).status_code == 413
    assert decisions(store, "t") == []


def test_the_inbox_filters_sorts_and_pages(store: Store) -> None:
    """Filters by thread and tool, oldest or newest first, a page at a time."""
    for thread_id in ("first", "second", "third"):
        paused(store, thread_id, [], [])
    with inbox_client(store, page_size=2) as client:
        current(client)
        sign_in(client, ALICE)

        def shown(**query: str) -> list[str]:
            page = client.get("/", params=query).text
            return re.findall(r'<a href="[^"]*/thread\?id=[^"]*">([^<]*)</a>', page)

        assert shown() == ["first", "second"]
        assert shown(page="2") == ["third"]
        assert shown(order="newest") == ["third", "second"]
        assert shown(thread="second") == ["second"]
        assert shown(tool="pay", page="2") == ["third"]
        assert shown(tool="refund") == []
        assert shown(page="junk") == ["first", "second"]


# One approval: one verification, at most two loads ------------------------------------


class CountingVerifier:
    """A real ``HmacReviewerVerifier``, each of whose verifications is counted."""

    def __init__(self, verifier: HmacReviewerVerifier) -> None:
        self.verifier = verifier
        self.calls = 0

    def verify(self, credential: Any) -> str:
        self.calls += 1
        return self.verifier.verify(credential)


class CountingReads:
    """Counts a real store's thread reads (``load``, ``find``, ``state_at``), each read
    once however the store's methods call one another inside it."""

    def __init__(self, store: Store) -> None:
        self.calls: Counter[str] = Counter()
        self._inside = threading.local()
        for name in ("load", "find", "state_at"):
            setattr(store, name, self._counted(name, getattr(store, name)))

    def _counted(self, name: str, read: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            outermost = not getattr(self._inside, "reading", False)
            if outermost:
                self.calls[name] += 1
                self._inside.reading = True
            try:
                return read(*args, **kwargs)
            finally:
                if outermost:
                    self._inside.reading = False

        return counted

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def test_one_approval_verifies_once_and_loads_the_thread_at_most_twice(store: Store) -> None:
    """An approval through the JSON API and one through the review page's form each
    verify the reviewer's credential once and read the thread at most twice."""
    paused(store, "api", [], [])
    paused(store, "form", [], [])
    verifier = CountingVerifier(VERIFIER)
    reads = CountingReads(store)
    with TestClient(create_app(store, verifier), base_url="http://inbox.test") as client:
        current(client)
        api_review = only_review(client, "api")["review_id"]
        form_review = only_review(client, "form")["review_id"]
        csrf = sign_in(client, ALICE)
        measured = {}
        for surface in ("api", "form"):
            verifier.calls = 0
            reads.calls.clear()
            if surface == "api":
                url = f"/api/reviews/{api_review}/approve"
                approved = client.post(url, headers=bearer(ALICE), json={"comment": "ok"})
                assert approved.status_code == 200, approved.text
            else:
                form = {"action": "approve", "review": form_review, "thread": "form",
                        "csrf": csrf, "comment": "ok"}  # fmt: skip
                approved = client.post(
                    "/decide", data=form, headers={"Origin": "http://inbox.test"},
                    follow_redirects=False,
                )  # fmt: skip
                assert approved.status_code == 303, approved.text
            measured[surface] = (verifier.calls, reads.total)
    assert measured["api"][0] == 1 and measured["api"][1] <= 2, measured
    assert measured["form"][0] == 1 and measured["form"][1] <= 2, measured
    assert [len(decisions(store, t)) for t in ("api", "form")] == [1, 1]


# What this server recorded is never listed as pending ---------------------------------


class HeldQueue(ReviewQueue):
    """A real reviewer queue, on a real view, that the application does not follow:
    the test moves it on with :meth:`catch_up`, so it lags as long as the test needs."""

    @contextlib.contextmanager
    def follow(self) -> Iterator[Any]:
        yield None

    def catch_up(self, store: Store) -> None:
        with ReviewQueue.follow(self):
            self.wait_until_current(store)


def test_what_this_server_recorded_is_not_listed_while_its_queue_lags(
    store: Store, tmp_path: Path
) -> None:
    """A decision, an answer and an abandonment leave the API's lists and the inbox
    page at once, though the queue still holds them; once the queue has caught up, a
    new pause on the same call is listed again."""
    paused(store, "decided", [], [])
    paused_on_tool(store, "answered")
    paused_on_tool(store, "given up")
    paused(store, "kept", [], [])
    queue = HeldQueue(store.url, view_url=f"sqlite:///{tmp_path / 'queue.db'}")
    queue.catch_up(store)
    with TestClient(create_app(store, VERIFIER, queue=queue), base_url="http://inbox.test") as c:
        review = only_review(c, "decided")["review_id"]
        approved = c.post(f"/api/reviews/{review}/approve", headers=bearer(ALICE), json={})
        assert approved.status_code == 200, approved.text
        answered = c.post(
            "/api/pauses/answered/c1/answer", headers=bearer(ALICE), json={"answer": "acct 9"}
        )
        assert answered.status_code == 200, answered.text
        reason = {"reason": "the customer withdrew"}
        gone = c.post("/api/threads/given%20up/abandon", headers=bearer(ALICE), json=reason)
        assert gone.status_code == 200, gone.text
        assert len(queue.pending()) == 4  # the queue has not moved
        assert [r["thread_id"] for r in c.get("/api/reviews", headers=bearer(ALICE)).json()] == [
            "kept"
        ]
        assert {p["thread_id"] for p in c.get("/api/pauses", headers=bearer(BOB)).json()} == {
            "kept"
        }
        sign_in(c, BOB)
        page = c.get("/").text
        assert "thread?id=kept" in page
        assert all(f"thread?id={t}" not in page for t in ("decided", "answered", "given+up"))
        again = [call(("c1", "ask", "{}"))]  # the model asks on call c1 once more
        assert resume(store, "answered", again, [], tool=ask_tool()) == ""
        queue.catch_up(store)
        listed = c.get("/api/pauses", headers=bearer(BOB)).json()
        assert sorted((p["thread_id"], p["kind"]) for p in listed) == [
            ("answered", "tool"),
            ("kept", "review"),
        ]
