"""Property: a thread's state is a fold of its stored events.

Random conversations (tool calls that succeed, fail, interrupt, wait for a review or are
invalid; steering; approvals and rejections; resumes; manual checkpoints; parallel or
sequential batches) run on a real store; after
every step, replaying the stored events alone gives the live agent's state, and so does
loading through snapshots. Every store the other tests open is checked the same way at
teardown (see ``conftest.open_test_store``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    CovonautError,
    HmacReviewerVerifier,
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
FINAL = ProviderResponse(content="final")
# Approving and resuming are listed twice, so that approvals often get used.
MOVES = ["run", "continue", "resume", "resume", "steer", "checkpoint", "approve", "approve"]
moves = st.lists(st.sampled_from([*MOVES, "reject"]), min_size=1, max_size=12)


def decide_first_review(agent: Agent, *, approve: bool) -> None:
    """Approve or reject the oldest pending review, if there is one."""
    if not agent.pending_reviews:
        return
    review_id = agent.pending_reviews[0].review_id
    if approve:
        agent.approve(review_id, reviewer=AUDITOR)
    else:
        agent.reject(review_id, reviewer=AUDITOR, reason="no")


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    script=st.lists(responses, max_size=30),
    plan=moves,
    parallel=st.booleans(),
    turns=st.integers(1, 4),
    db_name=st.uuids(),
)
def test_replaying_stored_events_gives_the_live_state(
    tmp_path: Path,
    script: list[ProviderResponse],
    plan: list[str],
    parallel: bool,
    turns: int,
    db_name: UUID,
) -> None:
    """Replay law: the stored events alone rebuild the live state after every step."""
    with open_store(
        f"sqlite:///{tmp_path / f'{db_name}.db'}", max_checkpoints_per_thread=3
    ) as store:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(script, respond=lambda _: FINAL),
                tools=TOOLS,
                max_turns=turns,
                parallel_tools=parallel,
                checkpoint=CheckpointSettings(store=store, thread_id="law"),
                clock=ticking_clock(),
                reviewer_verifier=VERIFIER,
            )
        )
        for move in plan:
            try:
                if move == "run":
                    agent.run("hi")
                elif move == "continue":
                    agent.continue_run()
                elif move == "resume":
                    agent.resume()
                elif move == "steer":
                    agent.steer("steering")
                elif move in ("approve", "reject"):
                    decide_first_review(agent, approve=move == "approve")
                else:
                    agent.save_checkpoint()
            except CovonautError:
                pass  # refused moves and failed runs are part of the law too
            if store.exists("law"):
                assert store.replay_state("law") == agent.state
                assert store.state_at("law") == agent.state


def test_replay_law_holds_across_snapshots(tmp_path: Path) -> None:
    """Long threads are loaded through snapshots; the result equals the replay."""
    script: list[Any] = []
    for i in range(60):
        script += [ProviderResponse(tool_calls=(ToolCall(f"c{i}", "echo", '{"text": "x"}'),))]
    script.append(ProviderResponse(content="done"))
    with open_store(f"sqlite:///{tmp_path / 'long.db'}") as store:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(script),
                tools=TOOLS,
                max_turns=100,
                checkpoint=CheckpointSettings(store=store, thread_id="long"),
                clock=ticking_clock(),
            )
        )
        agent.run("go")
        assert agent.state.version > 256
        assert store.replay_state("long") == agent.state == store.state_at("long")
        for checkpoint in store.checkpoints("long")[::7]:
            partial = store.state_at("long", checkpoint.version)
            assert partial.version == checkpoint.version
            assert partial.checkpoints[-1] == checkpoint
