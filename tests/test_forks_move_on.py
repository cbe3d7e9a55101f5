"""A fork at any version of a thread's history is a thread a worker moves on: it runs
it to its next pause or end, or leaves it waiting for a person, and never fails on it;
and no fork pays a second time with the approval its parent spent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from covonaut_es import (
    AgentConfig,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    ThreadStatus,
    Tool,
    ToolCall,
    open_store,
)
from covonaut_es.service import ThreadService, review_submission
from covonaut_es.workers import Worker
from test_service import RITA, VERIFIER


def _model(request: ProviderRequest) -> ProviderResponse:
    """Asks to pay until a payment's result is in (an approval that does not run the
    call tells it to ask again), then answers."""
    last = request.messages[-1]
    if last.role is Role.TOOL and "paid" in last.content:
        return ProviderResponse(content="done")
    asked = sum(m.role is Role.ASSISTANT for m in request.messages)
    return ProviderResponse(tool_calls=(ToolCall(f"pay-{asked}", "pay", '{"amount": 5}'),))


def _config(paid: list[str], run_on_approval: bool) -> AgentConfig:
    def pay(ctx: Any, args: dict[str, Any]) -> Any:
        paid.append(ctx.idempotency_key)
        return "paid"

    return AgentConfig(
        provider=ScriptedProvider(respond=_model),
        tools=[
            Tool(
                "pay",
                "Pay",
                {"type": "object"},
                pay,
                requires_approval=True,
                run_on_approval=run_on_approval,
            )
        ],
        reviewer_verifier=VERIFIER,
    )


@pytest.mark.parametrize("run_on_approval", [True, False])
def test_a_fork_at_every_version_of_an_approved_run_is_moved_on_and_pays_nothing_again(
    tmp_path: Path, run_on_approval: bool
) -> None:
    """A thread asks for a payment, a reviewer approves, a worker resumes it and it
    pays. A fork at every version of its history, all then given to a worker: no step
    fails, no fork is left running, and the payment is made once (a fork at the start
    of the resume was left running over its decided review, which every worker then
    failed to continue)."""
    path = tmp_path / "threads.db"
    paid: list[str] = []
    config = _config(paid, run_on_approval)
    with open_store(f"sqlite:///{path}") as store:
        store.submit("t", "Pay 5.")
        Worker(store, lambda _: config, poll_interval=0.05).run(once=True)
        service = ThreadService(store, verifier=VERIFIER)
        (review,) = store.state_at("t").reviews
        service.decide(
            review.request.review_id, review_submission("approve"), reviewer=service.reviewer(RITA)
        )
        assert not Worker(store, lambda _: config, poll_interval=0.05).run(once=True).failed
        assert store.state_at("t").status is ThreadStatus.FINISHED and len(paid) == 1
        head = store.head_version("t")
        assert head is not None
        forks = [store.fork("t", at_version=v, new_thread_id=f"f{v}") for v in range(1, head + 1)]
        summary = Worker(store, lambda _: config, poll_interval=0.05).run(once=True)
        assert summary.failed == ()
        for fork in forks:
            assert store.state_at(fork).status is not ThreadStatus.RUNNING, fork
        assert len(paid) == 1
