"""The service layer's commands on every store: decisions checked once and recorded as
what they mean, reviews found without a thread id, writes that commute with a run put
before its events, and calls past their timeout recorded in doubt."""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    InterruptError,
    ProviderRequest,
    ProviderResponse,
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
from covonaut_es.domain import Decision, PauseKind
from covonaut_es.domain._submissions import InputSubmitted, InputTaken, submission_stream_id
from covonaut_es.errors import (
    AmbiguousReviewError,
    ConfigurationError,
    InvalidDecisionError,
    LeaseLostError,
    ReviewNotFoundError,
    ThreadAbandonedError,
    ThreadBusyError,
    ThreadStateError,
)
from covonaut_es.runtime import running_calls
from covonaut_es.service import Reviewer, Settlement, ThreadService, review_submission
from hanging_tool import wait_for
from support import answer, call, ticking_clock

OBJECT: dict[str, Any] = {"type": "object"}
SECRET = secrets.token_bytes(32)
VERIFIER = HmacReviewerVerifier(SECRET)
RITA = VERIFIER.issue_token("rita", ttl_seconds=3600)
PAY_40 = '{"amount": 40, "to": "bob"}'


def paying(
    store: Store, thread_id: str = "t", *, paid: list[dict[str, Any]] | None = None
) -> Agent:
    """An agent whose model asks to pay 40 to bob (a tool that requires approval) once,
    then answers with what the call's result said."""

    def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if paid is not None:
            paid.append(args)
        return {"paid": args["amount"]}

    def model(request: ProviderRequest) -> ProviderResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL and last.content.startswith("{"):
            return answer(f"Done: {last.content}")
        asked = sum(m.role is Role.ASSISTANT for m in request.messages)
        return call((f"p{asked}", "pay", PAY_40))

    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[Tool("pay", "Pay", OBJECT, pay, requires_approval=True)],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            reviewer_verifier=VERIFIER,
            clock=ticking_clock(),
        )
    )


def paused(store: Store, thread_id: str = "t", **options: Any) -> tuple[Agent, str]:
    """A thread paused on the review of its payment; the agent and the review id."""
    agent = paying(store, thread_id, **options)
    assert agent.run("Pay bob 40.") == ""
    [request] = agent.pending_reviews
    return agent, request.review_id


def service(store: Store) -> tuple[ThreadService, Reviewer]:
    """The store's service, and Rita as it verifies her."""
    commands = ThreadService(store, verifier=VERIFIER)
    return commands, commands.reviewer(RITA)


# Decisions --------------------------------------------------------------------------------


def test_an_edit_equal_to_the_request_is_recorded_as_a_plain_approval(store: Store) -> None:
    """Edited arguments equal to the request (keys reordered, spaced otherwise, as text
    or a mapping) are recorded as a ReviewDecided event, not an edited approval; the
    resumed run pays what was asked, once."""
    for thread_id, edit in (
        ("text", '{"to":"bob",  "amount":40}'),
        ("map", {"to": "bob", "amount": 40}),
    ):
        paid: list[dict[str, Any]] = []
        _, review_id = paused(store, thread_id, paid=paid)
        commands, rita = service(store)
        submission = review_submission("approve", text="ok", arguments=edit)
        decision = commands.decide(review_id, submission, reviewer=rita)
        assert (decision.decision, decision.reviewer) == (Decision.APPROVED, "rita")
        decided = [e for e in store.history(thread_id) if isinstance(e, AgentThread.ReviewDecided)]
        assert [type(e) for e in decided] == [AgentThread.ReviewDecided]
        [review] = store.state_at(thread_id).reviews
        assert review.decision is not None and review.decision.digest == review.request.digest
        assert paying(store, thread_id, paid=paid).resume() == 'Done: {"paid":40}'
        assert paid == [{"amount": 40, "to": "bob"}]


def test_an_edit_that_differs_is_recorded_as_an_edited_approval(store: Store) -> None:
    """Edited arguments that differ are an edited approval, covering the edit only."""
    paid: list[dict[str, Any]] = []
    _, review_id = paused(store, paid=paid)
    commands, rita = service(store)
    submission = review_submission("approve", arguments='{"amount": 20, "to": "bob"}')
    commands.decide(review_id, submission, reviewer=rita)
    [decided] = [e for e in store.history("t") if isinstance(e, AgentThread.ReviewDecided)]
    assert type(decided) is AgentThread.ReviewApprovedWithEdits
    assert decided.arguments == {"amount": 20, "to": "bob"}


