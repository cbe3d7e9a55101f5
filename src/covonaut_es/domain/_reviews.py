"""Reviews that authorize: records bound to one exact operation.

A call of a tool that requires approval runs only if the thread's own record holds an
unused approval of the same *operation*: the same tool name and arguments, compared by
their :func:`operation_digest`. Reviews, decisions and uses of approvals are events of
the thread (see ``AgentThread.ReviewRequested``, ``ReviewDecided``, ``ApprovalUsed``);
this module holds their value types, the digest and the texts the model reads. It does
no I/O and reads no clock.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import msgspec

from covonaut_es.domain._canonical import canonical_json, jcs, json_data
from covonaut_es.domain._tool_pins import ToolPin
from covonaut_es.errors import ReviewExpiredError, ReviewNotFoundError, StaleReviewError

# Values ---------------------------------------------------------------------------------


class Decision(enum.StrEnum):
    """What a reviewer decided."""

    APPROVED = "approved"
    REJECTED = "rejected"
    RESPONDED = "responded"
    """The reviewer answered in the tool's place: the answer is the call's result and
    the operation never runs."""
    EXPIRED = "expired"
    """No reviewer decided before the review's deadline: it failed closed, so the
    operation never runs, and the thread goes on as after a rejection."""


ALL_DECISIONS = (Decision.APPROVED, Decision.REJECTED, Decision.RESPONDED)
"""The decisions a review allows unless its tool's policy says otherwise."""

MAX_DESCRIPTION_CHARS = 4000
"""The longest description a review request records; a longer one is cut there."""


class ReviewLimit(msgspec.Struct, frozen=True):
    """Above ``maximum``, the argument ``argument`` needs one of ``scopes`` to approve.

    Checked on the arguments an approval covers (the reviewer's edit, if any): an
    edit cannot raise an amount past what its reviewer may approve. A value that is no
    number (or a boolean) counts as above every limit; an argument that is absent is
    under it.

    Attributes:
        argument: A top-level argument's name, e.g. ``"amount"``.
        maximum: The largest value approvable without ``scopes``.
        scopes: The scopes of which a reviewer needs one to approve more.
    """

    argument: str
    maximum: int | float
    scopes: tuple[str, ...]

    def exceeded_by(self, arguments: Mapping[str, Any]) -> bool:
        """Whether ``arguments`` hold this argument above the maximum."""
        if self.argument not in arguments:
            return False
        value = arguments[self.argument]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return True
        return value > self.maximum


class ReviewRules(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a review's tool allows, as recorded in the request (see the module).

    Attributes:
        decisions: The decisions a reviewer may make.
        editable: The top-level arguments an approval may change (add, remove or
            alter); None: any. An empty tuple forbids editing.
        description: Text for the reviewer, built by the tool from the arguments;
            shown as text, never as markup.
        scopes: A reviewer needs one of these to decide; empty: any verified reviewer.
        limits: Argument values above which an approval needs more scope.
        four_eyes: An approval takes two different reviewers: the first is recorded
            as an approval in part, the second completes it; a rejection by either
            rejects.
    """

    decisions: tuple[Decision, ...] = ALL_DECISIONS
    editable: tuple[str, ...] | None = None
    description: str = ""
    scopes: tuple[str, ...] = ()
    limits: tuple[ReviewLimit, ...] = ()
    four_eyes: bool = False


DEFAULT_RULES = ReviewRules()
"""The rules of a review whose tool declares no policy (and of reviews recorded before
policies existed): any verified reviewer may decide anything."""


class ReviewRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    """A request for a person to approve one exact operation.

    It is the ``data`` of the interrupt that pauses the run (see :meth:`to_data`).

    Attributes:
        review_id: Unique across threads; pass it to ``Agent.approve`` or ``reject``.
        thread_id: The thread whose call asked for the review.
        tool_name: The tool the model called.
        arguments: The call's arguments, in canonical (key-sorted) order.
        digest: The :func:`operation_digest` of tool name and arguments.
        tool_call_id: The call that asked for the review; it does not run.
        tool: For a tool from a server (MCP), the tool exactly as the model was
            offered it; the digest then covers it too. None for the application's own
            tools.
        tool_changed: Not empty when an earlier review of this tool name covered
            another tool (the server changed it): says what changed.
        run_on_approval: An approval runs the held-back call itself, with the approved
            arguments, when the thread next runs (``Tool(run_on_approval=True)``): no
            model call is needed to run it. False: the approval authorizes the model's
            next call of the same operation.
        deadline: When the review expires unless decided (see ``Tool.review_deadline``);
            None when it waits for a decision as long as it takes.
        rules: What the tool's review policy allows on this review (who may decide,
            which decisions, which edits); None: anything, for any verified reviewer.
        may_have_run: The call may have run already: it was in doubt, and its retry
            asks for this review (a fork retrying a call its parent ran under an
            approval, whose authority it does not inherit). An approval runs it again,
            with its idempotency key (``run_on_approval`` is set); any other decision
            leaves it in doubt, for a person to settle, since none knows what it did.
    """

    review_id: str
    thread_id: str
    tool_name: str
    arguments: dict[str, Any]
    digest: str
    tool_call_id: str
    tool: ToolPin | None = None
    tool_changed: str = ""
    run_on_approval: bool = False
    deadline: datetime | None = None

    def expired(self, now: datetime) -> bool:
        """Whether the review's deadline has passed at ``now``: no decision counts then."""
        return self.deadline is not None and now >= self.deadline

    rules: ReviewRules | None = None
    may_have_run: bool = False

    def to_data(self) -> dict[str, Any]:
        """The request as plain JSON data, sharing nothing with this object."""
        data: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return data


