"""An approval that runs the call it held back: on resume, once, with the reviewer's
edits, its approval spent before it starts, and no model call to run it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolCallsInDoubtError,
    ToolContext,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.domain import RunMode
from covonaut_es.errors import ConfigurationError, ProviderError
from covonaut_es.service import ThreadService, review_submission
from covonaut_es.workers import Worker
from support import answer, call, ticking_clock
from test_approvals import ALICE, PAY_40, PAY_SCHEMA, VERIFIER, ProcessDied

APPROVAL_WORKER = str(Path(__file__).with_name("approval_worker.py"))


class ModelCalledAgain(AssertionError):
    """The model was asked for a turn the test says must not happen."""


def pay_tool(runs: list[tuple[ToolContext, dict[str, Any]]], *, crash: bool = False) -> Tool:
    def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
        runs.append((ctx, args))
        if crash and len(runs) == 1:
            raise ProcessDied
        return {"paid": args["amount"], "to": args["to"]}

    return Tool(
        "pay", "Send a payment", PAY_SCHEMA, pay, requires_approval=True, run_on_approval=True
    )


def agent_of(store: Store, script: list[Any], tool: Tool, *, thread_id: str = "t") -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[tool],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            reviewer_verifier=VERIFIER,
            clock=ticking_clock(),
        )
    )


def only_after_the_result(request: ProviderRequest) -> ProviderResponse:
    """The model's one turn after the approved call: its result must be in the history;
    a turn that would call the tool again fails the test."""
    last = request.messages[-1]
    if last.role.value != "tool" or "paid" not in last.content:
        raise ModelCalledAgain(f"the model was asked again before the call ran: {last!r}")
    return answer(f"Done: {last.content}")


def paused(store: Store, runs: list[Any], **options: Any) -> tuple[Agent, str]:
    script = [call(("c1", "pay", PAY_40)), only_after_the_result]
    agent = agent_of(store, script, pay_tool(runs, **options))
    assert agent.run("Pay bob 40.") == ""
    (request,) = agent.pending_reviews
    assert request.run_on_approval and runs == []
    return agent, request.review_id


def decide(store: Store, review_id: str, action: str, **fields: Any) -> None:
    """Decide through the service layer, as the inbox and the command line do."""
    service = ThreadService(store, verifier=VERIFIER)
    service.decide(review_id, review_submission(action, **fields), reviewer=service.reviewer(ALICE))


def stored(store: Store, kind: type[AgentThread.Event]) -> list[Any]:
    return [e for e in store.history("t") if isinstance(e, kind)]


def test_an_approved_call_runs_once_on_resume_with_the_edits_and_no_model_call(
    store: Store,
) -> None:
    """Approved with edited arguments: resume runs the held-back call once with them,
    under its recorded key and approval, then asks the model only for its answer."""
    runs: list[tuple[ToolContext, dict[str, Any]]] = []
    agent, review_id = paused(store, runs)
    key = agent.state.open_calls[0].idempotency_key
    decide(store, review_id, "approve", arguments='{"amount": 20, "to": "bob"}')
    assert agent.status is ThreadStatus.INTERRUPTED and agent.in_doubt == ()
    requests = agent.config.provider.requests  # type: ignore[attr-defined]
    asked = len(requests)

    output = agent.resume()

    assert len(requests) == asked + 1  # the answer; running the call took no model call
    ((ctx, args),) = runs
    assert args == {"amount": 20, "to": "bob"}
    assert ctx.tool_call_id == "c1" and ctx.idempotency_key == key
    assert ctx.approval is not None and ctx.approval.review_id == review_id
    assert ctx.approval.reviewer == "alice" and ctx.approval.arguments == args
    assert (
        output.startswith("Done: Ran with the arguments alice approved") and '"amount":20' in output
    )
    assert agent.result is not None and agent.result.status == "finished"
    (used,) = stored(store, AgentThread.ApprovalUsed)
    assert (used.review_id, used.tool_call_id, used.idempotency_key) == (review_id, "c1", key)
    kinds = [type(e).__name__ for e in store.history("t")]
    assert kinds.index("ReviewApprovedWithEdits") < kinds.index("ApprovalUsed")
    assert kinds.index("ApprovalUsed") < kinds.index("ToolResultRecorded")
    assert kinds.count("ToolResultRecorded") == 1


def test_a_worker_runs_the_approved_call_when_it_resumes_the_thread(store: Store) -> None:
    """The worker that resumes a decided thread runs the approved call, once."""
    runs: list[tuple[ToolContext, dict[str, Any]]] = []
    _, review_id = paused(store, runs)
    decide(store, review_id, "approve")

    def config(thread_id: str) -> AgentConfig:
        return AgentConfig(
            provider=ScriptedProvider(respond=only_after_the_result),
            tools=[pay_tool(runs)],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            clock=ticking_clock(),
        )

    Worker(store, config).run(once=True)
    assert [args for _, args in runs] == [{"amount": 40, "to": "bob"}]
    assert store.load("t").status is ThreadStatus.FINISHED
    Worker(store, config).run(once=True)
    assert len(runs) == 1


def test_an_approval_from_the_command_line_runs_with_its_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`covonaut-es approve --arguments` records the edit; the resume runs it once."""
    secret = "s" * 32
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", secret)
    token = HmacReviewerVerifier(secret.encode()).issue_token("carol", ttl_seconds=60)
    runs: list[tuple[ToolContext, dict[str, Any]]] = []
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        agent, review_id = paused(store, runs)
        edit = '{"amount": 7, "to": "bob"}'
        argv = ["approve", review_id, "--arguments", edit, "--reviewer-token", token]
        assert main([*argv, "--store", store.url]) == 0
        agent.resume()
    ((ctx, args),) = runs
    assert args == {"amount": 7, "to": "bob"} and ctx.approval is not None
    assert ctx.approval.reviewer == "carol"