def test_a_decision_for_another_digest_is_refused_and_records_nothing(store: Store) -> None:
    """A decision naming an operation digest other than the review's is refused with
    InvalidDecisionError, for every action, and the thread is as it was; the right
    digest is recorded."""
    _, review_id = paused(store)
    commands, rita = service(store)
    before = store.history("t")
    found = commands.find_review(review_id)
    for action, text in (("approve", ""), ("reject", "no"), ("respond", "paid by hand")):
        wrong = review_submission(action, text=text, digest="0" * 64)
        with pytest.raises(InvalidDecisionError, match="another operation; nothing was recorded"):
            commands.decide(review_id, wrong, reviewer=rita)
        assert store.history("t") == before
    right = review_submission("reject", text="no", digest=found.review.request.digest)
    assert commands.decide(review_id, right, reviewer=rita).decision is Decision.REJECTED
    with pytest.raises(StaleReviewError):
        commands.decide(review_id, right, reviewer=rita)


def test_one_decision_verifies_once_and_loads_the_thread_once(
    store: Store, other: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deciding a review found without its thread id verifies the credential once and
    loads the thread once; when another writer gets in between, twice, and the decision
    is recorded after that writer's event."""
    _, review_id = paused(store)
    paused(store, "u")
    verified: list[Any] = []
    loads: list[str] = []
    writing: list[bool] = []

    class Counting(HmacReviewerVerifier):
        def identify(self, credential: Any) -> Reviewer:
            verified.append(credential)
            return super().identify(credential)

    load = Store.load

    def counted(self: Store, thread_id: str, **options: Any) -> AgentThread:
        if writing:  # the other writer's own load
            return load(self, thread_id, **options)
        loads.append(thread_id)
        thread = load(self, thread_id, **options)
        if thread_id == "u" and loads.count("u") == 1:
            writing.append(True)
            ThreadService(other).label("u", "meanwhile")  # another writer, between load and save
            writing.clear()
        return thread

    monkeypatch.setattr(Store, "load", counted)
    commands = ThreadService(store, verifier=Counting(SECRET))
    rita = commands.reviewer(RITA)
    commands.decide(review_id, review_submission("approve"), reviewer=rita)
    assert (len(verified), loads) == (1, ["t"])
    loads.clear()
    [request] = [r.request for r in store.state_at("u").reviews]
    commands.decide(request.review_id, review_submission("approve"), reviewer=rita)
    assert (len(verified), loads) == (1, ["u", "u"])
    kinds = [type(e).__name__ for e in store.history("u")][-3:]
    assert kinds == ["Labelled", "ReviewDecided", "ToolResultRecorded"]


# Finding a review -------------------------------------------------------------------------


def test_a_review_is_found_without_its_thread_id(store: Store) -> None:
    """find_review names the thread that holds a review; an unknown id, or a thread
    that does not hold it, is ReviewNotFoundError."""
    _, first = paused(store, "a")
    _, second = paused(store, "b")
    commands, _ = service(store)
    assert (commands.find_review(first).thread_id, commands.find_review(second).thread_id) == (
        "a",
        "b",
    )
    assert commands.find_review(first).review.request.arguments == {"amount": 40, "to": "bob"}
    with pytest.raises(ReviewNotFoundError, match="no review 'nope'"):
        commands.find_review("nope")
    with pytest.raises(ReviewNotFoundError, match="thread 'b'"):
        commands.find_review(first, thread_id="b")


def test_a_review_pending_in_a_parent_and_its_fork_is_ambiguous(store: Store) -> None:
    """A fork inherits its parent's pending review: found or decided without a thread id
    it is AmbiguousReviewError naming both; decided on the parent, it is found pending in
    the fork alone, and the fork decides it its own way."""
    _, review_id = paused(store, "parent")
    store.fork("parent", new_thread_id="fork")
    commands, rita = service(store)
    for attempt in (
        lambda: commands.find_review(review_id),
        lambda: commands.decide(review_id, review_submission("approve"), reviewer=rita),
    ):
        with pytest.raises(AmbiguousReviewError) as ambiguous:
            attempt()
        assert set(ambiguous.value.thread_ids) == {"parent", "fork"}
    assert store.state_at("parent").reviews[0].pending
    commands.decide(review_id, review_submission("approve"), reviewer=rita, thread_id="parent")
    found = commands.find_review(review_id)
    assert (found.thread_id, found.review.pending) == ("fork", True)
    rejection = review_submission("reject", text="not from the fork")
    assert commands.decide(review_id, rejection, reviewer=rita).decision is Decision.REJECTED
    assert [r.decision.decision for r in store.state_at("parent").reviews if r.decision] == [
        Decision.APPROVED
    ]


# Pauses and the thread ---------------------------------------------------------------------


def test_answer_settle_and_retry_check_what_they_act_on(store: Store, other: Store) -> None:
    """An answer is refused when blank or aimed at a review's pause; settling and asking
    for a retry are refused while another runner holds the thread, and refused for a call
    that is not in doubt; abandoning twice is refused."""
    paused(store)
    commands, rita = service(store)
    with pytest.raises(InvalidDecisionError, match="the answer must not be empty"):
        commands.answer("t", "p0", "  ", reviewer=rita)
    with pytest.raises(ThreadStateError, match="no tool's pause on call 'p0'"):
        commands.answer("t", "p0", "paid", reviewer=rita)
    with pytest.raises(ThreadStateError, match="not in doubt"):
        commands.settle("t", "p0", Settlement.ran_with("paid"), reviewer=rita)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with other.lease("t"):
            held.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(timeout=30)
        with pytest.raises(ThreadBusyError):
            commands.settle("t", "p0", Settlement.not_run(), reviewer=rita)
        with pytest.raises(ThreadBusyError):
            commands.request_retry("t", "p0", reviewer=rita)
    finally:
        release.set()
        holder.join(timeout=30)
    before = store.history("t")
    commands.abandon("t", "customer left", reviewer=rita)
    with pytest.raises(ThreadStateError, match="already abandoned"):
        commands.abandon("t", "again", reviewer=rita)
    assert len(store.history("t")) == len(before) + 1
    assert store.state_at("t").status is ThreadStatus.ABANDONED


# Writes that commute with a run -------------------------------------------------------------


class Batch:
    """A run whose model asks, in one parallel batch, for a payment that needs a review
    (p1), a tool's pause (a1), and a call (b1) that blocks until the test lets it go."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.started, self.release = threading.Event(), threading.Event()
        self.outcome: list[object] = []

        def block(ctx: ToolContext, args: dict[str, Any]) -> Any:
            self.started.set()
            assert self.release.wait(timeout=30)
            return {"blocked": "done"}

        def ask(ctx: ToolContext, args: dict[str, Any]) -> Any:
            raise InterruptError("a person must answer", {"question": "Which account?"})

        batch = call(("p1", "pay", PAY_40), ("a1", "ask", "{}"), ("b1", "block", "{}"))
        self.agent = Agent(
            AgentConfig(
                provider=ScriptedProvider([batch]),
                tools=[
                    Tool("pay", "Pay", OBJECT, lambda ctx, args: "paid", requires_approval=True),
                    Tool("ask", "Ask a person", OBJECT, ask),
                    Tool("block", "Block", OBJECT, block),
                ],
                parallel_tools=True,
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
                reviewer_verifier=VERIFIER,
            )
        )
        self.runner = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            self.outcome.append(self.agent.run("Pay, ask and block."))
        except BaseException as exc:
            self.outcome.append(exc)

    def __enter__(self) -> Batch:
        """Start the run; return once b1 blocks and the review and a1's pause are stored."""
        self.runner.start()
        assert self.started.wait(timeout=30)
        wait_for(lambda: len(self.store.state_at("t").pauses) == 2, "the batch's pauses")
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.runner.join(timeout=30)
        assert not self.runner.is_alive()


WRITES: dict[str, Callable[[ThreadService, Reviewer, str], None]] = {
    "decision": lambda commands, rita, review_id: commands.decide(
        review_id, review_submission("reject", text="not today"), reviewer=rita
    ),
    "answer": lambda commands, rita, _: commands.answer("t", "a1", "Account 7.", reviewer=rita),
    "label": lambda commands, rita, _: commands.label("t", "while-blocked"),
    "abandon": lambda commands, rita, _: commands.abandon("t", "gave up", reviewer=rita),
}
WRITTEN = {
    "decision": AgentThread.ReviewDecided,
    "answer": AgentThread.InterruptAnswered,
    "label": AgentThread.Labelled,
    "abandon": AgentThread.Abandoned,
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_that_commutes_with_a_run_keeps_the_blocked_tools_result(
    store: Store, other: Store, write: str
) -> None:
    """While a call of a parallel batch blocks, another writer decides the batch's
    review, answers its tool's pause, labels the thread or gives it up: the run puts its
    events after that write, keeps the blocked call's result, and pauses as it would
    have (given up: stores the result, then raises ThreadAbandonedError)."""
    commands, rita = service(other)
    with Batch(store) as batch:
        [review] = store.state_at("t").reviews
        WRITES[write](commands, rita, review.request.review_id)
    [outcome] = batch.outcome
    if write == "abandon":
        assert isinstance(outcome, ThreadAbandonedError), outcome
    else:
        assert outcome == "", outcome
    state = store.state_at("t")
    results = {m.tool_call_id: m.content for m in state.messages if m.role is Role.TOOL}
    assert results["b1"] == '{"blocked":"done"}'
    history = store.history("t")
    [written] = [e.originator_version for e in history if type(e) is WRITTEN[write]]
    [recorded] = [
        e.originator_version
        for e in history
        if isinstance(e, AgentThread.ToolResultRecorded) and e.tool_call_id == "b1"
    ]
    assert written < recorded
    expected = ThreadStatus.ABANDONED if write == "abandon" else ThreadStatus.INTERRUPTED
    assert state.status is expected
    assert {p.interrupt.tool_call_id for p in state.pauses} == {"p1", "a1"}
    held_back = [] if write == "decision" else ["p1"]  # for its review, not in doubt
    assert [p.call.id for p in state.open_calls] == held_back
    assert store.verify("t").ok
    assert store.replay_state("t") == state == other.state_at("t")


# Calls past their timeout -------------------------------------------------------------------


def test_a_call_past_its_timeout_is_in_doubt_and_the_heartbeat_reports_it(store: Store) -> None:
    """A tool with timeout=0.2 that blocks longer: the worker's run records the call in
    doubt and pauses on it; running_calls() lists it past its deadline while it still
    runs, the worker's heartbeat reports it, and its late result is never recorded."""
    started, release = threading.Event(), threading.Event()

    def slow(ctx: ToolContext, args: dict[str, Any]) -> Any:
        started.set()
        release.wait(timeout=30)
        return "late"

    def make_config(thread_id: str) -> AgentConfig:
        script = [call(("s1", "slow", "{}")), answer("never")]
        return AgentConfig(
            provider=ScriptedProvider(script),
            tools=[Tool("slow", "Slow", OBJECT, slow, timeout=0.2)],
        )

    worker = Worker(store, make_config, poll_interval=0.05)
    runner = threading.Thread(target=worker.run)
    store.submit("t", "Go.")
    runner.start()
    try:
        wait_for(
            lambda: store.exists("t") and store.state_at("t").status is ThreadStatus.INTERRUPTED,
            "the pause",
        )
        state = store.state_at("t")
        assert [(p.kind, p.resolved) for p in state.pauses] == [(PauseKind.IN_DOUBT, False)]
        assert [p.call.id for p in state.open_calls] == ["s1"]
        assert "ran past its timeout of 0.2 s" in state.interrupts[0].reason
        [running] = [c for c in running_calls() if c.thread_id == "t"]
        assert (running.tool_call_id, running.tool_name) == ("s1", "slow")

        # The pause may be recorded a fraction of a millisecond before the timeout runs
        # out: a listing tells the seconds left at its moment, so list again until one
        # tells none.
        def hung_now() -> bool:
            listed = [c for c in running_calls() if c.thread_id == "t"]
            return any(c.hung(datetime.now(UTC)) for c in listed)

        wait_for(hung_now, "the deadline", timeout=5)
        assert started.is_set()

        def reported() -> bool:
            calls = [c for w in store.live_workers() for c in w.calls if c.thread_id == "t"]
            return any(c.tool_call_id == "s1" and c.hung(datetime.now(UTC)) for c in calls)

        wait_for(reported, "the heartbeat to report the hung call")
    finally:
        worker.stop()
        release.set()
        runner.join(timeout=30)
    wait_for(lambda: not [c for c in running_calls() if c.thread_id == "t"], "the call to end")
    assert store.state_at("t") == state
    assert store.replay_state("t") == state


class _Crash(BaseException):
    """Stands for the death of the runner's process inside a tool."""


def test_a_thread_given_up_runs_no_call_in_doubt_again(store: Store) -> None:
    """A thread given up with a call of an idempotent tool in doubt: continuing it or
    settling the call by running it again is refused before the call runs, a worker
    leaves it, and nothing is recorded."""
    runs: list[str] = []

    def sync(ctx: ToolContext, args: dict[str, Any]) -> Any:
        runs.append(ctx.idempotency_key)
        if len(runs) == 1:
            raise _Crash
        return "synced"

    def agent() -> Agent:
        return Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("s1", "sync", "{}")), answer("done")]),
                tools=[Tool("sync", "Sync", OBJECT, sync, idempotent=True)],
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
                reviewer_verifier=VERIFIER,
            )
        )

    with pytest.raises(_Crash):
        agent().run("Sync.")
    commands, rita = service(store)
    commands.abandon("t", "gave up", reviewer=rita)
    before = store.history("t")
    for attempt in (agent().continue_run, lambda: agent().settle("s1", retry=True)):
        with pytest.raises(ThreadStateError, match="was abandoned"):
            attempt()
    assert Worker(store, lambda _: agent().config).run(once=True).steps == 0
    assert runs == [runs[0]] and store.history("t") == before


