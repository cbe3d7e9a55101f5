"""Store.fork, refused the lease of a parent a run holds, checks the head for open
calls and then forks at the head it reads again: a call the run starts in between is
forked open, running in the parent, for a worker to run again (helper-254). The fork
must be taken at the version it checked."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, Store, Tool
from covonaut_es.errors import ToolCallRunningError
from support import answer, call


class _Gated(ScriptedProvider):
    def __init__(self, gate: threading.Event, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gate, self._first = gate, True

    def complete(self, request: Any) -> Any:
        if self._first:
            self._first = False
            self.asked.set()
            self._gate.wait(30)
        return super().complete(request)


def test_a_call_started_between_the_check_and_the_fork_is_not_forked_open(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, started, release = threading.Event(), threading.Event(), threading.Event()

    def charge(ctx: Any, args: dict[str, Any]) -> str:
        started.set()
        release.wait(30)
        return "charged"

    provider = _Gated(gate, [call(("c1", "charge", "{}")), answer("done")])
    provider.asked = threading.Event()
    agent = Agent(
        AgentConfig(
            provider=provider,
            tools=[Tool("charge", "Charge", {"type": "object"}, charge, idempotent=True)],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )
    checked = store._forks.refuse_open_calls

    def check_then_let_the_run_go_on(*args: Any) -> Any:
        checked_at = checked(*args)  # the head holds no call yet: passed
        gate.set()  # ...and the run, which holds the lease, starts its call now
        assert started.wait(30)
        return checked_at

    monkeypatch.setattr(store._forks, "refuse_open_calls", check_then_let_the_run_go_on)
    run = threading.Thread(target=agent.run, args=("Charge.",))
    run.start()
    try:
        assert provider.asked.wait(30)  # the run holds the lease, no call open yet
        try:
            fork = store.fork("t", new_thread_id="f")
        except ToolCallRunningError:
            fork = None
        if fork is not None:
            assert not store.state_at(fork).open_calls, "the fork holds c1, running in t, open"
    finally:
        gate.set()
        release.set()
        run.join(30)