class ReviewDecision(msgspec.Struct, frozen=True):
    """A verified reviewer's decision on a review: the record that authorizes a call.

    Attributes:
        review_id: The review decided.
        digest: The operation digest the decision covers.
        decision: Approved or rejected.
        reviewer: The reviewer id the :class:`~covonaut_es.runtime.ReviewerVerifier` returned.
        comment: The reviewer's comment, or the reason for a rejection.
        decided_at: When the decision was recorded.
        thread_id: The thread whose stream recorded it; an approval authorizes calls of
            that thread only (a fork inherits the decisions made before it, not their
            authority).
        arguments: For an approval with edited arguments, the arguments the reviewer
            approved instead of the requested ones; ``digest`` is then theirs. None
            otherwise.
        partial: Under four eyes, a first reviewer's approval in part: it authorizes
            nothing until a second, different reviewer approves.
    """

    review_id: str
    digest: str
    decision: Decision
    reviewer: str
    comment: str
    decided_at: datetime
    thread_id: str
    arguments: dict[str, Any] | None = None
    partial: bool = False


class Review(msgspec.Struct, frozen=True, omit_defaults=True):
    """A review as the thread records it.

    Attributes:
        request: What was asked.
        decision: The decision, or None while pending.
        used_by: For an approval, the id of the tool call it authorized, once used.
        used_by_key: That call's idempotency key: unlike call ids, which models may
            repeat, it names one recorded call.
        warned: Whether a notice that its deadline nears was recorded.
        approvals: Under four eyes, the approval in part of the first reviewer while
            the review waits for a second.
    """

    request: ReviewRequest
    decision: ReviewDecision | None = None
    used_by: str | None = None
    used_by_key: str | None = None
    warned: bool = False
    approvals: tuple[ReviewDecision, ...] = ()

    @property
    def pending(self) -> bool:
        """Whether the review still awaits a decision."""
        return self.decision is None

    @property
    def approved(self) -> bool:
        """Whether the review was decided and approved."""
        return self.decision is not None and self.decision.decision is Decision.APPROVED

    @property
    def usable(self) -> bool:
        """Whether this is an approval that no call has used yet."""
        return self.approved and self.used_by is None

    def authorizes(self, idempotency_key: str) -> bool:
        """Whether this is an approval used by the call with that idempotency key."""
        return self.approved and self.used_by_key == idempotency_key

    @property
    def runs_call(self) -> bool:
        """Whether this is an approval that runs the call it held back (see
        ``ReviewRequest.run_on_approval``)."""
        return self.approved and self.request.run_on_approval

    @property
    def approved_arguments(self) -> dict[str, Any]:
        """The arguments the decision approved: the reviewer's edit, else the request's."""
        if self.decision is not None and self.decision.arguments is not None:
            return self.decision.arguments
        return self.request.arguments

    @property
    def answers_call(self) -> bool:
        """Whether the decision stands in for the result of the call it held back: the
        review is decided, and not by an approval that runs the call. No decision stands
        for the result of a call that may have run (``ReviewRequest.may_have_run``): none
        knows what it did, and a person settles it. The thread records that result with
        the decision; a state between the two (a fork, a time-travel view or a saved
        state taken there) records it at its next run."""
        return self.decision is not None and not self.runs_call and not self.request.may_have_run

    @property
    def holds_back_call(self) -> bool:
        """Whether the call this review asked about waits on it without having run:
        the review awaits a decision, or it is an approval that runs the call and is
        not spent yet."""
        return self.pending or (self.runs_call and self.used_by is None)

    @property
    def accounts_for_call(self) -> bool:
        """Whether this review accounts for its call having no result: it holds the
        call back, or its decision stands for the result. Such a call is not in doubt:
        it waits on the review, or the decision is what the model reads for it."""
        return self.holds_back_call or self.answers_call


