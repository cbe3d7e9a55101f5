"""A thread is not forked at a version that holds calls open while a run holds the
thread: one of them may be running there, and the fork would hold it open too, in
doubt, for a worker to run again (an idempotent tool) or a person to settle, beside
the first (helper-253: a worker lists a call in its heartbeat only at its next beat,
2 s after it began, so a fork taken in that window was taken over as a crashed run and
its call charged twice). A fork at a version before the calls, or once the run let
go, is taken as ever."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    open_store,
)
from covonaut_es.errors import ToolCallRunningError
from support import answer, call

ROOT = Path(__file__).resolve().parent.parent


def _charging(store: Store, charge: Callable[[Any, dict[str, Any]], str]) -> Agent:
    """An agent whose thread ``t`` calls ``charge`` (idempotent) once, then answers."""
    return Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "charge", "{}")), answer("done")]),
            tools=[Tool("charge", "Charge", {"type": "object"}, charge, idempotent=True)],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )


def test_a_tool_forking_its_own_running_thread_at_its_head_is_refused(store: Store) -> None:
    """The fork is taken inside the run that holds the parent, which is granted the
    run's own lease again: it was not checked, and held the running call open, for a
    worker to run again (helper-254)."""
    outcome: dict[str, Any] = {}

    def charge(ctx: Any, args: dict[str, Any]) -> str:
        try:
            outcome["fork"] = store.fork(ctx.thread_id, new_thread_id="f")
        except ToolCallRunningError as exc:
            outcome["refused"] = exc
        return "charged"

    _charging(store, charge).run("Charge.")
    assert "refused" in outcome and not store.exists("f"), outcome


def test_a_thread_whose_run_holds_an_open_call_is_forked_only_before_the_call(
    store: Store,
) -> None:
    started, release = threading.Event(), threading.Event()

    def charge(ctx: Any, args: dict[str, Any]) -> str:
        started.set()
        release.wait(30)
        return "charged"

    agent = _charging(store, charge)
    run = threading.Thread(target=agent.run, args=("Charge.",))
    run.start()
    try:
        assert started.wait(30)
        with pytest.raises(ToolCallRunningError, match="holds call 'c1' open"):
            store.fork("t", new_thread_id="f")
        assert not store.exists("f")
        before = store.fork("t", at_version=1, new_thread_id="b")  # its start: no call
        assert not store.state_at(before).open_calls
    finally:
        release.set()
        run.join(30)
    assert store.state_at("t").status is ThreadStatus.FINISHED
    assert not store.state_at(store.fork("t", new_thread_id="f")).open_calls


def _lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


@pytest.mark.slow
def test_a_fork_while_a_worker_runs_the_call_never_runs_it_twice(
    shared_url: str, tmp_path: Path
) -> None:
    """Two real workers; the thread is forked while the first runs its idempotent
    charge (in the window before its heartbeat lists the call)."""
    ledger, hold = tmp_path / "ledger", tmp_path / "hold"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
        "CHARGE_LEDGER": str(ledger),
        "CHARGE_HOLD": str(hold),
        "CHARGE_IDEMPOTENT": "1",
    }
    hold.touch()  # the charge, once it wrote its ledger line, waits until this goes
    command = [sys.executable, "-m", "covonaut_es", "worker", "--store", shared_url]
    command += ["--app", "blocking_charge_app:make_config"]
    workers = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    try:
        with open_store(shared_url) as store:
            time.sleep(3)  # both workers up and following
            store.submit("charge-x", "Charge 5.")
            deadline = time.monotonic() + 60
            while not _lines(ledger):  # the first worker is inside the charge now
                assert time.monotonic() < deadline, "the charge never started"
                time.sleep(0.01)
            with pytest.raises(ToolCallRunningError):
                store.fork("charge-x", new_thread_id="charge-fork")
            time.sleep(3)  # another worker would have taken a fork up by now
            assert len(_lines(ledger)) == 1
            hold.unlink()
            deadline = time.monotonic() + 60
            while store.state_at("charge-x").status is not ThreadStatus.FINISHED:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert len(_lines(ledger)) == 1
    finally:
        for process in workers:
            process.kill()
            process.wait(timeout=30)
