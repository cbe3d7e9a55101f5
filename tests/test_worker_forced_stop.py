"""A worker whose step hangs (its model or tool never returns) is asked to
stop by a first Ctrl-C or SIGTERM; the second is to force the stop (exit 130 or 143,
docs/cli.md): the stop waited for the hung step for ever (helper-238)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from covonaut_es import ThreadStatus, open_store
from test_workers import Fleet, decide, pause, wait_for


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_forces_a_worker_whose_step_hangs_to_stop(
    tmp_path: Path, signum: int
) -> None:
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    workers = Fleet(url, tmp_path)
    try:
        with open_store(url) as store:
            pause(store, "slow")
            workers.hold.touch()  # the model hangs as long as this file exists
            process = workers.start()
            decide(store, "slow")
            wait_for(lambda: store.state_at("slow").status is ThreadStatus.RUNNING, "the resume")
            time.sleep(0.5)
            process.send_signal(signum)  # a graceful stop asked: the step never ends
            time.sleep(1.0)
            assert process.poll() is None  # still waiting for the step, as it should
            process.send_signal(signum)  # the second: forced
            try:
                status = process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pytest.fail("a second signal did not stop the worker\n" + workers.logs())
            assert status == (130 if signum == signal.SIGINT else 143), workers.logs()
    finally:
        if workers.hold.exists():
            workers.hold.unlink()
        workers.stop()
