"""A lost run lease can neither write nor run a tool, on every back end, when it is
really lost: its PostgreSQL session terminated, timed out or ended by a server restart;
its SQLite lock file removed; its entry in a memory store's lease table dropped. The
runner stops with ``LeaseLostError`` before its next tool call and stores nothing more,
and another runner takes the thread over (ADR 0025)."""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from covonaut_es import AgentThread, Message, Role, Store, ThreadBusyError, open_store
from covonaut_es.errors import LeaseLostError
from covonaut_es.store import WorkerRecord
from covonaut_es.store._backends._sqlite_leases import lease_directory
from lease_faults import (
    ANSWER,
    APPLICATION_PREFIX,
    HOLDER,
    THREAD,
    WAIT,
    Holder,
    PaymentFlow,
    SecondRunner,
    backends,
    check_takeover,
    finish,
    head,
    in_thread,
    keys_by_call,
    lock_file,
    lose_lease,
    recorded_calls,
    terminate,
    terminate_lease_session,
    wait_until_gone,
)
from postgres_server import PostgresServer, start_or_unavailable

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def flow() -> PaymentFlow:
    """The payment flow, its ledger empty."""
    return PaymentFlow()


@pytest.fixture
def stores() -> Iterator[Callable[[str], Store]]:
    """Open stores; each is closed at teardown."""
    opened: list[Store] = []

    def open_(url: str) -> Store:
        opened.append(open_store(url))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def shareable(store_url: str) -> str:
    """``store_url``, named if it is in memory, so that a second store shares it."""
    return f"memory://fenced-{uuid.uuid4().hex}" if store_url == "memory://" else store_url


# A PostgreSQL lease session that ends --------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("durability", ["step", "checkpoint"])
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_run_whose_lease_session_is_terminated_in_a_tool_stops_and_is_taken_over(
    postgres_database: str,
    flow: PaymentFlow,
    stores: Callable[[str], Store],
    durability: str,
    driver: str,
) -> None:
    """The lease session of a run is terminated while its first payment runs, and a
    second runner (another store) takes the thread: the run stops with LeaseLostError
    (releasing the lost lease raises nothing) before its next tool call; nothing it did
    after the loss is stored; the second runner finishes the thread and no payment ran
    under two idempotency keys."""
    url = postgres_database
    first, observer, second = stores(url), stores(url), stores(url)
    first.name_lease_holder(HOLDER)
    agent = flow.agent(first, THREAD, "a", durability=durability)
    gate = flow.hold_payment("pay-0")
    if driver == "sync":
        running = in_thread(lambda: agent.run("Pay twice."))
    else:
        running = in_thread(lambda: asyncio.run(agent.arun("Pay twice.")))
    gate.wait_reached()
    before = head(observer, THREAD)
    terminate_lease_session(url, HOLDER)
    runner = SecondRunner(second, THREAD)
    try:
        runner.take()
        gate.open()
        with pytest.raises(LeaseLostError):
            running.result(timeout=WAIT)
        assert head(observer, THREAD) == before
        assert flow.payments("a") == ["pay-0"]
        taking_over = flow.agent(second, THREAD, "b", durability=durability)
        assert runner.do(lambda: finish(taking_over, second, THREAD)) == ANSWER
    finally:
        runner.release()
    check_takeover(flow, observer, THREAD)


@pytest.mark.postgres
def test_a_lease_lost_with_its_session_stays_lost_when_the_store_connects_again(
    postgres_database: str, stores: Callable[[str], Store]
) -> None:
    """Once a lease's session is terminated, the store takes the next lease on a new
    connection, and the lost lease stays lost: its check keeps raising, another runner
    takes its thread, and releasing it does not raise."""
    url = postgres_database
    first, second = stores(url), stores(url)
    first.name_lease_holder(HOLDER)
    with first.lease("lost") as lost:
        terminate_lease_session(url, HOLDER)
        with first.lease("other") as other:
            other.check()
            with pytest.raises(LeaseLostError, match="database session ended"):
                lost.check()
            runner = SecondRunner(second, "lost")
            try:
                assert runner.take().token == lost.token + 1
            finally:
                runner.release()
            with pytest.raises(LeaseLostError):
                lost.check()
    with first.lease("lost") as again:  # the first store's own, after the other runner's
        assert again.token == lost.token + 2


