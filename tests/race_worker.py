"""A racer for the concurrency tests: agents in several processes append to one thread."""

from __future__ import annotations

from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    ThreadBusyError,
    ThreadConflictError,
    open_store,
)


def race(
    url: str, thread_id: str, racer: int, rounds: int, barrier: Barrier, results: Queue[Any]
) -> None:
    """Each round, after all racers meet, run one exchange on the thread; put wins as
    ("won", message), losses as ("lost", expected version) and runs refused while
    another racer held the thread's lease as ("busy", holder) on ``results``."""
    outcomes: list[Any] = []
    try:
        _race(url, thread_id, racer, rounds, barrier, outcomes)
    except BaseException as exc:  # report it to the test rather than die silently
        barrier.abort()
        outcomes.append(("error", f"racer {racer}: {exc!r}"))
    results.put(outcomes)


def _race(
    url: str, thread_id: str, racer: int, rounds: int, barrier: Barrier, outcomes: list[Any]
) -> None:
    with open_store(url) as store:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=lambda _: ProviderResponse(content="ok")),
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            )
        )
        for round_ in range(rounds):
            agent.restore_latest_checkpoint()
            barrier.wait(timeout=60)
            message = f"racer {racer} round {round_}"
            try:
                agent.run(message)
            except ThreadConflictError as exc:
                assert exc.thread_id == thread_id
                outcomes.append(("lost", exc.expected_version))
            except ThreadBusyError as exc:  # another racer held the run lease
                assert exc.thread_id == thread_id
                outcomes.append(("busy", exc.holder))
            else:
                outcomes.append(("won", message))