def test_a_runner_that_died_before_spending_the_approval_leaves_it_to_the_next(
    store: Store,
) -> None:
    """A runner that committed its resume and died before spending the approval: the
    call is not in doubt, and the runner that takes over runs it, once."""
    runs: list[tuple[ToolContext, dict[str, Any]]] = []
    _, review_id = paused(store, runs)
    decide(store, review_id, "approve")
    thread = store.load("t")
    thread.start_run(RunMode.RESUME, now=datetime.now(UTC))  # what it committed
    store.save(thread)
    taking_over = agent_of(store, [answer("paid")], pay_tool(runs))
    assert taking_over.status is ThreadStatus.RUNNING and taking_over.in_doubt == ()
    assert taking_over.continue_run() == "paid"
    assert len(runs) == 1 and len(stored(store, AgentThread.ApprovalUsed)) == 1


def test_the_awaited_and_streamed_resumes_run_it_and_set_the_result(store: Store) -> None:
    """aresume and astream_resume run the approved call too, and set agent.result."""

    async def streamed(agent: Agent) -> list[object]:
        return [item async for item in agent.astream_resume()]

    for thread_id, how in (("a", "aresume"), ("s", "astream")):
        runs: list[tuple[ToolContext, dict[str, Any]]] = []
        script = [call(("c1", "pay", PAY_40)), only_after_the_result]
        agent = agent_of(store, script, pay_tool(runs), thread_id=thread_id)
        asyncio.run(agent.arun("Pay bob 40."))
        assert agent.result is not None and agent.result.status == "paused"
        decide(store, agent.pending_reviews[0].review_id, "approve")
        asyncio.run(agent.aresume() if how == "aresume" else streamed(agent))
        assert len(runs) == 1 and agent.result is not None
        assert agent.result.status == "finished" and agent.result.output.startswith("Done")


def test_a_rejection_or_a_response_is_the_result_and_nothing_runs(store: Store) -> None:
    """Only an approval runs the call: a rejection (or a response) is its result."""
    for thread_id, action, text in (("r", "reject", "no"), ("s", "respond", "paid already")):
        runs: list[Any] = []
        script = [call(("c1", "pay", PAY_40)), answer("understood")]
        agent = agent_of(store, script, pay_tool(runs), thread_id=thread_id)
        agent.run("Pay bob 40.")
        decide(store, agent.pending_reviews[0].review_id, action, text=text)
        assert agent.resume() == "understood" and runs == []
        assert text in agent.messages[-2].content


def test_a_crash_after_the_approval_is_spent_leaves_the_call_in_doubt(store: Store) -> None:
    """The process dies inside the approved call: restored, it is in doubt and not run
    again; settled, the thread goes on without spending the approval twice."""
    runs: list[tuple[ToolContext, dict[str, Any]]] = []
    agent, review_id = paused(store, runs, crash=True)
    decide(store, review_id, "approve")
    with pytest.raises(ProcessDied):
        agent.resume()
    restored = agent_of(store, [answer("after the settlement")], pay_tool(runs))
    assert [p.call.id for p in restored.in_doubt] == ["c1"]
    with pytest.raises(ToolCallsInDoubtError):
        restored.continue_run()
    assert restored.result is not None and restored.result.status == "failed"
    assert [w.waits_for for w in restored.result.waiting] == ["operator"]
    restored.settle("c1", result={"paid": 40})
    assert restored.continue_run() == "after the settlement"
    assert len(runs) == 1 and len(stored(store, AgentThread.ApprovalUsed)) == 1


