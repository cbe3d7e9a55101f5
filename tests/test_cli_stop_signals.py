"""``worker`` and ``serve`` stop gracefully on SIGTERM or Ctrl-C, exit 0, whichever
step of their start the signal comes at: the application's factory imported, the
notifier made, the store opened, the inbox made, the socket bound, the worker or the
server made, or while it runs. A signal that came before their graceful handler was in
place was the raising one's: dropped where it landed in a finalizer, or exit 143
(helper-236). In the process, one test per step: the signal is sent from inside it."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
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


HANG_SECONDS = 8.0
"""How long a step that hangs takes to return on its own."""


@pytest.mark.parametrize("signum", SIGNALS)
@pytest.mark.parametrize(("module", "step"), STEPS, ids=lambda v: getattr(v, "__name__", v))
def test_a_worker_or_serve_stopped_at_any_step_of_its_start_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: Any, step: str, signum: int
) -> None:
    def step_with_a_signal(real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signum)  # docker stop, or Ctrl-C, as this step runs
        return real(*args, **kwargs)

    assert _started(tmp_path, monkeypatch, module, step, step_with_a_signal) == 0


@pytest.mark.parametrize("signum", SIGNALS)
@pytest.mark.parametrize(("module", "step"), STEPS, ids=lambda v: getattr(v, "__name__", v))
def test_a_second_signal_ends_a_step_of_the_start_that_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: Any, step: str, signum: int
) -> None:
    """The first signal asks for a graceful stop, which a step that hangs (an import, a
    database that does not answer) never reaches; the second forces it: Ctrl-C's exit
    130, SIGTERM's 143 (both signals were noted and the start waited, helper-237)."""

    def hung(real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signum)  # the first, handled at once: a graceful stop asked
        threading.Timer(0.3, os.kill, (os.getpid(), signum)).start()  # the second
        time.sleep(HANG_SECONDS)
        return real(*args, **kwargs)

    started = time.monotonic()
    status = _started(tmp_path, monkeypatch, module, step, hung)
    assert time.monotonic() - started < HANG_SECONDS / 2
    assert status == (130 if signum == signal.SIGINT else 143)


def _started(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    step: str,
    instead: Callable[..., Any],
) -> int:
    """The exit status of the command whose start takes ``module.step``, which runs
    ``instead(real_step, *args, **kwargs)``."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    open_store(url).close()
    monkeypatch.setattr(module, step, functools.partial(instead, getattr(module, step)))
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", "s" * 40)
    if module is _workers:
        return main(["worker", "--app", "worker_app:make_config", "--store", url])
    return main(["serve", "--store", url, "--port", "0"])
