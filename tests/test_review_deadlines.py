"""Review deadlines: a review past its deadline expires failing closed, a late decision
is refused and recorded nowhere, expiry is recorded once however many workers sweep, and
the thread goes on as after a rejection; on every store."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deadline_app
from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderRequest,
    ProviderResponse,
    ReviewExpiredError,
    Role,
    ScriptedProvider,
    StaleReviewError,
    Store,
    ThreadStatus,
    Tool,
    ToolContext,
    Worker,
    open_store,
)
from covonaut_es._clock import CLOCK_SKEW_BOUND
from covonaut_es.domain import Decision, thread_aggregate_id
from covonaut_es.errors import ClockOutOfStepError, StoreUnavailableError
from covonaut_es.service import ThreadService, review_submission
from covonaut_es.workers import ReviewNotice
from support import answer, call
from test_approvals import ALICE, VERIFIER

ROOT = Path(__file__).resolve().parent.parent
OBJECT: dict[str, Any] = {"type": "object"}
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
RITA = VERIFIER.issue_token("rita", ttl_seconds=3600)
PAY_40 = '{"amount": 40, "to": "bob"}'


@attrs.define
class Clock:
    """A clock the test moves: every reading gives the same time until it is moved."""

    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def paying(
    store: Store,
    clock: Clock,
    *,
    deadline: Any = timedelta(minutes=30),
    paid: list[dict[str, Any]] | None = None,
    thread_id: str = "t",
    run_on_approval: bool = False,
) -> Agent:
    """An agent whose model asks to pay 40 to bob (approval required, with ``deadline``),
    asks once more after a refusal of any kind, and answers with the last result."""

    def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if paid is not None:
            paid.append(args)
        return {"paid": args["amount"]}

    def model(request: ProviderRequest) -> ProviderResponse:
        last = request.messages[-1]
        asked = sum(m.role is Role.ASSISTANT for m in request.messages)
        if last.role is Role.TOOL and (last.content.startswith("{") or asked >= 2):
            return answer(f"Done: {last.content}")
        return call((f"p{asked}", "pay", PAY_40))

    tool = Tool(
        "pay",
        "Pay",
        OBJECT,
        pay,
        requires_approval=True,
        review_deadline=deadline,
        run_on_approval=run_on_approval,
    )
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[tool],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            reviewer_verifier=VERIFIER,
            clock=clock,
        )
    )


def paused(store: Store, clock: Clock, **options: Any) -> tuple[Agent, str]:
    agent = paying(store, clock, **options)
    assert agent.run("Pay bob 40.") == ""
    [request] = agent.pending_reviews
    return agent, request.review_id


def decisions(store: Store, thread_id: str = "t") -> list[AgentThread.ReviewDecided]:
    return [e for e in store.history(thread_id) if isinstance(e, AgentThread.ReviewDecided)]


# The deadline of a review -------------------------------------------------------------------


@pytest.mark.usefixtures("simulated_time")
def test_a_tools_deadline_is_recorded_with_the_review_and_shown_in_its_data(
    store: Store,
) -> None:
    """The request carries the time of the request plus the tool's deadline; the
    interrupt's data (what the queue and the inbox show) carries it as ISO text."""
    clock = Clock()
    agent, _ = paused(store, clock)
    [request] = agent.pending_reviews
    assert request.deadline == T0 + timedelta(minutes=30)
    assert agent.interrupted is not None
    shown = datetime.fromisoformat(agent.interrupted.data["deadline"])
    assert shown == T0 + timedelta(minutes=30)


