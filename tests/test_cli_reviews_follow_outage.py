"""``reviews --follow`` keeps following a PostgreSQL store through the server's restart
and through its sessions ended (a failover, ``pg_terminate_backend``, an idle timeout):
it ended with an error, and a reviewer's terminal showed a queue that no longer changed
until a person started it again. It says once per attempt that it stopped, starts its
runner again, and lists what was paused meanwhile."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from covonaut_es import open_store
from inbox_support import paused
from postgres_server import PostgresServer, start_or_unavailable
from test_postgres_kept_reads import end_sessions

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[1]
_WAIT = 60.0  # seconds, at most, for a listing: the runner starts again 5 s after a stop


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    """A server of this module's own, to restart without ending the session's."""
    server = PostgresServer()
    start_or_unavailable(server)
    yield server
    server.stop()


@pytest.fixture
def own_database(own_server: PostgresServer) -> str:
    """A fresh database on the module's server."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(own_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return own_server.url.rsplit("/", 1)[0] + f"/{name}"


class Following:
    """``covonaut-es reviews --follow --json`` on a store, its listings read as they
    come."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "covonaut_es", "reviews", "--follow", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COVONAUT_ES_STORE": url, "PYTHONPATH": str(ROOT / "src")},
        )
        self.listings: queue.Queue[list[str]] = queue.Queue()
        self.stderr: list[str] = []
        assert self.process.stdout is not None and self.process.stderr is not None
        stdout, stderr = self.process.stdout, self.process.stderr
        self._readers = [
            threading.Thread(target=self._read, args=(stdout,), daemon=True),
            threading.Thread(target=lambda: self.stderr.extend(stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stdout: object) -> None:
        for line in stdout:  # type: ignore[attr-defined]
            self.listings.put(sorted(item["thread_id"] for item in json.loads(line)))

    def until_listed(self, threads: list[str]) -> None:
        """Wait for a listing of exactly ``threads``; the follower must still run."""
        deadline = time.monotonic() + _WAIT
        while time.monotonic() < deadline:
            try:
                if self.listings.get(timeout=0.5) == threads:
                    return
            except queue.Empty:
                assert self.process.poll() is None, "".join(self.stderr)
        raise AssertionError(f"never listed {threads}: {''.join(self.stderr)}")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        for reader in self._readers:  # each ends at its pipe's end
            reader.join(timeout=10)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def _outage(server: PostgresServer, url: str, kind: str) -> Callable[[], None]:
    if kind == "the server restarts":
        return server.restart
    return lambda: end_sessions(server.url, url)


@pytest.mark.parametrize("kind", ["the server restarts", "its sessions are ended twice"])
def test_reviews_follow_lists_what_was_paused_after_an_outage(
    own_server: PostgresServer, own_database: str, kind: str
) -> None:
    """A review paused before the outage is listed; one paused after it is listed
    too, by the same process, which said it stopped following and told no traceback."""
    url = own_database
    first, later = "before", "after"
    with open_store(url) as store:
        paused(store, first, [], [])
    following = Following(url)
    try:
        following.until_listed([first])
        outage = _outage(own_server, url, kind)
        for _ in range(2 if "twice" in kind else 1):
            outage()
            time.sleep(0.5)  # the follower meets the outage before the next pause
        with open_store(url) as store:
            paused(store, later, [], [])
        following.until_listed(sorted([first, later]))
        stderr = "".join(following.stderr)
        assert "stopped following the store" in stderr and "starts again" in stderr
        assert "Traceback" not in stderr, stderr
    finally:
        following.stop()
