"""No read surface of the inbox names a fork's ancestor the reviewer may not see.

A fork inherits its parent's pauses and reviews, each with what the parent recorded
before the fork: a pause anyone may answer, a review pending, decided, or approved in
part under four eyes. The parent (or, for a fork of a fork, the grandparent) then asks
for a review outside the reviewer's scopes, so they may not see it. Every page and
JSON answer the reviewer can ask for about the forks (the listings, each fork's page,
each review and pause the fork holds, with their live status) must leave that thread
unnamed: helper-234 and helper-237 found it named by listings, helper-244 by the JSON
of an inherited decision and approval.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from covonaut_es import ReviewPolicy, Store, open_store
from covonaut_es.service import ThreadService, review_submission
from inbox_support import current, inbox_client, paused_on_tool, sign_in
from support import answer, call
from test_approvals import VERIFIER, make_agent
from test_inbox_review_policy import GUARDED, bearer, paused_on
from test_review_policy import NO_SCOPE, PAY_5000, PAYMENTS, pay

HIDDEN = "customer-42-dispute"


def _service(store: Store) -> ThreadService:
    return ThreadService(store, verifier=VERIFIER)


def _decide(store: Store, rid: str, decision: str, thread_id: str = HIDDEN) -> None:
    service = _service(store)
    submission = (
        review_submission(decision, text="no")
        if decision == "reject"
        else (review_submission(decision))
    )
    service.decide(rid, submission, reviewer=service.reviewer(PAYMENTS), thread_id=thread_id)


def _hide(store: Store) -> None:
    """The hidden thread asks for a review outside NO_SCOPE's scopes."""
    script = [call(("c9", "pay", PAY_5000.replace("5000", "4000"))), answer("x")]
    make_agent(store, script, [], thread_id=HIDDEN, tool=pay([], GUARDED)).resume()


def _inherited_pause(store: Store) -> tuple[str, ...]:
    paused_on_tool(store, HIDDEN)  # a tool's pause on c1: anyone's to answer
    store.fork(HIDDEN, new_thread_id="f")
    service = _service(store)
    service.answer(HIDDEN, "c1", "acct 1", reviewer=service.reviewer(PAYMENTS))
    make_agent(store, [call(("c9", "pay", PAY_5000))], [], thread_id=HIDDEN,
               tool=pay([], GUARDED)).resume()  # fmt: skip
    return ("f",)


def _inherited_pending_review(store: Store) -> tuple[str, ...]:
    rid = paused_on(store, HIDDEN, None)  # a review anyone may decide
    store.fork(HIDDEN, new_thread_id="f")
    _decide(store, rid, "reject")
    _hide(store)
    return ("f",)


def _inherited_decision(store: Store) -> tuple[str, ...]:
    rid = paused_on(store, HIDDEN, None)
    _decide(store, rid, "reject")
    store.fork(HIDDEN, new_thread_id="f")  # inherits the decided review
    _hide(store)
    return ("f",)


def _inherited_approval_in_part(store: Store) -> tuple[str, ...]:
    rid = paused_on(store, HIDDEN, ReviewPolicy(four_eyes=True))
    _decide(store, rid, "approve")
    store.fork(HIDDEN, new_thread_id="f")  # inherits the first approval
    _decide(store, rid, "reject")
    _hide(store)
    return ("f",)


def _inherited_through_a_fork(store: Store) -> tuple[str, ...]:
    rid = paused_on(store, HIDDEN, ReviewPolicy(four_eyes=True))
    _decide(store, rid, "approve")
    store.fork(HIDDEN, new_thread_id="p")
    store.fork("p", new_thread_id="f")
    _decide(store, rid, "reject")
    _hide(store)
    return ("p", "f")


STATES: dict[str, Callable[[Store], tuple[str, ...]]] = {
    "an inherited tool's pause": _inherited_pause,
    "an inherited pending review": _inherited_pending_review,
    "an inherited decision": _inherited_decision,
    "an inherited approval in part": _inherited_approval_in_part,
    "a review inherited through a fork": _inherited_through_a_fork,
}


def _surfaces(store: Store, forks: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """Every read the reviewer may make about the forks: path and query."""
    yield from (("/", {}), ("/rows", {}), ("/api/reviews", {}), ("/api/pauses", {}))
    for fork in forks:
        yield "/thread", {"id": fork}
        state = store.state_at(fork)
        for review in state.reviews:
            named = {"id": review.request.review_id, "thread": fork}
            yield "/review", named
            yield "/review/status", named
            yield f"/api/reviews/{review.request.review_id}", {"thread": fork}
        for pause in state.pauses:
            named = {"thread": fork, "call": pause.interrupt.tool_call_id}
            yield "/pause", named
            yield "/pause/status", named


@pytest.mark.parametrize("state", STATES)
def test_no_surface_names_an_ancestor_the_reviewer_may_not_see(state: str) -> None:
    with open_store("memory://") as store:
        forks = STATES[state](store)
        with inbox_client(store) as client:
            current(client)
            sign_in(client, NO_SCOPE)
            # The reviewer may not see it: its page reads as a thread no one made.
            assert client.get("/thread", params={"id": HIDDEN}).status_code == 404
            surfaces = list(_surfaces(store, forks))
            assert len(surfaces) > 4 + len(forks)  # each fork holds what it inherited
            for path, query in surfaces:
                shown = client.get(path, params=query, headers=bearer(NO_SCOPE))
                assert shown.status_code in (200, 404), (path, query, shown.text)
                assert HIDDEN not in shown.text, (path, query, shown.text)
