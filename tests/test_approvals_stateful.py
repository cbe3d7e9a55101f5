"""Approvals are spent at most once, whatever the order of runs, resumes, decisions
(with edits or not), crashes inside a call and settlements: a generated state machine
over both review models (the approval runs the call; the model calls again)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
    operation_digest,
)
from covonaut_es.errors import CovonautError
from covonaut_es.service import ThreadService, review_submission
from support import ticking_clock
from test_approvals import ALICE, PAY_SCHEMA, VERIFIER, ProcessDied


def model(request: ProviderRequest) -> ProviderResponse:
    """A model whose next step depends only on the history: a user message names the
    tool to pay with, and the model calls it; an approval of the model-calls-again kind is
    answered by calling again with the same arguments; anything else ends the turn."""
    messages = request.messages
    last = messages[-1]
    asked = sum(m.role.value == "assistant" for m in messages)
    if last.role.value == "user":
        name = last.content  # the tool the user asks for
        args = f'{{"amount": {asked}, "to": "bob"}}'
        return ProviderResponse(tool_calls=(ToolCall(f"c{asked}", name, args),))
    if last.role.value == "tool" and "has not run yet" in last.content:
        earlier = next(c for m in messages for c in m.tool_calls if c.id == last.tool_call_id)
        return ProviderResponse(
            tool_calls=(ToolCall(f"c{asked}", earlier.name, earlier.arguments),)
        )
    return ProviderResponse(content="ok")


TOOLS = st.sampled_from(["pay", "legacy"])
"""``pay`` runs on approval; ``legacy`` is approved for the model's next call."""


class Approvals(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = open_store("memory://")
        self.service = ThreadService(self.store, verifier=VERIFIER)
        self.executions: list[tuple[str, dict[str, Any], ToolContext]] = []
        self.crash_next = False
        self.agent = self._agent()

    def _tool(self, name: str, *, runs: bool) -> Tool:
        def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
            self.executions.append((name, args, ctx))
            if self.crash_next:
                self.crash_next = False
                raise ProcessDied
            return {"paid": args["amount"]}

        return Tool(name, "Pay", PAY_SCHEMA, pay, requires_approval=True, run_on_approval=runs)

    def _agent(self) -> Agent:
        return Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=model),
                tools=[self._tool("pay", runs=True), self._tool("legacy", runs=False)],
                checkpoint=CheckpointSettings(store=self.store, thread_id="t"),
                reviewer_verifier=VERIFIER,
                clock=ticking_clock(),
            )
        )

    def _command(self, command: str, *args: str) -> None:
        try:
            getattr(self.agent, command)(*args)
        except ProcessDied:
            self.agent = self._agent()  # the process died: a new one loads the store
        except CovonautError:
            pass  # refused (paused, in doubt, pending reviews): nothing ran

    def _pending(self) -> list[str]:
        thread = self.store.find("t")
        return [r.request.review_id for r in thread.reviews.pending] if thread else []

    @initialize(tool=TOOLS)
    def first_run(self, tool: str) -> None:
        self._command("run", tool)

    @rule(tool=TOOLS)
    def run(self, tool: str) -> None:
        self._command("run", tool)

    @rule()
    def resume(self) -> None:
        self._command("resume")

    @rule()
    def crash_in_the_next_call(self) -> None:
        self.crash_next = True

    @rule(action=st.sampled_from(["approve", "edit", "reject"]), which=st.integers(0, 3))
    def decide(self, action: str, which: int) -> None:
        pending = self._pending()
        if not pending:
            return
        review_id = pending[which % len(pending)]
        submissions = {
            "approve": review_submission("approve"),
            "edit": review_submission("approve", arguments='{"amount": 1, "to": "eve"}'),
            "reject": review_submission("reject", text="no"),
        }
        submission = submissions[action]
        self.service.decide(review_id, submission, reviewer=self.service.reviewer(ALICE))

    @precondition(lambda self: bool(self.agent.in_doubt))
    @rule(ran=st.booleans())
    def settle(self, ran: bool) -> None:
        for pending in self.agent.in_doubt:
            try:
                if ran:
                    self.agent.settle(pending.call.id, result="paid (found)")
                else:
                    self.agent.settle(pending.call.id, ran=False)
            except CovonautError:
                pass

    @invariant()
    def each_approval_is_spent_at_most_once_and_each_call_runs_once(self) -> None:
        history = list(self.store.history("t")) if self.store.exists("t") else []
        spent = Counter(e.review_id for e in history if isinstance(e, AgentThread.ApprovalUsed))
        assert all(n == 1 for n in spent.values()), spent
        keys = Counter(ctx.idempotency_key for _, _, ctx in self.executions)
        assert all(n == 1 for n in keys.values()), keys
        approved = {
            e.review_id: e.digest
            for e in history
            if isinstance(e, AgentThread.ReviewDecided) and e.decision.value == "approved"
        }
        used_by = {
            e.review_id: e.tool_call_id for e in history if isinstance(e, AgentThread.ApprovalUsed)
        }
        for name, args, ctx in self.executions:
            approval = ctx.approval
            assert approval is not None and approval.review_id in approved
            assert approved[approval.review_id] == operation_digest(name, args)
            assert used_by[approval.review_id] == ctx.tool_call_id

    def teardown(self) -> None:
        self.store.close()


TestApprovals = Approvals.TestCase
TestApprovals.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
