"""A run lease is let go however its task ends: cancelled once, or again while it lets
the lease go (as anyio's cancel scopes and a consumer leaving a stream do), and while
the worker threads that would release it are busy."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0)
    blocker.set()
    await asyncio.wait([task], timeout=10)
    assert task.done()
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
