"""A call that ran under an approval in the parent and was left in doubt, retried in a
fork: the fork does not inherit the approval's authority, so the retry asks for a review
of its own. Its decision must not say the call did not run, which nobody knows: an
approval runs the call again with its key, and a rejection or an expiry leaves it in
doubt for a person to settle."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import Agent, Store, Tool, open_store
from covonaut_es.domain import PauseKind
from covonaut_es.errors import DecisionNotAllowedError, ToolCallsInDoubtError
from covonaut_es.service import Settlement, ThreadService, review_submission
from support import answer, call, ticking_clock
from test_approvals import ProcessDied
from test_run_on_approval import agent_of
from test_service import RITA, VERIFIER

SOON = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)  # the agents' clocks start at midnight
LATER = datetime(2026, 6, 1, tzinfo=UTC)  # past the deadline, not ahead of the database


def agent(store: Store, thread_id: str, script: list[Any], keys: list[str]) -> Agent:
    """An agent whose ``pay`` needs an approval, records each key it runs with, and
    dies while ``keys`` is empty."""

    def pay(ctx: Any, args: dict[str, Any]) -> Any:
        keys.append(ctx.idempotency_key)
        if len(keys) == 1:
            raise ProcessDied
        return "paid"

    tool = Tool(
        "pay", "Pay", {"type": "object"}, pay, requires_approval=True, review_deadline=timedelta(1)
    )
    return agent_of(store, script, tool, thread_id=thread_id)


def fork_retrying(store: Store, service: ThreadService, keys: list[str]) -> str:
    """A parent whose approved call c2 ran and was left in doubt; a fork of it whose
    retry of c2 waits on a review of its own (the fork's id)."""
    pay = '{"to": "bob"}'
    parent = agent(store, "parent", [call(("c1", "pay", pay)), call(("c2", "pay", pay))], keys)
    parent.run("pay bob")
    (review,) = store.state_at("parent").reviews
    rita = service.reviewer(RITA)
    service.decide(review.request.review_id, review_submission("approve", text="ok"), reviewer=rita)
    with pytest.raises(ProcessDied):
        parent.resume()  # the model calls again, the approval is spent, and the tool dies
    service.pause_calls_in_doubt("parent", "its runner stopped")
    fork = store.fork("parent", new_thread_id="fork")
    service.request_retry(fork, "c2", reviewer=rita)
    retrying = agent(store, fork, [answer("done")], keys)
    retrying.restore_latest_checkpoint(fork)
    retrying.resume()
    (pause,) = [p for p in store.state_at(fork).pauses if not p.resolved]
    assert pause.kind is PauseKind.REVIEW and pause.interrupt.tool_call_id == "c2"
    return fork


@pytest.mark.parametrize("how", ["reject", "expire"])
@pytest.mark.usefixtures("simulated_time")
def test_a_retry_refused_in_a_fork_leaves_the_call_in_doubt(store: Store, how: str) -> None:
    """A rejection or expiry of the retry's review records no result for the call, which
    may have run: it is in doubt, paused for a person, who settles it."""
    keys: list[str] = []
    service = ThreadService(store, verifier=VERIFIER, clock=ticking_clock(SOON))
    fork = fork_retrying(store, service, keys)
    rita = service.reviewer(RITA)
    (_, retry_review) = store.state_at(fork).reviews
    if how == "reject":
        submission = review_submission("reject", text="not again")
        service.decide(retry_review.request.review_id, submission, reviewer=rita)
    else:
        ThreadService(store, verifier=VERIFIER, clock=lambda: LATER).expire_reviews(fork)
    state = store.state_at(fork)
    assert [p.call.id for p in state.in_doubt] == ["c2"]
    assert "c2" not in [m.tool_call_id for m in state.messages]
    runner = agent(store, fork, [answer("done")], keys)
    runner.restore_latest_checkpoint(fork)
    with pytest.raises(ToolCallsInDoubtError):
        runner.resume()
    service.pause_calls_in_doubt(fork, "no runner may retry it")
    (pause,) = [p for p in store.state_at(fork).pauses if not p.resolved]
    assert pause.kind is PauseKind.IN_DOUBT and pause.interrupt.tool_call_id == "c2"
    service.settle(fork, "c2", Settlement.ran_with("paid, checked"), reviewer=rita)
    runner.restore_latest_checkpoint(fork)
    assert runner.resume() == "done"
    assert len(keys) == 1  # never run again


def test_a_retry_approved_in_a_fork_runs_the_call_again_with_its_key(store: Store) -> None:
    """An approval of the retry's review runs that very call again, with the key it ran
    with in the parent, and records its result once."""
    keys: list[str] = []
    service = ThreadService(store, verifier=VERIFIER, clock=ticking_clock(SOON))
    fork = fork_retrying(store, service, keys)
    (_, retry_review) = store.state_at(fork).reviews
    submission = review_submission("approve", text="run it again")
    service.decide(retry_review.request.review_id, submission, reviewer=service.reviewer(RITA))
    runner = agent(store, fork, [answer("done")], keys)
    runner.restore_latest_checkpoint(fork)
    assert runner.resume() == "done"
    assert keys[1] == keys[0]
    assert [m.tool_call_id for m in store.state_at(fork).messages].count("c2") == 1


def test_a_retry_a_standing_rejection_refuses_leaves_the_call_in_doubt(store: Store) -> None:
    """Asked for again once its review was rejected, the retry is refused by that
    rejection before it runs: the call, which may have run, is paused in doubt again
    rather than recorded as not run."""
    keys: list[str] = []
    service = ThreadService(store, verifier=VERIFIER, clock=ticking_clock(SOON))
    fork = fork_retrying(store, service, keys)
    rita = service.reviewer(RITA)
    (_, retry_review) = store.state_at(fork).reviews
    submission = review_submission("reject", text="not again")
    service.decide(retry_review.request.review_id, submission, reviewer=rita)
    service.pause_calls_in_doubt(fork, "no runner may retry it")
    service.request_retry(fork, "c2", reviewer=rita)
    runner = agent(store, fork, [answer("done")], keys)
    runner.restore_latest_checkpoint(fork)
    assert runner.resume() == ""
    state = store.state_at(fork)
    (pause,) = [p for p in state.pauses if not p.resolved]
    assert pause.kind is PauseKind.IN_DOUBT and pause.interrupt.tool_call_id == "c2"
    assert "rejected" in pause.interrupt.reason
    assert "c2" not in [m.tool_call_id for m in state.messages]
    assert len(keys) == 1


_ARGUMENTS = st.dictionaries(
    st.sampled_from(["to", "amount", "memo"]),
    st.one_of(st.sampled_from(["bob", "mallory", "Bob"]), st.integers(0, 10**6), st.none()),
    max_size=3,
)


@settings(max_examples=15, deadline=None)
@given(arguments=_ARGUMENTS)
def test_a_retry_review_takes_no_edit(arguments: dict[str, Any]) -> None:
    """Its approval runs the call again under the key it may have run with, which an
    external system may answer with what that run did: any edit of the arguments is
    refused, and nothing is recorded; the arguments as requested are approved."""
    with open_store("memory://") as store:
        keys: list[str] = []
        service = ThreadService(store, verifier=VERIFIER, clock=ticking_clock(SOON))
        fork = fork_retrying(store, service, keys)
        (_, retry_review) = store.state_at(fork).reviews
        before = store.state_at(fork).version
        submission = review_submission("approve", text="again", arguments=arguments)
        decide = functools.partial(
            service.decide, retry_review.request.review_id, reviewer=service.reviewer(RITA)
        )
        if arguments == retry_review.request.arguments:
            decide(submission)
            return
        with pytest.raises(DecisionNotAllowedError, match="may have run"):
            decide(submission)
        assert store.state_at(fork).version == before