def _worker_record(worker_id: str) -> WorkerRecord:
    now = datetime.now(UTC)
    return WorkerRecord(
        worker_id=worker_id, host="h", pid=1, started_at=now, heartbeat_at=now, threads=()
    )


# Everything a store asks of its lease session, each as a worker or a runner would.
_LEASE_SESSION_USES: dict[str, Callable[[Store], object]] = {
    "name the holder": lambda store: store.name_lease_holder("worker-renamed"),
    "publish a heartbeat": lambda store: store.publish_worker(_worker_record("w-2")),
    "list live workers": lambda store: store.live_workers(),
    "withdraw a worker": lambda store: store._leasing.leases.withdraw("w-1"),
    "name who holds a thread": lambda store: store._leasing.leases.holder_of("t"),
    "take a lease": lambda store: _take_and_check(store, "second"),
}


def _take_and_check(store: Store, thread_id: str) -> None:
    with store.lease(thread_id) as lease:
        lease.check()


@pytest.mark.postgres
@pytest.mark.parametrize("use", sorted(_LEASE_SESSION_USES))
def test_every_use_of_a_lease_session_that_ended_unnoticed_goes_on_a_new_one(
    postgres_database: str, stores: Callable[[str], Store], use: str
) -> None:
    """The lease session was terminated while nothing asked it: whatever the store asks
    next (a worker naming itself, a heartbeat, the registry, a new lease) goes on a new
    session instead of raising the driver's error, and the leases of the old one stay
    lost."""
    url = postgres_database
    store = stores(url)
    store.name_lease_holder(HOLDER)
    store.publish_worker(_worker_record("w-1"))
    with store.lease("first") as first:
        terminate_lease_session(url, HOLDER)
        _LEASE_SESSION_USES[use](store)
        with pytest.raises(LeaseLostError):
            first.check()
    assert store.live_workers() is not None
    with store.lease("third") as lease:
        lease.check()


@pytest.mark.postgres
def test_releasing_a_lease_whose_session_ended_never_replaces_the_blocks_own_error(
    postgres_database: str, stores: Callable[[str], Store], caplog: pytest.LogCaptureFixture
) -> None:
    """An error raised in a lease's block after its session was terminated is the one
    the caller gets; the failure to release is logged."""

    class Stopped(Exception):
        pass

    store = stores(postgres_database)
    store.name_lease_holder(HOLDER)
    with (
        caplog.at_level(logging.WARNING, logger="covonaut_es"),
        pytest.raises(Stopped),
        store.lease(THREAD),
    ):
        terminate_lease_session(postgres_database, HOLDER)
        raise Stopped
    assert "was lost before its release" in caplog.text


@pytest.mark.postgres
def test_a_store_whose_url_names_an_application_takes_leases_under_its_holders_name(
    postgres_database: str, stores: Callable[[str], Store]
) -> None:
    """``?application_name=`` names the store's own sessions; its lease session still
    carries the holder's name, by which another runner refused learns who holds it."""
    store = stores(f"{postgres_database}?application_name=threads-app")
    store.name_lease_holder(HOLDER)
    with store.lease(THREAD):
        assert len(backends(postgres_database, APPLICATION_PREFIX + HOLDER)) == 1
        with pytest.raises(ThreadBusyError) as busy:
            SecondRunner(stores(postgres_database), THREAD).take()
        assert busy.value.holder == HOLDER


def lost_between_payments(
    flow: PaymentFlow,
    first: Store,
    observer: Store,
    second: Store,
    lose: Callable[[], None],
) -> None:
    """Run the flow on ``first`` and lose its lease (``lose``) while the model works
    out the second payment: the run stops with LeaseLostError before that payment and
    stores nothing more, so the payment is not left in doubt either; then ``second``
    finishes the thread."""
    gate = flow.hold_model(answered=1)
    running = in_thread(lambda: flow.agent(first, THREAD, "a").run("Pay twice."))
    gate.wait_reached()
    lose()
    before = head(observer, THREAD)
    gate.open()
    with pytest.raises(LeaseLostError):
        running.result(timeout=WAIT)
    assert head(observer, THREAD) == before
    assert flow.payments("a") == ["pay-0"]
    assert observer.load(THREAD).in_doubt == ()
    assert flow.agent(second, THREAD, "b").continue_run() == ANSWER
    assert flow.payments("b") == ["pay-1"]
    check_takeover(flow, observer, THREAD)


