"""A reviewer outside a review's scopes who answers, settles or retries a call of its
thread that has no pause is answered as for a thread no one made: the refusal named the
thread's open calls, the hidden review's among them, and told the review's state
(helper-234; ADR 0152: a refusal names the scopes needed, not the call;
``test_give_up_refusal_names_no_call.py`` guards the same for giving a thread up)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from covonaut_es import Store, open_store
from inbox_support import current, inbox_client
from test_inbox_review_policy import GUARDED, bearer, paused_on
from test_review_policy import NO_SCOPE


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory://") as opened:
        yield opened


@pytest.mark.parametrize(
    ("action", "body"), [("settle", {"ran": False, "note": "checked"}), ("retry", {})]
)
def test_a_command_on_a_call_not_open_names_no_call_of_a_hidden_review(
    store: Store, action: str, body: dict[str, Any]
) -> None:
    paused_on(store, "t", GUARDED)  # pending review of call c1, scope "payments"
    (hidden,) = store.state_at("t").open_calls
    assert hidden.call.id == "c1"
    with inbox_client(store) as client:
        current(client)
        # The reviewer sees nothing of the review: neither listed, nor its thread shown.
        assert client.get("/api/pauses", headers=bearer(NO_SCOPE)).json() == []
        refused = client.post(f"/api/pauses/t/c0/{action}", json=body, headers=bearer(NO_SCOPE))
        assert refused.status_code in (403, 404, 409), refused.text
        assert "c1" not in refused.text, refused.text
    assert [p.resolved for p in store.state_at("t").pauses] == [False]


# The threat model ("What a reviewer is shown") and test_inbox_scoped_oracle.py section 3:
# the surfaces keyed by a thread and a call tell a reviewer outside a review's scopes
# nothing of its state. Section 3 asks about the review's own call (c1), where the scope
# check answers first; a call of the same thread that no review governs (c0) has no scope
# to check, and its refusal tells pending from decided, expired and given up.

STATES = ("approved", "rejected", "expired", "given-up", "forked-parent-rejected")


def _commands_on_an_ungoverned_call(store: Store) -> dict[str, tuple[int, str]]:
    seen = {}
    with inbox_client(store) as client:
        current(client)
        for name, body in (
            ("answer", {"answer": "yes"}),
            ("settle", {"ran": False, "note": "n"}),
            ("retry", {}),
        ):
            response = client.post(f"/api/pauses/t/c0/{name}", json=body, headers=bearer(NO_SCOPE))
            seen[name] = (response.status_code, response.text)
    return seen


@pytest.mark.parametrize("name", STATES)
def test_commands_on_a_call_no_review_governs_tell_no_review_state(name: str) -> None:
    from test_inbox_scoped_oracle import world

    with open_store("memory://") as reference_store, open_store("memory://") as store:
        world(reference_store, "pending")
        reference = _commands_on_an_ungoverned_call(reference_store)
        world(store, name)
        before = store.last_log_position()
        seen = _commands_on_an_ungoverned_call(store)
        differ = {k: (reference[k], seen[k]) for k in seen if seen[k] != reference[k]}
        assert not differ, (name, differ)
        assert store.last_log_position() == before
