"""A closed store refuses every method with StoreClosedError, on every back end, and what
it stored before stays stored."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any

import pytest
from eventsourcing.persistence import ConnectionPoolClosedError, OperationalError

from covonaut_es import Store, open_store
from covonaut_es.errors import StoreClosedError, StoreUnavailableError, ThreadConflictError
from covonaut_es.store._read_only import WriteGuard
from support import conversation


def _public_methods() -> list[str]:
    return sorted(
        name
        for name, member in vars(Store).items()
        if not name.startswith("_") and name != "close" and inspect.isfunction(member)
    )


def test_every_public_method_of_a_closed_store_is_refused(store_url: str) -> None:
    """Each public method but ``close``, whatever its arguments, and each property
    raises StoreClosedError
    (a StoreUnavailableError) naming the closed store: one in memory went on reading and
    writing (its threads gone), and a closed SQLite store raised eventsourcing's untyped
    ``ConnectionPoolClosedError``, which the error still is, for code that caught that.
    Reopened, the store still holds what it stored."""
    store = open_store(store_url)
    store.write_state("kept", {"a": 1})
    store.close()
    methods = _public_methods()
    assert {"exists", "submit", "lease", "alease", "fork", "ping", "thread_ids"} <= set(methods)
    for name in methods:
        parameters = inspect.signature(getattr(Store, name)).parameters.values()
        required = [
            p
            for p in parameters
            if p.name != "self" and p.default is inspect.Parameter.empty and p.kind != p.VAR_KEYWORD
        ]
        positional = ["t" for p in required if p.kind != p.KEYWORD_ONLY]
        keywords = {p.name: "t" for p in required if p.kind == p.KEYWORD_ONLY}
        method = getattr(Store, name)
        assert inspect.iscoroutinefunction(method) == inspect.iscoroutinefunction(
            method.__wrapped__
        ), name
        with pytest.raises(StoreClosedError, match="is closed") as refused:
            called = getattr(store, name)(*positional, **keywords)
            if inspect.iscoroutine(called):
                asyncio.run(called)
        assert isinstance(refused.value, StoreUnavailableError | ConnectionPoolClosedError)
    properties = sorted(
        name
        for name, member in vars(Store).items()
        if not name.startswith("_") and isinstance(member, property)
    )
    assert {"database", "lease_holder", "submissions"} <= set(properties)
    for name in properties:
        with pytest.raises(StoreClosedError, match="is closed"):
            getattr(store, name)
    store.close()  # closing again is allowed
    if not store_url.startswith("memory"):
        with open_store(store_url) as reopened:
            assert reopened.read_state("kept") == {"a": 1}


@pytest.mark.parametrize("count", [3, 700])
def test_a_listing_begun_before_its_store_was_closed_is_refused_as_it_goes_on(
    store_url: str, count: int
) -> None:
    """``thread_ids()`` begun before ``close()``: the next id read raises StoreClosedError
    (a SQLite store's read of its next page raised eventsourcing's untyped error, and a
    store in memory went on listing)."""
    store = open_store(store_url)
    conversation(store, "t0", 1)
    for n in range(1, count):
        store.fork("t0", new_thread_id=f"t{n}")
    ids = store.thread_ids()
    assert next(ids) == "t0"
    store.close()
    with pytest.raises(StoreClosedError, match="is closed"):
        list(ids)


def closed_during(store: Store, part: Any, name: str, call: Callable[[], object]) -> object:
    """What ``call`` gives (or raises), run in a thread while ``store`` is closed: its
    ``part.name`` is held open until the store is."""
    original = getattr(part, name)
    entered, go_on = threading.Event(), threading.Event()

    def held_open(*args: Any) -> Any:
        entered.set()
        go_on.wait(10)
        return original(*args)

    setattr(part, name, held_open)
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert entered.wait(10)
    store.close()
    go_on.set()
    runner.join(10)
    (found,) = outcome
    return found


def test_a_lease_being_taken_when_its_store_is_closed_is_let_go(shared_url: str) -> None:
    """A store closed while a thread takes a run lease through it: the taking raises
    StoreClosedError, and the lease is free for another store at once (the lock was
    kept, by a back end nobody would close again, until the process exited)."""
    store = open_store(shared_url)

    def take() -> None:
        with store.lease("t"):
            pass

    found = closed_during(store, store._leasing.leases, "try_acquire", take)
    assert isinstance(found, StoreClosedError), found
    with open_store(shared_url) as other, other.lease("t"):
        pass


def test_a_part_of_a_closed_store_kept_past_close_writes_nothing(store_url: str) -> None:
    """The store's submissions, kept past ``close()``, refuse a write with
    StoreClosedError (a store in memory took it), and the store, reopened, holds none."""
    store = open_store(store_url)
    submissions = store.submissions
    store.close()
    with pytest.raises(StoreClosedError, match="is closed"):
        submissions.submit("t", "Go.")
    if not store_url.startswith("memory"):
        with open_store(store_url) as reopened:
            assert reopened.submissions.submitted("t").waiting() is None


def test_a_call_the_store_is_closed_under_raises_store_closed_error(shared_url: str) -> None:
    """A read under way when another thread closes the store raises StoreClosedError,
    whichever error its back end's closed pool gave (eventsourcing's untyped
    ``ConnectionPoolClosedError`` on SQLite, an ``OperationalError`` on PostgreSQL)."""
    store = open_store(shared_url)
    store.submit("t", "Go.")
    found = closed_during(store, store._records, "log_position", store.last_log_position)
    assert isinstance(found, StoreClosedError), found


def test_a_lease_entered_after_its_store_was_closed_is_refused(store_url: str) -> None:
    """A lease asked for before ``close()`` and entered after it raises StoreClosedError,
    and no back end of leases is made again (on PostgreSQL it connected anew, and could
    hang on a server that did not answer)."""
    store = open_store(store_url)
    asked = store.lease("t")
    store.close()
    with pytest.raises(StoreClosedError, match="is closed"), asked:
        pass
    assert store._leasing._lease_backend is None


@pytest.mark.parametrize(
    "error",
    [ThreadConflictError("taken", thread_id="t", expected_version=0), ValueError("bad")],
)
def test_an_error_of_a_call_itself_is_never_taken_for_the_close(error: Exception) -> None:
    """An error of the call's own (a conflict, a bad value) raised after the store was
    closed stays what it is; only a back end's failure to reach its database becomes
    StoreClosedError."""
    guard = WriteGuard("memory://", read_only=False)
    guard.closed = True
    guard.refuse_under(error, "the call")  # returns: the caller raises the error itself
    with pytest.raises(StoreClosedError) as refused:
        guard.refuse_under(OperationalError("the pool was closed"), "the call")
    assert isinstance(refused.value.__cause__, OperationalError)