class ReviewLedger(msgspec.Struct, frozen=True):
    """Every review of a thread, in request order (internal to ``AgentThread``).

    Decisions stand until the next user input: ``reviews[standing_from:]`` are the
    reviews asked for since then. Within that span a rejected or used-up operation is
    refused without asking again; new user input starts afresh.
    """

    reviews: tuple[Review, ...] = ()
    standing_from: int = 0

    def get(self, review_id: str) -> Review | None:
        """The review with that id, if this thread has one."""
        return next((r for r in self.reviews if r.request.review_id == review_id), None)

    def naming(self, tool_call_id: str) -> tuple[Review, ...]:
        """Every review that held back the call, or whose approval it spent, oldest
        first: a fork asked to run again a call its parent approved asks a review of its
        own, after the parent's."""
        return tuple(r for r in self.reviews if tool_call_id in (r.request.tool_call_id, r.used_by))

    def undecided(self, review_id: str, *, thread_id: str) -> Review:
        """The review with that id, which must still await a decision.

        Raises:
            ReviewNotFoundError: This thread has no such review.
            StaleReviewError: The review was decided already (``ReviewExpiredError``:
                it expired).
        """
        review = self.get(review_id)
        if review is None:
            msg = (
                f"thread {thread_id!r} has no review {review_id!r}; decide a review "
                "through the agent of the thread named in its request"
            )
            raise ReviewNotFoundError(msg)
        if review.decision is not None and review.decision.decision is Decision.EXPIRED:
            by = review.decision.comment or "the sweeping clock"
            msg = (
                f"review {review_id!r} of thread {thread_id!r} expired at "
                f"{_deadline_text(review.request)} without a decision (recorded at "
                f"{review.decision.decided_at.isoformat()} by {by}): it failed closed "
                "and decides nothing now; a new call of the operation, after new user "
                "input, asks for a new review"
            )
            raise ReviewExpiredError(msg)
        if review.decision is not None:
            msg = (
                f"review {review_id!r} of thread {thread_id!r} was already "
                f"{review.decision.decision} by {review.decision.reviewer!r}, so it is stale "
                "(the thread may have moved on); a review is decided once, and a new call "
                "of the operation asks for a new review"
            )
            raise StaleReviewError(msg)
        return review

    @property
    def pending(self) -> tuple[Review, ...]:
        """Reviews awaiting a decision."""
        return tuple(r for r in self.reviews if r.pending)

    def due(self, now: datetime) -> tuple[Review, ...]:
        """Pending reviews whose deadline has passed at ``now``."""
        return tuple(r for r in self.pending if r.request.expired(now))

    def nearing(self, now: datetime, lead: timedelta) -> tuple[Review, ...]:
        """Pending reviews not yet warned of whose deadline is less than ``lead`` away
        at ``now`` and has not passed."""
        return tuple(
            r
            for r in self.pending
            if not r.warned
            and r.request.deadline is not None
            and not r.request.expired(now)
            and near(r.request.deadline, now, lead)
        )

    def awaiting(self, tool_call_id: str) -> Review | None:
        """The pending review that holds back that call, if any."""
        return next((r for r in self.pending if r.request.tool_call_id == tool_call_id), None)

    def of_call(self, tool_call_id: str) -> Review | None:
        """The review that call asked for, if any (a call id names one call of a
        thread, and a call asks for one review)."""
        return next(
            (r for r in reversed(self.reviews) if r.request.tool_call_id == tool_call_id), None
        )

    def answering(self, tool_call_id: str) -> Review | None:
        """The decided review whose decision stands in for that call's result, if any
        (see :attr:`Review.answers_call`)."""
        review = self.of_call(tool_call_id)
        return review if review is not None and review.answers_call else None

    def decided_ids(self) -> frozenset[str]:
        """The ids of the reviews decided (in part does not count)."""
        return frozenset(r.request.review_id for r in self.reviews if not r.pending)

    def holding_back(self, tool_call_id: str) -> Review | None:
        """The review that call waits on without having run, if any (see
        :attr:`Review.holds_back_call`): what a stored claim of doubt is checked
        against, as it was when the claim was recorded."""
        review = self.of_call(tool_call_id)
        return review if review is not None and review.holds_back_call else None

    def accounting_for(self, tool_call_id: str) -> Review | None:
        """The review that accounts for that call having no result, if any (see
        :attr:`Review.accounts_for_call`)."""
        review = self.of_call(tool_call_id)
        return review if review is not None and review.accounts_for_call else None

    def runs_on_approval(
        self, tool_call_id: str, digests: frozenset[str], *, thread_id: str
    ) -> Review | None:
        """The approval of thread ``thread_id`` that runs that very call with one of
        its operation's ``digests`` (:func:`operation_digests`; unspent, or spent by it),
        if any: it rules on the call before any other approval of the same operation,
        so the record says which decision ran which call."""
        review = self.of_call(tool_call_id)
        if (
            review is None
            or not review.runs_call
            or review.decision is None
            or review.decision.digest not in digests
            or review.decision.thread_id != thread_id
        ):
            return None
        return review

    def standing(
        self, digests: frozenset[str], idempotency_key: str, *, thread_id: str
    ) -> Review | None:
        """The decided review that rules now on a call of thread ``thread_id`` with one
        of its operation's ``digests`` (:func:`operation_digests`) and that idempotency
        key.

        In order: an approval that call already used (a retry of the same call), an
        unused approval, a rejection, an approval used by another call. None when no
        decision stands, so the call needs a review of its own. Decisions recorded by
        another thread never count: a fork inherits its parent's history, and an
        approval spendable in both would run twice. Nor does an unspent approval that
        runs the call it held back: it is that call's alone (:meth:`runs_on_approval`).
        """
        decided = [
            r
            for r in self.reviews[self.standing_from :]
            if r.decision is not None
            and r.decision.digest in digests
            and r.decision.decision is not Decision.RESPONDED
            and r.decision.thread_id == thread_id
            and not (r.runs_call and r.used_by is None)
        ]
        rulings = (
            (r for r in decided if r.authorizes(idempotency_key)),
            (r for r in decided if r.usable),
            (r for r in decided if not r.approved),
            iter(decided),
        )
        for candidates in rulings:
            review = next(candidates, None)
            if review is not None:
                return review
        return None

    def requested(self, request: ReviewRequest) -> ReviewLedger:
        """With a new pending review."""
        return msgspec.structs.replace(self, reviews=(*self.reviews, Review(request)))

    def approved_in_part(self, approval: ReviewDecision) -> ReviewLedger:
        """With a first reviewer's approval in part of a review under four eyes."""
        review = self.get(approval.review_id)
        assert review is not None
        return self._replace(approval.review_id, approvals=(*review.approvals, approval))

    def decided(self, decision: ReviewDecision) -> ReviewLedger:
        """With a review's decision recorded."""
        return self._replace(decision.review_id, decision=decision)

    def used(self, review_id: str, tool_call_id: str, idempotency_key: str) -> ReviewLedger:
        """With an approval marked as used by a call."""
        return self._replace(review_id, used_by=tool_call_id, used_by_key=idempotency_key)

    def warned(self, review_id: str) -> ReviewLedger:
        """With a review's nearing deadline noted."""
        return self._replace(review_id, warned=True)

    def lapsed(self) -> ReviewLedger:
        """With every decision so far no longer standing (new user input)."""
        return msgspec.structs.replace(self, standing_from=len(self.reviews))

    def _replace(self, review_id: str, **changes: Any) -> ReviewLedger:
        reviews = tuple(
            msgspec.structs.replace(r, **changes) if r.request.review_id == review_id else r
            for r in self.reviews
        )
        return msgspec.structs.replace(self, reviews=reviews)