@pytest.mark.usefixtures("simulated_time")
def test_a_deadline_policy_decides_per_call_and_one_that_fails_expires_at_once(
    store: Store,
) -> None:
    """A policy's timedelta is the deadline; None waits as long as it takes; a policy
    that raises, or gives what is no positive timedelta of at most a hundred years (one
    that would overflow the time it ends among them), fails closed: the review's deadline
    is the time it was asked for."""
    cases: dict[str, tuple[Callable[[dict[str, Any]], Any], datetime | None]] = {
        "big": (lambda args: timedelta(hours=args["amount"]), T0 + timedelta(hours=40)),
        "none": (lambda args: None, None),
        "raises": (lambda args: 1 / 0, T0),
        "negative": (lambda args: timedelta(seconds=-5), T0),
        "wrong-type": (lambda args: 30, T0),
        "overflowing": (lambda args: timedelta.max, T0),
        "past-a-century": (lambda args: timedelta(days=36_526), T0),
    }
    for thread_id, (policy, expected) in cases.items():
        agent, _ = paused(store, Clock(), deadline=policy, thread_id=thread_id)
        assert agent.pending_reviews[0].deadline == expected, thread_id


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wait=st.one_of(st.timedeltas(), st.none(), st.integers(), st.floats(), st.text()))
def test_whatever_a_deadline_policy_gives_the_review_is_asked_for_and_fails_closed(
    wait: Any,
) -> None:
    """Whatever a deadline policy returns, the run pauses on the review (never a crash,
    never a call left in doubt): its deadline is the policy's when that is a wait of at
    most a hundred years, none for None, else the time it was asked for."""
    with open_store("memory://") as store:
        agent, _ = paused(store, Clock(), deadline=lambda args: wait)
        [request] = agent.pending_reviews
        assert agent.in_doubt == ()
    if wait is None:
        assert request.deadline is None
    elif isinstance(wait, timedelta) and timedelta(0) < wait <= timedelta(days=36_525):
        assert request.deadline == T0 + wait
    else:
        assert request.deadline == T0


def test_a_tool_refuses_a_deadline_that_is_not_positive() -> None:
    """``review_deadline`` takes a positive timedelta of at most a hundred years (one
    near ``timedelta.max`` would overflow the time it ends), a policy or None."""
    for bad in (timedelta(0), timedelta(seconds=-1), 30, timedelta.max, timedelta(days=36_526)):
        with pytest.raises(ValueError, match="review_deadline must be a positive timedelta"):
            Tool("pay", "Pay", OBJECT, lambda ctx, args: None, review_deadline=bad)


# Expiry and late decisions ------------------------------------------------------------------


@pytest.mark.usefixtures("simulated_time")
def test_a_decision_after_the_deadline_is_refused_and_recorded_nowhere(store: Store) -> None:
    """Deciding at or past the deadline, by the service's clock, raises
    ReviewExpiredError (a StaleReviewError) naming both times; nothing is recorded."""
    clock = Clock()
    _, review_id = paused(store, clock)
    commands = ThreadService(store, verifier=VERIFIER, clock=clock)
    before = store.head_version("t")
    clock.advance(30 * 60)
    with pytest.raises(ReviewExpiredError, match="expired at 2026-03-01T09:30:00") as raised:
        commands.decide(review_id, review_submission("approve"), reviewer=commands.reviewer(RITA))
    assert isinstance(raised.value, StaleReviewError)
    assert "this decision was not recorded" in str(raised.value)
    assert store.head_version("t") == before and decisions(store) == []


@pytest.mark.usefixtures("simulated_time")
def test_expiry_fails_closed_and_the_thread_goes_on_as_after_a_rejection(store: Store) -> None:
    """The sweep records one ReviewExpired with the call's result saying it did not run;
    the resumed model's new call of the same operation is refused, not reviewed again,
    and the tool never runs."""
    clock, paid = Clock(), []
    _, review_id = paused(store, clock, paid=paid)
    commands = ThreadService(store, clock=clock)
    clock.advance(29 * 60)
    assert commands.expire_reviews("t") == ()
    clock.advance(60)
    [expired] = commands.expire_reviews("t")
    assert (expired.review_id, expired.decision, expired.reviewer) == (
        review_id,
        Decision.EXPIRED,
        "",
    )
    assert commands.expire_reviews("t") == ()
    [event] = decisions(store)
    assert isinstance(event, AgentThread.ReviewExpired)
    assert event.deadline == T0 + timedelta(minutes=30)
    output = paying(store, clock, paid=paid).resume()
    assert output.startswith("Done: Not executed: review ") and "expired" in output
    assert paid == []
    state = store.state_at("t")
    assert state.status is ThreadStatus.FINISHED
    results = [m.content for m in state.messages if m.role is Role.TOOL]
    assert results[0].startswith(f"Expired (review {review_id}): no reviewer decided by ")
    assert results[0].endswith("The operation did not run.")
    assert not any(r.pending for r in state.reviews)


