"""The inbox and the served process under review policies: each reviewer is shown and
offered only what their scopes and the tool's policy let them decide, the tool's text
for the reviewer is shown as text, and a refused decision is recorded nowhere, over the
pages, the JSON API and a real ``covonaut-es serve`` process."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import AgentThread, HmacReviewerVerifier, ReviewPolicy, Store, open_store
from covonaut_es.domain import (
    Decision,
    Review,
    ReviewDecision,
    ReviewLimit,
    ReviewRequest,
    ReviewRules,
    operation_digest,
)
from covonaut_es.domain._review_rules import check_decision
from covonaut_es.domain._reviews import ALL_DECISIONS
from covonaut_es.errors import DecisionNotAllowedError, ReviewerNotPermittedError
from covonaut_es.inbox._items import ReviewItem
from covonaut_es.projections._paging import QueueKey, encode_cursor
from covonaut_es.service import FoundReview, Reviewer
from inbox_support import HOSTILE, current, free_port, inbox_client, sign_in
from support import call
from test_approvals import make_agent
from test_inbox_serve import healthy, serve, stopped
from test_review_policy import LARGE, NO_SCOPE, PAY_5000, PAYMENTS, PAYMENTS_TOO, pay

OWN = {"Origin": "http://inbox.test"}

GUARDED = ReviewPolicy(
    decisions={"approved", "rejected"},
    editable=("amount",),
    describe=lambda args: f"Invoice {HOSTILE}\n\x1b[2Jline two for {args['to']}",
    scopes=("payments",),
    limits=(ReviewLimit("amount", 1000, ("payments:large",)),),
)


def paused_on(store: Store, thread_id: str, review: Any) -> str:
    """``thread_id`` paused on a review of pay 5000 under ``review``; its review id."""
    agent = make_agent(
        store, [call(("c1", "pay", PAY_5000))], [], thread_id=thread_id, tool=pay([], review)
    )
    agent.run("Pay the invoice.")
    (pending,) = store.state_at(thread_id).reviews
    return pending.request.review_id


def recorded(store: Store, thread_id: str) -> list[Any]:
    kinds = (AgentThread.ReviewDecided, AgentThread.ReviewApprovedInPart)
    return [e for e in store.history(thread_id) if isinstance(e, kinds)]


def forms(page: str) -> set[str]:
    return set(re.findall(r'<form [^>]*id="([a-z-]+-form)"', page))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_each_reviewer_sees_only_the_reviews_they_may_decide(store: Store) -> None:
    """The queue page and the JSON API leave out a review whose scopes the reviewer's
    token lacks, and its page and its JSON answer 404 with nothing of it, even to a
    reviewer who knows (or guessed) its id; reviews without a policy stay listed for
    every reviewer."""
    guarded, plain = paused_on(store, "t", GUARDED), paused_on(store, "u", None)
    with inbox_client(store) as client:
        current(client)
        listed = {
            r["review_id"] for r in client.get("/api/reviews", headers=bearer(NO_SCOPE)).json()
        }
        assert listed == {plain}
        both = {r["review_id"] for r in client.get("/api/reviews", headers=bearer(PAYMENTS)).json()}
        assert both == {plain, guarded}
        pauses = client.get("/api/pauses", headers=bearer(NO_SCOPE)).json()
        assert [p["review_id"] for p in pauses] == [plain]
        sign_in(client, NO_SCOPE)
        home = client.get("/").text
        assert plain in home and guarded not in home
        direct = client.get(f"/api/reviews/{guarded}", headers=bearer(NO_SCOPE))
        assert direct.status_code == 404 and "5000" not in direct.text
        assert client.get(f"/api/reviews/{guarded}", headers=bearer(PAYMENTS)).status_code == 200
        page = client.get("/review", params={"id": guarded, "thread": "t"})
        assert page.status_code == 404 and forms(page.text) == set()
        assert "5000" not in page.text
        status = client.get("/review/status", params={"id": guarded, "thread": "t"})
        assert status.status_code == 404


def test_a_cursor_a_client_made_up_only_places_the_page(store: Store) -> None:
    """A cursor is not signed: one a client made up in the form a page gives, before
    every review, is accepted, and the page it starts holds only the reviews the
    reviewer may see, as the first page does."""
    guarded, plain = paused_on(store, "t", GUARDED), paused_on(store, "u", None)
    made_up = encode_cursor(QueueKey("2000-01-01T00:00:00+00:00", "a", "a"))
    with inbox_client(store) as client:
        current(client)
        for token, expected in ((NO_SCOPE, {plain}), (PAYMENTS, {plain, guarded})):
            page = client.get("/api/reviews", params={"after": made_up}, headers=bearer(token))
            assert page.status_code == 200, page.text
            assert {r["review_id"] for r in page.json()} == expected


def test_the_review_page_offers_only_the_allowed_forms_and_shows_the_text_as_text(
    store: Store,
) -> None:
    """Approve, edit (amount only) and reject are offered, respond is not; the tool's
    description is escaped and its control characters shown as escapes."""
    review = paused_on(store, "t", GUARDED)
    with inbox_client(store) as client:
        current(client)
        sign_in(client, PAYMENTS)
        page = client.get("/review", params={"id": review, "thread": "t"}).text
        assert forms(page) == {"approve-form", "edit-form", "reject-form"}
        assert "Only these arguments may be edited: amount." in page
        assert "<script>" not in page and "&lt;script&gt;" in page
        assert "\x1b" not in page and "\\x1b[2J" in page
        assert "line two for DE02 1001" in page
        api = client.get(f"/api/reviews/{review}", headers=bearer(PAYMENTS)).json()
        assert api["policy"]["decisions"] == ["approved", "rejected"]
        assert api["policy"]["editable"] == ["amount"]


@pytest.mark.parametrize(
    ("token", "fields", "status", "said"),
    [
        (PAYMENTS, {"action": "respond", "answer": "paid"}, 400, "allows only approved, rejected"),
        (PAYMENTS, {"action": "approve-edited", "arguments": '{"amount": 10, "to": "XX"}'},
         400, "forbids editing to"),
        (PAYMENTS, {"action": "approve"}, 403, "above 1000 needs one of the scopes"),
        (NO_SCOPE, {"action": "reject", "reason": "no"}, 403, "needs one of the scopes"),
    ],
    # named, not shown: a token's id changes with its expiry, and every pytest-xdist
    # worker must collect the same tests
    ids=["respond", "edit-forbidden", "approve-over-limit", "no-scope"],
)  # fmt: skip
def test_a_refused_decision_is_shown_on_the_review_page_and_recorded_nowhere(
    store: Store, token: str, fields: dict[str, str], status: int, said: str
) -> None:
    """A crafted post the page did not offer, or one outside the reviewer's scopes, is
    refused with the one check's message, on the review page; nothing is recorded."""
    review = paused_on(store, "t", GUARDED)
    with inbox_client(store) as client:
        current(client)
        csrf = sign_in(client, token)
        form = {"review": review, "thread": "t", "csrf": csrf, **fields}
        refused = client.post("/decide", data=form, headers=OWN)
        assert refused.status_code == status
        assert said in refused.text
        api = client.post(f"/api/reviews/{review}/reject", json={"reason": "x"},
                          headers=bearer(NO_SCOPE))  # fmt: skip
        assert api.status_code == 403
    assert recorded(store, "t") == []


