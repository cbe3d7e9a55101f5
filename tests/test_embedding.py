"""Agent threads inside the user's own eventsourcing application, on every store: one
transaction saves the user's aggregate and the thread, or neither."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest
from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError

from covonaut_es import (
    AgentApplication,
    AgentThread,
    Message,
    Role,
    SerializationError,
    Store,
    ThreadStatus,
)
from covonaut_es.errors import ConfigurationError
from covonaut_es.store._urls import persistence_env
from covonaut_es.store._writer import SNAPSHOT_MIN_VERSION
from embedded_domain_app import ExpenseApp, ExpenseClaim, reviewer_agent

NOW = datetime(2026, 5, 6, tzinfo=UTC)


class Memo(Aggregate):
    """A user's aggregate whose event has a field without a type annotation."""

    @event("Written")
    def __init__(self, text) -> None:  # type: ignore[no-untyped-def]
        self.text = text


@pytest.fixture
def app(store_url: str) -> Iterator[ExpenseApp]:
    """The example's expense application on each kind of store."""
    application = ExpenseApp(env=persistence_env(store_url))
    yield application
    application.close()


@pytest.fixture
def store(app: ExpenseApp) -> Iterator[Store]:
    """A thread store on the application; every thread replays to its loaded state."""
    threads = Store.from_application(app)
    yield threads
    for thread_id in threads.thread_ids():
        assert threads.replay_state(thread_id) == threads.state_at(thread_id), thread_id
    threads.close()


def paused_review(app: ExpenseApp, store: Store) -> tuple[UUID, str]:
    """Submit a claim and run its reviewer until it asks a manager; (claim id, thread id)."""
    claim_id = app.submit("ann", Decimal("42.50"), "taxi")
    agent = reviewer_agent(store, claim_id)
    agent.run("Review the claim.")
    assert agent.interrupted is not None
    return claim_id, agent.thread_id


def test_the_approval_saves_claim_and_thread_in_one_transaction(
    app: ExpenseApp, store: Store
) -> None:
    """The claim's approval and the note to the agent are stored by one save, next to
    each other in the application's log, and the agent resumes from that note."""
    claim_id, thread_id = paused_review(app, store)
    app.approve(claim_id, store.load(thread_id), reviewer="maria")

    claim = app.claim(claim_id)
    assert claim.approved_by == "maria" and claim.amount == Decimal("42.50")
    last = store.history(thread_id)[-1]
    assert isinstance(last, AgentThread.Steered)
    assert last.message.content == "maria approved the claim for 42.50."
    log = app.recorder.select_notifications(None, 100)
    originators = [n.originator_id for n in log[-2:]]
    assert originators == [claim_id, last.originator_id]

    agent = reviewer_agent(store, claim_id)
    agent.restore_latest_checkpoint()
    assert agent.resume() == "Reimbursement queued: maria approved the claim for 42.50."
    assert agent.status is ThreadStatus.FINISHED


def test_a_conflict_on_the_thread_rolls_back_the_claim(app: ExpenseApp, store: Store) -> None:
    """When the thread changed since it was loaded, the save fails whole: the claim is
    not approved either."""
    claim_id, thread_id = paused_review(app, store)
    stale = store.load(thread_id)
    agent = reviewer_agent(store, claim_id)
    agent.restore_latest_checkpoint()
    agent.save_checkpoint()  # another writer moves the thread on
    version = store.state_at(thread_id).version

    with pytest.raises(IntegrityError):
        app.approve(claim_id, stale, reviewer="maria")
    assert app.claim(claim_id).approved_by is None
    assert store.state_at(thread_id).version == version