@pytest.mark.postgres
def test_idle_session_timeout_between_two_tool_calls_stops_the_run_before_the_second(
    postgres_database: str, flow: PaymentFlow, stores: Callable[[str], Store]
) -> None:
    """The server ends the idle lease session (``idle_session_timeout``) while the model
    works out the second payment: the run stops before it and writes nothing more."""
    url = postgres_database
    options = quote("-c idle_session_timeout=1000")
    first = stores(f"{url}?options={options}")
    first.name_lease_holder(HOLDER)
    lost_between_payments(
        flow,
        first,
        stores(url),
        stores(url),
        lambda: wait_until_gone(url, APPLICATION_PREFIX + HOLDER),
    )


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this module's own, to restart without ending the
    session's server."""
    server = PostgresServer()
    start_or_unavailable(server)
    yield server
    server.stop()


@pytest.mark.postgres
def test_a_server_restart_between_two_tool_calls_stops_the_run_before_the_second(
    own_server: PostgresServer, flow: PaymentFlow, stores: Callable[[str], Store]
) -> None:
    """The server restarts while the model works out the second payment: the run stops
    before it and writes nothing more; a runner whose store was open across the restart
    finishes it."""
    url = own_server.url
    first, observer = stores(url), stores(url)
    first.name_lease_holder(HOLDER)
    lost_between_payments(flow, first, observer, stores(url), own_server.restart)


# Fencing, on every back end ------------------------------------------------------------


def test_a_lost_lease_cannot_save_while_the_new_holders_saves_go_through(
    shareable: str, stores: Callable[[str], Store]
) -> None:
    """Once a lease is lost and another runner took the thread, the first holder's
    save is refused with LeaseLostError and writes nothing, its check raises, and the
    new holder's saves go through."""
    first, second = stores(shareable), stores(shareable)
    first.name_lease_holder(HOLDER)
    seeded = AgentThread.start(THREAD, now=NOW)
    seeded.append_message(Message(Role.USER, "hello"), now=NOW)
    first.save(seeded)
    with first.lease(THREAD) as lease:
        thread = first.load(THREAD)
        thread.append_message(Message(Role.USER, "from the first holder"), now=NOW)
        lease.check()
        lose_lease(first, shareable, THREAD)
        with pytest.raises(LeaseLostError):
            lease.check()
        runner = SecondRunner(second, THREAD)
        try:
            assert runner.take().token > lease.token
            with pytest.raises(LeaseLostError) as refused:
                first.save(thread)
            assert refused.value.token == lease.token
            assert head(second, THREAD) == seeded.version
            with pytest.raises(LeaseLostError):
                lease.check()

            def save_as_new_holder() -> int:
                assert runner.lease is not None
                runner.lease.check()
                taken = second.load(THREAD)
                taken.append_message(Message(Role.USER, "from the new holder"), now=NOW)
                second.save(taken)
                return taken.version

            assert runner.do(save_as_new_holder) == seeded.version + 1
        finally:
            runner.release()
    contents = [m.content for m in second.state_at(THREAD).messages]
    assert contents == ["hello", "from the new holder"]
    assert second.verify(THREAD).ok


@pytest.mark.parametrize("takeover", ["in the tool", "after the run stopped"])
def test_a_run_that_lost_its_lease_in_a_tool_stores_nothing_more(
    shareable: str, flow: PaymentFlow, stores: Callable[[str], Store], takeover: str
) -> None:
    """A run's lease is lost while its first payment runs; another runner takes the
    thread while the payment still runs, or only once the run stopped: either way the
    run stops with LeaseLostError before its next tool call, nothing it did after the
    loss is stored, and the other runner finishes the thread."""
    first, observer, second = stores(shareable), stores(shareable), stores(shareable)
    first.name_lease_holder(HOLDER)
    gate = flow.hold_payment("pay-0")
    running = in_thread(lambda: flow.agent(first, THREAD, "a").run("Pay twice."))
    gate.wait_reached()
    before = head(observer, THREAD)
    lose_lease(first, shareable, THREAD)
    runner = SecondRunner(second, THREAD)
    try:
        if takeover == "in the tool":
            runner.take()
        gate.open()
        with pytest.raises(LeaseLostError):
            running.result(timeout=WAIT)
        assert head(observer, THREAD) == before
        assert flow.payments("a") == ["pay-0"]
        if takeover == "after the run stopped":
            runner.take()
        taking_over = flow.agent(second, THREAD, "b")
        assert runner.do(taking_over.continue_run) == ANSWER
    finally:
        runner.release()
    check_takeover(flow, observer, THREAD)


