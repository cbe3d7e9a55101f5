"""Calls of a server's tool left in doubt, written by the code before a thread kept each
open call's pin: read now, each thread reads at its head as that code read it, from
its snapshot as from its events, and verifies; each open call has its pin back."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, Store
from covonaut_es.service import ThreadService
from support import GOLDEN, answer, golden_store

MANIFEST = json.loads((GOLDEN / "pinned-calls" / "manifest.json").read_text())

sys.path.insert(0, str(GOLDEN.parent))
from write_golden_pinned_calls import PIN, book_tool, summary  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with golden_store("pinned-calls", tmp_path) as opened:
        yield opened


@pytest.mark.parametrize("thread_id", sorted(MANIFEST["threads"]))
def test_each_thread_reads_as_the_code_that_wrote_it_read_it(store: Any, thread_id: str) -> None:
    assert summary(store.state_at(thread_id)) == MANIFEST["threads"][thread_id]
    assert store.state_at(thread_id) == store.replay_state(thread_id)
    assert store.verify(thread_id).findings == ()


@pytest.mark.parametrize("thread_id", sorted(MANIFEST["threads"]))
def test_each_open_call_keeps_the_tool_it_was_made_of_and_runs_again_with_it(
    store: Any, thread_id: str
) -> None:
    """The snapshot that holds the open call without its pin is rebuilt from the events,
    whose ``ToolPinned`` gives it; the idempotent call then runs again with its tool."""
    (pending,) = store.state_at(thread_id).open_calls
    assert pending.pin == PIN
    ThreadService(store).pause_calls_in_doubt(thread_id, "its runner died")
    runner = Agent(
        AgentConfig(
            provider=ScriptedProvider([answer("done")]),
            tools=[book_tool(lambda ctx, args: "booked")],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    )
    assert runner.resume() == "done"
    assert [m.content for m in store.state_at(thread_id).messages][-2:] == ["booked", "done"]
