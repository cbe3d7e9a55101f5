"""Closing a SQLite store while other threads read or write it must not crash the
process: Python's sqlite3 crashes (SIGSEGV) when a connection is closed under a
statement another thread is stepping. Each race runs in its own interpreter
(close_racer.py), whose exit code is the verdict."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from close_racer import seed

RACER = Path(__file__).with_name("close_racer.py")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("close-race") / "threads.db"
    seed(f"sqlite:///{path}")
    return path


def race(path: Path, rounds: int, what: str, *extra: int) -> None:
    result = subprocess.run(
        [sys.executable, str(RACER), str(path), str(rounds), what, *map(str, extra)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode < 0:
        crashed = f"the process was killed by {signal.Signals(-result.returncode).name}"
        pytest.fail(f"{crashed} while a store was closed under its readers\n{result.stderr}")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_closing_a_store_under_its_readers_and_saver_does_not_crash_the_process(
    seeded: Path,
) -> None:
    race(seeded, 10, "store")


@pytest.mark.slow
def test_closing_a_review_queue_under_its_runner_does_not_crash_the_process(
    seeded: Path,
) -> None:
    race(seeded, 30, "queue")


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(readers=st.integers(min_value=1, max_value=8), delay_ms=st.integers(0, 60))
def test_closing_returns_with_every_connection_closed_whatever_the_readers_do(
    seeded: Path, readers: int, delay_ms: int
) -> None:
    race(seeded, 3, "store", readers, delay_ms)
