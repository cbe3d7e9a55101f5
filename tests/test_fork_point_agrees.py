"""What a fork inherits agrees with the thread at every version: the interrupts a fork's
first event records for the projections (read from the tail of its parent's stream) are
exactly the pauses the parent's aggregate, folded to that version, says wait for a
person, in order. Checked at every version of threads driven through generated runs,
pauses, decisions, retries, settlements, forks and abandonment."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import ThreadStatus, open_store
from covonaut_es.domain import AgentThread, Interrupt, PauseKind
from covonaut_es.domain._forks import fork_point
from covonaut_es.domain._pauses import in_doubt_data
from covonaut_es.errors import ThreadStateError
from test_review_queue_property import Step, World, run, steps

NOW = datetime(2026, 12, 1, tzinfo=UTC)


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
# A call in doubt whose runner was not found dead, sent to run again, then the thread
# paused on its calls in doubt, in it or in a fork of it: the retry asked for deals with
# the call, which waits for a runner and is not paused.
@example(plan=[("run", "", ("transfer",), False), ("retry", 0), ("pause", 0)])
@example(plan=[("run", "", ("transfer",), False), ("retry", 0), ("fork", 0, 1.0), ("pause", 1)])
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


def test_a_pause_in_doubt_stored_after_a_retry_asked_for_is_inherited_as_the_thread_reads_it() -> (
    None
):
    """A thread written before a call whose retry was asked for could not be paused holds
    that pause after the request: the thread reads it as dealt with (the retry stands),
    and so does a fork's record of what it inherits, and the fork loads."""
    store = open_store("memory://")
    world = World(store, "p")
    world.run("", ("transfer",), False)
    world.retry(0)
    (thread_id,) = world.threads
    thread = store.load(thread_id)
    (pending,) = thread.in_doubt
    with pytest.raises(ThreadStateError, match="to be run again"):
        thread.pause_in_doubt(pending.call.id, "checking", now=NOW)
    # As the code before wrote it: the event, past the command's refusal.
    data = in_doubt_data(pending, thread.reviews, paused_at=thread.version + 1)
    interrupt = Interrupt("checking", data, pending.call.id, pending.call.name, PauseKind.IN_DOUBT)
    thread.trigger_event(AgentThread.Interrupted, interrupt=interrupt, timestamp=NOW)
    store.save(thread)
    events = list(store.history(thread_id))
    assert fork_point(reversed(events)) == ((), False)
    assert waiting(store, thread_id, thread.version) == ()
    fork_id = store.fork(thread_id)
    assert store.load(fork_id).pauses == store.load(thread_id).pauses
