"""A follower in an eventsourcing ``System`` is told of every event a library command
stores in its leader, not only of a save's: a fork, a named state, a submission, the
input a worker takes and an import store theirs outside a save, and a runner that
trusts each notice's account of the log (``NewSingleThreadedRunner``,
``NewMultiThreadedRunner``) passed over them for good (helper-221)."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.application import ProcessingEvent
from eventsourcing.domain import Aggregate, event
from eventsourcing.system import (
    MultiThreadedRunner,
    NewMultiThreadedRunner,
    NewSingleThreadedRunner,
    ProcessApplication,
    Runner,
    SingleThreadedRunner,
    System,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentApplication,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    open_store,
)
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.workers import Worker
from support import answer

WAIT = 30.0  # seconds a multi-threaded follower may take to catch up, at most
RUNNERS = (
    SingleThreadedRunner,
    MultiThreadedRunner,
    NewSingleThreadedRunner,
    NewMultiThreadedRunner,
)


class Claim(Aggregate):
    """An aggregate of the leader's own, saved as eventsourcing saves it."""

    @event("Submitted")
    def __init__(self, amount: Decimal) -> None:
        self.amount = amount


class Claims(AgentApplication):
    """The leader: its own claims and its threads in one log."""

    aggregate_classes = (Claim,)


class Watcher(AgentApplication, ProcessApplication[UUID]):
    """A follower noting the leader's notification id of each event it processes."""

    aggregate_classes = (Claim,)
    seen: ClassVar[list[int]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def policy(self, domain_event: Any, processing_event: ProcessingEvent[UUID]) -> None:
        assert processing_event.tracking is not None
        with self.lock:
            self.seen.append(processing_event.tracking.notification_id)


def _config(store: Store, thread_id: str) -> AgentConfig:
    return AgentConfig(
        provider=ScriptedProvider([answer("noted")]),
        checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
    )


def _imported(store: Store, count: int) -> None:
    """A thread run in another store, exported, and imported into ``store``."""
    thread_id = f"imported-{count}"
    with open_store("memory://") as elsewhere:
        Agent(_config(elsewhere, thread_id)).run("hello")
        lines = list(export_thread(elsewhere, thread_id))
    import_threads(store, lines)


_WRITES: dict[str, Callable[[Claims, Store, int], object]] = {
    "save": lambda app, store, n: app.save(Claim(Decimal(n))),
    "run": lambda app, store, n: Agent(_config(store, "t")).run(f"turn {n}"),
    "fork": lambda app, store, n: store.fork("t", at_version=1, new_thread_id=f"t-{n}"),
    "state": lambda app, store, n: store.write_state(f"prefs-{n}", {"n": n}),
    "submit": lambda app, store, n: store.submit("t", f"question {n}"),
    "worker": lambda app, store, n: Worker(store, lambda thread_id: _config(store, thread_id)).run(
        once=True
    ),
    "import": lambda app, store, n: _imported(store, n),
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runner_class=st.sampled_from(RUNNERS),
    writes=st.lists(st.sampled_from(sorted(_WRITES)), min_size=1, max_size=6),
)
@example(runner_class=NewSingleThreadedRunner, writes=["fork", "state", "submit", "save"])
@example(runner_class=SingleThreadedRunner, writes=["fork"])
@example(runner_class=NewMultiThreadedRunner, writes=["submit", "worker", "import", "save"])
def test_a_follower_is_told_of_every_event_its_leader_stores(
    runner_class: type[Runner[UUID]], writes: list[str]
) -> None:
    """After any sequence of library commands and saves on the leader, under each of
    eventsourcing's runners, the follower has processed every record of the leader's
    log once, in order, and nothing else: without waiting for a save to tell it of
    the ones before (the stock runners only pulled them then)."""
    Watcher.seen.clear()
    folder = Path(tempfile.mkdtemp(prefix="covonaut-notices-"))
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "CLAIMS_SQLITE_DBNAME": str(folder / "claims.db"),
        "WATCHER_SQLITE_DBNAME": str(folder / "watcher.db"),
    }
    runner = runner_class(System([[Claims, Watcher]]), env=env)
    runner.start()
    try:
        leader, watcher = runner.get(Claims), runner.get(Watcher)
        store = Store.from_application(leader)
        Agent(_config(store, "t")).run("first")  # the thread every command names
        for count, write in enumerate(writes):
            _WRITES[write](leader, store, count)
        logged = [n.id for n in leader.recorder.select_notifications(start=None, limit=1000)]
        deadline = time.monotonic() + WAIT
        while watcher.recorder.max_tracking_id(leader.name) != logged[-1]:
            assert time.monotonic() < deadline, "the follower did not catch up"
            time.sleep(0.01)
        with Watcher.lock:
            assert Watcher.seen == logged
    finally:
        runner.stop()
