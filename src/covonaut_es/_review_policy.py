"""A tool's review policy: who may decide its reviews, what they may decide, and the
text they are shown.

:class:`ReviewPolicy` is declared on a tool (``Tool(..., review=ReviewPolicy(...))``) or
made per call by a function of the arguments. When a call of the tool asks for a review,
:func:`review_rules` evaluates it once and the request records the resulting
:class:`~covonaut_es.domain.ReviewRules`: every surface (the agent, the inbox, the
command line) decides against that record, with or without the application's code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from covonaut_es import _logs
from covonaut_es._text import is_text
from covonaut_es.domain import Decision, ReviewLimit, ReviewRules
from covonaut_es.domain._reviews import ALL_DECISIONS, MAX_DESCRIPTION_CHARS

logger = _logs.logger("covonaut_es")

FAILED_POLICY_RULES = ReviewRules(
    decisions=(Decision.REJECTED,),
    editable=(),
    description=(
        "The tool's review policy failed on these arguments, so nothing but a rejection "
        "can be recorded (the application's log has the error)."
    ),
)
"""The rules of a review whose policy function raised: it fails closed, so the call
can only be rejected."""

_FAILED_DESCRIPTION = "(The tool's description of this call failed; see the application's log.)"


def _decisions(value: Iterable[Decision | str]) -> tuple[Decision, ...]:
    if isinstance(value, str):
        msg = f"decisions must be a collection of decisions, not the string {value!r}"
        raise TypeError(msg)
    chosen = {Decision(v) for v in value}
    if Decision.EXPIRED in chosen:
        msg = (
            "expired is no decision a reviewer makes: a review policy allows approved, "
            "rejected or responded"
        )
        raise ValueError(msg)
    if not chosen:
        msg = "a review policy must allow at least one decision (rejected, at least)"
        raise ValueError(msg)
    return tuple(d for d in ALL_DECISIONS if d in chosen)


def _names(value: Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return _strings(value)


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        msg = f"expected a collection of names, not the string {value!r}"
        raise TypeError(msg)
    names = tuple(dict.fromkeys(value))
    if not all(isinstance(name, str) and name for name in names):
        msg = f"expected non-empty strings, got {names!r}"
        raise TypeError(msg)
    return names


def _limits(value: Iterable[ReviewLimit]) -> tuple[ReviewLimit, ...]:
    limits = tuple(value)
    for limit in limits:
        if not isinstance(limit, ReviewLimit) or not limit.scopes:
            msg = f"limits must be ReviewLimit values naming at least one scope, got {limit!r}"
            raise TypeError(msg)
        maximum = limit.maximum
        if (
            isinstance(maximum, bool)
            or not isinstance(maximum, int | float)
            or not (math.isfinite(maximum))
        ):
            # NaN would compare below nothing, and the limit would never apply.
            msg = f"a limit's maximum must be a finite number, got {maximum!r}"
            raise ValueError(msg)
    return limits


@attrs.frozen
class ReviewPolicy:
    """What reviewers of a tool's calls may decide, and who they must be.

    Attributes:
        decisions: The decisions allowed, of ``"approved"``, ``"rejected"`` and
            ``"responded"`` (:class:`~covonaut_es.domain.Decision`); default: all.
        editable: The top-level arguments an approval may change; None (default):
            any; ``()``: none, so an approval covers the call as requested. Name
            those a reviewer may edit, e.g. ``("amount", "memo")`` keeps ``iban``
            as the model asked.
        describe: ``describe(args) -> str``: text for the reviewer about this call
            (shown as plain text, never as markup; cut at 4,000 characters). A
            function that raises gives a note of its failure instead.
        scopes: A reviewer needs one of these scopes (from their credential) to
            decide; empty (default): any verified reviewer.
        limits: :class:`~covonaut_es.domain.ReviewLimit` values: above a limit's
            maximum, an approval needs one of the limit's scopes too.
        four_eyes: An approval needs two different reviewers: the first approval
            is recorded in part and the call is approved by the second; a
            rejection by either rejects.
    """

    decisions: tuple[Decision, ...] = attrs.field(default=ALL_DECISIONS, converter=_decisions)
    editable: tuple[str, ...] | None = attrs.field(default=None, converter=_names)
    describe: Callable[[dict[str, Any]], str] | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.is_callable())
    )
    scopes: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    limits: tuple[ReviewLimit, ...] = attrs.field(default=(), converter=_limits)
    four_eyes: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))


ReviewPolicyFunction = Callable[[dict[str, Any]], ReviewPolicy]
"""``policy(args) -> ReviewPolicy``: a tool's review policy chosen per call."""


def review_rules(
    tool_name: str, policy: ReviewPolicy | ReviewPolicyFunction | None, args: dict[str, Any]
) -> ReviewRules | None:
    """The rules a review of a call with these validated arguments records; None for a
    tool without a policy. A policy function that raises, or returns no policy, fails
    closed (:data:`FAILED_POLICY_RULES`)."""
    if policy is None:
        return None
    if not isinstance(policy, ReviewPolicy):
        try:
            policy = policy(args)
        except Exception:
            logger.exception("review policy of tool %r failed: only a rejection", tool_name)
            return FAILED_POLICY_RULES
        if not isinstance(policy, ReviewPolicy):
            logger.error("review policy of tool %r returned no ReviewPolicy", tool_name)
            return FAILED_POLICY_RULES
    return ReviewRules(
        decisions=policy.decisions,
        editable=policy.editable,
        description=_description(tool_name, policy, args),
        scopes=policy.scopes,
        limits=policy.limits,
        four_eyes=policy.four_eyes,
    )


def _description(tool_name: str, policy: ReviewPolicy, args: dict[str, Any]) -> str:
    if policy.describe is None:
        return ""
    try:
        text = policy.describe(args)
    except Exception:
        logger.exception("review description of tool %r failed", tool_name)
        return _FAILED_DESCRIPTION
    if not isinstance(text, str):
        logger.error("review description of tool %r is no text", tool_name)
        return _FAILED_DESCRIPTION
    if not is_text(text):
        return _FAILED_DESCRIPTION  # a lone surrogate could not be stored
    return text[:MAX_DESCRIPTION_CHARS]
