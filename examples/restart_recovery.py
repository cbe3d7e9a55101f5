"""Recovery across a restart: two OS processes, one SQLite file.

The first process runs until a tool asks for a human review, checkpoints the interrupt
to the SQLite file and exits. The second process, started only after the first has
exited, restores the thread from the file, is steered with the reviewer's decision and
resumes to the final answer. No model credentials are needed: a scripted provider plays
the model.

Run it with ``python examples/restart_recovery.py [path/to/threads.db]``; run again on
the same file, it starts a thread of its own beside the first (``review-thread-2``...).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, Tool, open_store
from recovery import request_review, review_model  # the same model and tool, beside this file

THREAD_ID = "review-thread"


def make_agent(db: Path, thread_id: str) -> Agent:
    return Agent(
        AgentConfig(
            model="offline-review",
            provider=ScriptedProvider(respond=review_model),
            max_turns=5,
            checkpoint=CheckpointSettings(store=open_store(f"sqlite:///{db}"), thread_id=thread_id),
            tools=[
                Tool(
                    "request_review", "Pause for a host review", {"type": "object"}, request_review
                )
            ],
        )
    )


def first_process(db: Path, thread_id: str) -> None:
    print(f"[process 1, pid {os.getpid()}] run until the review interrupt, then exit")
    agent = make_agent(db, thread_id)
    agent.run("Prepare a request for review.")
    assert agent.interrupted is not None, "expected a review interrupt"
    print("Paused:", agent.interrupted.reason)


def second_process(db: Path, thread_id: str) -> None:
    print(f"[process 2, pid {os.getpid()}] restore from {db.name} after process 1 exited")
    agent = make_agent(db, thread_id)
    checkpoint = agent.restore_latest_checkpoint(thread_id)
    assert checkpoint is not None and agent.interrupted is not None
    print("Restored:", agent.interrupted.data["request_id"])
    agent.steer("I reviewed the preview. Continue without external actions.")
    print(agent.resume())


def new_thread_id(db: Path) -> str:
    """``review-thread``, or the first of ``review-thread-2``, ``-3``... that the file
    does not hold yet."""
    with open_store(f"sqlite:///{db}") as store:
        names = itertools.chain([THREAD_ID], (f"{THREAD_ID}-{n}" for n in itertools.count(2)))
        return next(name for name in names if not store.exists(name))


def main() -> None:
    if len(sys.argv) == 4:
        phase, db, thread_id = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
        if phase == "first":
            first_process(db, thread_id)
        else:
            second_process(db, thread_id)
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(sys.argv[1]) if len(sys.argv) == 2 else Path(tmp) / "threads.db"
        thread_id = new_thread_id(db)
        for phase in ("first", "second"):  # one after the other: the first has exited
            subprocess.run([sys.executable, __file__, phase, str(db), thread_id], check=True)


if __name__ == "__main__":
    main()
