"""The inbox's JSON API and its web-security rules, over plain HTTP, on SQLite and
PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest
from eventsourcing.persistence import StoredEvent
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from covonaut_es import (
    AgentThread,
    HmacReviewerVerifier,
    Store,
    ThreadStatus,
    ToolContext,
    create_cipher_key,
    open_store,
)
from covonaut_es.domain import operation_digest, thread_aggregate_id
from covonaut_es.errors import SerializationError, StoreFileReplacedError
from covonaut_es.inbox import create_app
from covonaut_es.inbox._http import quoted
from covonaut_es.projections import ReviewQueue
from covonaut_es.projections._queue import ReviewQueueProjection
from covonaut_es.store._heads import HEADS, NEW_STREAMS, heads_of_records
from inbox_support import (
    HOSTILE,
    ask_tool,
    current,
    in_doubt,
    inbox_client,
    paused,
    paused_on_tool,
    resume,
    sign_in,
)
from support import answer, call
from test_approvals import (
    ALICE,
    BOB,
    SECRET,
    VERIFIER,
    make_agent,
    paused_on_review,
    pay_tool,
)

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
    answers = []
    # The queue's follower may notice the deleted file too, and says so as it stops.
    with contextlib.suppress(StoreFileReplacedError), inbox_client(gone) as client:
        (tmp_path / "gone.db").unlink()
        gone.close()
        answers.append(client.get("/healthz").status_code)
    assert answers == [503]


def test_healthz_reads_no_thread(store: Store) -> None:
    """healthz asks the store one read of its log's end, not its threads: a thread's
    first row that no longer decodes (written behind the library) does not make the
    probe fail, and no thread's first input is read to answer it."""
    stream = thread_aggregate_id("damaged")
    record = StoredEvent(stream, 1, "40", store._app.mapper.stored_payload(b"not an event"))  # type: ignore[attr-defined]
    heads = {HEADS: heads_of_records([record]), NEW_STREAMS: {stream}}
    store._app.recorder.insert_events([record], **heads)
    with pytest.raises(SerializationError):
        list(store.thread_ids())
    with inbox_client(store) as client:
        assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("runs_on_approval", [False, True])
def test_a_review_says_whether_approving_runs_the_call_at_once(
    store: Store, runs_on_approval: bool
) -> None:
    """A review of a tool whose approval runs the call says so, in the JSON API and on
    the review page beside the approve form; any other review does not."""
    tool = attrs.evolve(pay_tool([]), run_on_approval=runs_on_approval)
    paused_on_review(store, [], [], thread_id="t", tool=tool)
    with inbox_client(store) as client:
        current(client)
        (review,) = client.get("/api/reviews", headers=bearer(ALICE)).json()
        assert review["run_on_approval"] is runs_on_approval
        sign_in(client, ALICE)
        page = client.get("/review", params={"id": review["review_id"], "thread": "t"}).text
    assert ("without asking the model again" in page) is runs_on_approval


def test_a_replaced_store_file_is_503_and_names_no_file(tmp_path: Path) -> None:
    """A backup restored over the store's file under a running inbox: its pages and API
    answer 503 saying the server must be restarted, never the old file's queue, and
    never the file's path."""
    path = tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        paused(store, "t", [], [])
        with inbox_client(store) as client:
            current(client)
            assert len(client.get("/api/reviews", headers=bearer(ALICE)).json()) == 1
            spare = tmp_path / "spare.db"
            shutil.copyfile(path, spare)
            os.replace(spare, path)
            for _ in range(300):  # until the queue's follower polls the file (at most 30 s)
                response = client.get("/api/reviews", headers=bearer(ALICE))
                if response.status_code != 200:
                    break
                time.sleep(0.1)
            assert response.status_code == 503
            assert "restarted" in response.text
            assert str(tmp_path) not in response.text


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


