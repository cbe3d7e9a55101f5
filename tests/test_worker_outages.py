"""A worker rides out a database that stops answering: a read of the log that fails
(eventsourcing's retries ran out: a failover, a restart longer than they last) is
logged and made again at the next step, and a record that cannot be withdrawn as it
stops lapses without hiding why it stopped (helper-223: every worker of a fleet exited
with status 2 some 43 s into an outage, naming the run leases instead of the log)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    AgentConfig,
    ProviderResponse,
    ScriptedProvider,
    Store,
    ThreadStatus,
    open_store,
)
from covonaut_es.errors import StoreFileReplacedError, StoreUnavailableError
from covonaut_es.workers import Worker

_WAIT = 30.0


def _config(thread_id: str) -> AgentConfig:
    return AgentConfig(provider=ScriptedProvider([ProviderResponse(content="done")]))


def _failing(store: Store, failures: int, error: Exception) -> list[int]:
    """Make the store's log fail its next ``failures`` reads with ``error``; the reads
    left to fail."""
    left = [failures]
    notifications = store.log.notifications

    def reads(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise error
        return notifications(*args, **kwargs)

    store.log.notifications = reads  # type: ignore[method-assign]
    return left


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(failures=st.integers(1, 5))
def test_a_worker_reads_the_log_again_after_it_failed_and_runs_what_is_ready(
    tmp_path_factory: pytest.TempPathFactory, failures: int
) -> None:
    """The log's reads fail ``failures`` times: the running worker goes on, runs a
    thread submitted meanwhile, and stops cleanly when asked."""
    folder = tmp_path_factory.mktemp("outage")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        worker = Worker(store, _config, poll_interval=0.01)
        outcome: list[object] = []
        running = threading.Thread(target=lambda: outcome.append(worker.run()))
        left = _failing(store, failures, StoreUnavailableError("the database did not answer"))
        running.start()
        try:
            store.submit("t", "hello")
            deadline = time.monotonic() + _WAIT
            while not (store.exists("t") and store.state_at("t").status is ThreadStatus.FINISHED):
                assert time.monotonic() < deadline and running.is_alive(), outcome
                time.sleep(0.01)
        finally:
            worker.stop()
            running.join(_WAIT)
        assert left == [0] and len(outcome) == 1 and not running.is_alive()


def test_a_failure_that_does_not_pass_stops_the_worker_with_it(tmp_path: Any) -> None:
    """A store file replaced under the worker is no outage: it stops with that error."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        _failing(store, 1, StoreFileReplacedError("the file was replaced"))
        with pytest.raises(StoreFileReplacedError):
            Worker(store, _config, poll_interval=0.01).run()


def test_a_run_once_raises_the_failure_of_its_read(tmp_path: Any) -> None:
    """A run ``once`` (a cron job, a test) is not left trying for ever."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        _failing(store, 1, StoreUnavailableError("the database did not answer"))
        with pytest.raises(StoreUnavailableError, match="did not answer"):
            Worker(store, _config).run(once=True)


def test_a_record_that_cannot_be_withdrawn_does_not_hide_why_the_worker_stopped(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its database down as it stops, a worker's record is left to lapse: a run that
    ended well returns, and one that failed raises its own error."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:

        def down(worker_id: str) -> None:
            raise StoreUnavailableError("cannot connect for run leases")

        monkeypatch.setattr(store, "withdraw_worker", down)
        assert Worker(store, _config).run(once=True).steps == 0
        _failing(store, 1, StoreUnavailableError("the log did not answer"))
        with pytest.raises(StoreUnavailableError, match="the log did not answer"):
            Worker(store, _config).run(once=True)
