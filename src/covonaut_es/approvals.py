"""Approvals that authorize: review records bound to one exact operation (B18-B20).

A call of a tool that requires approval runs only if the thread's own record holds an
unused approval of the same *operation*: the same tool name and arguments, compared by
their :func:`operation_digest`. Reviews, decisions and uses of approvals are events of
the thread (see ``AgentThread.ReviewRequested``, ``ReviewDecided``, ``ApprovalUsed``);
this module holds their value types, the digest, the reviewer verification and the texts
the model reads. It does no I/O.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

import attrs
import msgspec

from covonaut_es.errors import (
    ConfigurationError,
    ReviewerNotVerifiedError,
    ReviewNotFoundError,
    StaleReviewError,
)

# Values ---------------------------------------------------------------------------------


class Decision(enum.StrEnum):
    """What a reviewer decided."""

    APPROVED = "approved"
    REJECTED = "rejected"


class ReviewRequest(msgspec.Struct, frozen=True):
    """A request for a person to approve one exact operation.

    It is the ``data`` of the interrupt that pauses the run (see :meth:`to_data`).

    Attributes:
        review_id: Unique across threads; pass it to ``Agent.approve`` or ``reject``.
        thread_id: The thread whose call asked for the review.
        tool_name: The tool the model called.
        arguments: The call's arguments, in canonical (key-sorted) order.
        digest: The :func:`operation_digest` of tool name and arguments.
        tool_call_id: The call that asked for the review; it does not run.
    """

    review_id: str
    thread_id: str
    tool_name: str
    arguments: dict[str, Any]
    digest: str
    tool_call_id: str

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
        reviewer: The reviewer id the :class:`ReviewerVerifier` returned.
        comment: The reviewer's comment, or the reason for a rejection.
        decided_at: When the decision was recorded.
        thread_id: The thread whose stream recorded it; an approval authorizes calls of
            that thread only (a fork inherits the decisions made before it, not their
            authority).
    """

    review_id: str
    digest: str
    decision: Decision
    reviewer: str
    comment: str
    decided_at: datetime
    thread_id: str