@pytest.mark.parametrize("length", [b"\xb2", b"\xd9\xa3", b"1" * 5000, b"-1", b"0x10"])
def test_a_content_length_that_is_no_ascii_number_is_refused_as_missing(
    store: Store, length: bytes
) -> None:
    """A Content-Length that writes no whole number in ASCII digits (a superscript,
    another script's digit, 5,000 digits) is answered 411, never 500, and records
    nothing."""
    paused(store, "t", [], [])
    with inbox_client(store) as client:
        current(client)
        (review,) = client.get("/api/reviews", headers=bearer(ALICE)).json()
        url = f"/api/reviews/{review['review_id']}/approve"
        response = client.post(
            url, headers={**bearer(ALICE), "content-length": length}, content=b"{}"
        )
        assert response.status_code in (400, 411), response.text
    assert decisions(store, "t") == []


def test_a_page_number_that_is_no_ascii_number_shows_the_first_page(store: Store) -> None:
    """``?page=`` is read as every number from outside is (``whole_number``): another
    script's digit, a sign, an underscore or spaces, which ``int`` took, give the first
    page."""
    for index in range(51):  # two pages of 50
        paused(store, f"t{index}", [], [])
    with inbox_client(store) as client:
        current(client)
        sign_in(client, ALICE)
        for number in ("\u0663", "+3", "1_0", " 2 ", "9" * 5000, "-1", ""):
            shown = client.get("/", params={"page": number})
            assert shown.status_code == 200, number
            assert "51 pending · page 1 of 2" in shown.text, number


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


def test_a_decision_is_gone_from_the_lists_the_moment_it_is_recorded(store: Store) -> None:
    """The inbox that recorded a decision lists it no more at once, over the API and on
    its page, without waiting for its queue."""
    paused(store, "decided", [], [])
    with inbox_client(store) as client:
        current(client)
        csrf = sign_in(client, ALICE)
        review = only_review(client, "decided")["review_id"]
        headers = {"Origin": "http://inbox.test", "X-CSRF-Token": csrf}
        assert client.post(f"/api/reviews/{review}/approve", headers=headers).status_code == 200
        assert client.get("/api/reviews").json() == []
        assert client.get("/api/pauses").json() == []
        assert "thread?id=decided" not in client.get("/").text


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
            ("answered", "interrupt"),
            ("kept", "review"),
        ]


