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
from covonaut_es.domain._forks import fork_point
from test_review_queue_property import Step, World, run, steps


def waiting(store: Any, thread_id: str, version: int) -> tuple[Any, ...]:
    state = store.state_at(thread_id, version=version)
    if state.status is ThreadStatus.ABANDONED:
        return ()
    return tuple(p.interrupt for p in state.pauses if not p.resolved)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(plan=st.tuples(run, st.lists(steps, max_size=9)).map(lambda p: [p[0], *p[1]]))
# A retry asked for before a fork and begun in it, whose runner lives, dies unfound, or
# dies and is found: the retry deals with the pause the fork did not record, and a call
# left in doubt again is paused anew.
@example(plan=[("run", "", ("transfer",)), ("decide", 1, ""), ("fork", 0, 1.0), ("resume", 1)])
@example(
    plan=[
        ("run", "", ("transfer",)),
        ("decide", 1, ""),
        ("fork", 0, 1.0),
        ("resume", 1, "dies unfound"),
        ("resume", 1, "dies"),
        ("decide", 1, ""),
    ]
)
# A call in doubt sent to run again, whose runner then dies in the retry, twice.
@example(
    plan=[
        ("run", "", ("transfer",)),
        ("decide", 1, ""),
        ("resume", 0, "dies"),
        ("decide", 1, ""),
        ("resume", 0, "dies"),
    ]
)
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
            assert inherited == waiting(store, thread_id, version), (thread_id, version)
