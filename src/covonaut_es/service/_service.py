"""The service layer's commands: every change to a stored thread, in one place.

:class:`ThreadService` holds the use cases of a thread store, as an eventsourcing
application holds its own (``examples/aggregate3``): each command loads the thread,
calls one method of the aggregate and saves. :class:`~covonaut_es.Agent`, the inbox, the
command line and the workers call it; none of them changes a thread another way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import attrs

from covonaut_es._arguments import check_instance, check_text
from covonaut_es._clock import AwareClock
from covonaut_es._text import is_blank
from covonaut_es.domain import (
    AgentThread,
    Decision,
    ReviewDecision,
    ReviewRequest,
    check_may_act_on_call,
    check_may_decide,
)
from covonaut_es.domain._review_rules import call_refusal
from covonaut_es.domain._submissions import InputSubmitted
from covonaut_es.errors import (
    AmbiguousReviewError,
    ConfigurationError,
    InvalidDecisionError,
    ReviewerNotPermittedError,
    ThreadConflictError,
    ThreadNotFoundError,
)
from covonaut_es.migrations import Upcaster
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.service._clock_guard import ClockGuard
from covonaut_es.service._pauses import check_pause
from covonaut_es.service._review_lookup import (
    FoundReview,
    ReviewIndex,
    held_review,
    no_review,
    thread_of_review,
)
from covonaut_es.service._reviewers import Reviewer, ReviewerVerifier, verified_reviewer
from covonaut_es.service._running import refuse_while_running
from covonaut_es.service._runs import RunSession
from covonaut_es.service._submissions import (
    Action,
    ReviewSubmission,
    person_text,
    review_submission,
)
from covonaut_es.store import Store
from covonaut_es.store._submissions import Submitted

T = TypeVar("T")

_DECISIONS = {
    Action.APPROVE: Decision.APPROVED,
    Action.REJECT: Decision.REJECTED,
    Action.RESPOND: Decision.RESPONDED,
}

RUNNER_STOPPED = (
    "its runner stopped after recording the call and before its result; check the "
    "external system, settle it, then resume"
)
"""Why a call is in doubt when a runner finds the run it takes over cut short there."""

NOT_RUN_RESULT = "Not executed: a person checked and found that the call did not run."
"""What the model reads of a call in doubt settled as not run, with no note."""


@attrs.frozen
class PauseAnswer:
    """A person's answer to a tool's pause, as :meth:`ThreadService.answer` takes it.

    Attributes:
        tool_call_id: The paused call.
        text: What the model reads.
        pause: The token of the pause the person saw, if the surface sent it.
    """

    tool_call_id: str
    text: object
    pause: object = None


@attrs.frozen
class Settlement:
    """What a person found of a call in doubt: it ran, with this result, or it did not.

    Make one with :meth:`ran` or :meth:`not_run`, which check the text.

    Attributes:
        ran: Whether the call ran.
        content: The result the model reads.
    """

    ran: bool
    content: str

    @classmethod
    def ran_with(cls, result: object) -> Settlement:
        """It ran, and ``result`` (text a person typed) is what it gave.

        Raises:
            InvalidDecisionError: The result is no text, too long, or blank.
        """
        return cls(True, person_text(result, "result", required=True))

    @classmethod
    def not_run(cls, note: object = "") -> Settlement:
        """It did not run; ``note`` says why, for the model.

        Raises:
            InvalidDecisionError: The note is no text or too long.
        """
        text = person_text(note, "note")
        return cls(False, NOT_RUN_RESULT if is_blank(text) else f"Not executed: {text}")


class ThreadService:
    """Every command on the threads of one store.

    Args:
        store: The threads' store.
        verifier: Establishes reviewers from their credentials (:meth:`reviewer`); the
            commands that record a person's decision need one.
        clock: The time of the events it records; the store's clock by default. A
            time it gives without a timezone is a ``ConfigurationError`` naming it.
        reviews: Where a pending review's thread is looked up by the review's id, when
            a command names no thread; without it (or while it is behind the log), the
            threads are found from the log's review requests and forks.
    """

    def __init__(
        self,
        store: Store,
        *,
        verifier: ReviewerVerifier | None = None,
        clock: Callable[[], datetime] | None = None,
        reviews: ReviewIndex | None = None,
    ) -> None:
        self.store = store
        self.verifier = verifier
        self._clock = AwareClock(clock or store.clock)
        self.reviews = reviews
        self._clock_guard = ClockGuard(store)

    # Who acts -----------------------------------------------------------------------

    def reviewer(self, credential: Any) -> Reviewer:
        """The reviewer ``credential`` verifies as: every command a person runs takes it.

        Raises:
            ReviewerNotVerifiedError: The credential does not verify.
            ConfigurationError: The service has no verifier.
        """
        if self.verifier is None:
            msg = (
                "deciding needs a reviewer verifier to establish who decides, e.g. "
                "HmacReviewerVerifier(secret): pass it to ThreadService(verifier=...) or "
                "AgentConfig(reviewer_verifier=...)"
            )
            raise ConfigurationError(msg)
        return verified_reviewer(self.verifier, credential)

    # Reviews ------------------------------------------------------------------------

    def find_review(self, review_id: str, *, thread_id: str | None = None) -> FoundReview:
        """The review with that id, as its thread records it now.

        Args:
            review_id: The review.
            thread_id: The thread to look in; by default the one thread where it is
                pending, else the one that asked for it.

        Raises:
            ReviewNotFoundError: No thread (or not ``thread_id``) has it.
            AmbiguousReviewError: It is pending in several threads (forks inherit
                pending reviews) and none was named.
        """
        thread = self.store.load(thread_of_review(self.store, self.reviews, review_id, thread_id))
        review = thread.reviews.get(review_id)
        if review is None:
            raise no_review(self.store, review_id, thread.thread_id)
        return FoundReview(thread.thread_id, review, review in thread.reviews_awaiting)

    def decide(
        self,
        review_id: str,
        submission: ReviewSubmission,
        *,
        reviewer: Reviewer,
        thread_id: str | None = None,
    ) -> ReviewDecision:
        """Record a reviewer's decision on a pending review. It commutes with a run, so
        it takes no lease: a run going on the thread puts its own events after it.

        Args:
            review_id: The review.
            submission: The decision, as :func:`review_submission` checked it.
            reviewer: Who decides, from :meth:`reviewer`.
            thread_id: As for :meth:`find_review`.

        Returns:
            The recorded decision.

        Raises:
            ReviewNotFoundError: No such review (``AmbiguousReviewError``: in several
                threads, none named).
            StaleReviewError: It was decided already (``ReviewExpiredError``: its
                deadline passed, by the service's clock, so it decides nothing).
            ClockOutOfStepError: Its deadline passed by the service's clock, which runs
                more than ``CLOCK_SKEW_BOUND`` ahead of the database's: the review is
                still pending, and nothing was recorded (ADR 0119).
            InvalidDecisionError: The decision names another operation digest than the
                review's; nothing was recorded.
            DecisionNotAllowedError: The review's tool allows no such decision or edit.
            ReviewerNotPermittedError: The reviewer's scopes do not cover the review (or
                the approved arguments' limits), or they approved it already under four
                eyes; nothing was recorded.

        Under four eyes a first approval is recorded in part: the returned decision's
        ``partial`` is true and the review stays pending for a second reviewer.
        """
        command = self._deciding(review_id, submission, reviewer)
        try:
            found = thread_of_review(self.store, self.reviews, review_id, thread_id)
        except AmbiguousReviewError as exc:
            # The threads that hold it, told only to whom may decide it: another is
            # refused as naming any one of them would be.
            asked = held_review(self.store, review_id, exc)
            if asked is not None:
                check_may_decide(asked, reviewer=reviewer.id, scopes=reviewer.scopes)
            raise
        return self._change(found, command)

    def decide_together(
        self,
        thread_id: str,
        *,
        decisions: Mapping[str, ReviewSubmission],
        answers: Sequence[PauseAnswer] = (),
        reviewer: Reviewer,
    ) -> tuple[ReviewDecision, ...]:
        """Record a reviewer's decisions on reviews of one thread, and answers to its
        tools' pauses, in one save: all of them, or none. For a surface that takes
        several at once (an AG-UI resume): decided one by one, two such requests racing
        could each record a part while both were refused; a writer that got in between
        makes the retry check the whole again.

        Args:
            thread_id: The thread whose reviews and pauses these are.
            decisions: Each decision by review id, as :meth:`decide` takes it.
            answers: Each answer, as :meth:`answer` takes it.
            reviewer: Who decides and answers, from :meth:`reviewer`.

        Returns:
            The recorded decisions, in the order given.

        Raises:
            CovonautError: What :meth:`decide` or :meth:`answer` raises for the first
                one refused; nothing was recorded.
        """
        check_instance("decisions", decisions, Mapping, "a mapping of review ids to decisions")
        check_instance("answers", answers, (list, tuple), "a sequence of PauseAnswer")
        for answer in answers:
            check_instance("answers", answer, PauseAnswer, "a sequence of PauseAnswer")
        commands = [self._deciding(r, s, reviewer) for r, s in decisions.items()]
        answering = [self._answering(a.tool_call_id, a.text, reviewer, a.pause) for a in answers]

        def together(thread: AgentThread) -> tuple[ReviewDecision, ...]:
            decided = tuple(command(thread) for command in commands)
            for answer_it in answering:
                answer_it(thread)
            return decided

        return self._change(thread_id, together)

    def _deciding(
        self, review_id: str, submission: ReviewSubmission, reviewer: Reviewer
    ) -> Callable[[AgentThread], ReviewDecision]:
        """The command recording one decision, its arguments checked first."""
        check_text("review_id", review_id)
        check_instance("submission", submission, ReviewSubmission, "a ReviewSubmission")
        _check_reviewer(reviewer)
        # One made directly, not by the one reader, is read by it now: its rules hold.
        submission = review_submission(
            submission.action,
            text=submission.text,
            arguments=submission.arguments,
            digest=submission.digest,
            arguments_as_text=False,
        )
        decision = _DECISIONS[submission.action]

        def decide(thread: AgentThread) -> ReviewDecision:
            # The scopes first: a refused digest would confirm a guess at an operation
            # the reviewer may not see, and a stale review say who decided it how.
            asked = thread.reviews.get(review_id)
            if asked is not None:
                check_may_decide(asked, reviewer=reviewer.id, scopes=reviewer.scopes)
            review = thread.reviews.undecided(review_id, thread_id=thread.thread_id)
            if submission.digest is not None and submission.digest != review.request.digest:
                msg = (
                    f"the decision is for operation digest {submission.digest!r}, but review "
                    f"{review_id!r} asks about {review.request.digest!r}: the reviewer saw "
                    "another operation; nothing was recorded"
                )
                raise InvalidDecisionError(msg)
            now = self._clock()
            if review.request.expired(now):
                self._clock_guard.refuse_if_ahead(now, review.request, thread.thread_id)
            return thread.decide_review(
                review_id,
                decision,
                reviewer=reviewer.id,
                scopes=reviewer.scopes,
                comment=submission.text,
                arguments=submission.arguments,
                now=now,
            )

        return decide

    # Deadlines ----------------------------------------------------------------------

    def expire_reviews(self, thread_id: str) -> tuple[ReviewDecision, ...]:
        """Expire the thread's pending reviews whose deadline has passed by the
        service's clock: each fails closed (its call does not run) and the thread goes
        on as after a rejection. It commutes with a run, as a decision does.

        Any number of workers may sweep one thread at once: each expiry is recorded
        once, since a second writer's save conflicts and its retry finds it decided.

        A clock running more than ``CLOCK_SKEW_BOUND`` (30 s) ahead of the database's
        (PostgreSQL's server; SQLite's, the machine the file is on) expires nothing: the
        skew is logged as an error, and the reviews wait for a sweep by a clock in step
        (ADR 0119). Each expiry names whose clock recorded it.

        Returns:
            The expiries recorded now (none when nothing was due, or the clock is ahead).
        """
        now = self._clock()
        if self._clock_guard.runs_ahead(
            now, f"expiring the reviews of thread {thread_id!r}", "nothing expired"
        ):
            return ()
        clock = f"the clock of {self.store.lease_holder}"
        return self._change(thread_id, lambda t: t.expire_reviews(now=now, clock=clock))

    def note_deadlines_near(self, thread_id: str, lead: timedelta) -> tuple[ReviewRequest, ...]:
        """Record, once per review, that a pending review of the thread expires within
        ``lead`` by the service's clock; the notices follow these records. A clock
        running ahead of the database's notes nothing, as :meth:`expire_reviews`
        expires nothing.

        Returns:
            The requests noted now (none when nothing was due, or the clock is ahead).
        """
        now = self._clock()
        if self._clock_guard.runs_ahead(
            now, f"noting the near deadlines of thread {thread_id!r}", "nothing noted"
        ):
            return ()
        return self._change(thread_id, lambda t: t.note_deadlines_near(lead=lead, now=now))

    def review_time(self, now: datetime) -> datetime:
        """The time a review a runner asks for at ``now`` (its clock's reading) counts
        its deadline from: ``now``, or the database's time when ``now`` is more than
        ``CLOCK_SKEW_BOUND`` off it either way, logged as an error (ADR 0119)."""
        return self._clock_guard.review_time(now)

    # Pauses -------------------------------------------------------------------------

    def answer(
        self,
        thread_id: str,
        tool_call_id: str,
        answer: object,
        *,
        reviewer: Reviewer,
        pause: object = None,
    ) -> None:
        """Record a person's answer to a tool's pause; the next runner resumes the thread
        and the model reads the answer.

        Args:
            thread_id: The thread.
            tool_call_id: The paused call.
            answer: What the model reads.
            reviewer: Who answers, from :meth:`reviewer`.
            pause: The token of the pause the person saw (:func:`pause_token`), if the
                surface sent it: refused if that pause is no longer the one pending.

        Raises:
            InvalidDecisionError: The answer is no text, too long or blank.
            StalePauseError: ``pause`` is no longer pending on that call.
            ThreadStateError: No tool's pause on that call awaits an answer.
            ReviewerNotPermittedError: The reviewer could not have made the approval
                the call ran under (a scope of its review or of a limit its approved
                arguments exceed); nothing was recorded.
        """
        self._change(thread_id, self._answering(tool_call_id, answer, reviewer, pause))

    def _answering(
        self, tool_call_id: str, answer: object, reviewer: Reviewer, pause: object
    ) -> Callable[[AgentThread], None]:
        """The command recording one answer, its arguments checked first."""
        check_text("tool_call_id", tool_call_id)
        _check_reviewer(reviewer)
        text = person_text(answer, "answer", required=True)

        def answer_it(thread: AgentThread) -> None:
            _check(thread, pause, tool_call_id, reviewer)
            thread.answer(tool_call_id, text, by=reviewer.id, now=self._clock())

        return answer_it

    def settle(
        self,
        thread_id: str,
        tool_call_id: str,
        settlement: Settlement,
        *,
        reviewer: Reviewer | None = None,
        pause: object = None,
    ) -> None:
        """Record what checking the external system found of a call in doubt. Under the
        thread's lease: a call is not settled while a runner may be running it.

        Args:
            thread_id: The thread.
            tool_call_id: The call in doubt.
            settlement: It ran with a result, or it did not run.
            reviewer: The person who settled it; None for the application itself.
            pause: As for :meth:`answer`.

        Raises:
            ThreadBusyError: A runner holds the thread (``ToolCallRunningError``: the
                call's tool, past its timeout, still runs in this process).
            StalePauseError: ``pause`` is no longer pending on that call.
            ThreadStateError: The call is not in doubt.
            ReviewerNotPermittedError: The reviewer could not have made the approval
                the call ran under (a scope of its review or of a limit its approved
                arguments exceed); nothing was recorded.
        """
        by = reviewer.id if reviewer else ""

        def settle(thread: AgentThread) -> None:
            _check(thread, pause, tool_call_id, reviewer)
            content, ran = settlement.content, settlement.ran
            thread.settle(tool_call_id, content, ran=ran, by=by, now=self._clock())

        self._change(thread_id, settle, leased=True)

    def pause_calls_in_doubt(self, thread_id: str, reason: str = RUNNER_STOPPED) -> None:
        """Pause the thread on each of its calls in doubt (its runner stopped between a
        call and its result), for a person to settle; a runner's command, under the
        thread's lease, for a runner that finds a run cut short with calls no runner may
        retry. A call a person asked to run again waits for a runner instead.

        Raises:
            ThreadBusyError: Another runner holds the thread.
        """

        def pause(thread: AgentThread) -> None:
            for pending in thread.in_doubt:
                call = pending.call
                if call.id in thread.retries_requested:
                    continue
                why = f"call {call.id!r} of tool {call.name!r} is in doubt: {reason}"
                thread.pause_in_doubt(call.id, why, now=self._clock())

        self._change(thread_id, pause, leased=True)

    def request_retry(
        self,
        thread_id: str,
        tool_call_id: str = "",
        *,
        reviewer: Reviewer,
        pause: object = None,
    ) -> None:
        """Ask for a call in doubt to run again with its idempotency key, or (no call
        named) for the thread's failed run to be tried again: the next runner does it.
        ``pause`` is as for :meth:`answer` (with a call only).

        Raises:
            ThreadBusyError: A runner holds the thread (``ToolCallRunningError``: a call's
                tool, past its timeout, still runs in this process).
            StalePauseError: ``pause`` is no longer pending on that call.
            ThreadStateError: The call is not in doubt, or the thread's run did not fail.
            ReviewerNotPermittedError: The reviewer could not have made the approval
                the call ran under (a scope of its review or of a limit its approved
                arguments exceed), or it was approved under four eyes, which one
                person's retry would undo; nothing was recorded.
        """

        def retry(thread: AgentThread) -> None:
            _check(thread, pause, tool_call_id or None, reviewer, runs_again=True)
            thread.request_retry(tool_call_id, by=reviewer.id, now=self._clock())

        self._change(thread_id, retry, leased=True)

    # The thread ---------------------------------------------------------------------

    def abandon(
        self,
        thread_id: str,
        reason: object = "",
        *,
        reviewer: Reviewer | None = None,
        pause: object = None,
    ) -> None:
        """Give a thread up: its pending pauses leave the reviewer queue and no run starts
        on it again (a fork of it still can). A run going on it records the results of
        the calls that ran and stops. With ``pause`` (the token of the pause the person
        gave the thread up from), only while that pause is still pending.

        A person (``reviewer``) says why, and may give up only a thread whose pending
        reviews they may all decide: giving it up ends each of them.

        Raises:
            InvalidDecisionError: The reason is no text or too long, or a person gave
                none (or one that shows nothing).
            StalePauseError: ``pause`` is no longer pending on the thread.
            ThreadStateError: It is abandoned already.
            ReviewerNotPermittedError: A call the thread waits on is one the reviewer
                may not act on (see :meth:`settle`); nothing was recorded.
        """
        text = person_text(reason, "reason", required=reviewer is not None)
        by = reviewer.id if reviewer else ""

        def abandon(thread: AgentThread) -> None:
            if reviewer is not None:  # first: a stale pause's refusal says what is pending
                _check_may_give_up(thread, reviewer)
            _check(thread, pause, None, None)
            thread.abandon(text, by=by, now=self._clock())

        self._change(thread_id, abandon)

    def label(self, thread_id: str, name: str, *, version: int | None = None) -> None:
        """Give the thread, or one of its versions, a label (a name labels one thing).

        Raises:
            ThreadStateError: The name is blank or the version does not exist.
        """
        self._change(thread_id, lambda t: t.label(name, version=version, now=self._clock()))

    # Submitted input ----------------------------------------------------------------

    def take_input(
        self, thread_id: str, submitted: Submitted, *, thread_version: int
    ) -> InputSubmitted | None:
        """Record that the runner holding the thread's lease takes the next submission
        waiting, before it runs it: only if no other runner took one since it read
        ``submitted`` (the thread's submissions, read under the lease), and fenced by the
        lease as a save is (ADR 0105). Submissions appended since are followed, as a
        save follows the events that commute with it: the one to run is the same.

        Args:
            thread_id: The thread.
            submitted: Its submissions, from ``store.submissions.submitted(thread_id)``.
            thread_version: The thread's version the runner found (0 before its first
                event): a taker that dies is known by no run started after it.

        Returns:
            The submission taken, to run; None when none waits.

        Raises:
            InvalidThreadIdError: ``thread_id`` is no thread's id.
            ConfigurationError: ``submitted`` is no Submitted, holds another thread's
                submissions, or is not the thread's as stored up to its version (built
                or edited by hand), or ``thread_version`` is no whole number from 0 to
                2**63-1 or is past the thread's latest version.
            ReadOnlyStoreError: The store was opened read-only.
            LeaseLostError: The current task holds no lease of the thread, another
                runner took input since, or the lease was lost; nothing was recorded.
        """
        return self.store.submissions.take(thread_id, submitted, thread_version)

    # Runs ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def session(
        self,
        thread_id: str,
        *,
        thread: AgentThread | None = None,
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> Iterator[RunSession]:
        """Hold the thread's run lease for a run, with the thread loaded under it; when
        the run ends without an error, store a snapshot of it if one is due at rest
        (:meth:`RunSession.rest`), still under the lease.

        Args:
            thread_id: The thread; started (not yet saved) when the store has none.
            thread: The runner's own copy, used instead of loading one while the store
                holds nothing newer (a decision recorded elsewhere makes it reload).
            migrators: The application's snapshot upcasters, for loading it.

        Raises:
            ThreadBusyError: Another runner holds the lease (``ToolCallRunningError``: a
                tool call of the thread still runs in this process, past its timeout).
        """
        refuse_while_running(self.store, thread_id)  # no lease is taken then
        with self.store.lease(thread_id) as lease:
            # Again under it: a runner may have let it go with a call still running.
            refuse_while_running(self.store, thread_id)
            session = RunSession(self.store, lease, self._current(thread_id, thread, migrators))
            yield session
            session.rest()  # not after an error: the run did not come to rest

    @contextlib.asynccontextmanager
    async def asession(
        self,
        thread_id: str,
        *,
        thread: AgentThread | None = None,
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> AsyncIterator[RunSession]:
        """Like :meth:`session`, for asyncio: the store is asked in worker threads."""
        refuse_while_running(self.store, thread_id)  # no lease is taken then
        async with self.store.alease(thread_id) as lease:
            await asyncio.to_thread(refuse_while_running, self.store, thread_id)
            current = await asyncio.to_thread(self._current, thread_id, thread, migrators)
            session = RunSession(self.store, lease, current)
            yield session
            await asyncio.to_thread(session.rest)

    # Internals ----------------------------------------------------------------------

    def _current(
        self, thread_id: str, copy: AgentThread | None, migrators: Mapping[int, Upcaster]
    ) -> AgentThread:
        """The runner's ``copy`` if the store holds nothing newer (or it has unsaved
        events, which its first commit reconciles), else the thread as stored, or a new
        one."""
        if copy is not None and (
            copy.pending_events or self.store.head_version(thread_id) == copy.version
        ):
            return copy
        found = self.store.find(thread_id, snapshot_migrators=migrators)
        return found or AgentThread.start(thread_id, now=self._clock())

    def _change(
        self, thread_id: str, command: Callable[[AgentThread], T], *, leased: bool = False
    ) -> T:
        """Load the thread, apply ``command`` and save; once more from the stored head if
        another writer got in between (so a thread is loaded at most twice)."""
        if leased and not self.store.exists(thread_id):  # no lease is taken of nothing
            raise ThreadNotFoundError.in_store(thread_id, self.store.url)
        for attempt in range(2):
            lease = self.store.lease(thread_id) if leased else contextlib.nullcontext()
            with lease:
                if leased:  # under the lease: a runner may have let go with a call running
                    refuse_while_running(self.store, thread_id)
                thread = self.store.load(thread_id)
                result = command(thread)
                try:
                    self.store.save(thread)
                except ThreadConflictError:
                    if attempt:
                        raise
                    continue
                return result
        raise AssertionError("unreachable")  # pragma: no cover


def _check(
    thread: AgentThread,
    pause: object,
    tool_call_id: str | None,
    reviewer: Reviewer | None,
    *,
    runs_again: bool = False,
) -> None:
    """Refuse a person's command on a pause unless the call's review (if any) lets them
    act on it, ``runs_again`` or not (the application itself, no reviewer, may), and the
    pause it names (if any) is still pending: in that order, since a stale pause's
    refusal says what is pending on the thread now."""
    if reviewer is not None and tool_call_id:
        check_may_act_on_call(
            thread.reviews,
            tool_call_id,
            reviewer=reviewer.id,
            scopes=reviewer.scopes,
            runs_again=runs_again,
        )
    if pause is not None:
        check_pause(thread, pause, tool_call_id)


def _check_may_give_up(thread: AgentThread, reviewer: Reviewer) -> None:
    """Refuse a person's giving up of a thread that waits on a review, a pause or a call
    in doubt of a reviewed call they may not act on: it would end, unseen, what the
    queue never shows them, or a call they may not settle."""
    waiting = [p.interrupt.tool_call_id for p in thread.pauses if not p.resolved]
    waiting += [review.request.tool_call_id for review in thread.reviews.pending]
    waiting += [pending.call.id for pending in thread.in_doubt]
    for tool_call_id in dict.fromkeys(waiting):
        # Why, as deciding says it (the scopes needed), but not which call: its id is
        # not theirs to learn (ADR 0152).
        reason = call_refusal(thread.reviews.naming(tool_call_id), reviewer.scopes)
        if reason is not None:
            msg = (
                f"thread {thread.thread_id!r} cannot be given up by reviewer "
                f"{reviewer.id!r}: it waits on a call they may not act on: {reason}"
            )
            raise ReviewerNotPermittedError(msg)


def _check_reviewer(reviewer: object) -> None:
    """A command's reviewer is one :meth:`ThreadService.reviewer` verified.

    Raises:
        ConfigurationError: It is not a ``Reviewer``.
    """
    check_instance("reviewer", reviewer, Reviewer, "a Reviewer, from ThreadService.reviewer")
