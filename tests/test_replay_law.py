"""Property: a thread's state is a fold of its stored events.

A state machine plays random conversations on a real store (tool calls that succeed,
fail, interrupt, wait for a review or are invalid; steering; approvals and rejections;
resumes; manual checkpoints; parallel or sequential batches); after every step,
replaying the stored events alone gives the live agent's state, and so does loading
through snapshots. Every store the other tests open is checked the same way at
teardown (see ``conftest.open_test_store``).
"""

from __future__ import annotations

import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    CovonautError,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from support import OBJECT_SCHEMA, echo_tool, review_tool, ticking_clock


def broken(ctx: ToolContext, args: dict[str, Any]) -> Any:
    raise ValueError("broken tool")


def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return {"paid": args}


TOOLS = [
    echo_tool(),
    review_tool(),
    Tool("broken", "Fails", OBJECT_SCHEMA, broken),
    Tool("pay", "Pays after approval", OBJECT_SCHEMA, pay, requires_approval=True),
]
VERIFIER = HmacReviewerVerifier(b"replay-law-secret-of-32-bytes...")
AUDITOR = VERIFIER.issue_token("auditor", ttl_seconds=3600)
THREAD = "law"

tool_calls = st.lists(
    st.sampled_from(
        [
            ("echo", '{"text": "hello"}'),
            ("echo", "{bad json"),
            ("review", "{}"),
            ("broken", "{}"),
            ("missing", "{}"),
            # One operation, twice as likely: approvals then get used, and reused.
            ("pay", '{"n": 1}'),
            ("pay", '{ "n" : 1 }'),
        ]
    ),
    min_size=1,
    max_size=3,
)
responses = st.one_of(
    st.text(max_size=40).map(lambda text: ProviderResponse(content=text)),
    tool_calls.map(
        lambda calls: ProviderResponse(
            tool_calls=tuple(ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(calls))
        )
    ),
)
# What the model answers during one command; once used up, it gives the final answer.
replies = st.lists(responses, max_size=3)
# After a review, the model often asks for the reviewed operation again: approvals get used.
replies_after_review = st.one_of(
    st.just([ProviderResponse(tool_calls=(ToolCall("again", "pay", '{"n": 1}'),))]), replies
)
FINAL = ProviderResponse(content="final")


class ReplayLaw(RuleBasedStateMachine):
    """One agent on one thread of a fresh SQLite store, driven by random commands."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.TemporaryDirectory()
        self.store = open_store(
            f"sqlite:///{Path(self.directory.name) / 'law.db'}", max_checkpoints_per_thread=3
        )
        self.replies: deque[ProviderResponse] = deque()

    def teardown(self) -> None:
        """Close the store and delete its file."""
        self.store.close()
        self.directory.cleanup()

    def reply(self, request: ProviderRequest) -> ProviderResponse:
        """The model: the replies queued for the current command, then a final answer."""
        return self.replies.popleft() if self.replies else FINAL

    def attempt(
        self, command: Callable[[], object], script: Sequence[ProviderResponse] = ()
    ) -> None:
        """Run a command with the model's replies queued, tolerating refusals and failures."""
        self.replies = deque(script)
        with suppress(CovonautError):  # refused moves and failed runs are part of the law too
            command()

    @initialize(turns=st.integers(1, 4), parallel=st.booleans())
    def open_agent(self, turns: int, parallel: bool) -> None:
        """Bind an agent to the thread, running each batch of calls in parallel or in turn."""
        self.agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=self.reply),
                tools=TOOLS,
                max_turns=turns,
                parallel_tools=parallel,
                checkpoint=CheckpointSettings(store=self.store, thread_id=THREAD),
                clock=ticking_clock(),
                reviewer_verifier=VERIFIER,
            )
        )

    @rule(script=replies)
    def run(self, script: list[ProviderResponse]) -> None:
        """Run on new input while the model answers with the script's replies."""
        self.attempt(lambda: self.agent.run("hi"), script)

    @rule(script=replies)
    def continue_run(self, script: list[ProviderResponse]) -> None:
        """Run on from the history without new input."""
        self.attempt(self.agent.continue_run, script)

    @precondition(lambda self: self.agent.interrupted is not None)
    @rule(script=replies_after_review)
    def resume(self, script: list[ProviderResponse]) -> None:
        """Resume an interrupted run; refused while a review is still pending."""
        self.attempt(self.agent.resume, script)

    @rule()
    def steer(self) -> None:
        """Queue a message for the model's next call."""
        self.agent.steer("steering")

    def pending_review(self, pick: int) -> str:
        """The id of one of the pending reviews, chosen by ``pick``."""
        reviews = self.agent.pending_reviews
        return reviews[pick % len(reviews)].review_id

    @precondition(lambda self: self.agent.pending_reviews)
    @rule(pick=st.integers(min_value=0))
    def approve(self, pick: int) -> None:
        """Approve one of the pending reviews; a later call of that operation may run."""
        review_id = self.pending_review(pick)
        self.attempt(lambda: self.agent.approve(review_id, reviewer=AUDITOR))

    @precondition(lambda self: self.agent.pending_reviews)
    @rule(pick=st.integers(min_value=0))
    def reject(self, pick: int) -> None:
        """Reject one of the pending reviews; the model reads the reason after resuming."""
        review_id = self.pending_review(pick)
        self.attempt(lambda: self.agent.reject(review_id, reviewer=AUDITOR, reason="no"))

    @rule()
    def checkpoint(self) -> None:
        """Save a manual checkpoint (only three are retained)."""
        self.attempt(self.agent.save_checkpoint)

    @invariant()
    def replay_gives_the_live_state(self) -> None:
        """Replaying the stored events, or loading through snapshots, gives the live state."""
        if self.store.exists(THREAD):
            assert self.store.replay_state(THREAD) == self.agent.state
            assert self.store.state_at(THREAD) == self.agent.state


ReplayLaw.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReplayLaw = ReplayLaw.TestCase
