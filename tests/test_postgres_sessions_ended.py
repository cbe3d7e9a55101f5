"""Every command of a PostgreSQL store runs again on a new session when the server ended
the one it had (a failover, a restart, ``pg_terminate_backend``, ``idle_session_timeout``),
as docs/durability.md says: the server ends every session of the store's database before
each command, which then works as it would have (helper-223: a run on a new thread
failed, its head's read never tried again)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from covonaut_es import ReviewQueue, Store, open_store
from covonaut_es.audit import export_thread
from covonaut_es.service import ThreadService, review_submission
from covonaut_es.workers import Worker
from inbox_support import paused
from test_approvals import ALICE, VERIFIER
from test_postgres_kept_reads import end_sessions

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 12, 7, tzinfo=UTC)


def _queue(store: Store) -> object:
    queue = ReviewQueue(store.url, view_url="memory://")
    try:
        with queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
        return queue.pending()
    finally:
        queue.close()


def _approve(store: Store) -> object:
    service = ThreadService(store, verifier=VERIFIER)
    (pause,) = store.state_at("t").pauses
    review_id = str(pause.interrupt.data["review_id"])
    reviewer = service.reviewer(ALICE)
    return service.decide(review_id, review_submission("approve"), reviewer=reviewer)


_COMMANDS: dict[str, Callable[[Store], object]] = {
    "run on a new thread": lambda store: paused(store, "new", [], []),
    "load": lambda store: store.load("t"),
    "find an unknown thread": lambda store: store.find("nobody"),
    "exists": lambda store: store.exists("t"),
    "history": lambda store: store.history("t"),
    "state at": lambda store: store.state_at("t", 2),
    "replay": lambda store: store.replay_state("t"),
    "verify": lambda store: store.verify("t"),
    "thread ids": lambda store: list(store.thread_ids()),
    "list threads": lambda store: store.list_threads(),
    "threads with a review": lambda store: store.threads_with_review("r"),
    "children": lambda store: store.children("t"),
    "checkpoints": lambda store: store.checkpoints("t"),
    "fork": lambda store: store.fork("t", at_version=2, new_thread_id="t-fork", now=NOW),
    "label": lambda store: ThreadService(store).label("t", "seen"),
    "submit": lambda store: store.submit("t", "more"),
    "write a state": lambda store: store.write_state("prefs", {"n": 1}),
    "read a state": lambda store: store.read_state("prefs"),
    "log position": lambda store: store.last_log_position(),
    "export": lambda store: list(export_thread(store, "t")),
    "reviewer queue": _queue,
    "approve": _approve,
    "worker": lambda store: Worker(store, lambda thread_id: None).run(once=True),  # type: ignore[arg-type,return-value]
}


@pytest.mark.parametrize("command", sorted(_COMMANDS))
def test_a_command_after_the_server_ended_every_session_runs_on_a_new_one(
    postgres_url: str, postgres_database: str, command: str
) -> None:
    with open_store(postgres_database) as store:
        paused(store, "t", [], [])
        store.write_state("prefs", {"n": 0})
        end_sessions(postgres_url, postgres_database)
        _COMMANDS[command](store)