def test_an_agent_resumes_a_thread_decided_through_the_service(store: Store) -> None:
    """An agent that paused a thread, whose review a reviewer then decides through the
    service (the inbox, the command line, another process), resumes it: its own copy of
    the thread, behind the store, does not refuse with the review it still shows
    pending; asyncio alike."""
    paid: list[dict[str, Any]] = []
    for thread_id, resume in (("sync", Agent.resume), ("async", None)):
        agent, review_id = paused(store, thread_id, paid=paid)
        commands, rita = service(store)
        commands.decide(review_id, review_submission("approve"), reviewer=rita)
        if resume is None:
            assert asyncio.run(agent.aresume()) == 'Done: {"paid":40}'
        else:
            assert resume(agent) == 'Done: {"paid":40}'
    assert paid == [{"amount": 40, "to": "bob"}] * 2


def test_an_agent_behind_the_store_still_refuses_what_the_stored_thread_refuses(
    store: Store,
) -> None:
    """The copy is read again only when the store moved on: a resume refused by the
    stored thread itself (its review still pending) is refused, and nothing is stored."""
    agent, _ = paused(store)
    before = store.history("t")
    ThreadService(store).label("t", "meanwhile")
    with pytest.raises(ThreadStateError, match="awaiting a decision"):
        agent.resume()
    assert (
        store.history("t")[: len(before)] == before and len(store.history("t")) == len(before) + 1
    )


