"""What a fork inherits agrees with the thread at every version: the interrupts a fork's
first event records for the projections (read from the tail of its parent's stream) are
exactly the pauses the parent's aggregate, folded to that version, says wait for a
person, in order. Checked at every version of threads driven through generated runs,
pauses, decisions, retries, settlements, forks and abandonment."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import ThreadStatus, open_store
from covonaut_es.domain import AgentThread, PauseKind
from covonaut_es.domain._forks import fork_point
from test_review_queue_property import Step, World, run, steps


def waiting(store: Any, thread_id: str, version: int) -> tuple[Any, ...]:
    state = store.state_at(thread_id, version=version)
    if state.status is ThreadStatus.ABANDONED:
        return ()
    return tuple(p.interrupt for p in state.pauses if not p.resolved)


def known_gap(events: list[Any], interrupts: tuple[Any, ...]) -> tuple[Any, ...]:
    """``interrupts`` without the one gap ADR 0060 lists: a fork records only the pauses
    still waiting, so a call in doubt whose retry was asked for before the fork, and
    whose retry's start revives its pause after it, waits in the thread only."""
    forks = [n for n, e in enumerate(events) if isinstance(e, AgentThread.Forked)]
    if not forks:
        return interrupts
    retried = {
        e.tool_call_id for e in events[: forks[-1]] if isinstance(e, AgentThread.RetryRequested)
    }
    return tuple(
        i for i in interrupts if not (i.kind is PauseKind.IN_DOUBT and i.tool_call_id in retried)
    )


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(plan=st.tuples(run, st.lists(steps, max_size=9)).map(lambda p: [p[0], *p[1]]))
# A call in doubt sent to run again, whose retry has begun: it is in doubt again.
# A retry asked for before a fork and begun in it: the gap ADR 0060 lists.
@example(plan=[("run", "", ("transfer",)), ("decide", 1, ""), ("fork", 0, 1.0), ("resume", 1)])
@example(
    plan=[
        ("run", "", ("transfer", "ask")),
        ("decide", 1, ""),
        ("resume", 0),
        ("decide", 0, ""),
    ]
)
def test_a_fork_inherits_exactly_the_pauses_waiting_at_its_version(plan: list[Step]) -> None:
    """Property: for every thread and every version of it, ``fork_point`` over the
    stream up to that version gives the interrupts the folded thread says wait."""
    store = open_store("memory://")
    world = World(store, "p")
    for name, *args in plan:
        getattr(world, name)(*args)
        world.note_heads()
    for thread_id in store.thread_ids():
        events = list(store.history(thread_id))
        for n, event in enumerate(events):
            version = event.originator_version
            inherited, abandoned = fork_point(reversed(events[: n + 1]))
            state = store.state_at(thread_id, version=version)
            assert abandoned is (state.status is ThreadStatus.ABANDONED), (thread_id, version)
            expected = waiting(store, thread_id, version)
            read = events[: n + 1]
            assert known_gap(read, inherited) == known_gap(read, expected), (thread_id, version)
