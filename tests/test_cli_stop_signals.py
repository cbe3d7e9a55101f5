"""``worker`` and ``serve`` stop gracefully on SIGTERM or Ctrl-C, exit 0, whichever
step of their start the signal comes at: the application's factory imported, the
notifier made, the store opened, the inbox made, the socket bound, the worker or the
server made, or while it runs. A signal that came before their graceful handler was in
place was the raising one's: dropped where it landed in a finalizer, or exit 143
(helper-236). In the process, one test per step: the signal is sent from inside it."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import open_store
from covonaut_es.cli import _serve, _workers, main

SIGNALS = [signal.SIGTERM, signal.SIGINT]
STEPS = [
    *((_workers, step) for step in ("_factory", "_notifier", "open_from", "Worker")),
    *(
        (_serve, step)
        for step in ("reviewer_verifier_from", "listening_on", "open_from", "review_queue")
    ),
]
"""Each step of each command's start, by the module that names it."""


@pytest.mark.parametrize("signum", SIGNALS)
@pytest.mark.parametrize(("module", "step"), STEPS, ids=lambda v: getattr(v, "__name__", v))
def test_a_worker_or_serve_stopped_at_any_step_of_its_start_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: Any, step: str, signum: int
) -> None:
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    open_store(url).close()
    real: Callable[..., Any] = getattr(module, step)

    def step_with_a_signal(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signum)  # docker stop, or Ctrl-C, as this step runs
        return real(*args, **kwargs)

    monkeypatch.setattr(module, step, step_with_a_signal)
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", "s" * 40)
    if module is _workers:
        argv = ["worker", "--app", "worker_app:make_config", "--store", url]
    else:
        argv = ["serve", "--store", url, "--port", "0"]
    assert main(argv) == 0
