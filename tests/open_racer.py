"""A racer for the concurrent-open tests: processes open one new store at once."""

from __future__ import annotations

import os
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from covonaut_es import open_store
from covonaut_es.domain import AgentThread, RunMode
from covonaut_es.messages import Message, Role
from covonaut_es.projections import ReviewQueue
from covonaut_es.store import WorkerRecord
from covonaut_es.store._chain import scheme_of


def open_and_save(
    url: str, racer: int, options: dict[str, Any], barrier: Barrier, results: Queue[Any]
) -> None:
    """After all racers meet, open the store with ``options`` and save a thread of
    this racer's own; put ``("ok", racer)`` or ``("error", traceback)`` on ``results``."""
    try:
        barrier.wait(timeout=60)
        with open_store(url, **options) as store:
            thread = AgentThread.start(f"racer-{racer}", now=_now())
            thread.start_run(RunMode.RUN, now=_now(), given=Message(Role.USER, f"from {racer}"))
            store.save(thread)
            assert options.get("chain_key") is None or scheme_of(str(thread.chain_head)).keyed
        results.put(("ok", racer))
    except BaseException:  # report it to the test rather than die silently
        results.put(("error", traceback.format_exc()))


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def open_each(urls: list[str], barrier: Barrier, results: Queue[Any]) -> None:
    """Open each of ``urls`` in turn, all racers meeting before each; put the
    tracebacks of the opens that failed on ``results``, as one list."""
    failures = []
    for url in urls:
        barrier.wait(timeout=60)
        try:
            with open_store(url):
                pass
        except Exception:  # each failure is what the test reports
            failures.append(traceback.format_exc())
    results.put(failures)


def register_on_each(urls: list[str], barrier: Barrier, results: Queue[Any]) -> None:
    """On each of ``urls``, opened beforehand, publish a worker record of this racer's
    own once all racers meet, as workers starting at once on a store that no worker
    ran on before do, then, once all have, read the registry; put what failed (a
    publication's traceback, or a registry that does not list every racer) on
    ``results``, as one list."""
    failures = []
    for url in urls:
        with open_store(url) as store:
            now = _now()
            record = WorkerRecord(
                worker_id=f"racer-{os.getpid()}", host="here", pid=os.getpid(),
                started_at=now, heartbeat_at=now,
            )  # fmt: skip
            barrier.wait(timeout=60)
            try:
                store.publish_worker(record)
            except Exception:  # each failure is what the test reports
                failures.append(traceback.format_exc())
            barrier.wait(timeout=60)
            listed = [worker.worker_id for worker in store.live_workers()]
            if len(listed) != barrier.parties:
                failures.append(f"{url} lists {sorted(listed)} of {barrier.parties} racers")
            barrier.wait(timeout=60)  # every racer has read before any closes its store
    results.put(failures)


def view_each(urls: list[str], barrier: Barrier, results: Queue[Any]) -> None:
    """Once all racers meet, open the reviewer queue's view in the database of each of
    ``urls``, as reviewers' processes starting at once on a store no queue ran on do;
    put the tracebacks of the views that failed on ``results``, as one list."""
    failures = []
    for url in urls:
        with ReviewQueue(url) as queue:
            barrier.wait(timeout=60)
            try:
                queue.view()
            except Exception:  # each failure is what the test reports
                failures.append(traceback.format_exc())
    results.put(failures)
