"""A decision that does not run its call writes two events in one command: the decision,
then the call's result that it stands for. A fork taken between the two must be a thread
that goes on: its call is not in doubt, and its next run records the decision's result,
so that the fork continues exactly as the parent does from the same point."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    open_store,
)
from covonaut_es.service import ThreadService, review_submission
from support import answer, call, ticking_clock
from test_service import RITA, VERIFIER

OBJECT: dict[str, Any] = {"type": "object"}
SOON = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)  # the agents' clock starts at midnight
LATER = datetime(2026, 6, 1, tzinfo=UTC)  # past the deadline, not ahead of the database

DECISIONS = {
    "approve": ("approve", "fine"),
    "reject": ("reject", "no money today"),
    "respond": ("respond", "paid by hand"),
}


def pay_tool(runs_on_approval: bool) -> Tool:
    return Tool(
        "pay",
        "Pay",
        OBJECT,
        lambda ctx, args: "paid",
        requires_approval=True,
        run_on_approval=runs_on_approval,
        review_deadline=timedelta(hours=1),
    )


def agent(store: Store, thread_id: str, script: list[Any], runs_on_approval: bool) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[pay_tool(runs_on_approval)],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            reviewer_verifier=VERIFIER,
            clock=ticking_clock(),
        )
    )


def decided_thread(store: Store, how: str) -> int:
    """Thread ``t`` paused on a review of ``pay``, then decided ``how``; the version of
    the decision's own event."""
    runs = how == "approve and run"
    agent(store, "t", [call(("c1", "pay", '{"to": "bob"}')), answer("asked")], runs).run("pay")
    when = LATER if how == "expire" else SOON
    service = ThreadService(store, verifier=VERIFIER, clock=lambda: when)
    before = store.state_at("t").version
    if how == "expire":
        service.expire_reviews("t")
    else:
        (review,) = store.state_at("t").reviews
        action, text = DECISIONS.get(how, ("approve", ""))
        service.decide(
            review.request.review_id,
            review_submission(action, text=text),
            reviewer=service.reviewer(RITA),
            thread_id="t",
        )
    return before + 1


def resumed(store: Store, thread_id: str, runs_on_approval: bool) -> tuple[Any, ...]:
    """The thread's messages after a resume whose model answers at once."""
    runner = agent(store, thread_id, [answer("done")], runs_on_approval)
    runner.restore_latest_checkpoint(thread_id)
    runner.resume()
    return store.state_at(thread_id).messages


@settings(max_examples=20, deadline=None)
@given(
    how=st.sampled_from(["approve", "reject", "respond", "expire", "approve and run"]),
    after=st.integers(0, 3),
)
def test_a_fork_at_any_version_from_a_decision_on_goes_on_as_its_parent(
    how: str, after: int
) -> None:
    """Property: forked at the decision's version or any later one, the thread has no
    call in doubt, and resuming the fork gives the messages resuming the parent gives;
    but an approval that runs its call authorizes the parent's call only, so the fork
    asks again (a fork inherits decisions, not their authority)."""
    store = open_store("memory://")
    runs = how == "approve and run"
    decision = decided_thread(store, how)
    head = store.state_at("t").version
    fork = store.fork("t", at_version=min(decision + after, head))
    assert store.state_at(fork).in_doubt == ()
    forked, parent = resumed(store, fork, runs), resumed(store, "t", runs)
    assert store.state_at("t").status is ThreadStatus.FINISHED
    if runs:
        assert [r.pending for r in store.state_at(fork).reviews] == [False, True]
    else:
        assert forked == parent


def test_the_split_decision_shows_no_call_in_doubt_and_records_its_result_on_resume(
    tmp_path: Any,
) -> None:
    """On a SQLite store, the fork at a rejection's version: nothing in doubt, the
    review decided, and its next run records the rejection as the call's result before
    the model is asked."""
    store = open_store(f"sqlite:///{tmp_path / 'threads.db'}")
    decision = decided_thread(store, "reject")
    fork = store.fork("t", at_version=decision)
    state = store.state_at(fork)
    assert [p.call.id for p in state.open_calls] == ["c1"]
    assert state.in_doubt == ()
    assert all(pause.resolved for pause in state.pauses)
    messages = resumed(store, fork, runs_on_approval=False)
    result = next(m for m in messages if m.tool_call_id == "c1")
    assert result.content.startswith("Rejected by rita")
    assert store.replay_state(fork) == store.state_at(fork)


@pytest.mark.parametrize("how", ["approve", "reject"])
def test_settling_a_call_its_decision_answers_is_refused_and_says_why(how: str) -> None:
    """Such a call is not in doubt, so it cannot be settled or sent to run again: the
    error names the decision that is its result."""
    store = open_store("memory://")
    decision = decided_thread(store, how)
    fork = store.fork("t", at_version=decision)
    service = ThreadService(store, verifier=VERIFIER)
    with pytest.raises(Exception, match="the decision is its result"):
        service.request_retry(fork, "c1", reviewer=service.reviewer(RITA))
