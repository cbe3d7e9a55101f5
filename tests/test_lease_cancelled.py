"""A run lease is let go however its task ends: cancelled once, or again while it lets
the lease go (as anyio's cancel scopes and a consumer leaving a stream do), and while
the worker threads that would release it are busy."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import open_store
from covonaut_es.errors import ThreadBusyError
from covonaut_es.store import Store


def lease_is_free(store: Store, thread_id: str) -> bool:
    """Whether a runner could take the thread's run lease now (it is let go at once)."""
    try:
        with store.lease(thread_id):
            return True
    except ThreadBusyError:
        return False


async def cancelled(task: asyncio.Task[None], times: int, *, then: threading.Event) -> None:
    """Cancel ``task`` ``times``, one loop turn apart, set ``then``, and wait until it
    ends."""
    for _ in range(times):
        task.cancel()
        await asyncio.sleep(0)
    then.set()
    await asyncio.wait([task], timeout=10)
    assert task.done()


async def hold_then_cancel(store: Store, thread_id: str, cancels: int, busy: bool) -> None:
    """Hold the lease in a task, then cancel the task ``cancels`` times, one loop turn
    apart; with ``busy``, the loop's one worker thread is taken meanwhile."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    holding = asyncio.Event()

    async def run() -> None:
        async with store.alease(thread_id):
            holding.set()
            await asyncio.Event().wait()  # until cancelled

    task = asyncio.create_task(run())
    await asyncio.wait_for(holding.wait(), 10)
    blocker = threading.Event()
    if busy:
        taken = loop.run_in_executor(None, blocker.wait, 10)
    await cancelled(task, cancels, then=blocker)
    if busy:
        await taken
    await asyncio.to_thread(lambda: None)  # whatever was queued before has run


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(cancels=st.integers(min_value=1, max_value=4), busy=st.booleans())
def test_a_lease_is_let_go_however_often_its_task_is_cancelled(
    tmp_path: Path, cancels: int, busy: bool
) -> None:
    """A task holding a run lease, cancelled once or again while it lets the lease go,
    with the worker threads free or busy, leaves the lease free for the next runner."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        asyncio.run(hold_then_cancel(store, "t", cancels, busy))
        assert lease_is_free(store, "t")


async def cancel_while_taking(store: Store, thread_id: str, when: str, cancels: int) -> None:
    """Cancel a task ``cancels`` times while it takes the lease: ``before`` its worker
    thread starts, ``during`` (the thread holds the database's lock, not yet the lease
    returned), or ``after`` the thread returned it and before the task resumes."""
    leases = store._leasing.leases  # the backend every acquisition of the store goes through
    taking, go_on = threading.Event(), threading.Event()
    original = leases.try_acquire

    def try_acquire(thread_id: str) -> Any:
        taking.set()
        go_on.wait(10)
        return original(thread_id)

    leases.try_acquire = try_acquire  # type: ignore[method-assign]  # the window, held open
    try:
        task = asyncio.create_task(_take(store, thread_id))
        if when != "before":
            await asyncio.to_thread(taking.wait, 10)
        if when == "after":
            go_on.set()
            await asyncio.sleep(0.01)  # the thread returns the lease to the event loop
        await cancelled(task, cancels, then=go_on)
        # The release the cancelled acquisition left to a worker thread, once it returns.
        free = await asyncio.to_thread(_until, lambda: lease_is_free(store, thread_id))
        assert free, "the lease taken for the cancelled task was never let go"
    finally:
        leases.try_acquire = original  # type: ignore[method-assign]


async def _take(store: Store, thread_id: str) -> None:
    async with store.alease(thread_id):
        await asyncio.Event().wait()  # until cancelled


def _until(ready: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether ``ready`` becomes true within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(when=st.sampled_from(("before", "during", "after")), cancels=st.integers(1, 3))
def test_a_lease_taken_for_a_task_cancelled_while_taking_it_is_let_go(
    tmp_path: Path, when: str, cancels: int
) -> None:
    """A task cancelled while its worker thread takes the run lease (an ``arun`` under
    ``asyncio.wait_for``, a client that left) leaves the lease free for the next runner:
    the thread, which cannot be stopped, lets go what it took."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        asyncio.run(cancel_while_taking(store, "t", when, cancels))


async def end_loop_while_taking(store: Store, thread_id: str, when: str, taking: Any) -> None:
    """Start a task that takes the lease, and end the event loop (return from the main
    coroutine, so that ``asyncio.run`` cancels the task) ``before`` its worker thread
    starts, ``during`` its taking, or ``after`` it took the lease, before the task
    resumed."""
    taking.task = asyncio.create_task(_take(store, thread_id))  # left to asyncio.run's end
    if when == "before":
        threading.Timer(0.05, taking.go_on.set).start()
        return
    await asyncio.to_thread(taking.started.wait, 10)
    if when == "during":
        threading.Timer(0.05, taking.go_on.set).start()  # as the loop shuts down
        return
    taking.go_on.set()
    await asyncio.to_thread(taking.returned.wait, 10)


class _HeldOpen:
    """The window of a lease's taking, held open: ``started`` once the worker thread is
    in it, until ``go_on``; ``returned`` once the lease is taken."""

    def __init__(self, store: Store) -> None:
        self.started, self.go_on, self.returned = (threading.Event() for _ in range(3))
        self.leases = store._leasing.leases
        self.original = self.leases.try_acquire
        self.task: asyncio.Task[None] | None = None

    def try_acquire(self, thread_id: str) -> Any:
        self.started.set()
        self.go_on.wait(10)
        try:
            return self.original(thread_id)
        finally:
            self.returned.set()


@settings(
    max_examples=9,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(when=st.sampled_from(("before", "during", "after")))
def test_a_lease_taken_for_a_task_whose_event_loop_ended_is_let_go(
    tmp_path: Path, when: str
) -> None:
    """The event loop of a task taking the run lease ends (``asyncio.run`` returns, and
    cancels the task) before, while or after its worker thread takes the lease: the
    lease is let go (it was kept by this process until it exited, when the loop ended
    while the thread took it)."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        taking = _HeldOpen(store)
        taking.leases.try_acquire = taking.try_acquire  # type: ignore[method-assign]
        try:
            asyncio.run(end_loop_while_taking(store, "t", when, taking))
        finally:
            taking.leases.try_acquire = taking.original  # type: ignore[method-assign]
        assert _until(lambda: lease_is_free(store, "t")), "the lease was never let go"