def test_a_server_stopped_while_its_queue_catches_up_stops_without_error(
    tmp_path: Path,
) -> None:
    """The server's shutdown stops the queue's runner before it closes the queue's view:
    closed first, the view was closed under the runner still writing it, and the
    shutdown failed with the runner's error."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        for t in range(8):
            paused(store, f"t{t}", [], [])
        for attempt in range(3):  # each time a new view, which the runner fills from zero
            queue = ReviewQueue(store.url, view_url=f"sqlite:///{tmp_path / f'q{attempt}.db'}")
            with TestClient(create_app(store, VERIFIER, queue=queue)) as client:
                assert client.get("/healthz").status_code == 200


# Tools' pauses and calls in doubt, on every store -------------------------------------

ODD_THREAD = "a/b?c#d %e&f=..<x>"
ODD_CALL = "call/1?x=y#z %2F."


@pytest.fixture
def every_store(open_test_store: Callable[..., Store]) -> Store:
    """A store of each kind: memory, SQLite and PostgreSQL."""
    return open_test_store()


def pause_url(thread_id: str, call_id: str, action: str) -> str:
    return f"/api/pauses/{quoted(thread_id)}/{quoted(call_id)}/{action}"


def test_every_kind_of_pause_is_listed_with_its_kind(every_store: Store) -> None:
    """GET /api/pauses lists reviews, tools' pauses and calls in doubt, each with its
    kind, its call and its data; GET /api/reviews still lists the reviews alone."""
    paused(every_store, "review", [], [])
    paused_on_tool(every_store, "tool", data={"question": HOSTILE})
    key = in_doubt(every_store, "doubt")
    with inbox_client(every_store) as client:
        current(client)
        listed = client.get("/api/pauses", headers=bearer(ALICE)).json()
        by_thread = {p["thread_id"]: p for p in listed}
        assert {t: p["kind"] for t, p in by_thread.items()} == {
            "review": "review",
            "tool": "interrupt",
            "doubt": "in_doubt",
        }
        assert by_thread["tool"]["data"] == {"question": HOSTILE}
        assert by_thread["tool"]["tool_call_id"] == "c1" and by_thread["tool"]["review_id"] is None
        assert by_thread["doubt"]["data"]["idempotency_key"] == key
        assert by_thread["review"]["review_id"] and by_thread["review"]["digest"]
        reviews = client.get("/api/reviews", headers=bearer(ALICE)).json()
        assert [r["thread_id"] for r in reviews] == ["review"]
        assert client.get("/api/pauses").status_code == 401


def test_an_answer_to_a_tools_pause_leaves_the_thread_to_a_runner(every_store: Store) -> None:
    """A tool's pause on ids holding any printable character is answered through
    their quoted path; the thread then waits for a runner, which resumes it with the
    answer for the model; a second answer is 409 and records nothing."""
    paused_on_tool(every_store, ODD_THREAD, call_id=ODD_CALL)
    with inbox_client(every_store) as client:
        current(client)
        (listed,) = client.get("/api/pauses", headers=bearer(ALICE)).json()
        assert (listed["thread_id"], listed["tool_call_id"]) == (ODD_THREAD, ODD_CALL)
        url = pause_url(ODD_THREAD, ODD_CALL, "answer")
        answered = client.post(url, headers=bearer(ALICE), json={"answer": "Account 9."})
        assert answered.status_code == 200, answered.text
        assert answered.json() == {
            "thread_id": ODD_THREAD,
            "tool_call_id": ODD_CALL,
            "action": "answer",
            "reviewer": "alice",
        }
        assert every_store.state_at(ODD_THREAD).waiting_for == "runner"
        assert client.get("/api/pauses", headers=bearer(ALICE)).json() == []
        version = every_store.state_at(ODD_THREAD).version
        again = client.post(url, headers=bearer(BOB), json={"answer": "Account 10."})
        assert again.status_code == 409 and "awaiting an answer" in again.json()["error"]
        assert every_store.state_at(ODD_THREAD).version == version
    (event,) = (
        e for e in every_store.history(ODD_THREAD) if type(e).__name__ == "InterruptAnswered"
    )
    assert (event.answer, event.answered_by) == ("Account 9.", "alice")
    done = resume(every_store, ODD_THREAD, [answer("Refunded to account 9.")], [], tool=ask_tool())
    assert done == "Refunded to account 9."


def test_calls_in_doubt_are_settled_as_run_as_not_run_or_run_again(every_store: Store) -> None:
    """Each settlement of a call in doubt is recorded under the reviewer, with the
    result the model reads, and leaves the thread to a runner."""
    for thread_id in ("ran", "not run", "retried"):
        in_doubt(every_store, thread_id)
    with inbox_client(every_store) as client:
        current(client)
        for thread_id, action, body in (
            ("ran", "settle", {"ran": True, "result": "Sent: ledger entry 77."}),
            ("not run", "settle", {"ran": False, "note": "the bank has no such transfer"}),
            ("retried", "retry", None),
        ):
            url = pause_url(thread_id, "c1", action)
            posted = client.post(url, headers=bearer(BOB), json=body)
            assert posted.status_code == 200, (thread_id, posted.text)
            assert posted.json()["reviewer"] == "bob"
            assert every_store.state_at(thread_id).waiting_for == "runner", thread_id
        assert client.get("/api/pauses", headers=bearer(ALICE)).json() == []
    settled = {
        t: next(e for e in every_store.history(t) if isinstance(e, AgentThread.ToolCallSettled))
        for t in ("ran", "not run")
    }
    assert settled["ran"].content == "Sent: ledger entry 77." and settled["ran"].settled_by == "bob"
    assert settled["not run"].content == "Not executed: the bank has no such transfer"
    (retry,) = (
        e for e in every_store.history("retried") if isinstance(e, AgentThread.RetryRequested)
    )
    assert (retry.tool_call_id, retry.requested_by) == ("c1", "bob")


def test_abandoning_a_thread_takes_all_its_pauses_off_the_list(every_store: Store) -> None:
    """POST /api/threads/{id}/abandon gives the thread up under the reviewer with the
    reason; its pauses leave the list; giving it up again is 409."""
    paused_on_tool(every_store, ODD_THREAD)
    paused(every_store, "kept", [], [])
    with inbox_client(every_store) as client:
        current(client)
        url = f"/api/threads/{quoted(ODD_THREAD)}/abandon"
        gone = client.post(url, headers=bearer(ALICE), json={"reason": "duplicate request"})
        assert gone.status_code == 200, gone.text
        assert gone.json()["thread_id"] == ODD_THREAD
        listed = client.get("/api/pauses", headers=bearer(ALICE)).json()
        assert [p["thread_id"] for p in listed] == ["kept"]
        again = client.post(url, headers=bearer(ALICE), json={"reason": "again"})
        assert again.status_code == 409 and "already abandoned" in again.json()["error"]
    state = every_store.state_at(ODD_THREAD)
    assert state.status is ThreadStatus.ABANDONED
    (event,) = (e for e in every_store.history(ODD_THREAD) if isinstance(e, AgentThread.Abandoned))
    assert (event.reason, event.abandoned_by) == ("duplicate request", "alice")


REFUSED_PAUSE_ACTIONS: list[tuple[str, str, dict[str, Any] | str | None, int, str]] = [
    ("tool", "answer", {"answer": "  "}, 400, "answer must not be empty"),
    ("tool", "answer", {}, 400, "answer must not be empty"),
    ("tool", "answer", {"answer": 7}, 400, "answer must be text"),
    ("tool", "answer", '{"answer": "a", "answer": "b"}', 400, "'answer' twice"),
    ("tool", "answer", {"answer": "x", "by": "ceo"}, 400, "unknown fields ['by']"),
    ("tool", "answer", "[1]", 400, "one JSON object"),
    ("doubt", "answer", {"answer": "yes"}, 409, "no tool's pause"),
    ("tool", "settle", {"ran": True, "result": "x"}, 409, "not open"),
    ("tool", "retry", None, 409, "not open"),
    ("doubt", "settle", {"ran": "yes", "result": "x"}, 400, '"ran" must be true'),
    ("doubt", "settle", {"result": "x"}, 400, '"ran" must be true'),
    ("doubt", "settle", {"ran": True}, 400, "result must not be empty"),
    ("doubt", "settle", {"ran": True, "result": " "}, 400, "result must not be empty"),
    ("doubt", "settle", {"ran": False, "result": "x"}, 400, 'without a "result"'),
    ("doubt", "settle", {"ran": True, "result": "x", "note": "y"}, 400, 'without a "note"'),
    ("doubt", "settle", '{"ran": true, "result": NaN}', 400, "holds NaN"),
    ("doubt", "retry", {"again": True}, 400, "unknown fields ['again']"),
    # As a thread the reviewer may not see: neither tells whether the thread exists.
    ("missing", "answer", {"answer": "x"}, 404, "no pause on call 'c1' of thread 'missing'"),
]
"""(thread, action, body, status, what the error says) of a refused pause action."""


def test_a_refused_pause_action_records_nothing(every_store: Store) -> None:
    """Bad bodies, the wrong action for a pause's kind and a missing thread are each
    refused with a status and a message naming the fault; no thread changes."""
    paused_on_tool(every_store, "tool")
    in_doubt(every_store, "doubt")
    versions = {t: every_store.state_at(t).version for t in ("tool", "doubt")}
    with inbox_client(every_store) as client:
        for thread_id, action, body, status, said in REFUSED_PAUSE_ACTIONS:
            url = pause_url(thread_id, "c1", action)
            content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            headers = {**bearer(ALICE), "Content-Type": "application/json"}
            refused = client.post(url, headers=headers, content=b"" if body is None else content)
            case = (thread_id, action, body)
            assert refused.status_code == status, (case, refused.text)
            assert said in refused.json()["error"], case
            assert str(every_store.url) not in refused.text
            assert {t: every_store.state_at(t).version for t in versions} == versions, case


def test_abandoning_needs_a_reason(every_store: Store) -> None:
    """A reviewer who gives a thread up from the inbox says why: a blank or missing
    reason is 400 and the thread runs on."""
    paused_on_tool(every_store, "t")
    version = every_store.state_at("t").version
    with inbox_client(every_store) as client:
        for body in ({}, {"reason": " \n"}, {"reason": ["no"]}):
            refused = client.post("/api/threads/t/abandon", headers=bearer(ALICE), json=body)
            assert refused.status_code == 400 and "reason" in refused.json()["error"], body
    assert every_store.state_at("t").version == version


def test_a_settlement_while_a_runner_holds_the_thread_is_409(every_store: Store) -> None:
    """A call in doubt is not settled, nor sent to run again, while a runner holds the
    thread's lease: 409, and nothing is recorded."""
    in_doubt(every_store, "t")
    version = every_store.state_at("t").version
    with inbox_client(every_store) as client, runner_holding(every_store, "t"):
        for action, body in (("settle", {"ran": False}), ("retry", None)):
            busy = client.post(pause_url("t", "c1", action), headers=bearer(ALICE), json=body)
            assert busy.status_code == 409, busy.text
            assert "is being run by" in busy.json()["error"]
    assert every_store.state_at("t").version == version