def test_an_abandoned_thread_expires_nothing(store: Store) -> None:
    """A thread given up decides none of its reviews, so none expires."""
    clock = Clock()
    paused(store, clock)
    commands = ThreadService(store, clock=clock)
    commands.abandon("t", "customer left")
    clock.advance(3600)
    assert commands.expire_reviews("t") == ()
    assert decisions(store) == []


@pytest.mark.usefixtures("simulated_time")
def test_a_fork_inherits_the_deadline_and_expires_on_its_own(store: Store) -> None:
    """A fork that inherited a pending review expires it in its own stream; the parent's
    review stays pending until swept itself."""
    clock = Clock()
    paused(store, clock)
    store.fork("t", new_thread_id="f")
    commands = ThreadService(store, clock=clock)
    clock.advance(3600)
    [expired] = commands.expire_reviews("f")
    assert expired.thread_id == "f"
    assert decisions(store, "t") == [] and len(decisions(store, "f")) == 1


@pytest.mark.usefixtures("simulated_time")
def test_the_queue_shows_the_deadline_and_drops_the_review_once_expired(store: Store) -> None:
    """The reviewer queue's item carries the deadline; an expiry removes it, as any
    decision does."""
    from covonaut_es.projections import ReviewQueue

    clock = Clock()
    queue = ReviewQueue(store.url)
    with queue.follow():
        paused(store, clock)
        queue.wait_until_current(store)
        [item] = queue.pending()
        assert item.deadline == T0 + timedelta(minutes=30)
        clock.advance(3600)
        ThreadService(store, clock=clock).expire_reviews("t")
        queue.wait_until_current(store)
        assert queue.pending() == ()
    queue.close()


@settings(max_examples=60, deadline=None)
@given(shown=st.one_of(st.text(max_size=40), st.integers(), st.none(), st.datetimes().map(str)))
def test_a_queued_deadline_read_from_stored_data_is_a_time_with_its_offset_or_none(
    shown: Any,
) -> None:
    """Whatever a stored pause's data holds as its deadline, the queue item reads it as
    a time with its offset, or as none; it never raises."""
    from covonaut_es.domain import PauseKind
    from covonaut_es.projections import PendingReview

    item = PendingReview(
        thread_id="t",
        item_id="r",
        kind=PauseKind.REVIEW,
        review_id="r",
        tool_name="pay",
        reason="why",
        data={"deadline": shown},
        requested_at=T0,
    )
    found = item.deadline
    assert found is None or found.tzinfo is not None


_STEPS = st.lists(
    st.tuples(st.integers(0, 400), st.sampled_from(["approve", "reject", "sweep"])),
    min_size=1,
    max_size=6,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wait=st.integers(1, 900), steps=_STEPS, run_on_approval=st.booleans())
def test_generated_clock_steps_never_record_a_late_decision_nor_run_an_expired_call(
    wait: int, steps: list[tuple[int, str]], run_on_approval: bool
) -> None:
    """Over any deadline and any steps of the clock between decisions and sweeps, for a
    call the model asks for again or one its approval runs: a decision is recorded only
    before the deadline, an expiry only at or after it, at most one of them; a refused
    decision records nothing; resuming runs the call exactly when it was approved."""
    with open_store("memory://") as store:
        clock, paid = Clock(), []
        options = {"paid": paid, "run_on_approval": run_on_approval}
        _, review_id = paused(store, clock, deadline=timedelta(seconds=wait), **options)
        deadline = T0 + timedelta(seconds=wait)
        commands = ThreadService(store, verifier=VERIFIER, clock=clock)
        rita = commands.reviewer(RITA)
        for advance, action in steps:
            clock.advance(advance)
            was_pending, late = not decisions(store), clock.now >= deadline
            if action == "sweep":
                expired = commands.expire_reviews("t")
                assert len(expired) == (1 if was_pending and late else 0)
                continue
            submission = review_submission(action, text="no" if action == "reject" else "")
            try:
                commands.decide(review_id, submission, reviewer=rita)
            except ReviewExpiredError:
                expired_before = any(
                    isinstance(e, AgentThread.ReviewExpired) for e in decisions(store)
                )
                assert late and (was_pending or expired_before)
            except StaleReviewError:
                assert not was_pending
            else:
                assert was_pending and not late
        recorded = decisions(store)
        assert len(recorded) <= 1
        for event in recorded:
            if isinstance(event, AgentThread.ReviewExpired):
                assert event.timestamp >= deadline
            else:
                assert event.timestamp < deadline
        if recorded:
            paying(store, clock, **options).resume()
        approved = bool(recorded) and recorded[0].decision is Decision.APPROVED
        assert paid == ([{"amount": 40, "to": "bob"}] if approved else [])


