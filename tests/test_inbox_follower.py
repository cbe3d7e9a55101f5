"""The inbox keeps following the store after its queue's runner stopped on an error:
a database session that ended (a failover, a restart, ``idle_session_timeout``)
stopped eventsourcing's runner for good, and the inbox answered 503 until a person
restarted it (helper-223). While stopped, every listing is 503; a new runner starts
:data:`~covonaut_es.projections._follower.RESTART_SECONDS` after the stop was seen."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import open_store
from covonaut_es.projections import _follower
from covonaut_es.projections._queue import ReviewQueueProjection
from inbox_support import current, inbox_client, paused
from test_approvals import ALICE

_RESTART = 0.05
_WAIT = 30.0  # seconds, at most, for the inbox to list again


def _listed(client: TestClient) -> Any:
    return client.get("/api/reviews", headers={"Authorization": f"Bearer {ALICE}"})


def _answering(client: TestClient, threads: set[str]) -> list[int]:
    """The statuses of the listings until one lists the reviews of ``threads``."""
    statuses: list[int] = []
    deadline = time.monotonic() + _WAIT
    while time.monotonic() < deadline:
        response = _listed(client)
        statuses.append(response.status_code)
        if response.status_code == 200 and {r["thread_id"] for r in response.json()} >= threads:
            return statuses
        time.sleep(0.02)
    raise AssertionError(f"the inbox did not list {threads} again: {statuses[-5:]}")


@pytest.fixture
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_follower, "RESTART_SECONDS", _RESTART)
    yield


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(failures=st.integers(1, 3))
def test_a_runner_stopped_by_failures_that_pass_is_started_again(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    quick_restarts: None,
    failures: int,
) -> None:
    """The queue's runner fails on ``failures`` batches in a row (each new runner meets
    the next), then reads: the inbox answers 503 while it is stopped, then lists the
    review paused meanwhile, with nobody restarting it."""
    folder = tmp_path_factory.mktemp("inbox")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        paused(store, "t", [], [])
        with inbox_client(store) as client:
            current(client)
            left = [failures]
            processed = ReviewQueueProjection.process_events

            def fails(self: Any, batch: Any) -> None:
                if left[0] > 0:
                    left[0] -= 1
                    raise psycopg.OperationalError("the session ended")
                processed(self, batch)

            monkeypatch.setattr(ReviewQueueProjection, "process_events", fails)
            paused(store, "u", [], [])
            statuses = _answering(client, {"t", "u"})
            assert set(statuses) <= {200, 503} and left == [0]
            assert client.get("/healthz").status_code == 200
            queue = client.app.state.inbox.desk.queue  # type: ignore[attr-defined]
            assert len(queue._followed) == 1  # no stopped runner kept (helper-225)


@pytest.mark.postgres
def test_the_inbox_follows_again_once_the_servers_sessions_ended(
    postgres_url: str, postgres_database: str, quick_restarts: None
) -> None:
    """Every session of the store's database ended by the server (as a failover or
    ``idle_session_timeout`` ends them): the inbox lists a review paused afterwards."""
    with open_store(postgres_database) as store:
        paused(store, "t", [], [])
        with inbox_client(store) as client:
            current(client)
            name = postgres_database.rsplit("/", 1)[1]
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (name,),
                )
            paused(store, "u", [], [])
            _answering(client, {"t", "u"})
            assert client.get("/healthz").status_code == 200


def test_a_queue_that_keeps_failing_stays_503_and_says_it_starts_again(
    monkeypatch: pytest.MonkeyPatch, quick_restarts: None
) -> None:
    """A failure that does not pass (a damaged page) stops every new runner again: the
    inbox stays 503, saying it starts following again, and never lists a queue that
    no longer changes."""
    with open_store("memory://") as store:
        paused(store, "t", [], [])
        with inbox_client(store) as client:
            current(client)

            def fails(self: Any, batch: Any) -> None:
                raise RuntimeError("a page of the log could not be read")

            monkeypatch.setattr(ReviewQueueProjection, "process_events", fails)
            paused(store, "u", [], [])
            deadline = time.monotonic() + _WAIT
            while _listed(client).status_code == 200:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            for _ in range(20):
                response = _listed(client)
                if response.status_code == 200:  # a new runner, before it meets the page
                    assert "u" not in {r["thread_id"] for r in response.json()}
                else:
                    assert response.status_code == 503, response.text
                    assert "starts following again" in response.text
                time.sleep(_RESTART / 2)
