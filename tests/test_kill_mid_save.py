"""A writer SIGKILLed in the middle of a save leaves a store that verifies."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from covonaut_es import open_store
from covonaut_es.messages import Message
from test_chain import KEY, NOW

SAVER = Path(__file__).parent / "kill_saver.py"


@pytest.mark.slow
def test_a_writer_killed_mid_save_leaves_every_thread_intact_and_writable(
    shared_url: str,
) -> None:
    """Writers SIGKILLed at random moments (seeded) while they save large batches,
    snapshot and fork: every thread in the store verifies intact, and the next keyed
    save on each goes on."""
    chance = random.Random(7)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for kill in range(4):
        process = subprocess.Popen(
            [sys.executable, str(SAVER), shared_url, KEY, f"w{kill}"],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert process.stdout is not None
        for _ in range(chance.randint(1, 6)):
            process.stdout.readline()
        time.sleep(chance.uniform(0, 0.05))
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        process.stdout.close()
    with open_store(shared_url, chain_key=KEY) as store:
        threads = list(store.thread_ids())
        assert len(threads) >= 4
        for thread_id in threads:
            report = store.verify(thread_id)
            assert report.ok, (thread_id, report.findings)
            thread = store.load(thread_id)
            thread.append_message(Message(role="user", content="after the kill"), now=NOW)
            store.save(thread)
            assert store.verify(thread_id).ok