@contextlib.contextmanager
def runner_holding(store: Store, thread_id: str) -> Iterator[None]:
    """A runner in a thread of its own (not this test's context, whose leases the
    application's requests would inherit) holds the thread's lease for the block."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.lease(thread_id):
            taken.set()
            done.wait(30)

    runner = threading.Thread(target=hold)
    runner.start()
    try:
        assert taken.wait(30)
        yield
    finally:
        done.set()
        runner.join(30)


def test_pause_actions_riding_on_the_cookie_need_the_csrf_token(every_store: Store) -> None:
    """A signed-in browser's pause actions and abandonment need this origin and the
    session's CSRF token, as decisions do; without a credential they are 401."""
    paused_on_tool(every_store, "t")
    own = {"Origin": "http://inbox.test"}
    with inbox_client(every_store) as client, inbox_client(every_store) as stranger:
        csrf = sign_in(client, ALICE)
        answer_url = pause_url("t", "c1", "answer")
        for url, body in (
            (answer_url, {"answer": "x"}),
            ("/api/threads/t/abandon", {"reason": "x"}),
        ):
            assert client.post(url, json=body, headers=own).status_code == 403
            forged = {"Origin": "http://evil.test", "X-CSRF-Token": csrf}
            assert client.post(url, json=body, headers=forged).status_code == 403
            assert stranger.post(url, json=body).status_code == 401
        assert every_store.state_at("t").waiting_for == "person"
        headers = {**own, "X-CSRF-Token": csrf}
        assert client.post(answer_url, json={"answer": "x"}, headers=headers).status_code == 200
    assert every_store.state_at("t").waiting_for == "runner"


