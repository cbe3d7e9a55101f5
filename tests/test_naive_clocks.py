"""A clock that gives a time without a timezone, handed to a worker or the thread
service: its first reading is a ConfigurationError naming the clock, before a deadline is
compared with it or an event records it; never a bare TypeError from the sweep."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import Agent, AgentConfig, AgentThread, ScriptedProvider, Store, Worker, open_store
from covonaut_es._clock import EARLIEST, LATEST, AwareClock
from covonaut_es.errors import ConfigurationError
from covonaut_es.service import ThreadService
from test_review_deadlines import Clock, decisions, paused, paying

NAIVE = datetime(2026, 3, 1, 10, 0)


def naive_clock() -> datetime:
    return NAIVE


def test_a_workers_naive_clock_is_refused_naming_it_and_expires_nothing(store: Store) -> None:
    """A worker whose clock gives naive times, on a store holding a review with a
    deadline, stops with a ConfigurationError naming the clock; nothing is recorded."""
    paused(store, Clock())
    before = store.head_version("t")

    def make_config(thread_id: str) -> AgentConfig:
        return attrs.evolve(paying(store, Clock(), thread_id=thread_id).config, checkpoint=None)

    worker = Worker(store, make_config, clock=naive_clock, poll_interval=0.01)
    with pytest.raises(ConfigurationError, match=r"the clock naive_clock returned .*timezone"):
        worker.run(once=True)
    assert store.head_version("t") == before
    assert decisions(store) == []


def test_the_services_naive_clock_is_refused_naming_it(store: Store) -> None:
    """Sweeping a thread's deadlines with a service whose clock is naive is refused,
    naming the clock, and records nothing."""
    paused(store, Clock())
    before = store.head_version("t")
    service = ThreadService(store, clock=naive_clock)
    with pytest.raises(ConfigurationError, match="naive_clock"):
        service.expire_reviews("t")
    assert store.head_version("t") == before


def test_a_store_opened_with_a_naive_clock_is_refused_when_a_service_reads_it() -> None:
    """The store's clock is the service's by default: a naive one is named the same way."""
    with open_store("memory://", clock=naive_clock) as store:
        paused(store, Clock())
        with pytest.raises(ConfigurationError, match="naive_clock"):
            ThreadService(store).expire_reviews("t")


@settings(max_examples=60, deadline=None)
@given(
    when=st.datetimes(
        timezones=st.none()
        | st.just(UTC)
        | st.timezones()
        | st.builds(lambda m: timezone(timedelta(minutes=m)), st.integers(-23 * 60, 23 * 60))
    )
)
def test_any_reading_is_given_back_when_aware_and_refused_when_naive(when: datetime) -> None:
    """Property: a checked clock gives back exactly the time of an aware reading between
    EARLIEST and LATEST, and refuses a naive one, or one nearer the ends of datetime's
    range, with the typed error; never another exception."""
    clock = AwareClock(lambda: when)
    if when.utcoffset() is None:
        with pytest.raises(ConfigurationError, match="timezone-aware"):
            clock()
    elif not EARLIEST <= when <= LATEST:
        with pytest.raises(ConfigurationError, match="overflow"):
            clock()
    else:
        assert clock() is when


def test_an_agents_naive_clock_is_refused_naming_it_before_the_run_records_anything(
    store: Store,
) -> None:
    """An agent configured with a naive clock: its run is a ConfigurationError naming
    the clock, and nothing of it (nor a review deadline a worker would compare) is
    stored."""
    store.save(AgentThread.start("n", now=datetime.now(UTC)))  # begun elsewhere
    before = store.head_version("n")
    agent = paying(store, Clock(), thread_id="n")
    naive = Agent(attrs.evolve(agent.config, clock=naive_clock))
    with pytest.raises(ConfigurationError, match="naive_clock"):
        naive.run("Pay 7.")
    assert store.head_version("n") == before


def test_a_configs_clock_is_checked_and_compares_as_the_clock_it_wraps() -> None:
    """The configuration keeps the caller's clock, checked at each reading; two
    configurations of one clock and one provider are equal."""
    provider = ScriptedProvider([])
    config = AgentConfig(provider=provider, clock=naive_clock)
    assert config == AgentConfig(provider=provider, clock=naive_clock)
    assert config != AgentConfig(provider=provider)
    with pytest.raises(ConfigurationError, match="naive_clock"):
        config.clock()


# Readings near the ends of datetime's range ---------------------------------------------------

NEAR_AN_END = st.one_of(
    st.timedeltas(timedelta(0), timedelta(days=400 * 366)).map(
        lambda d: datetime.min.replace(tzinfo=UTC) + d
    ),
    st.timedeltas(timedelta(0), timedelta(days=400 * 366)).map(
        lambda d: datetime.max.replace(tzinfo=UTC) - d
    ),
)


@settings(max_examples=50, deadline=None)
@given(now=NEAR_AN_END)
def test_a_runner_clock_near_the_ends_of_time_is_a_typed_error_never_an_overflow(
    now: datetime,
) -> None:
    """A runner whose clock reads near datetime.min or datetime.max asks for a review with
    a deadline, an hour or a century away: the run gives a ConfigurationError naming the
    clock when the reading is outside EARLIEST..LATEST, and otherwise pauses for the
    review; never a bare OverflowError."""
    with open_store("memory://") as store:
        agent = paying(store, Clock(now), deadline=lambda args: timedelta(days=36_525))
        try:
            agent.run("Pay bob 40.")
        except ConfigurationError as exc:
            assert "the clock" in str(exc) and "overflow" in str(exc)
        else:
            [request] = agent.pending_reviews
            assert request.deadline == now + timedelta(days=36_525)


# A time given to a command ------------------------------------------------------------------

REFUSED_NOW = st.one_of(
    st.datetimes(timezones=st.none()),
    NEAR_AN_END.filter(lambda now: not EARLIEST <= now <= LATEST),
    # An aware time whose UTC instant is past either end of datetime's range.
    st.builds(
        lambda hours, end: end.replace(tzinfo=timezone(timedelta(hours=hours))),
        st.integers(-23, 23).filter(bool),
        st.sampled_from([datetime.min, datetime.max]),
    ),
)


@settings(max_examples=50, deadline=None)
@given(now=REFUSED_NOW, command=st.sampled_from(["fork", "abandon", "label", "clock"]))
def test_generated_times_no_clock_may_give_are_refused_by_every_command_taking_now(
    tmp_path_factory: pytest.TempPathFactory, now: datetime, command: str
) -> None:
    """Property: Store.fork, and the deprecated Store.abandon and label, given a ``now``
    a clock may not give (naive, or outside EARLIEST..LATEST, its UTC instant past
    datetime's range included), or a store whose own clock gives it, refuse it with a
    ConfigurationError and record nothing: the store's threads are still listed."""
    url = f"sqlite:///{tmp_path_factory.mktemp('now') / 'threads.db'}"
    with open_store(url) as store:
        store.save(AgentThread.start("t", now=datetime.now(UTC)))
        if command == "clock":
            with open_store(url, clock=lambda: now) as clocked, pytest.raises(ConfigurationError):
                ThreadService(clocked).abandon("t", "gone")
        else:
            arguments = {"new_thread_id": "f"} if command == "fork" else {}
            if command == "label":
                arguments["label"] = "x"
            alias = command != "fork"
            warns = pytest.warns(DeprecationWarning) if alias else contextlib.nullcontext()
            with warns, pytest.raises(ConfigurationError, match="now is"):
                getattr(store, command)("t", now=now, **arguments)
        assert [thread.thread_id for thread in store.list_threads().threads] == ["t"]
