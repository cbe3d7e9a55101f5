"""The tool calls running in this process: what a worker's heartbeat reports.

A call is listed from the moment its function starts until it returns, also after its
timeout ran out and its run went on without it (Python cannot stop a blocking function,
so such a call keeps its thread): a liveness probe then sees it past its deadline.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import timedelta

from covonaut_es._clock import utc_now
from covonaut_es.store import CallRunning

_LOCK = threading.Lock()
_RUNNING: dict[int, CallRunning] = {}


@contextlib.contextmanager
def listed(
    thread_id: str, tool_call_id: str, tool_name: str, timeout: float | None
) -> Iterator[None]:
    """List a call as running for the block."""
    started = utc_now()
    call = CallRunning(
        thread_id=thread_id,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        started_at=started,
        deadline=None if timeout is None else started + timedelta(seconds=timeout),
    )
    key = id(call)
    with _LOCK:
        _RUNNING[key] = call
    try:
        yield
    finally:
        with _LOCK:
            del _RUNNING[key]


def running_calls() -> tuple[CallRunning, ...]:
    """The calls running in this process now, oldest first."""
    with _LOCK:
        calls = list(_RUNNING.values())
    return tuple(sorted(calls, key=lambda c: c.started_at))