# SQLite: one file, many names -----------------------------------------------------------


@pytest.fixture
def names(tmp_path: Path) -> dict[str, Path]:
    """A store's SQLite file and a symbolic link to it."""
    database = tmp_path / "threads.db"
    open_store(f"sqlite:///{database}").close()
    (tmp_path / "link.db").symlink_to(database)
    return {"file": database, "symbolic link": tmp_path / "link.db"}


@pytest.mark.parametrize(
    ("holding", "refused"), [("symbolic link", "file"), ("file", "symbolic link")]
)
def test_processes_reaching_one_file_through_its_name_and_a_symbolic_link_share_its_leases(
    names: dict[str, Path], holding: str, refused: str
) -> None:
    """While a process holds a thread's lease through one name of a SQLite file,
    processes reaching it through the other names are refused and told who holds it;
    once it is released, the next lease through another name has the next token, and
    no lock file is left."""
    assert len({lease_directory(str(path)) for path in names.values()}) == 1
    holder = Holder(names[holding])
    try:
        assert holder.said() == "held 1"
        for name in dict.fromkeys((refused, "file")):
            other = Holder(names[name])
            assert other.said().startswith(f"busy pid {holder.process.pid} "), name
            other.finished()
        holder.release()
        assert holder.said() == "released"
        holder.finished()
    finally:
        holder.process.kill()
        holder.process.wait(timeout=WAIT)
    again = Holder(names[refused])
    assert again.said() == "held 2"
    again.release()
    assert again.said() == "released"
    again.finished()
    assert list(lease_directory(str(names["file"])).glob("*.lock")) == []
    with closing(sqlite3.connect(names["file"])) as database:
        assert database.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_runners_contending_through_two_names_never_share_a_thread_and_leave_no_lock_file(
    names: dict[str, Path], flow: PaymentFlow
) -> None:
    """Four runners, each with a store of its own on the file or its symbolic link,
    run eight threads over and over, contending for their leases: no two ever hold one
    thread at once, every run granted is stored (no conflict), and once all released
    the lease directory holds no lock file."""
    holding: Counter[str] = Counter()
    granted: Counter[str] = Counter()
    guard = threading.Lock()
    thread_ids = [f"thread-{n}" for n in range(8)]

    def runner(number: int) -> None:
        name = names["file" if number % 2 else "symbolic link"]
        with open_store(f"sqlite:///{name}") as store:
            for round_ in range(3):
                for thread_id in thread_ids[number % 3 :] + thread_ids[: number % 3]:
                    try:
                        with store.lease(thread_id):
                            with guard:
                                holding[thread_id] += 1
                                assert holding[thread_id] == 1, thread_id
                            try:
                                flow.agent(store, thread_id, f"r{number}").run(f"Round {round_}.")
                            finally:
                                with guard:
                                    holding[thread_id] -= 1
                                    granted[thread_id] += 1
                    except ThreadBusyError:
                        pass

    runners = [in_thread(functools.partial(runner, number)) for number in range(4)]
    for running in runners:
        running.result(timeout=WAIT * 2)
    assert list(lease_directory(str(names["file"])).glob("*.lock")) == []
    with open_store(f"sqlite:///{names['file']}") as store:
        for thread_id in thread_ids:
            runs = [e for e in store.history(thread_id) if isinstance(e, AgentThread.RunStarted)]
            assert len(runs) == granted[thread_id] >= 1
            assert store.verify(thread_id).ok
    assert all(len(keys) == 1 for keys in keys_by_call(flow.ledger).values())


def test_a_lock_file_removed_or_replaced_under_its_holder_is_noticed_by_its_check(
    names: dict[str, Path], stores: Callable[[str], Store]
) -> None:
    """A lease whose lock file was removed fails its check, and still does once another
    runner locked a new file of that name; releasing it leaves the new holder's file,
    which goes with the new holder's release."""
    url = f"sqlite:///{names['file']}"
    first, second = stores(url), stores(url)
    path = lock_file(names["file"], THREAD)
    with first.lease(THREAD) as lease:
        lease.check()
        path.unlink()
        with pytest.raises(LeaseLostError, match="removed or replaced"):
            lease.check()
        runner = SecondRunner(second, THREAD)
        new = runner.take()
        assert path.exists()
        with pytest.raises(LeaseLostError, match="removed or replaced"):
            lease.check()
    try:
        assert path.exists()
        runner.do(new.check)
    finally:
        runner.release()
    assert not path.exists()