# Submitted input --------------------------------------------------------------------------


def test_a_runner_takes_the_next_submission_waiting_through_the_service(store: Store) -> None:
    """Taking input under the thread's lease records the take of the first submission
    waiting and returns it; the next one waits after it."""
    store.submit("t", "one")
    store.submit("t", "two")
    with store.lease("t"):
        taken = ThreadService(store).take_input(
            "t", store.submissions.submitted("t"), thread_version=0
        )
    assert taken is not None
    assert taken.text == "one"
    submitted = store.submissions.submitted("t")
    assert submitted.taken is not None
    assert submitted.taken.submitted_version == taken.originator_version
    waiting = submitted.waiting()
    assert waiting is not None
    assert waiting.text == "two"


def test_a_take_after_another_runners_is_refused_and_none_waiting_takes_nothing(
    store: Store,
) -> None:
    """A runner whose read of the submissions another runner's take followed is refused
    with LeaseLostError, recording nothing; with none waiting, nothing is taken."""
    store.submit("t", "one")
    read = store.submissions.submitted("t")
    commands = ThreadService(store)
    with store.lease("t"):
        commands.take_input("t", read, thread_version=0)
        with pytest.raises(LeaseLostError):
            commands.take_input("t", read, thread_version=0)
        now = store.submissions.submitted("t")
        assert now.version == read.version + 1
        assert commands.take_input("t", now, thread_version=0) is None
    assert store.submissions.submitted("t").version == now.version


