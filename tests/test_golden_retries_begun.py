"""Calls in doubt whose retry began, written by the code before a retry's start came to
deal with the call's pause (ADR 0066): that code revived the pause, so a runner dying
during the retry left the thread waiting on it again. Read now, each reads at its head as
that code read it, from its snapshot as from its events, verifies, and goes on: a person
settles the call, and its result is recorded once."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import Store
from covonaut_es.service import Settlement, ThreadService
from support import GOLDEN, answer, golden_store

MANIFEST = json.loads((GOLDEN / "retries-begun" / "manifest.json").read_text())

sys.path.insert(0, str(GOLDEN.parent))
from write_golden_retries_begun import VERIFIER, agent, summary  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with golden_store("retries-begun", tmp_path) as opened:
        yield opened


@pytest.mark.parametrize("thread_id", sorted(MANIFEST["threads"]))
def test_each_thread_reads_as_the_code_that_wrote_it_read_it(store: Any, thread_id: str) -> None:
    """Each thread's state at its head is the one its writer read, from events as from
    the snapshot, and its chain verifies."""
    assert summary(store.state_at(thread_id)) == MANIFEST["threads"][thread_id]
    assert store.state_at(thread_id) == store.replay_state(thread_id)
    assert store.verify(thread_id).findings == ()


@pytest.mark.parametrize("thread_id", sorted(MANIFEST["threads"]))
def test_each_thread_goes_on_and_its_call_gets_one_result(store: Any, thread_id: str) -> None:
    """A person settles a call left waiting on its revived pause; every thread then
    resumes to its answer, with one result for the call."""
    service = ThreadService(store, verifier=VERIFIER)
    if store.state_at(thread_id).waiting_for == "person":
        rita = service.reviewer(VERIFIER.issue_token("rita", ttl_seconds=600))
        service.settle(thread_id, "c1", Settlement.not_run("checked: not sent"), reviewer=rita)
    runner = agent(store, thread_id, dies=False, script=[answer("done")])
    runner.restore_latest_checkpoint(thread_id)
    if store.state_at(thread_id).waiting_for:
        runner.resume()
    messages = store.state_at(thread_id).messages
    assert [m.tool_call_id for m in messages].count("c1") == 1
    assert messages[-1].content == "done"
