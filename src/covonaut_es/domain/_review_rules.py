"""Who may decide a review, and what: the check of a decision against its review's rules.

When a run asks for a review, the tool's policy is evaluated once, on the call's
arguments, and what it says is recorded in the request as ``ReviewRules``: the
decisions allowed, the arguments a reviewer may edit, the text shown to the reviewer,
the scopes that may decide, the limits above which more scope is needed, and whether a
second, different reviewer must approve. Every surface decides through
``AgentThread.decide_review``, which checks a decision against them with
:func:`check_decision`, the one check; the inbox uses :func:`may_decide` only to leave
out of a reviewer's queue what the check would refuse them. Pure: no I/O, no clock.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from covonaut_es.domain._canonical import canonical_json
from covonaut_es.domain._reviews import DEFAULT_RULES, Decision, Review, ReviewLedger, ReviewRules
from covonaut_es.errors import DecisionNotAllowedError, ReviewerNotPermittedError


def rules_of(review: Review) -> ReviewRules:
    """The rules recorded with a review's request."""
    return review.request.rules or DEFAULT_RULES


def may_decide(rules: ReviewRules, scopes: Collection[str]) -> bool:
    """Whether a reviewer holding ``scopes`` may decide such a review at all (some
    decision of theirs could pass :func:`check_decision`)."""
    return not rules.scopes or any(scope in scopes for scope in rules.scopes)


def check_may_act_on_call(
    reviews: ReviewLedger,
    tool_call_id: str,
    *,
    reviewer: str,
    scopes: Collection[str],
    runs_again: bool = False,
) -> None:
    """Refuse a person's dealing with a reviewed call (answering, settling, giving up,
    or with ``runs_again`` running it again) unless they could have made the approvals
    it acts on (ADR 0107): :func:`call_refusal` of the reviews naming the call.

    Raises:
        ReviewerNotPermittedError: They hold none of the review's scopes, or none of a
            limit's the approved arguments exceed; or they would run again a call
            approved under four eyes.
    """
    reason = call_refusal(reviews.naming(tool_call_id), scopes, runs_again=runs_again)
    if reason is not None:
        msg = f"reviewer {reviewer!r} may not act on call {tool_call_id!r}: {reason}"
        raise ReviewerNotPermittedError(msg)


def may_act_on_call(naming: Sequence[Review], scopes: Collection[str]) -> bool:
    """Whether a person holding ``scopes`` may deal with the call the reviews
    ``naming`` name (:meth:`ReviewLedger.naming`): what a reviewer's queue shows them."""
    return call_refusal(naming, scopes) is None


def call_refusal(
    naming: Sequence[Review], scopes: Collection[str], *, runs_again: bool = False
) -> str | None:
    """Why a person holding ``scopes`` may not deal with the call the reviews ``naming``
    name (:meth:`ReviewLedger.naming`, oldest first), or None: they must hold one of
    the scopes of the review that governs it now, and of each review that approved it
    (a fork's new review of a call its parent approved does not stand in for the
    parent's approval, whatever its own decision), with one of the scopes of each limit
    that approval's arguments exceed; and a call approved under four eyes runs again
    (``runs_again``) only on two reviewers' word, never on one person's retry. A call
    no review names is anyone's to deal with."""
    binding = [
        (review, rules)
        for review in (*(r for r in naming if r.approved), *naming[-1:])
        if (rules := review.request.rules) is not None
    ]
    for review, rules in binding:
        if not may_decide(rules, scopes):
            needed = ", ".join(rules.scopes)
            return f"its review needs one of the scopes {needed}; nothing was recorded"
        if review.approved:
            exceeded = _limit_refusal(rules, review.approved_arguments, scopes)
            if exceeded is not None:
                return exceeded
    if runs_again and any(rules.four_eyes for _, rules in binding):
        return (
            "its review needs the approval of two different reviewers, and a retry runs "
            "it again on one person's word; check the external system and settle it "
            "instead; nothing was recorded"
        )
    return None


def _limit_refusal(
    rules: ReviewRules, arguments: Mapping[str, Any], scopes: Collection[str]
) -> str | None:
    """Why a reviewer holding ``scopes`` may not approve ``arguments`` under the rules'
    limits (one they exceed needs a scope the reviewer lacks), or None."""
    for limit in rules.limits:
        if limit.exceeded_by(arguments) and not any(s in scopes for s in limit.scopes):
            return (
                f"{limit.argument!r} above {limit.maximum:g} needs one of the scopes "
                f"{list(limit.scopes)}; ask a reviewer who holds one; nothing was recorded"
            )
    return None


def check_may_decide(review: Review, *, reviewer: str, scopes: Collection[str]) -> None:
    """Refuse a reviewer whose scopes let them decide nothing of the review: checked
    first, before anything that would tell them about its operation.

    Raises:
        ReviewerNotPermittedError: They hold none of the scopes the review needs.
    """
    rules = rules_of(review)
    if not may_decide(rules, scopes):
        msg = (
            f"reviewer {reviewer!r} may not decide review {review.request.review_id!r}: it "
            f"needs one of the scopes {list(rules.scopes)}, and the reviewer's credential "
            f"grants {sorted(scopes) or 'none'}; ask a reviewer who holds one; nothing was "
            "recorded"
        )
        raise ReviewerNotPermittedError(msg)