def test_a_killed_process_leaves_the_approved_call_in_doubt_not_rerun(tmp_path: Path) -> None:
    """A real process killed inside the approved call (after its side effect): the
    stored thread holds it in doubt with the approval spent, and a new runner refuses to
    run on until it is settled."""
    url, ledger = f"sqlite:///{tmp_path / 'threads.db'}", tmp_path / "ledger"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for phase in ("first", "resume"):
        done = subprocess.run(
            [sys.executable, APPROVAL_WORKER, url, str(ledger), phase],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == (17 if phase == "resume" else 0), done.stderr
        if phase == "first":
            decide_first_review(url)
    (line,) = ledger.read_text().splitlines()
    with open_store(url) as store:
        thread = store.load("t")
        (pending,) = thread.in_doubt
        assert json.loads(line) == {"key": pending.idempotency_key, "amount": 20}
        (used,) = stored(store, AgentThread.ApprovalUsed)
        assert used.idempotency_key == pending.idempotency_key
        agent = agent_of(store, [answer("x")], pay_tool([]))
        with pytest.raises(ToolCallsInDoubtError):
            agent.resume()
    assert len(ledger.read_text().splitlines()) == 1


def decide_first_review(url: str) -> None:
    with open_store(url) as store:
        (review,) = store.load("t").reviews.pending
        decide(store, review.request.review_id, "approve", arguments='{"amount": 20, "to": "b"}')


def test_a_fork_asks_again_and_the_approval_runs_the_call_in_its_own_thread_only(
    store: Store,
) -> None:
    """Forked after the approval, before the call ran: the branch's resume asks for a
    review of its own (approved there, it runs there); the parent's runs once."""
    runs: list[tuple[ToolContext, dict[str, Any]]] = []
    agent, review_id = paused(store, runs)
    decide(store, review_id, "approve")
    fork = store.fork("t", new_thread_id="t/branch")
    branch = agent_of(store, [only_after_the_result], pay_tool(runs), thread_id=fork)
    assert branch.in_doubt == ()
    assert branch.resume() == "" and runs == []
    (again,) = branch.pending_reviews
    assert again.tool_call_id == "c1" and again.review_id != review_id
    assert branch.result is not None and branch.result.waiting[0].review_id == again.review_id
    assert agent.resume().startswith("Done")
    branch.approve(again.review_id, reviewer=ALICE)
    assert branch.resume().startswith("Done")
    assert [ctx.thread_id for ctx, _ in runs] == ["t", fork]
    assert [ctx.approval.review_id for ctx, _ in runs if ctx.approval] == [
        review_id,
        again.review_id,
    ]


def test_run_on_approval_needs_a_tool_that_requires_approval() -> None:
    """The keyword on a tool that never requires approval is refused, naming the fix."""
    with pytest.raises(ConfigurationError, match="requires_approval"):
        Tool("pay", "Pay", PAY_SCHEMA, lambda ctx, args: None, run_on_approval=True)


# The run result ------------------------------------------------------------------------


def test_the_result_says_finished_paused_for_whom_or_failed(store: Store) -> None:
    """After each run command, agent.result has the status, output and what waits."""
    runs: list[Any] = []
    agent, review_id = paused(store, runs)
    result = agent.result
    assert result is not None and result.status == "paused" and result.output is None
    (waiting,) = result.waiting
    assert (waiting.waits_for, waiting.review_id, waiting.tool_name) == (
        "reviewer",
        review_id,
        "pay",
    )
    decide(store, review_id, "approve")
    agent.resume()
    assert agent.result is not None and agent.result.status == "finished"
    assert agent.result.output == agent.messages[-1].content and agent.result.waiting == ()

    failing = agent_of(store, [RuntimeError("model down")], pay_tool(runs), thread_id="f")
    with pytest.raises(ProviderError):
        failing.run("hello")
    assert failing.result is not None and failing.result.status == "failed"
    assert "model down" in failing.result.error and failing.result.output is None


EDITS = st.fixed_dictionaries(
    {},
    optional={
        "amount": st.integers(-5, 5) | st.text(max_size=3) | st.none() | st.booleans(),
        "to": st.text(max_size=3) | st.integers(0, 3),
    },
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(edit=EDITS)
def test_the_result_says_ran_with_the_edit_exactly_when_the_tool_ran(
    tmp_path: Path, edit: dict[str, Any]
) -> None:
    """Whatever edit a reviewer approves, on resume the tool runs with it only if the
    tool's schema takes it, and the recorded result says it ran with the approved
    arguments exactly when it did: an edit the schema refuses did not run."""
    with open_store(f"sqlite:///{tmp_path / f'{uuid.uuid4().hex}.db'}") as store:
        runs: list[tuple[ToolContext, dict[str, Any]]] = []
        script = [call(("c1", "pay", PAY_40)), lambda request: answer("over")]
        agent = agent_of(store, script, pay_tool(runs))
        agent.run("Pay bob 40.")
        (request,) = agent.pending_reviews
        decide(store, request.review_id, "approve", arguments=json.dumps(edit))
        agent.resume()
        (result,) = [m.content for m in agent.messages if m.tool_call_id == "c1"]
        ran = bool(runs)
        assert ran == (type(edit.get("amount")) is int and isinstance(edit.get("to"), str))
        assert result.startswith("Ran with the arguments alice approved") == ran, result
        assert result.startswith("Did not run with the arguments alice approved") != ran, result