class Review(msgspec.Struct, frozen=True, omit_defaults=True):
    """A review as the thread records it.

    Attributes:
        request: What was asked.
        decision: The decision, or None while pending.
        used_by: For an approval, the id of the tool call it authorized, once used (B20).
        used_by_key: That call's idempotency key: unlike call ids, which models may
            repeat, it names one recorded call.
    """

    request: ReviewRequest
    decision: ReviewDecision | None = None
    used_by: str | None = None
    used_by_key: str | None = None

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

    def undecided(self, review_id: str, *, thread_id: str) -> Review:
        """The review with that id, which must still await a decision.

        Raises:
            ReviewNotFoundError: This thread has no such review.
            StaleReviewError: The review was decided already.
        """
        review = self.get(review_id)
        if review is None:
            msg = (
                f"thread {thread_id!r} has no review {review_id!r}; decide a review "
                "through the agent of the thread named in its request"
            )
            raise ReviewNotFoundError(msg)
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

    def awaiting(self, tool_call_id: str) -> Review | None:
        """The pending review that holds back that call, if any."""
        return next((r for r in self.pending if r.request.tool_call_id == tool_call_id), None)

    def standing(self, digest: str, idempotency_key: str, *, thread_id: str) -> Review | None:
        """The decided review that rules now on a call of thread ``thread_id`` with that
        operation digest and idempotency key.

        In order: an approval that call already used (a retry of the same call), an
        unused approval, a rejection, an approval used by another call. None when no
        decision stands, so the call needs a review of its own. Decisions recorded by
        another thread never count: a fork inherits its parent's history, and an
        approval spendable in both would run twice.
        """
        decided = [
            r
            for r in self.reviews[self.standing_from :]
            if r.request.digest == digest
            and r.decision is not None
            and r.decision.thread_id == thread_id
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

    def decided(self, decision: ReviewDecision) -> ReviewLedger:
        """With a review's decision recorded."""
        return self._replace(decision.review_id, decision=decision)

    def used(self, review_id: str, tool_call_id: str, idempotency_key: str) -> ReviewLedger:
        """With an approval marked as used by a call."""
        return self._replace(review_id, used_by=tool_call_id, used_by_key=idempotency_key)

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


def canonical_json(value: Any) -> bytes:
    """JSON with object keys sorted (by code point) at every level, no whitespace, UTF-8.

    Equal parsed values give equal bytes, whatever the key order and spacing of the
    text they were parsed from. Numbers keep their kind: ``40`` and ``40.0`` differ.
    """
    return msgspec.json.encode(value, order="sorted")


def operation_digest(tool_name: str, arguments: dict[str, Any]) -> str:
    """The SHA-256 (hex) of the canonical JSON of ``{"arguments": ..., "tool_name": ...}``.

    An approval covers exactly the operation with this digest (B19, B20).
    """
    operation = {"arguments": arguments, "tool_name": tool_name}
    return hashlib.sha256(canonical_json(operation)).hexdigest()


# Reviewers --------------------------------------------------------------------------------


class ReviewerVerifier(Protocol):
    """Establishes who a reviewer is from a credential the application passes on.

    ``Agent.approve`` and ``Agent.reject`` record a decision only under the reviewer id
    returned here, never under a name the caller asserts.
    """

    def verify(self, credential: Any) -> str:
        """The verified reviewer id.

        Raises:
            ReviewerNotVerifiedError: The credential is invalid, expired or not one this
                verifier understands.
        """
        ...


_TOKEN_CONTEXT = b"covonaut-es reviewer token v1\x00"
RECOMMENDED_SECRET_BYTES = 32

logger = logging.getLogger("covonaut_es")


class _TokenClaims(msgspec.Struct, frozen=True):
    sub: str
    exp: float


def _secret_bytes(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def _check_secret(_: object, __: attrs.Attribute[bytes], secret: bytes) -> None:
    if not secret:
        msg = (
            "an HMAC reviewer secret must not be empty; generate one with "
            f"secrets.token_bytes({RECOMMENDED_SECRET_BYTES})"
        )
        raise ConfigurationError(msg)
    if len(secret) < RECOMMENDED_SECRET_BYTES:
        logger.warning(
            "HMAC reviewer secret has %d bytes, fewer than the %d recommended: tokens are "
            "easier to forge by guessing it",
            len(secret),
            RECOMMENDED_SECRET_BYTES,
        )


def _epoch_seconds() -> float:
    return time.time()  # looked up per call, so tests may patch time.time


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@attrs.frozen
class HmacReviewerVerifier:
    """Verifies reviewer tokens signed with HMAC-SHA256 under a shared secret.

    A token names a reviewer id and an expiry time; its signature is checked in
    constant time. Issue tokens where reviewers sign in, verify them where decisions
    are recorded: both sides need the same secret, and nothing else.

    Attributes:
        secret: Random bytes, 32 or more (a ``str`` is taken as UTF-8); a shorter one
            is logged as a warning. Keep it secret: whoever has it can issue tokens for
            any reviewer.
        clock: Seconds since the epoch, for expiry.
    """

    secret: bytes = attrs.field(converter=_secret_bytes, validator=_check_secret, repr=False)
    clock: Callable[[], float] = attrs.field(default=_epoch_seconds, kw_only=True)

    def issue_token(self, reviewer_id: str, ttl_seconds: float) -> str:
        """A token that verifies as ``reviewer_id`` for ``ttl_seconds`` from now (zero
        or less gives a token that is already expired)."""
        if not reviewer_id:
            msg = "a reviewer id must not be empty"
            raise ValueError(msg)
        claims = _TokenClaims(sub=reviewer_id, exp=self.clock() + ttl_seconds)
        payload = _b64(msgspec.json.encode(claims))
        return f"{payload}.{_b64(self._sign(payload))}"

    def verify(self, credential: Any) -> str:
        """The reviewer id of a valid, unexpired token this verifier's secret signed.

        Raises:
            ReviewerNotVerifiedError: The token is malformed, tampered with, signed
                under another secret or expired.
        """
        if not isinstance(credential, str) or credential.count(".") != 1:
            msg = (
                "expected a reviewer token as issued by HmacReviewerVerifier.issue_token, "
                f"got a {type(credential).__name__} that is not one; sign in again"
            )
            raise ReviewerNotVerifiedError(msg)
        payload, signature = credential.split(".")
        if not hmac.compare_digest(_b64(self._sign(payload)).encode(), signature.encode()):
            msg = (
                "the reviewer token's signature does not match: it was altered or signed "
                "with another secret; issue a new token"
            )
            raise ReviewerNotVerifiedError(msg)
        try:
            claims = msgspec.json.decode(_unb64(payload), type=_TokenClaims)
        except (binascii.Error, ValueError) as exc:  # msgspec errors are ValueErrors
            msg = f"the reviewer token is signed but its claims do not decode: {exc}"
            raise ReviewerNotVerifiedError(msg) from exc
        now = self.clock()
        if now >= claims.exp:
            msg = (
                f"the reviewer token of {claims.sub!r} expired {now - claims.exp:.0f} s ago; "
                "issue a new token"
            )
            raise ReviewerNotVerifiedError(msg)
        return claims.sub

    def _sign(self, payload: str) -> bytes:
        return hmac.digest(self.secret, _TOKEN_CONTEXT + payload.encode(), "sha256")


# What the model reads -------------------------------------------------------------------


def review_reason(request: ReviewRequest) -> str:
    """The reason of the interrupt that asks for a review."""
    return f"{request.tool_name} needs a reviewer's approval (review {request.review_id})"


def decision_text(review: Review) -> str:
    """The tool result of the call that asked for a review, once it is decided."""
    assert review.decision is not None
    decided, request = review.decision, review.request
    if decided.decision is Decision.REJECTED:
        return (
            f"Rejected by {decided.reviewer} (review {decided.review_id}): "
            f"{decided.comment or 'no reason given'}. The operation did not run."
        )
    note = f": {decided.comment}" if decided.comment else ""
    return (
        f"Approved by {decided.reviewer} (review {decided.review_id}){note}. The operation "
        f"has not run yet: call {request.tool_name} again with the same arguments to run "
        "it once."
    )


def refusal_text(review: Review) -> str:
    """The tool result of a call that a standing decision keeps from running."""
    decided = review.decision
    assert decided is not None
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
