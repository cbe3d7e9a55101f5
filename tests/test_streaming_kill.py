"""SIGKILL mid-stream: a process streaming a run is killed inside the model's answer,
and a new process restores the thread and streams on to the state an uninterrupted run
reaches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).parent / "stream_worker.py"


def worker(url: str, thread: str, phase: str, *args: str) -> list[Any]:
    result = subprocess.run(
        [sys.executable, str(WORKER), url, thread, phase, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=WORKER.parent,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def killed_mid_stream(url: str, thread: str, cut: str) -> list[str]:
    """Start a streaming run, SIGKILL it once the model is cut; the lines it printed."""
    process = subprocess.Popen(
        [sys.executable, str(WORKER), url, thread, "first", cut],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=WORKER.parent,
    )
    assert process.stdout is not None
    lines = []
    try:
        for line in process.stdout:
            if line.strip() == "cut":
                os.kill(process.pid, signal.SIGKILL)
                break
            lines.append(line.strip())
    finally:
        process.wait(timeout=60)
        process.stdout.close()
        assert process.stderr is not None
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    return lines


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cut", "pieces_seen", "restored"),
    [
        ("1:2", 2, ["user"]),  # inside the tool call's arguments: nothing of it committed
        # inside the answer, after the tool ran (its call came in four pieces)
        ("2:3", 4 + 3, ["user", "assistant", "tool"]),
    ],
)
def test_sigkill_mid_stream_then_restore_resumes_to_the_uninterrupted_state(
    tmp_path: Path, cut: str, pieces_seen: int, restored: list[str]
) -> None:
    """A run SIGKILLed mid-stream leaves only what was committed; a new process restores
    it and streams on to the same final state as an uninterrupted run, no call in doubt."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    reference = worker(url, "reference", "reference")[-1]
    assert reference["status"] == "finished"

    seen = killed_mid_stream(url, "t", cut)
    assert len(seen) == pieces_seen

    *_, before, after = worker(url, "t", "second")
    assert before == {"restored": restored}
    assert after == reference