# Sweepers -----------------------------------------------------------------------------------


def sweep_together(stores: tuple[Store, Store], thread_id: str, clock: Clock) -> list[int]:
    """Sweep the thread from both stores at once, each sweep's clock waiting at its
    first reading (after the load, before the save) for the other; how many expiries
    each recorded."""
    meet = threading.Barrier(2)
    recorded: list[int] = []
    errors: list[BaseException] = []

    def sweep(store: Store) -> None:
        read = [False]

        def meeting_clock() -> datetime:
            if not read[0]:
                read[0] = True
                meet.wait(timeout=60)
            return clock()

        try:
            recorded.append(
                len(ThreadService(store, clock=meeting_clock).expire_reviews(thread_id))
            )
        except BaseException as exc:  # reported below
            errors.append(exc)

    sweepers = [threading.Thread(target=sweep, args=(store,)) for store in stores]
    for sweeper in sweepers:
        sweeper.start()
    for sweeper in sweepers:
        sweeper.join()
    assert errors == []
    return recorded


@pytest.mark.usefixtures("simulated_time")
def test_concurrent_sweeps_record_each_expiry_once(shared_url: str) -> None:
    """Two services on two connections sweep a thread at the same moment: both load it
    before either saves, so one save conflicts and its retry from the head finds the
    review expired. Each review expires exactly once."""
    clock = Clock()
    thread_ids = [f"t{i}" for i in range(6)]
    with open_store(shared_url) as first, open_store(shared_url) as second:
        for thread_id in thread_ids:
            paused(first, clock, thread_id=thread_id)
        clock.advance(3600)
        for thread_id in thread_ids:
            assert sorted(sweep_together((first, second), thread_id, clock)) == [0, 1]
            [event] = decisions(first, thread_id)
            assert isinstance(event, AgentThread.ReviewExpired)


@pytest.mark.slow
def test_two_worker_processes_expire_each_review_once_and_never_pay(
    shared_url: str, tmp_path: Path
) -> None:
    """Two ``covonaut-es worker --once`` processes on one store find reviews past their
    deadline: each is expired exactly once, each thread is resumed to its answer as
    after a rejection, and the payment never runs."""
    ledger = tmp_path / "ledger"
    thread_ids = [f"t{i}" for i in range(12)]
    with open_store(shared_url) as store:
        for thread_id in thread_ids:
            config = deadline_app.make_config(thread_id)
            settings_ = CheckpointSettings(store=store, thread_id=thread_id)
            agent = Agent(attrs.evolve(config, checkpoint=settings_))
            assert agent.run("Pay 5.") == ""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
            "DEADLINE_TEST_LEDGER": str(ledger),
        }
        command = [sys.executable, "-m", "covonaut_es", "worker", "--store", shared_url]
        command += ["--app", "deadline_app:make_config", "--once", "--concurrency", "2"]
        workers = [
            subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)
        ]
        for worker in workers:
            _, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err
        for thread_id in thread_ids:
            [event] = decisions(store, thread_id)
            assert isinstance(event, AgentThread.ReviewExpired)
            state = store.state_at(thread_id)
            assert state.status is ThreadStatus.FINISHED, thread_id
            assert state.messages[-1].content.startswith("Finished: Expired (review ")
    assert not ledger.exists()