def test_quoted_routes_work_under_a_mount(every_store: Store) -> None:
    """Mounted under a path, a pause's quoted ids are still read as one id each."""
    paused_on_tool(every_store, ODD_THREAD, call_id=ODD_CALL)
    inbox = create_app(every_store, VERIFIER)
    outer = Starlette(routes=[Mount("/inbox", inbox)], lifespan=inbox.router.lifespan_context)
    with TestClient(outer, base_url="http://host.test") as client:
        url = "/inbox" + pause_url(ODD_THREAD, ODD_CALL, "answer")
        answered = client.post(url, headers=bearer(ALICE), json={"answer": "Account 9."})
        assert answered.status_code == 200, answered.text
    assert every_store.state_at(ODD_THREAD).waiting_for == "runner"


def test_the_pause_page_forms_answer_settle_retry_and_abandon(store: Store) -> None:
    """Each action of the pause page is a form of its own with the session's CSRF
    token: answered or settled, the page says the thread waits for a runner; given
    up, the thread page says abandoned; a forged or blank form records nothing."""
    paused_on_tool(store, ODD_THREAD, call_id=ODD_CALL)
    for thread_id in ("ran", "not run", "retried"):
        in_doubt(store, thread_id)
    paused_on_tool(store, "given up")
    own = {"Origin": "http://inbox.test"}
    with inbox_client(store) as client:
        current(client)
        csrf = sign_in(client, BOB)

        def act(thread_id: str, call_id: str, **fields: str) -> Any:
            page = client.get("/pause", params={"thread": thread_id, "call": call_id}).text
            (pause,) = set(re.findall(r'name="pause" value="([^"]+)"', page))
            form = {"thread": thread_id, "call": call_id, "csrf": csrf, "pause": pause}
            return client.post("/pause", data={**form, **fields}, headers=own)

        version = store.state_at(ODD_THREAD).version
        assert act(ODD_THREAD, ODD_CALL, action="answer", answer=" ").status_code == 400
        assert act(ODD_THREAD, ODD_CALL, action="shrug").status_code == 400
        forged = {"thread": ODD_THREAD, "call": ODD_CALL, "action": "answer", "answer": "x"}
        assert client.post("/pause", data=forged, headers=own).status_code == 403
        evil = {**forged, "csrf": csrf}
        assert (
            client.post("/pause", data=evil, headers={"Origin": "http://evil.test"}).status_code
            == 403
        )
        assert store.state_at(ODD_THREAD).version == version
        answered = act(ODD_THREAD, ODD_CALL, action="answer", answer="Account 9.")
        assert answered.status_code == 200 and 'id="resolved"' in answered.text, answered.text
        assert store.state_at(ODD_THREAD).waiting_for == "runner"
        for thread_id, fields in (
            ("ran", {"action": "ran", "result": "Sent: ledger entry 77."}),
            ("not run", {"action": "not-run", "note": ""}),
            ("retried", {"action": "retry"}),
        ):
            settled = act(thread_id, "c1", **fields)
            assert settled.status_code == 200 and 'id="resolved"' in settled.text, thread_id
            assert store.state_at(thread_id).waiting_for == "runner", thread_id
        gone = act("given up", "c1", action="abandon", reason="the customer withdrew")
        assert gone.status_code == 200 and gone.url.path == "/thread"
        assert "Status abandoned" in gone.text
        current(client)
        assert client.get("/api/pauses").json() == []
    assert store.state_at("given up").status is ThreadStatus.ABANDONED
    settled_events = [
        e for e in store.history("not run") if isinstance(e, AgentThread.ToolCallSettled)
    ]
    (not_run,) = settled_events
    assert not_run.content.startswith("Not executed") and not_run.settled_by == "bob"