def test_a_take_without_the_threads_lease_is_refused_recording_nothing(store: Store) -> None:
    """A take by a task that holds no lease of the thread (none at all, or another
    thread's: as while another process holds the thread's) is refused with
    LeaseLostError naming the thread, and records nothing (helper-167)."""
    store.submit("t", "one")
    read = store.submissions.submitted("t")
    commands = ThreadService(store)
    with pytest.raises(LeaseLostError, match=r"'t'.*holds none"):
        commands.take_input("t", read, thread_version=0)
    with store.lease("u"), pytest.raises(LeaseLostError, match="'t'"):
        commands.take_input("t", read, thread_version=0)
    assert store.submissions.submitted("t") == read


def test_a_take_of_another_threads_submissions_is_refused_recording_nothing(
    store: Store,
) -> None:
    """Under thread a's lease, a take given thread b's submissions is refused with
    ConfigurationError naming both, and neither thread's input is taken (helper-167)."""
    store.submit("a", "for a")
    store.submit("b", "for b")
    of_b = store.submissions.submitted("b")
    with store.lease("a"), pytest.raises(ConfigurationError, match=r"'a'.*'b'"):
        ThreadService(store).take_input("a", of_b, thread_version=0)
    assert store.submissions.submitted("a").taken is None
    assert store.submissions.submitted("b") == of_b