@pytest.mark.usefixtures("simulated_time")
def test_a_worker_notes_a_near_deadline_once_and_sends_both_notices(store: Store) -> None:
    """With ``notice_lead``, a worker records ReviewDeadlineNear once when the deadline
    is that near, and its notifier gets the request's notice and that one, in order,
    each with a key of its own; past the deadline it expires the review and resumes the
    thread to its answer."""
    clock, got = Clock(), []
    paused(store, clock)

    def make_config(thread_id: str) -> AgentConfig:
        agent = paying(store, clock, thread_id=thread_id)
        return attrs.evolve(agent.config, checkpoint=None)

    def worker() -> Worker:
        return Worker(
            store,
            make_config,
            notifier=got.append,
            notice_lead=timedelta(minutes=10),
            clock=clock,
            poll_interval=0.01,
        )

    worker().run(once=True)
    assert [n.kind for n in got] == ["review_requested"]
    clock.advance(21 * 60)
    worker().run(once=True)
    worker().run(once=True)
    near = [e for e in store.history("t") if isinstance(e, AgentThread.ReviewDeadlineNear)]
    assert len(near) == 1 and near[0].deadline == T0 + timedelta(minutes=30)
    assert [n.kind for n in got] == ["review_requested", "deadline_near"]
    assert all(isinstance(n, ReviewNotice) for n in got)
    assert len({n.idempotency_key for n in got}) == 2
    assert got[1].deadline == T0 + timedelta(minutes=30) and got[1].thread_id == "t"
    clock.advance(10 * 60)
    worker().run(once=True)
    [event] = decisions(store)
    assert isinstance(event, AgentThread.ReviewExpired)
    assert store.state_at("t").status is ThreadStatus.FINISHED
    assert [n.kind for n in got] == ["review_requested", "deadline_near"]


# The inbox ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("simulated_time")
def test_the_inbox_shows_the_deadline_and_refuses_a_late_decision_over_http(
    shared_url: str,
) -> None:
    """The queue shows a review's deadline; past it (the inbox's service reads the
    system clock), a decision over the JSON API is 409 saying it expired and records no
    decision but the review's expiry, as a worker's sweep would; the review page then
    shows it expired, offering no decision, and a form posted from a page opened before
    is answered by that page with the refusal as an alert."""
    from inbox_support import current, inbox_client, sign_in

    with open_store(shared_url) as store:
        _, review_id = paused(store, Clock())  # asked in March 2026: long expired now
        version = store.state_at("t").version
        with inbox_client(store) as client:
            current(client)
            auth = {"Authorization": f"Bearer {ALICE}"}
            [listed] = client.get("/api/reviews", headers=auth).json()
            assert datetime.fromisoformat(listed["deadline"]) == T0 + timedelta(minutes=30)
            late = client.post(f"/api/reviews/{review_id}/approve", headers=auth, json={})
            assert late.status_code == 409, late.text
            assert "expired at 2026-03-01T09:30:00" in late.text
            assert "this decision was not recorded" in late.text
            [expired] = decisions(store)
            assert isinstance(expired, AgentThread.ReviewExpired)
            assert store.state_at("t").version > version
            csrf = sign_in(client, ALICE)
            page = client.get("/review", params={"id": review_id, "thread": "t"}).text
            assert 'id="approve-form"' not in page and "Decided: expired" in page
            form = {"review": review_id, "thread": "t", "csrf": csrf, "action": "approve"}
            refused = client.post("/decide", data=form, headers={"Origin": "http://inbox.test"})
            assert refused.status_code == 409, refused.text
            assert 'role="alert"' in refused.text
        assert decisions(store) == [expired]


@pytest.mark.usefixtures("simulated_time")
def test_the_inbox_records_the_expiry_of_a_review_opened_past_its_deadline(
    shared_url: str,
) -> None:
    """A review page opened past the deadline, before any worker swept: the inbox
    records the expiry (once, however often the page is opened) and shows the review
    expired, with no form to decide it; the queue no longer lists it."""
    from inbox_support import current, inbox_client, sign_in

    with open_store(shared_url) as store:
        _, review_id = paused(store, Clock())  # asked in March 2026: long expired now
        with inbox_client(store) as client:
            current(client)
            sign_in(client, ALICE)
            for _ in range(2):
                page = client.get("/review", params={"id": review_id, "thread": "t"}).text
                assert 'id="approve-form"' not in page and "Decided: expired" in page
            auth = {"Authorization": f"Bearer {ALICE}"}
            assert client.get("/api/reviews", headers=auth).json() == []
        [expired] = decisions(store)
        assert isinstance(expired, AgentThread.ReviewExpired)