def test_four_eyes_through_the_pages_needs_a_second_reviewer(store: Store) -> None:
    """The first approval is shown as in part; its reviewer is no longer offered to
    approve; a second reviewer's approval decides the review."""
    review = paused_on(store, "t", ReviewPolicy(four_eyes=True))
    with inbox_client(store) as client, inbox_client(store) as second:
        current(client)
        csrf = sign_in(client, PAYMENTS)
        form = {"review": review, "thread": "t", "csrf": csrf, "action": "approve"}
        after = client.post("/decide", data=form, headers=OWN)
        assert after.status_code == 200
        assert "Approved in part by" in after.text and "carol" in after.text
        assert forms(after.text) == {"reject-form", "respond-form"}
        csrf2 = sign_in(second, PAYMENTS_TOO)
        page = second.get("/review", params={"id": review, "thread": "t"}).text
        assert "approve-form" in forms(page)
        form2 = {"review": review, "thread": "t", "csrf": csrf2, "action": "approve"}
        decided = second.post("/decide", data=form2, headers=OWN)
        assert 'id="decision"' in decided.text
    kinds = [type(e).__name__ for e in recorded(store, "t")]
    assert kinds == ["ReviewApprovedInPart", "ReviewDecided"]


def test_the_served_inbox_applies_the_recorded_policy_without_the_application(
    tmp_path: Path,
) -> None:
    """`covonaut-es serve` has none of the application's code, and still lists and
    decides by the rules the review recorded: over real HTTP, a reviewer without the
    scope sees nothing and is refused, one approval is in part, the same reviewer
    cannot approve twice, a second one decides."""
    secret = "s" * 40
    signer = HmacReviewerVerifier(secret)
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        review = paused_on(store, "t", ReviewPolicy(scopes=("payments",), four_eyes=True))
    port = free_port()
    process = serve(url, port, env={"COVONAUT_ES_REVIEWER_SECRET": secret})
    base = f"http://127.0.0.1:{port}"
    carol = bearer(signer.issue_token("carol", 600, scopes=["payments"]))
    dave = bearer(signer.issue_token("dave", 600, scopes=["payments"]))
    nobody = bearer(signer.issue_token("alice", 600))
    try:
        healthy(process, base)
        approve = f"{base}/api/reviews/{review}/approve"
        assert httpx.get(f"{base}/api/reviews", headers=nobody).json() == []
        assert httpx.post(approve, json={}, headers=nobody).status_code == 403
        first = httpx.post(approve, json={}, headers=carol)
        assert first.status_code == 200 and first.json()["partial"] is True
        again = httpx.post(approve, json={}, headers=carol)
        assert again.status_code == 403 and "second, different reviewer" in again.text
        final = httpx.post(approve, json={}, headers=dave)
        assert (final.json()["reviewer"], final.json()["partial"]) == ("dave", False)
    finally:
        stopped(process)
    with open_store(url) as store:
        kinds = [type(e).__name__ for e in recorded(store, "t")]
    assert kinds == ["ReviewApprovedInPart", "ReviewDecided"]