# The operation digest ---------------------------------------------------------------------


DIGEST_PREFIX = "jcs-sha256:"
"""What an operation digest computed under ADR 0048 starts with: the SHA-256 of the RFC
8785 canonical JSON of the operation, in hex. One recorded before has no prefix: the
SHA-256 of msgspec's sorted JSON of it."""


def near(deadline: datetime, now: datetime, lead: timedelta) -> bool:
    """Whether ``deadline`` is at most ``lead`` away at ``now`` (or past): compared as a
    difference, which no time of the log overflows, where ``deadline - lead`` overflows
    near ``datetime.min``."""
    return deadline - now <= lead


def operation_digest(
    tool_name: str,
    arguments: dict[str, Any],
    tool: ToolPin | None = None,
    *,
    like: str | None = None,
) -> str:
    """The digest of the operation ``{"arguments": ..., "tool_name": ...}``, with
    ``"tool": <the pin's digest>`` too for a tool from a server: ``jcs-sha256:`` and the
    SHA-256 (hex) of its RFC 8785 canonical JSON.

    An approval covers exactly the operation with this digest: for a pinned tool, that
    server's tool with that schema and description, no other.

    Args:
        tool_name: The tool's name.
        arguments: The call's arguments.
        tool: The pin of a server's tool, or None.
        like: A digest recorded earlier (a review's, an approval's): the digest is then
            computed the way that one was, so that an approval recorded before ADR 0048
            (a bare hex digest over msgspec's sorted JSON) still covers its operation:
            ``approval.digest == operation_digest(name, args, like=approval.digest)``.
    """
    operation = _operation(tool_name, arguments, tool)
    if like is not None and not like.startswith(DIGEST_PREFIX):
        return _digest_before_jcs(operation)
    return _digest(operation)