# Clocks out of step, and deadlines near the ends of time -----------------------------------------


def in_step_clock() -> Clock:
    return Clock(datetime.now(UTC))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(offset=st.integers(-2 * 86_400, 2 * 86_400))
def test_generated_worker_clock_offsets_never_expire_a_review_before_its_deadline(
    shared_url: str, offset: int
) -> None:
    """A runner in step with the database asks for a review due in an hour; a worker
    whose clock is ``offset`` seconds off sweeps: no expiry is recorded before the
    deadline by the database's clock (give or take CLOCK_SKEW_BOUND), and an approval
    on time by it is recorded."""
    thread_id = f"skew-{uuid.uuid4().hex[:8]}"
    with open_store(shared_url) as store:
        paused(store, in_step_clock(), deadline=timedelta(hours=1), thread_id=thread_id)

        def make_config(name: str) -> AgentConfig:
            agent = paying(store, in_step_clock(), thread_id=name)
            return attrs.evolve(agent.config, checkpoint=None)

        def skewed() -> datetime:
            return datetime.now(UTC) + timedelta(seconds=offset)

        Worker(store, make_config, clock=skewed, poll_interval=0.01).run(once=True)
        database_now = store._records.database_now()
        assert database_now is not None
        for expired in decisions(store, thread_id):
            assert expired.deadline is not None
            assert expired.deadline <= database_now + CLOCK_SKEW_BOUND
        [review] = store.load(thread_id).reviews.pending
        commands = ThreadService(store, verifier=VERIFIER)
        commands.decide(
            review.request.review_id,
            review_submission("approve"),
            reviewer=commands.reviewer(RITA),
        )


@pytest.mark.usefixtures("simulated_time")
def test_an_expiry_names_when_it_was_recorded_and_by_whose_clock(store: Store) -> None:
    """A late decision is refused with a ReviewExpiredError naming the deadline, when
    the expiry was recorded and whose clock recorded it."""
    clock = Clock()
    _, review_id = paused(store, clock)
    store.name_lease_holder("worker w-1")
    clock.advance(3600)
    ThreadService(store, clock=clock).expire_reviews("t")
    commands = ThreadService(store, verifier=VERIFIER, clock=clock)
    with pytest.raises(ReviewExpiredError) as raised:
        commands.decide(review_id, review_submission("approve"), reviewer=commands.reviewer(RITA))
    assert "expired at 2026-03-01T09:30:00+00:00" in str(raised.value)
    assert "recorded at 2026-03-01T10:00:00+00:00 by the clock of worker w-1" in str(raised.value)


FAR = timedelta(days=400 * 366)


@settings(max_examples=40, deadline=None)
@given(
    deadline=st.one_of(
        st.timedeltas(timedelta(0), FAR).map(lambda d: datetime.min.replace(tzinfo=UTC) + d),
        st.timedeltas(timedelta(0), FAR).map(lambda d: datetime.max.replace(tzinfo=UTC) - d),
    ),
    lead=st.timedeltas(timedelta(seconds=1), timedelta(days=36_525)),
)
def test_generated_deadlines_near_the_ends_of_time_never_stop_a_worker(
    deadline: datetime, lead: timedelta
) -> None:
    """A deadline from the log near datetime.min or datetime.max (another writer's), with
    any notice lead, is compared without overflow: the worker's sweep goes on and
    Worker.run returns; the thread's own reviews judge the same without overflow."""
    with open_store("memory://") as store:
        clock = Clock()
        paused(store, clock)

        def make_config(name: str) -> AgentConfig:
            return attrs.evolve(paying(store, clock, thread_id=name).config, checkpoint=None)

        worker = Worker(store, make_config, notice_lead=lead, clock=clock, poll_interval=0.01)
        worker._follow()
        worker._deadlines.restore(thread_aggregate_id("t"), "t", {"r-far": (deadline, False)})
        assert worker.run(once=True).failed == ()


