"""The live status of a tool's pause a reviewer was shown (and may act on) says "dealt
with" once the pause is gone, also when the thread has since asked for a review outside
their scopes, which they are not shown: a page polling its status would otherwise wait
for good."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from covonaut_es import Agent, AgentConfig, CheckpointSettings, Store, open_store
from covonaut_es.service import pause_token
from inbox_support import ask_tool, current, inbox_client, sign_in
from support import ScriptedProvider, answer, call, ticking_clock
from test_approvals import VERIFIER
from test_inbox_review_policy import GUARDED, bearer
from test_review_policy import NO_SCOPE, PAY_5000, PAYMENTS, pay

BOB = VERIFIER.issue_token("bob", 3600)  # no scope either: anyone may answer the pause


def _agent(store: Store, script: list[Any]) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[pay([], GUARDED), ask_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id="m"),
            clock=ticking_clock(),
            reviewer_verifier=VERIFIER,
        )
    )


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory://") as opened:
        yield opened


def test_the_status_of_a_pause_answered_elsewhere_says_dealt_with(store: Store) -> None:
    _agent(store, [call(("c2", "ask", "{}"))]).run("Refund, then pay.")
    state = store.state_at("m")
    (pause,) = state.pauses
    token = pause_token(state.messages, pause)
    with inbox_client(store) as client:
        current(client)
        sign_in(client, NO_SCOPE)
        status = {"thread": "m", "call": "c2", "pause": token}
        assert client.get("/pause", params={"thread": "m", "call": "c2"}).status_code == 200
        assert 'data-state="pending"' in client.get("/pause/status", params=status).text
        # Bob answers; a worker resumes the thread, whose next turn asks for a review
        # alice may not decide.
        answered = client.post("/api/pauses/m/c2/answer", json={"answer": "acct 1"},
                               headers=bearer(BOB))  # fmt: skip
        assert answered.status_code == 200, answered.text
        _agent(store, [call(("c1", "pay", PAY_5000)), answer("done")]).resume()
        assert [p.interrupt.tool_call_id for p in store.state_at("m").pauses] == ["c1"]
        current(client)
        seen = client.get("/pause/status", params=status)
        assert seen.status_code == 200, seen.text  # a 404 would be polled for good
        assert 'data-state="dealt-with"' in seen.text
        # Whoever may see the thread is told so too (unchanged).
        sign_in(client, PAYMENTS)
        assert 'data-state="dealt-with"' in client.get("/pause/status", params=status).text
