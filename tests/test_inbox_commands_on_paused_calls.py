"""A command on a call that has a pause (a tool's pause, anyone's to act on), in a thread
whose other call waits on a review outside the reviewer's scopes: the reviewer is told
only of the pause that awaits them there. The command went to the service whatever the
pause's kind or state, and its refusal named the thread's open calls, the hidden
review's call among them, and so told whether that review was pending or decided; the
status of such a pause, dealt with, told the thread was given up (helper-237; ADR 0152:
"not naming its open calls, nor telling its state")."""

from __future__ import annotations

from typing import Any

import pytest

from covonaut_es import Agent, AgentConfig, CheckpointSettings, Store, open_store
from covonaut_es.service import ThreadService, review_submission
from inbox_support import ask_tool, current, inbox_client
from support import ScriptedProvider, call, ticking_clock
from test_approvals import VERIFIER
from test_inbox_review_policy import GUARDED, bearer
from test_review_policy import NO_SCOPE, PAY_5000, PAYMENTS, pay

COMMANDS = (("settle", {"ran": False, "note": "n"}), ("retry", {}), ("answer", {"answer": "x"}))


def _world(store: Store, review: str, *, answered: bool) -> None:
    """Thread t, one step: c0 a tool's pause (anyone's), c1 a review of pay 5000 in
    scope "payments"; c0 answered if ``answered``; the review pending or rejected."""
    script = [call(("c0", "ask", '{"about": "refund"}'), ("c1", "pay", PAY_5000))]
    Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[ask_tool(), pay([], GUARDED)],
            checkpoint=CheckpointSettings(store=store, thread_id="t", durability="step"),
            clock=ticking_clock(),
            reviewer_verifier=VERIFIER,
        )
    ).run("Refund and pay.")
    service = ThreadService(store, verifier=VERIFIER)
    if answered:
        service.answer("t", "c0", "acct 1", reviewer=service.reviewer(NO_SCOPE))
    if review == "rejected":
        (pending,) = store.state_at("t").reviews
        service.decide(
            pending.request.review_id,
            review_submission("reject", text="no"),
            reviewer=service.reviewer(PAYMENTS),
        )


def _seen(store: Store, commands: Any) -> dict[str, tuple[int, str]]:
    seen = {}
    with inbox_client(store) as client:
        current(client)
        for name, body in commands:
            response = client.post(f"/api/pauses/t/c0/{name}", json=body, headers=bearer(NO_SCOPE))
            seen[name] = (response.status_code, response.text)
    return seen


@pytest.mark.parametrize("answered", [False, True], ids=["c0-pending", "c0-answered"])
def test_a_command_on_a_call_with_a_pause_names_no_call_of_a_hidden_review(
    answered: bool,
) -> None:
    commands = COMMANDS[:2] if not answered else COMMANDS  # answering a pending c0 succeeds
    with open_store("memory://") as store:
        _world(store, "pending", answered=answered)
        (hidden,) = store.state_at("t").reviews
        assert hidden.request.tool_call_id == "c1"
        seen = _seen(store, commands)
    named = {k: v for k, v in seen.items() if "c1" in v[1]}
    assert not named, named


@pytest.mark.parametrize("answered", [False, True], ids=["c0-pending", "c0-answered"])
def test_a_command_on_a_call_with_a_pause_tells_no_review_state(answered: bool) -> None:
    commands = COMMANDS[:2] if not answered else COMMANDS
    with open_store("memory://") as reference, open_store("memory://") as store:
        _world(reference, "pending", answered=answered)
        _world(store, "rejected", answered=answered)
        before = store.last_log_position()
        expected, seen = _seen(reference, commands), _seen(store, commands)
        assert store.last_log_position() == before
    differ = {k: (expected[k], seen[k]) for k in seen if seen[k] != expected[k]}
    assert not differ, differ


def test_the_status_of_a_pause_no_longer_shown_tells_no_give_up_of_a_hidden_review() -> None:
    """c0's pause was answered (no longer listed to anyone); the thread, which NO_SCOPE
    may not see, is then given up by a payments reviewer. The live status of c0's pause
    must say it was dealt with, as for a thread no one made (operations.md "What a
    reviewer is shown"); it says the thread was given up, which the pending world does
    not: the hidden review's state shows."""
    from inbox_support import sign_in

    def status(store: Store) -> tuple[int, str]:
        with inbox_client(store) as client:
            current(client)
            sign_in(client, NO_SCOPE)
            r = client.get("/pause/status", params={"thread": "t", "call": "c0", "pause": ""})
            return r.status_code, r.text

    with open_store("memory://") as reference, open_store("memory://") as store:
        _world(reference, "pending", answered=True)
        _world(store, "pending", answered=True)
        service = ThreadService(store, verifier=VERIFIER)
        service.abandon("t", "duplicate", reviewer=service.reviewer(PAYMENTS))
        assert status(store) == status(reference)