def check_decision(
    review: Review,
    decision: Decision,
    *,
    reviewer: str,
    scopes: Collection[str],
    arguments: Mapping[str, Any] | None,
    digest: str,
) -> None:
    """Refuse a decision its review's rules do not allow this reviewer: the one check.

    Args:
        review: The pending review.
        decision: What the reviewer decides.
        reviewer: The verified reviewer id.
        scopes: The scopes the verifier established for the reviewer.
        arguments: An approval's edit of the requested arguments (None: as requested).
        digest: The operation digest the decision covers.

    Raises:
        ReviewerNotPermittedError: The reviewer lacks a scope the review or one of its
            limits needs, or approves a second time under four eyes.
        DecisionNotAllowedError: The tool's policy allows no such decision, or no edit
            of an argument the edit changes; or the review runs again a call that may
            have run, which takes no edit.
    """
    check_may_decide(review, reviewer=reviewer, scopes=scopes)
    rules, review_id = rules_of(review), review.request.review_id
    if decision not in rules.decisions:
        allowed = ", ".join(str(d) for d in rules.decisions)
        msg = (
            f"review {review_id!r} cannot be {decision}: its tool allows only {allowed}; "
            "nothing was recorded"
        )
        raise DecisionNotAllowedError(msg)
    if decision is not Decision.APPROVED:
        return
    requested = review.request.arguments
    approved = requested if arguments is None else arguments
    if review.request.may_have_run and arguments is not None and _edits(requested, arguments):
        # Its approval runs the call again under the same idempotency key, which an
        # external system may answer with what the first run did: other arguments under
        # that key would be recorded as run while another operation may have happened.
        msg = (
            f"review {review_id!r} asks to run again a call that may have run already, "
            "under the same idempotency key: approve it as requested, or reject; an edit "
            "is a new operation for the model to ask for; nothing was recorded"
        )
        raise DecisionNotAllowedError(msg)
    if arguments is not None and rules.editable is not None:
        changed = sorted(
            name
            for name in set(requested) | set(arguments)
            if name not in rules.editable and _changed(name, requested, arguments)
        )
        if changed:
            may = ", ".join(rules.editable) or "none"
            msg = (
                f"review {review_id!r} forbids editing {', '.join(changed)} (editable: {may}); "
                "approve those as requested, or reject; nothing was recorded"
            )
            raise DecisionNotAllowedError(msg)
    exceeded = _limit_refusal(rules, approved, scopes)
    if exceeded is not None:
        msg = f"reviewer {reviewer!r} may not approve review {review_id!r}: {exceeded}"
        raise ReviewerNotPermittedError(msg)
    if any(same_reviewer(a.reviewer, reviewer) for a in review.approvals):
        msg = (
            f"reviewer {reviewer!r} approved review {review_id!r} already: it needs the "
            "approval of a second, different reviewer; nothing was recorded"
        )
        raise ReviewerNotPermittedError(msg)
    if review.approvals and review.approvals[0].digest != digest:
        msg = (
            f"review {review_id!r} was approved in part for operation digest "
            f"{review.approvals[0].digest!r}, and this approval covers {digest!r}: the second "
            "reviewer approves the same operation (with the same edit) or rejects; nothing "
            "was recorded"
        )
        raise DecisionNotAllowedError(msg)


def may_offer_edit(review: Review) -> bool:
    """Whether a reviewer may be offered to approve ``review`` with arguments of their
    own, the offer :func:`check_decision` would not refuse for the edit itself: its
    rules leave some argument editable, nobody approved it in part (the second approval
    covers the first's very operation), and its call cannot have run already (an
    approval runs it again under the same idempotency key, as requested)."""
    return (
        rules_of(review).editable != () and not review.approvals and not review.request.may_have_run
    )


def _edits(requested: Mapping[str, Any], edited: Mapping[str, Any]) -> bool:
    """Whether ``edited`` changes any argument of ``requested``."""
    return any(_changed(name, requested, edited) for name in set(requested) | set(edited))


def _changed(name: str, requested: Mapping[str, Any], edited: Mapping[str, Any]) -> bool:
    """Whether the edit added, removed or altered the argument ``name``."""
    if (name in requested) != (name in edited):
        return True
    # Compared as canonical JSON: in Python True == 1 == 1.0, which JSON tells apart.
    return canonical_json(requested[name]) != canonical_json(edited[name])


def same_reviewer(first: str, second: str) -> bool:
    """Whether two reviewer ids name one person for four eyes: equal once each is
    NFKC-normalised, case-folded and stripped of default-ignorable characters (Unicode's
    NFKC_Casefold, roughly), so that ``Alice`` and ``alice``, ``alice`` in fullwidth
    letters, or ``alice`` with a soft hyphen, are not two reviewers. The ids are
    recorded as the verifier gave them; only this comparison folds them."""
    return _folded(first) == _folded(second)


_DEFAULT_IGNORABLE = dict.fromkeys(
    code
    for first, last in (
        (0x00AD, 0x00AD),
        (0x034F, 0x034F),
        (0x061C, 0x061C),
        (0x115F, 0x1160),
        (0x17B4, 0x17B5),
        (0x180B, 0x180F),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x206F),
        (0x3164, 0x3164),
        (0xFE00, 0xFE0F),
        (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0),
        (0xFFF0, 0xFFF8),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF),
    )
    for code in range(first, last + 1)
)
"""Unicode's Default_Ignorable_Code_Point characters (DerivedCoreProperties.txt), which
NFKC_Casefold removes and the standard library's normalisation keeps: a soft hyphen or
a zero-width space must not make a second reviewer of the first."""


def _folded(reviewer: str) -> str:
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", reviewer).casefold())
    return folded.translate(_DEFAULT_IGNORABLE)