def test_a_conflict_on_the_claim_rolls_back_the_thread(app: ExpenseApp, store: Store) -> None:
    """When the claim changed since it was loaded, the thread's new events are not
    stored either."""
    claim_id, thread_id = paused_review(app, store)
    stale_claim = app.claim(claim_id)
    app.approve(claim_id, store.load(thread_id), reviewer="maria")
    version = store.state_at(thread_id).version

    thread = store.load(thread_id)
    stale_claim.approve("bob")
    thread.steer(Message(Role.USER, "bob approved the claim"), now=NOW)
    with pytest.raises(IntegrityError):
        app.save(stale_claim, thread)
    assert app.claim(claim_id).approved_by == "maria"
    assert store.state_at(thread_id).version == version


def test_the_application_reads_the_thread_with_its_own_repository(
    app: ExpenseApp, store: Store
) -> None:
    """The application's repository rebuilds an agent thread with its types, equal to
    the store's."""
    _, thread_id = paused_review(app, store)
    loaded = store.load(thread_id)
    assert isinstance(app.repository.get(loaded.id), AgentThread)
    assert app.repository.get(loaded.id).state == loaded.state


def test_an_untyped_event_field_is_refused_before_anything_is_stored(
    app: ExpenseApp,
) -> None:
    """An @event parameter without an annotation is refused with a message naming it,
    and nothing of that save is stored."""
    memo = Memo("remember the receipt")
    with pytest.raises(SerializationError, match=r"Memo.Written.*\['text'\].*annotate"):
        app.save(memo)
    with pytest.raises(AggregateNotFoundError):
        app.repository.get(memo.id)


def test_snapshots_of_the_users_aggregates_are_taken_and_read_back() -> None:
    """A snapshot of the user's aggregate that declares no snapshot class of its own is
    stored as eventsourcing stores it and the aggregate loads from it, with its types."""
    app = ExpenseApp(env={"IS_SNAPSHOTTING_ENABLED": "y"})
    try:
        claim = ExpenseClaim("ann", Decimal("1.50"), "pens")
        app.save(claim)
        app.take_snapshot(claim.id)
        assert app.snapshots is not None
        (snapshot,) = app.snapshots.get(claim.id)
        assert snapshot.originator_version == claim.version
        loaded = app.claim(claim.id)
        assert (loaded.amount, loaded.created_on) == (Decimal("1.50"), claim.created_on)
    finally:
        app.close()


def test_from_application_refuses_an_application_with_another_mapper() -> None:
    """A stock Application cannot read threads: Store.from_application says how to fix it."""
    app = Application[UUID]()
    with pytest.raises(ConfigurationError, match="AgentApplication"):
        Store.from_application(app)
    app.close()


def test_agent_application_works_as_a_mixin() -> None:
    """AgentApplication also installs the mapper when mixed into another Application
    subclass."""

    class Audited(Application[UUID]):
        name = "audited"

    class Mixed(AgentApplication, Audited):
        pass

    app = Mixed()
    thread = AgentThread.start("mixed", now=NOW)
    app.save(thread)
    assert Store.from_application(app).state_at("mixed") == thread.state
    app.close()


@pytest.mark.parametrize(
    "module", ["eventsourcing.popo", "eventsourcing.sqlite", "other_persistence"]
)
def test_an_application_on_another_persistence_module_keeps_working(
    module: str, tmp_path: Path
) -> None:
    """An application configured with eventsourcing's stock module, or any other (not
    the store's back ends), holds threads as before: saved, forked, snapshotted,
    leased, verified."""
    env = {
        "PERSISTENCE_MODULE": module,
        "SQLITE_DBNAME": str(tmp_path / "app.db"),
        "IS_SNAPSHOTTING_ENABLED": "y",
    }
    application = ExpenseApp(env=env)
    with Store.from_application(application) as store:
        thread = AgentThread.start("t", now=NOW)
        for n in range(SNAPSHOT_MIN_VERSION + 2):
            thread.append_message(Message(Role.USER, f"m{n}"), now=NOW)
        store.save(thread)
        assert store.snapshot_if_due(thread)
        store.fork("t", new_thread_id="f", now=NOW)
        with store.lease("t"):
            pass
        assert store.load("f").version == thread.version + 1
        assert store.verify("t").ok and store.verify("f").ok
    application.close()
