"""A reviewer who may act on a tool's pause, giving the thread up from a page that went
stale while the thread moved on to a review outside their scopes, is refused without
being told that review's call (ADR 0152: the answer tells whether such a review waits,
and the scopes it needs, as deciding does)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from covonaut_es import Store, open_store
from covonaut_es.service import ThreadService, pause_token
from inbox_support import current, inbox_client, paused_on_tool
from support import call
from test_approvals import VERIFIER, make_agent
from test_inbox_review_policy import GUARDED, bearer
from test_review_policy import NO_SCOPE, PAY_5000, PAYMENTS, pay


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory://") as opened:
        yield opened


def test_the_give_up_refusal_does_not_name_the_hidden_call(store: Store) -> None:
    paused_on_tool(store, "v")
    state = store.state_at("v")
    token = pause_token(state.messages, state.pauses[0])
    service = ThreadService(store, verifier=VERIFIER)
    service.answer("v", "c1", "acct 1", reviewer=service.reviewer(PAYMENTS))
    make_agent(store, [call(("c9", "pay", PAY_5000))], [], thread_id="v",
               tool=pay([], GUARDED)).resume()  # fmt: skip
    with inbox_client(store) as client:
        current(client)
        refused = client.post("/api/threads/v/abandon", json={"reason": "dup", "pause": token},
                              headers=bearer(NO_SCOPE))  # fmt: skip
        assert refused.status_code in (403, 409), refused.text
        assert refused.status_code == 403 and "c9" not in refused.text, refused.text