def test_a_limit_keeps_the_review_listed_but_approving_above_it_needs_its_scope(
    store: Store,
) -> None:
    """A limit does not hide the review (the reviewer may still reject it); approving
    above it needs the limit's scope."""
    review = paused_on(store, "t", GUARDED)
    with inbox_client(store) as client:
        current(client)
        refused = client.post(f"/api/reviews/{review}/approve", json={}, headers=bearer(PAYMENTS))
        assert refused.status_code == 403
        approved = client.post(f"/api/reviews/{review}/approve", json={}, headers=bearer(LARGE))
        assert approved.status_code == 200 and approved.json()["reviewer"] == "erin"


def test_a_reviewer_gives_up_no_thread_waiting_on_a_review_outside_their_scopes(
    store: Store,
) -> None:
    """Giving a thread up ends every review it waits on: without the scope of one, the
    API answers 403 and records nothing, and the thread's page answers 404 with nothing
    of the operation, as the review's own page does; with the scope, both work."""
    paused_on(store, "t", GUARDED)
    version = store.state_at("t").version
    with inbox_client(store) as client:
        refused = client.post(
            "/api/threads/t/abandon", headers=bearer(NO_SCOPE), json={"reason": "not mine"}
        )
        assert refused.status_code == 403 and "payments" in refused.json()["error"]
        assert store.state_at("t").version == version
        sign_in(client, NO_SCOPE)
        page = client.get("/thread", params={"id": "t"})
        assert page.status_code == 404 and "5000" not in page.text and "DE02" not in page.text
        sign_in(client, PAYMENTS)
        assert client.get("/thread", params={"id": "t"}).status_code == 200
        given_up = client.post(
            "/api/threads/t/abandon", headers=bearer(PAYMENTS), json={"reason": "duplicate"}
        )
        assert given_up.status_code == 200, given_up.text
    assert store.state_at("t").status == "abandoned"


NOW = datetime(2026, 1, 1, tzinfo=UTC)

_EDITABLE = st.sampled_from([None, (), ("amount",), ("to",), ("amount", "to")])
_APPROVED_IN_PART_BY = st.sampled_from([None, "ann", "bob"])


