"""A follower in an eventsourcing ``System`` is told of every event a library command
stores in its leader, not only of a save's: a fork, a named state, a submission, the
input a worker takes and an import store theirs outside a save, and a runner that
trusts each notice's account of the log (``NewSingleThreadedRunner``,
``NewMultiThreadedRunner``) passed over them for good (helper-221)."""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar
from uuid import UUID

import pytest
from eventsourcing.application import ProcessingEvent
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError
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
from covonaut_es.errors import FollowerError
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


@contextlib.contextmanager
def _running(
    runner_class: type[Runner[UUID]], follower: type[AgentApplication]
) -> Iterator[tuple[Runner[UUID], Store]]:
    """A system of the leader and ``follower`` on SQLite files, run by
    ``runner_class``, and the leader's store holding thread ``t``, run once."""
    folder = Path(tempfile.mkdtemp(prefix="covonaut-notices-"))
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "CLAIMS_SQLITE_DBNAME": str(folder / "claims.db"),
        f"{follower.__name__.upper()}_SQLITE_DBNAME": str(folder / "follower.db"),
    }
    runner = runner_class(System([[Claims, follower]]), env=env)
    runner.start()
    try:
        store = Store.from_application(runner.get(Claims))
        Agent(_config(store, "t")).run("first")  # the thread every command names
        yield runner, store
    finally:
        runner.stop()


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
    with _running(runner_class, Watcher) as (runner, store):
        leader, watcher = runner.get(Claims), runner.get(Watcher)
        for count, write in enumerate(writes):
            _WRITES[write](leader, store, count)
        logged = [n.id for n in leader.recorder.select_notifications(start=None, limit=1000)]
        deadline = time.monotonic() + WAIT
        while watcher.recorder.max_tracking_id(leader.name) != logged[-1]:
            assert time.monotonic() < deadline, "the follower did not catch up"
            time.sleep(0.01)
        with Watcher.lock:
            assert Watcher.seen == logged


class Refuser(AgentApplication, ProcessApplication[UUID]):
    """A follower whose policy fails with its own IntegrityError on every event of a
    named state or a submission: a conflict of the follower's own, say."""

    aggregate_classes = (Claim,)

    def policy(self, domain_event: Any, processing_event: ProcessingEvent[UUID]) -> None:
        if type(domain_event).__name__ in ("StateSaved", "InputSubmitted"):
            raise IntegrityError("the follower's own conflict")


@pytest.mark.parametrize("runner_class", [SingleThreadedRunner, NewSingleThreadedRunner])
@pytest.mark.parametrize("write", ["state", "submit"])
def test_a_followers_failure_is_told_as_its_own_and_the_write_made_once(
    runner_class: type[Runner[UUID]], write: str
) -> None:
    """A follower run in the writer's thread fails on the event a named state or a
    submission stored: the write raises FollowerError, its event stored once (the
    follower's IntegrityError was taken for another writer's conflict, and the event
    written again, thousands of times: helper-225)."""
    with _running(runner_class, Refuser) as (runner, store):
        leader = runner.get(Claims)
        before = leader.recorder.max_notification_id()
        with pytest.raises(FollowerError, match="the follower's own conflict"):
            _WRITES[write](leader, store, 1)
        assert leader.recorder.max_notification_id() == before + 1  # stored once
