"""Kill tests: a worker process dies at every step boundary, or inside a tool
after its side effect, and a new process restores the thread.

The reference run records, after every commit, the thread's version and its open calls;
a killed run must restore to exactly that commit (nothing lost once a commit returned,
nothing after it), report exactly those calls in doubt, and, settled by looking them up
in the external ledger, finish without charging any card twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import open_store

WORKER = Path(__file__).parent / "kill_worker.py"
KILLED = 17


def worker(url: str, thread: str, durability: str, ledger: Path, *args: str) -> Any:
    return subprocess.run(
        [sys.executable, str(WORKER), url, thread, durability, str(ledger), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=WORKER.parent,
    )


def reference_commits(url: str, durability: str, tmp_path: Path) -> list[dict[str, Any]]:
    result = worker(url, "reference", durability, tmp_path / "reference.ledger", "first")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def charges(ledger: Path) -> Counter[str]:
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return Counter(line.split()[1] for line in lines)


def finish(url: str, thread: str, durability: str, ledger: Path) -> dict[str, Any]:
    result = worker(url, thread, durability, ledger, "second")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    assert report["output"] == "All charges done and reviewed."
    return report


@pytest.mark.slow
def test_kill_at_every_step_boundary_with_step_durability(shared_url: str, tmp_path: Path) -> None:
    """Step durability: a kill after any commit restores exactly that commit, reports
    exactly the uncommitted results in doubt, and no charge runs twice."""
    commits = reference_commits(shared_url, "step", tmp_path)
    # The run's start; each turn's write-ahead (the turn start, the response and its
    # calls); the first charge's result before the second runs; the last result with
    # the end-of-turn checkpoint.
    assert [c["open"] for c in commits] == [
        [],
        ["charge-1", "charge-2"],
        ["charge-2"],
        [],
        ["review-1"],
        [],
    ]
    for n, expected in enumerate(commits, start=1):
        thread, ledger = f"kill-{n}", tmp_path / f"kill-{n}.ledger"
        killed = worker(shared_url, thread, "step", ledger, "first", f"save:{n}")
        assert killed.returncode == KILLED, killed.stderr
        with open_store(shared_url) as store:
            state = store.state_at(thread)
            assert state.version == expected["version"]
            assert sorted(c.call.id for c in state.open_calls) == expected["open"]
            assert store.replay_state(thread) == state
        report = finish(shared_url, thread, "step", ledger)
        assert sorted(report["in_doubt"]) == expected["open"]
        assert set(charges(ledger).values()) <= {1}, (n, charges(ledger))
        assert set(charges(ledger)) == {"charge-1", "charge-2"}


@pytest.mark.slow
@pytest.mark.parametrize("call_id", ["charge-1", "charge-2"])
def test_kill_inside_a_tool_after_its_side_effect(
    shared_url: str, tmp_path: Path, call_id: str
) -> None:
    """A tool that did its work but died before its result was recorded is reported in
    doubt, settled from the ledger, and never run again."""
    ledger = tmp_path / "ledger"
    killed = worker(shared_url, "t", "step", ledger, "first", f"tool:{call_id}")
    assert killed.returncode == KILLED, killed.stderr
    report = finish(shared_url, "t", "step", ledger)
    assert call_id in report["in_doubt"]
    assert charges(ledger) == Counter({"charge-1": 1, "charge-2": 1})


@pytest.mark.slow
def test_checkpoint_durability_commits_checkpoints_and_the_calls_before_they_run(
    shared_url: str, tmp_path: Path
) -> None:
    """Checkpoint durability commits its checkpoints and, before any tool runs, the
    calls' records (so a tool's key is always stored): a kill after any commit restores
    it, the calls it left open are in doubt, and no charge runs twice."""
    commits = reference_commits(shared_url, "checkpoint", tmp_path)
    assert [c["open"] for c in commits] == [
        ["charge-1", "charge-2"],
        [],
        ["review-1"],
        [],
    ]
    for n, expected in enumerate(commits, start=1):
        thread, ledger = f"ckpt-{n}", tmp_path / f"ckpt-{n}.ledger"
        killed = worker(shared_url, thread, "checkpoint", ledger, "first", f"save:{n}")
        assert killed.returncode == KILLED, killed.stderr
        with open_store(shared_url) as store:
            state = store.state_at(thread)
            assert state.version == expected["version"]
            assert sorted(c.call.id for c in state.open_calls) == expected["open"]
        finish(shared_url, thread, "checkpoint", ledger)
        assert set(charges(ledger).values()) <= {1}, (n, charges(ledger))


@pytest.mark.slow
def test_checkpoint_durability_reports_a_call_killed_after_its_side_effect_in_doubt(
    shared_url: str, tmp_path: Path
) -> None:
    """With checkpoint durability too, a tool killed after its side effect left its
    call recorded under the key it used: the call is in doubt, settled from the ledger,
    and never charged twice."""
    ledger = tmp_path / "ledger"
    killed = worker(shared_url, "t", "checkpoint", ledger, "first", "tool:charge-1")
    assert killed.returncode == KILLED, killed.stderr
    report = finish(shared_url, "t", "checkpoint", ledger)
    assert "charge-1" in report["in_doubt"]
    assert charges(ledger) == Counter({"charge-1": 1, "charge-2": 1})
