"""The reviewer's other two answers: approve with edited arguments (the approval covers
exactly the edit, and the history keeps both), and respond in the tool's place (the
answer is the call's result and the tool never runs)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import AgentThread, StaleReviewError, Store, ThreadStatus, ToolContext, open_store
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.domain import Decision, operation_digest
from covonaut_es.errors import ThreadStateError
from covonaut_es.projections import ReviewQueue
from support import answer, call
from test_approvals import ALICE, BOB, PAY_40, paused_on_review, review_id, tool_results

PAY_20 = '{"amount": 20, "to": "bob"}'
EDIT = {"to": "bob", "amount": 20}


def test_an_edited_approval_runs_the_tool_with_exactly_the_edit(store: Store) -> None:
    """The model's call with the edited arguments runs with the approval; the history
    keeps the requested arguments, the edit and who edited."""
    runs: list[ToolContext] = []
    script = [call(("c2", "pay", PAY_20)), answer("Paid 20.")]
    agent = paused_on_review(store, script, runs)
    rid = review_id(agent)
    decision = agent.approve(rid, reviewer=ALICE, comment="halved", arguments=EDIT)
    assert decision.digest == operation_digest("pay", EDIT)
    assert decision.arguments == {"amount": 20, "to": "bob"}
    assert 'with edited arguments {"amount":20,"to":"bob"}' in tool_results(agent)["c1"]
    assert agent.resume() == "Paid 20."
    (ran,) = runs
    assert ran.tool_call_id == "c2" and ran.approval == decision
    (review,) = agent.state.reviews
    assert review.request.arguments == {"amount": 40, "to": "bob"}
    assert review.used_by == "c2"
    (edited,) = (e for e in store.history("t") if isinstance(e, AgentThread.ReviewDecided))
    assert type(edited) is AgentThread.ReviewApprovedWithEdits
    assert (edited.reviewer, edited.arguments) == ("alice", {"amount": 20, "to": "bob"})
    summaries = [entry.summary for entry in store.replay("t")]
    assert any("approved by alice with edited arguments" in s for s in summaries)
    assert store.verify("t").ok


def test_an_edited_approval_does_not_cover_the_requested_arguments(store: Store) -> None:
    """A call with the arguments the model first asked for needs a review of its own."""
    runs: list[ToolContext] = []
    agent = paused_on_review(store, [call(("c2", "pay", PAY_40))], runs)
    agent.approve(review_id(agent), reviewer=ALICE, arguments=EDIT)
    assert agent.resume() == ""
    assert runs == [] and agent.status is ThreadStatus.INTERRUPTED
    assert len(agent.pending_reviews) == 1


def test_a_response_is_the_call_result_and_the_tool_never_runs(store: Store) -> None:
    """respond() records the answer as the held-back call's result; the tool never runs."""
    runs: list[ToolContext] = []
    agent = paused_on_review(store, [answer("Bob was paid last week.")], runs)
    decision = agent.respond(
        review_id(agent), reviewer=BOB, answer="Already paid on Monday; do not pay again."
    )
    assert (decision.decision, decision.reviewer) == (Decision.RESPONDED, "bob")
    assert tool_results(agent)["c1"] == "Already paid on Monday; do not pay again."
    assert agent.resume() == "Bob was paid last week."
    assert runs == []
    kinds = [type(e).__name__ for e in store.history("t")]
    assert "ReviewResponded" in kinds and "ApprovalUsed" not in kinds
    assert store.verify("t").ok


def test_a_response_does_not_stand_for_a_later_call(store: Store) -> None:
    """A response answers one call; the same operation called again asks again."""
    runs: list[ToolContext] = []
    agent = paused_on_review(store, [call(("c2", "pay", PAY_40))], runs)
    agent.respond(review_id(agent), reviewer=BOB, answer="not now")
    assert agent.resume() == ""
    assert runs == [] and len(agent.pending_reviews) == 1


@pytest.mark.parametrize("second", ["approve", "respond", "edit"])
def test_a_decided_review_is_stale_for_every_action(store: Store, second: str) -> None:
    """Whatever came first, a second decision of any kind is refused."""
    runs: list[ToolContext] = []
    agent = paused_on_review(store, [], runs)
    rid = review_id(agent)
    agent.respond(rid, reviewer=BOB, answer="no need") if second != "respond" else agent.approve(
        rid, reviewer=BOB
    )
    attempts: dict[str, Any] = {
        "approve": lambda: agent.approve(rid, reviewer=ALICE),
        "respond": lambda: agent.respond(rid, reviewer=ALICE, answer="x"),
        "edit": lambda: agent.approve(rid, reviewer=ALICE, arguments=EDIT),
    }
    with pytest.raises(StaleReviewError, match="already"):
        attempts[second]()


def test_only_an_approval_takes_edited_arguments(store: Store) -> None:
    """The aggregate refuses edited arguments with a rejection."""
    runs: list[ToolContext] = []
    agent = paused_on_review(store, [], runs)
    thread = store.load("t")
    assert thread is not None
    with pytest.raises(ThreadStateError, match="only an approval"):
        thread.decide_review(
            review_id(agent),
            Decision.REJECTED,
            reviewer="bob",
            comment="",
            now=thread.modified_on,
            arguments=EDIT,
        )


def test_the_queue_drops_reviews_decided_by_edit_or_response(tmp_path: Path) -> None:
    """Both new decisions remove the review from the reviewer queue."""
    sqlite_url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(sqlite_url) as opened:
        runs: list[ToolContext] = []
        first = paused_on_review(opened, [], runs)
        second = paused_on_review(opened, [], runs, thread_id="u")
        queue = ReviewQueue(sqlite_url, view_url=f"memory://q-{uuid.uuid4().hex}")
        with queue.follow():
            queue.wait_until_current(opened)
            assert len(queue.pending()) == 2
            first.approve(review_id(first), reviewer=ALICE, arguments=EDIT)
            second.respond(review_id(second), reviewer=ALICE, answer="done already")
            queue.wait_until_current(opened)
            assert queue.pending() == ()


def test_new_decisions_survive_export_and_import(tmp_path: Path) -> None:
    """A thread with an edited approval and a response exports, imports into another
    store, verifies there and reads back the same reviews."""
    runs: list[ToolContext] = []
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as source:
        edited = paused_on_review(source, [], runs)
        edited.approve(review_id(edited), reviewer=ALICE, arguments=EDIT)
        answered = paused_on_review(source, [], runs, thread_id="u")
        answered.respond(review_id(answered), reviewer=BOB, answer="done")
        exports = {t: list(export_thread(source, t)) for t in ("t", "u")}
        expected = {t: source.state_at(t).reviews for t in ("t", "u")}
    with open_store(f"sqlite:///{tmp_path / 'b.db'}") as target:
        assert [import_threads(target, lines) for lines in exports.values()] == [["t"], ["u"]]
        for thread_id, reviews in expected.items():
            assert target.verify(thread_id).ok
            assert target.state_at(thread_id).reviews == reviews