# Faults injected at every save of a run ----------------------------------------------------


SAVES = 6
"""Saves of a run of the flow (step durability): its start; each payment's write-ahead;
each payment's result with the turn's checkpoint; the answer."""


def test_a_run_of_the_payment_flow_saves_six_times(flow: PaymentFlow) -> None:
    """The run the fault injection cuts saves SAVES times, so every save is cut once."""
    with open_store("memory://") as store:
        saved: list[list[str]] = []
        save = store.save

        def counting(thread: AgentThread) -> None:
            saved.append([type(e).__name__ for e in thread.pending_events])
            save(thread)

        store.save = counting  # type: ignore[method-assign]
        assert flow.agent(store, THREAD, "a").run("Pay twice.") == ANSWER
    assert len(saved) == SAVES, saved


@pytest.mark.parametrize("cut", range(1, SAVES + 1))
def test_a_lease_lost_at_any_save_of_a_run_leaves_nothing_after_the_loss(
    shared_url: str,
    flow: PaymentFlow,
    stores: Callable[[str], Store],
    monkeypatch: pytest.MonkeyPatch,
    cut: int,
) -> None:
    """At a run's n-th save its lease is really lost and another runner takes the
    thread (PostgreSQL: the store's pool sessions and its lease session terminated;
    SQLite: the lock file removed): the save is refused, nothing more is stored, every
    payment made is recorded with its result or open in doubt, and once the other
    runner finished the thread no payment ran under two keys and the thread verifies."""
    postgres = shared_url.startswith("postgresql:")
    first_url = f"{shared_url}?application_name={HOLDER}" if postgres else shared_url
    first, observer, second = stores(first_url), stores(shared_url), stores(shared_url)
    first.name_lease_holder(HOLDER)
    runner = SecondRunner(second, THREAD)
    saves = 0
    at_loss: dict[str, Any] = {}
    save = first.save

    def save_and_lose(thread: AgentThread) -> None:
        nonlocal saves
        saves += 1
        if saves == cut:
            at_loss["head"] = head(observer, THREAD)
            if postgres:
                terminate(shared_url, backends(shared_url, HOLDER, APPLICATION_PREFIX + HOLDER))
            else:
                lock_file(Path(shared_url.removeprefix("sqlite:///")), THREAD).unlink()
            runner.take()
        save(thread)

    monkeypatch.setattr(first, "save", save_and_lose)
    try:
        with pytest.raises(LeaseLostError):
            flow.agent(first, THREAD, "a").run("Pay twice.")
        assert saves == cut
        assert head(observer, THREAD) == at_loss["head"]
        recorded = recorded_calls(observer, THREAD)
        assert all(payment.key in recorded for payment in flow.ledger), (flow.ledger, recorded)
        assert at_loss["head"] is None or observer.verify(THREAD).ok
        taking_over = flow.agent(second, THREAD, "b")
        assert runner.do(lambda: finish(taking_over, second, THREAD)) == ANSWER
    finally:
        runner.release()
    check_takeover(flow, observer, THREAD)


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_live_worker_is_listed_whenever_its_heartbeat_rewrites_its_record(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A worker beats as fast as it can (each beat rewrites its record) while another
    process's `workers` lists the live workers again and again: every listing shows it,
    never a moment of its rewrite in which it would look gone."""
    url = (
        f"sqlite:///{tmp_path / 'threads.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    with open_store(url) as worker, open_store(url) as lister:
        worker.publish_worker(_worker_record("w-busy"))
        stop = threading.Event()

        def beat() -> None:
            while not stop.is_set():
                worker.publish_worker(_worker_record("w-busy"))

        beating = threading.Thread(target=beat)
        beating.start()
        try:
            listings = [[r.worker_id for r in lister.live_workers()] for _ in range(300)]
        finally:
            stop.set()
            beating.join()
    assert all(listed == ["w-busy"] for listed in listings), listings