@settings(max_examples=50, deadline=None)
@given(
    argument=st.sampled_from(["submitted", "thread_version"]),
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(max_value=-1),
        st.integers(min_value=2**63),
        st.floats(),
        st.text(max_size=3),
        st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    ),
)
def test_a_take_given_a_wrong_argument_is_refused_typed_recording_nothing(
    argument: str, value: object
) -> None:
    """Whatever the wrong value of ``submitted`` or ``thread_version`` (None, a bool, a
    negative or past 2**63-1, a float, text, a dict), a take under the lease raises
    ConfigurationError naming the argument, never an AttributeError, OverflowError or
    a take recorded at a version no thread has (helper-167)."""
    with open_store("memory://") as store:
        store.submit("t", "one")
        args: dict[str, Any] = {"submitted": store.submissions.submitted("t"), "version": 0}
        args["version" if argument == "thread_version" else argument] = value
        with store.lease("t"), pytest.raises(ConfigurationError, match=argument):
            ThreadService(store).take_input("t", args["submitted"], thread_version=args["version"])
        assert store.submissions.submitted("t").taken is None


def _forged(store: Store, edit: str, number: int) -> tuple[Any, int]:
    """The thread's submissions read from ``store`` edited by ``edit`` (a field set to
    ``number`` or an event made up at it), and the thread version to take at."""
    read = store.submissions.submitted("t")
    stream = submission_stream_id("t")
    if edit == "version":
        return attrs.evolve(read, version=read.version + number), 0
    if edit == "made-up input":
        made_up = InputSubmitted(
            originator_id=stream,
            originator_version=number,
            timestamp=InputSubmitted.create_timestamp(),
            thread_id="t",
            text="never submitted",
        )
        return attrs.evolve(read, inputs=(*read.inputs, made_up)), 0
    if edit == "inputs dropped":
        return attrs.evolve(read, inputs=read.inputs[number % len(read.inputs) + 1 :]), 0
    if edit == "made-up take":
        take = InputTaken(
            originator_id=stream,
            originator_version=read.version,
            timestamp=InputTaken.create_timestamp(),
            thread_id="t",
            submitted_version=number % read.version,
            thread_version=0,
        )
        return attrs.evolve(read, taken=take), 0
    return read, number  # a thread version past the thread's (it has none)


@settings(max_examples=50, deadline=None)
@given(
    submitted=st.integers(min_value=1, max_value=4),
    edit=st.sampled_from(
        ["version", "made-up input", "inputs dropped", "made-up take", "thread_version"]
    ),
    number=st.integers(min_value=1, max_value=99),
)
def test_a_take_of_submissions_the_stream_never_held_is_refused_recording_nothing(
    submitted: int, edit: str, number: int
) -> None:
    """Submissions built or edited by hand (a version the stream is not at, a
    submission never made, some dropped, a take never recorded), or a thread version
    past the thread's, are refused with ConfigurationError, and nothing is recorded: a
    made-up submission at version 99 was taken, so every real one before it was never
    run, and a read set to a later version took a submission twice (helper-170)."""
    with open_store("memory://") as store:
        for n in range(submitted):
            store.submit("t", f"input {n}")
        before = store.submissions.submitted("t")
        read, thread_version = _forged(store, edit, number)
        with store.lease("t"):
            try:
                taken = ThreadService(store).take_input("t", read, thread_version=thread_version)
            except ConfigurationError as exc:
                assert "nothing was recorded" in str(exc)
            else:
                assert taken is None  # nothing waits in it: nothing to refuse
        assert store.submissions.submitted("t") == before
