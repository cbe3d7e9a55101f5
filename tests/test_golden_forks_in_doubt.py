"""Forks that the code before ADR 0060 took between a decision and the result it records:
that code held their call in doubt, paused it for a person, and people settled it, sent
it to run again or left it paused. Read now, where the decision stands for the call's
result, each reads at its head as that code read it, from its snapshot as from its
events, verifies, and goes on: the call's result is recorded once."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ReviewQueue,
    ScriptedProvider,
    Store,
    Tool,
)
from covonaut_es.service import Settlement, ThreadService
from support import GOLDEN, answer, golden_store, ticking_clock

MANIFEST = json.loads((GOLDEN / "forks-in-doubt" / "manifest.json").read_text())

sys.path.insert(0, str(GOLDEN.parent))
from write_golden_forks_in_doubt import VERIFIER, summary  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with golden_store("forks-in-doubt", tmp_path) as opened:
        yield opened


@pytest.mark.parametrize("fork", sorted(MANIFEST["threads"]))
def test_each_fork_reads_as_the_code_that_wrote_it_read_it(store: Any, fork: str) -> None:
    assert summary(store.state_at(fork)) == MANIFEST["threads"][fork]
    assert store.state_at(fork) == store.replay_state(fork)
    assert store.verify(fork).findings == ()


def test_the_queue_lists_what_the_forks_wait_for(store: Any) -> None:
    queue = ReviewQueue(store.url)
    try:
        with queue.follow():
            queue.wait_until_current(store)
        listed = {(p.thread_id, p.kind.value) for p in queue.pending()}
    finally:
        queue.close()
    waiting = {
        (fork, kind)
        for fork, read in MANIFEST["threads"].items()
        for kind, _, resolved in read["pauses"]
        if not resolved
    }
    assert listed == waiting


@pytest.mark.parametrize("fork", sorted(MANIFEST["threads"]))
def test_each_fork_goes_on_and_its_call_gets_one_result(store: Any, fork: str) -> None:
    service = ThreadService(store, verifier=VERIFIER)
    if store.state_at(fork).waiting_for == "person":
        rita = service.reviewer(VERIFIER.issue_token("rita", ttl_seconds=600))
        service.settle(fork, "c1", Settlement.not_run("checked: not paid"), reviewer=rita)
    pay = Tool("pay", "Pay", {"type": "object"}, lambda ctx, args: "paid", requires_approval=True)
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([answer("done")]),
            tools=[pay],
            checkpoint=CheckpointSettings(store=store, thread_id=fork),
            reviewer_verifier=VERIFIER,
            clock=ticking_clock(),
        )
    )
    agent.restore_latest_checkpoint(fork)
    agent.resume()
    messages = store.state_at(fork).messages
    assert [m.tool_call_id for m in messages].count("c1") == 1
    assert messages[-1].content == "done"