def test_a_queue_that_stopped_on_an_error_is_503_at_every_listing_and_at_healthz(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower keeping the inbox's queue current stops on an error (a damaged page
    of a SQLite file, say) while the store still answers: every listing after it
    answers 503 naming the stop, not the first alone and then a queue that no longer
    changes (eventsourcing's runner gives its error once), and ``/healthz`` says the
    queue stopped (503) though the store is reachable."""
    paused(store, "t", [], [])
    with inbox_client(store) as client:
        current(client)
        assert len(client.get("/api/reviews", headers=bearer(ALICE)).json()) == 1

        def fails(self: Any, batch: Any) -> None:
            raise RuntimeError("a page of the log could not be read")

        monkeypatch.setattr(ReviewQueueProjection, "process_events", fails)
        paused(store, "u", [], [])  # the follower meets it, and stops
        for _ in range(300):
            response = client.get("/api/reviews", headers=bearer(ALICE))
            if response.status_code != 200:
                break
            time.sleep(0.1)
        for _ in range(3):
            assert response.status_code == 503, response.text
            assert "stopped following the store" in response.text
            assert "could not be read" in response.text
            response = client.get("/api/pauses", headers=bearer(ALICE))
        health = client.get("/healthz")
        assert (health.status_code, health.json()) == (
            503,
            {"store": "reachable", "queue": "stopped"},
        )
