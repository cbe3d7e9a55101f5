"""A fork inherits a tool's pause (anyone's to answer); its parent then asks for a
review outside a reviewer's scopes, so the reviewer may not see the parent: its page
answers as for a thread no one made, the fork's page leaves it unnamed, and so do the
listings, which named it as the pause's ``branch_parent`` ("inherited from ...",
helper-234)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from covonaut_es import Store, open_store
from covonaut_es.service import ThreadService, review_submission
from inbox_support import current, inbox_client, paused_on_tool, sign_in
from support import answer, call
from test_approvals import VERIFIER, make_agent
from test_inbox_review_policy import GUARDED, bearer, paused_on
from test_review_policy import NO_SCOPE, PAY_5000, PAYMENTS, pay

PARENT = "customer-42-dispute"


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory://") as opened:
        yield opened


def _parent_hidden_after_the_fork(store: Store) -> None:
    paused_on_tool(store, PARENT)  # a tool's pause on c1: anyone's to answer
    store.fork(PARENT, new_thread_id="f")  # the fork inherits that pause
    service = ThreadService(store, verifier=VERIFIER)
    service.answer(PARENT, "c1", "acct 1", reviewer=service.reviewer(PAYMENTS))
    make_agent(store, [call(("c9", "pay", PAY_5000))], [], thread_id=PARENT,
               tool=pay([], GUARDED)).resume()  # fmt: skip


def test_a_listed_forks_pause_names_no_parent_the_reviewer_may_not_see(store: Store) -> None:
    _parent_hidden_after_the_fork(store)
    with inbox_client(store) as client:
        current(client)
        listed = client.get("/api/pauses", headers=bearer(NO_SCOPE))
        assert [item["thread_id"] for item in listed.json()] == ["f"]
        sign_in(client, NO_SCOPE)
        # The reviewer may not see the parent: its page reads as a thread no one made.
        assert client.get("/thread", params={"id": PARENT}).status_code == 404
        assert PARENT not in client.get("/thread", params={"id": "f"}).text
        assert PARENT not in listed.text, listed.text
        rows = client.get("/")
        assert PARENT not in rows.text, re.findall(r"inherited from[^<]*", rows.text)


def test_a_listed_forks_review_names_no_parent_the_reviewer_may_not_see() -> None:
    """The fork inherits a review anyone may decide; its listed request data named the
    hidden parent as the thread it was asked in (helper-237): it names the fork."""
    with open_store("memory://") as store:
        rid = paused_on(store, PARENT, None)  # a review anyone may decide
        store.fork(PARENT, new_thread_id="f")  # the fork inherits it
        service = ThreadService(store, verifier=VERIFIER)
        service.decide(rid, review_submission("reject", text="no"),
                       reviewer=service.reviewer(PAYMENTS), thread_id=PARENT)  # fmt: skip
        script = [call(("c9", "pay", PAY_5000.replace("5000", "4000"))), answer("x")]
        make_agent(store, script, [], thread_id=PARENT, tool=pay([], GUARDED)).resume()
        with inbox_client(store) as client:
            current(client)
            listed = client.get("/api/pauses", headers=bearer(NO_SCOPE))
            assert [item["thread_id"] for item in listed.json()] == ["f"]
            assert [item["branch_parent"] for item in listed.json()] == [None]
            sign_in(client, NO_SCOPE)
            # The reviewer may not see the parent: its page reads as a thread no one made.
            assert client.get("/thread", params={"id": PARENT}).status_code == 404
            assert PARENT not in listed.text, listed.json()[0]["data"]


GRAND = "customer-42-dispute"


def _grandparent_hidden(store) -> None:
    rid = paused_on(store, GRAND, None)  # a review anyone may decide
    store.fork(GRAND, new_thread_id="p")  # inherits it
    store.fork("p", new_thread_id="f")  # and so does its fork
    service = ThreadService(store, verifier=VERIFIER)
    service.decide(rid, review_submission("reject", text="no"),
                   reviewer=service.reviewer(PAYMENTS), thread_id=GRAND)  # fmt: skip
    script = [call(("c9", "pay", PAY_5000.replace("5000", "4000"))), answer("x")]
    make_agent(store, script, [], thread_id=GRAND, tool=pay([], GUARDED)).resume()


def test_a_fork_of_a_fork_names_no_grandparent_the_reviewer_may_not_see() -> None:
    with open_store("memory://") as store:
        _grandparent_hidden(store)
        with inbox_client(store) as client:
            current(client)
            listed = client.get("/api/pauses", headers=bearer(NO_SCOPE))
            assert sorted(item["thread_id"] for item in listed.json()) == ["f", "p"]
            sign_in(client, NO_SCOPE)
            assert client.get("/thread", params={"id": GRAND}).status_code == 404
            assert GRAND not in client.get("/thread", params={"id": "f"}).text
            assert GRAND not in listed.text, [i["data"] for i in listed.json()]
            reviews = client.get("/api/reviews", headers=bearer(NO_SCOPE))
            assert GRAND not in reviews.text, reviews.json()