def test_a_clock_ahead_of_the_databases_expires_nothing_and_says_so_once(
    shared_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A service whose clock runs a day ahead of the database's sweeps a review due in an
    hour: nothing is recorded, and the error naming the skew is logged once however
    often a worker sweeps."""
    with open_store(shared_url) as store:
        paused(store, in_step_clock(), deadline=timedelta(hours=1))
        before = store.head_version("t")
        service = ThreadService(store, clock=lambda: datetime.now(UTC) + timedelta(days=1))
        with caplog.at_level("ERROR", logger="covonaut_es.service"):
            assert service.expire_reviews("t") == ()
            assert service.expire_reviews("t") == ()
        assert store.head_version("t") == before
        [logged] = caplog.records
        assert "ahead of the database's" in logged.getMessage()
        assert "nothing expired" in logged.getMessage()


@pytest.mark.postgres
def test_the_databases_clock_is_read_again_after_the_server_ended_a_session(
    postgres_url: str, postgres_database: str
) -> None:
    """The read of PostgreSQL's clock is retried as the store's other reads are: after
    the server ended the pool's sessions, the next sweep reads the time on a new one
    instead of failing."""
    import psycopg

    with open_store(postgres_database) as store:
        assert store._records.database_now() is not None  # a session of the pool is open
        name = postgres_database.rsplit("/", 1)[1]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
        assert store._records.database_now() is not None


def test_a_databases_clock_that_cannot_be_read_is_a_typed_error(
    postgres_url: str, postgres_database: str
) -> None:
    """A database gone for good (dropped while the store is open) makes the read of its
    clock, after its retries, a StoreUnavailableError (helper-156), so that a sweep, a
    decision or a review's request that asks it fails typed."""
    import psycopg

    # Each of the read's attempts waits for a connection as long as connect_timeout.
    with open_store(f"{postgres_database}?connect_timeout=1") as store:
        assert store._records.database_now() is not None
        name = postgres_database.rsplit("/", 1)[1]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        with pytest.raises(StoreUnavailableError, match="its clock was not read"):
            store._records.database_now()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(offset=st.integers(-2 * 86_400, 2 * 86_400))
def test_generated_decider_clock_offsets_never_refuse_a_review_as_expired_before_its_deadline(
    shared_url: str, offset: int
) -> None:
    """A runner in step with the database asks for a review due in an hour; a service
    whose clock is ``offset`` seconds off approves it: the approval is recorded, or,
    when only its clock has the deadline passed, refused with a ClockOutOfStepError
    naming the skew and saying the review is still pending; never a ReviewExpiredError,
    and a service in step then approves it."""
    thread_id = f"decider-{uuid.uuid4().hex[:8]}"
    with open_store(shared_url) as store:
        _, review_id = paused(
            store, in_step_clock(), deadline=timedelta(hours=1), thread_id=thread_id
        )
        skewed = ThreadService(
            store,
            verifier=VERIFIER,
            clock=lambda: datetime.now(UTC) + timedelta(seconds=offset),
        )
        approve = review_submission("approve")
        try:
            skewed.decide(review_id, approve, reviewer=skewed.reviewer(RITA))
        except ClockOutOfStepError as exc:
            assert offset > 3600 - CLOCK_SKEW_BOUND.total_seconds()
            assert "is still pending" in str(exc) and "ahead of the database's" in str(exc)
            assert [r.request.review_id for r in store.load(thread_id).reviews.pending] == [
                review_id
            ]
            in_step = ThreadService(store, verifier=VERIFIER)
            in_step.decide(review_id, approve, reviewer=in_step.reviewer(RITA))
        else:
            assert offset <= 3600 + CLOCK_SKEW_BOUND.total_seconds()
        assert store.load(thread_id).reviews.pending == ()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(offset=st.integers(-2 * 86_400, 2 * 86_400) | st.integers(23 * 3600, 25 * 3600))
def test_generated_worker_clock_offsets_never_note_a_deadline_near_before_its_lead(
    shared_url: str, offset: int
) -> None:
    """A runner in step with the database asks for a review due in 25 hours; a service
    whose clock is ``offset`` seconds off (a day ahead among them, which finds it near)
    notes near deadlines two hours ahead: a ReviewDeadlineNear is recorded only within
    the lead by the database's clock (give or take CLOCK_SKEW_BOUND)."""
    thread_id = f"near-{uuid.uuid4().hex[:8]}"
    lead = timedelta(hours=2)
    with open_store(shared_url) as store:
        paused(store, in_step_clock(), deadline=timedelta(hours=25), thread_id=thread_id)
        skewed = ThreadService(store, clock=lambda: datetime.now(UTC) + timedelta(seconds=offset))
        skewed.note_deadlines_near(thread_id, lead)
        database_now = store._records.database_now()
        assert database_now is not None
        for near in store.history(thread_id):
            if isinstance(near, AgentThread.ReviewDeadlineNear):
                assert near.deadline - database_now <= lead + CLOCK_SKEW_BOUND


def test_the_inbox_refuses_a_decision_its_clock_ahead_takes_for_late_as_unavailable(
    shared_url: str,
) -> None:
    """An inbox whose clock runs two hours ahead of the database's, asked to approve a
    review due in an hour: 503 naming the skew, the review still pending; nothing is
    recorded, not even its expiry."""
    from inbox_support import current, inbox_client

    with open_store(shared_url) as store:
        _, review_id = paused(store, in_step_clock(), deadline=timedelta(hours=1))
        version = store.head_version("t")
    ahead = lambda: datetime.now(UTC) + timedelta(hours=2)  # noqa: E731
    with open_store(shared_url, clock=ahead) as store, inbox_client(store) as client:
        current(client)
        auth = {"Authorization": f"Bearer {ALICE}"}
        refused = client.post(f"/api/reviews/{review_id}/approve", headers=auth, json={})
        assert refused.status_code == 503, refused.text
        assert "still pending" in refused.text and "ahead of the database's" in refused.text
        assert store.head_version("t") == version


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    offset=st.integers(-2 * 86_400, 2 * 86_400),
    wait=st.integers(60, 2 * 86_400),
    parallel=st.booleans(),
)
def test_generated_runner_clock_offsets_never_set_a_deadline_its_wait_does_not_give(
    shared_url: str, offset: int, wait: int, parallel: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A runner whose clock is ``offset`` seconds off the database's asks for a review
    due in ``wait`` seconds: its deadline is ``wait`` after the request by the
    database's clock (give or take CLOCK_SKEW_BOUND), so a sweep by a clock in step
    expires nothing; a skew past the bound is logged as an error naming it."""
    thread_id = f"runner-{uuid.uuid4().hex[:8]}"
    with open_store(shared_url) as store:
        before = store._records.database_now()
        assert before is not None
        agent = paying(
            store,
            Clock(datetime.now(UTC) + timedelta(seconds=offset)),
            deadline=timedelta(seconds=wait),
            thread_id=thread_id,
        )
        agent = Agent(attrs.evolve(agent.config, parallel_tools=parallel))
        caplog.clear()
        with caplog.at_level("ERROR", logger="covonaut_es.service"):
            assert agent.run("Pay bob 40.") == ""
        after = store._records.database_now()
        assert after is not None
        [request] = agent.pending_reviews
        assert request.deadline is not None
        asked = timedelta(seconds=wait)
        assert before + asked - CLOCK_SKEW_BOUND <= request.deadline
        assert request.deadline <= after + asked + CLOCK_SKEW_BOUND
        assert ThreadService(store).expire_reviews(thread_id) == ()
        skewed = abs(offset) > CLOCK_SKEW_BOUND.total_seconds() + 5
        logged = [r.getMessage() for r in caplog.records]
        assert not skewed or any("asking for a review" in m for m in logged), logged


def test_a_runner_clock_out_of_step_is_logged_once_for_many_reviews(
    shared_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A runner a day behind that asks for many reviews (a batch of reviewed calls, a
    worker resuming many threads) logs its skew once, not once a review (helper-156),
    and each review still counts from the database's time."""
    with open_store(shared_url) as store:
        service = ThreadService(store)
        behind = datetime.now(UTC) - timedelta(days=1)
        with caplog.at_level("ERROR", logger="covonaut_es.service"):
            times = [service.review_time(behind) for _ in range(5)]
        logged = [r for r in caplog.records if "asking for a review" in r.getMessage()]
        assert len(logged) == 1
        assert all(t - behind > timedelta(hours=23) for t in times)