def operation_digests(
    tool_name: str, arguments: dict[str, Any], tool: ToolPin | None = None
) -> frozenset[str]:
    """The digests of an operation that a recorded one may equal: today's, and the one
    an approval recorded before ADR 0048 holds."""
    operation = _operation(tool_name, arguments, tool)
    return frozenset((_digest(operation), _digest_before_jcs(operation)))


def _operation(tool_name: str, arguments: dict[str, Any], tool: ToolPin | None) -> dict[str, Any]:
    data = json_data(arguments, where=f"the arguments of {tool_name!r}")
    operation: dict[str, Any] = {"arguments": data, "tool_name": tool_name}
    if tool is not None:
        operation["tool"] = tool.digest
    return operation


def _digest(operation: dict[str, Any]) -> str:
    return DIGEST_PREFIX + hashlib.sha256(jcs(operation)).hexdigest()


def _digest_before_jcs(operation: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(operation)).hexdigest()


def review_reason(request: ReviewRequest) -> str:
    """The reason of the interrupt that asks for a review."""
    return f"{request.tool_name} needs a reviewer's approval (review {request.review_id})"


def decision_text(review: Review) -> str:
    """The tool result of the call that asked for a review, once it is decided."""
    assert review.decision is not None
    decided, request = review.decision, review.request
    if decided.decision is Decision.RESPONDED:
        return decided.comment
    if decided.decision is Decision.EXPIRED:
        return (
            f"Expired (review {decided.review_id}): no reviewer decided by "
            f"{_deadline_text(request)}. The operation did not run."
        )
    if decided.decision is Decision.REJECTED:
        return (
            f"Rejected by {decided.reviewer} (review {decided.review_id}): "
            f"{decided.comment or 'no reason given'}. The operation did not run."
        )
    note = f": {decided.comment}" if decided.comment else ""
    if decided.arguments is not None:
        edited = canonical_json(decided.arguments).decode()
        return (
            f"Approved by {decided.reviewer} (review {decided.review_id}) with edited "
            f"arguments {edited}{note}. The operation has not run yet: call "
            f"{request.tool_name} again with exactly these arguments to run it once."
        )
    return (
        f"Approved by {decided.reviewer} (review {decided.review_id}){note}. The operation "
        f"has not run yet: call {request.tool_name} again with the same arguments to run "
        "it once."
    )


def ran_text(review: Review, content: str, *, ran: bool = True) -> str:
    """The result of a call an approval runs: the tool's own, after a note of the
    reviewer's edit when the arguments were edited, so the model knows what ran, or
    (not ``ran``: the approved arguments were refused, say) that they did not run."""
    decided = review.decision
    if decided is None or decided.arguments is None:
        return content
    edited = canonical_json(decided.arguments).decode()
    note = (
        f"with the arguments {decided.reviewer} approved in review {decided.review_id} "
        f"instead of the requested ones: {edited}."
    )
    return f"Ran {note} Result:\n{content}" if ran else f"Did not run {note} {content}"


def refusal_text(review: Review) -> str:
    """The tool result of a call that a standing decision keeps from running."""
    decided = review.decision
    assert decided is not None
    if decided.decision is Decision.EXPIRED:
        return (
            f"Not executed: review {decided.review_id} of this operation expired at "
            f"{_deadline_text(review.request)} without a decision."
        )
    if decided.decision is Decision.REJECTED:
        return (
            f"Not executed: this operation was rejected by {decided.reviewer} "
            f"(review {decided.review_id}): {decided.comment or 'no reason given'}."
        )
    return (
        f"Not executed: the approval of this operation by {decided.reviewer} "
        f"(review {decided.review_id}) was already used by call {review.used_by}; an "
        "approval covers one execution."
    )


def _deadline_text(request: ReviewRequest) -> str:
    assert request.deadline is not None
    return request.deadline.isoformat()