@settings(max_examples=150, deadline=None)
@given(
    decisions=st.sets(st.sampled_from(ALL_DECISIONS), min_size=1),
    editable=_EDITABLE,
    may_have_run=st.booleans(),
    four_eyes=st.booleans(),
    approved_in_part_by=_APPROVED_IN_PART_BY,
)
def test_the_forms_a_review_page_offers_are_the_decisions_the_service_accepts(
    decisions: set[Decision],
    editable: tuple[str, ...] | None,
    may_have_run: bool,
    four_eyes: bool,
    approved_in_part_by: str | None,
) -> None:
    """Property: for any review (its policy's decisions and editable arguments, four
    eyes and a first approval in part, a retry of a call that may have run), the review
    page offers a reviewer a form exactly when the domain's one check accepts that
    decision from them (an edit: one that changes an argument the policy lets them
    edit). The page offered an edit box on a retry of a call that may have run, which
    the check always refuses (helper-199)."""
    arguments = {"amount": 5, "to": "bob"}
    digest = operation_digest("pay", arguments)
    rules = ReviewRules(decisions=tuple(decisions), editable=editable, four_eyes=four_eyes)
    request = ReviewRequest(
        review_id="r1",
        thread_id="t",
        tool_name="pay",
        arguments=arguments,
        digest=digest,
        tool_call_id="c1",
        rules=rules,
        may_have_run=may_have_run,
        run_on_approval=may_have_run,
    )
    approvals: tuple[ReviewDecision, ...] = ()
    if approved_in_part_by is not None and four_eyes and Decision.APPROVED in decisions:
        first = ReviewDecision(
            review_id="r1",
            digest=digest,
            decision=Decision.APPROVED,
            reviewer=approved_in_part_by,
            comment="",
            decided_at=NOW,
            thread_id="t",
            partial=True,
        )
        approvals = (first,)
    review = Review(request=request, approvals=approvals)
    ann = Reviewer("ann")
    offered = ReviewItem.recorded(FoundReview("t", review, awaiting=True), None).actions(ann)
    edited = {**arguments, (editable or ("amount",))[0]: 7}
    submissions = {
        "approve": (Decision.APPROVED, None, digest),
        "approve-edited": (Decision.APPROVED, edited, operation_digest("pay", edited)),
        "reject": (Decision.REJECTED, None, digest),
        "respond": (Decision.RESPONDED, None, digest),
    }
    for form, (decision, edit, covered) in submissions.items():
        try:
            check_decision(
                review,
                decision,
                reviewer=ann.id,
                scopes=ann.scopes,
                arguments=edit,
                digest=covered,
            )
        except (DecisionNotAllowedError, ReviewerNotPermittedError):
            accepted = False
        else:
            accepted = True
        assert (form in offered) == accepted, (form, offered)


SEEN_BY = [
    ("/api/reviews/{id}", {}),
    ("/review", {"id": "{id}"}),
    ("/review/status", {"id": "{id}"}),
]
"""Where a reviewer asks of one review by its id: its JSON, its page, its status."""


def asked_of(
    client: Any, seen_by: tuple[str, dict[str, str]], review_id: str, thread: str | None
) -> Any:
    """What ``client``, signed in outside the review's scopes, is answered at
    ``seen_by`` about ``review_id`` (in ``thread``, when named)."""
    path, params = seen_by
    query = {name: value.format(id=review_id) for name, value in params.items()}
    if thread is not None:
        query["thread"] = thread
    return client.get(path.format(id=review_id), params=query, headers=bearer(NO_SCOPE))


@pytest.mark.parametrize("forked", [False, True])
def test_a_review_outside_the_reviewers_scopes_reads_as_an_id_no_review_has(
    store: Store, forked: bool
) -> None:
    """Whatever a reviewer outside a review's scopes asks of it by its id (its JSON,
    its page, its status; naming its thread, its fork's, another thread or none, the
    review pending in a fork too or not), the answer is the one a made-up id of the
    same length gets, byte for byte once the id is swapped: nothing says that it
    exists, nor which threads hold it."""
    guarded = paused_on(store, "t", GUARDED)
    paused_on(store, "u", None)
    if forked:
        store.fork("t", new_thread_id="t-fork")
    made_up = "r" * len(guarded)
    with inbox_client(store) as client:
        current(client)
        sign_in(client, NO_SCOPE)
        for seen_by in SEEN_BY:
            for thread in (None, "t", "t-fork", "u", "nope"):
                hidden = asked_of(client, seen_by, guarded, thread)
                unknown = asked_of(client, seen_by, made_up, thread)
                where = (seen_by[0], thread)
                assert hidden.status_code == unknown.status_code == 404, where
                assert hidden.text.replace(guarded, made_up) == unknown.text, where
        allowed = client.get(f"/api/reviews/{guarded}", headers=bearer(PAYMENTS))
        assert allowed.status_code == (400 if forked else 200), allowed.text
