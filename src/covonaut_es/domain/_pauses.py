"""Pauses: what kind each pending interrupt is, and whether a person has dealt with it.

A pause's kind is written by the command that pauses the run (a tool's ``InterruptError``,
a review request, a call found in doubt) and checked again against the thread whenever an
interrupt is applied: a review pause must name a review that holds back its call, and an
in-doubt pause must name the idempotency key of its open call. A claim that does not hold
is a tool's pause. That check is also what reads interrupts recorded before pauses had a
kind, whose kind the migration can only guess from their data.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence

import msgspec

from covonaut_es.domain._canonical import canonical_json
from covonaut_es.domain._reviews import ReviewLedger
from covonaut_es.domain._shown import check_review_copy
from covonaut_es.domain._values import Interrupt, Pause, PauseKind, PendingToolCall


def checked_kind(
    interrupt: Interrupt, reviews: ReviewLedger, open_calls: Mapping[str, PendingToolCall]
) -> Interrupt:
    """``interrupt`` with the kind the thread bears out: a review or in-doubt claim
    that the thread does not support becomes a tool's pause.

    Raises:
        ValueError: A review's pause names a review of the thread, or a pause is on a
            call a review awaits, and it does not repeat that review's request as a
            review's pause (:func:`check_review_copy`).
    """
    check_review_copy(interrupt, reviews)
    if interrupt.kind is PauseKind.INTERRUPT or _claim_holds(interrupt, reviews, open_calls):
        return interrupt
    return msgspec.structs.replace(interrupt, kind=PauseKind.INTERRUPT)


def _claim_holds(
    interrupt: Interrupt, reviews: ReviewLedger, open_calls: Mapping[str, PendingToolCall]
) -> bool:
    data = interrupt.data if isinstance(interrupt.data, dict) else {}
    if interrupt.kind is PauseKind.REVIEW:
        awaiting = reviews.awaiting(interrupt.tool_call_id)
        return awaiting is not None and data.get("review_id") == awaiting.request.review_id
    pending = open_calls.get(interrupt.tool_call_id)
    return (
        reviews.holding_back(interrupt.tool_call_id) is None
        and pending is not None
        and data.get("idempotency_key") == pending.idempotency_key
    )


def paused_by_its_tool(interrupts: list[Interrupt], tool_call_id: str) -> None:
    """Turn the in-doubt claims on ``tool_call_id`` into tools' pauses, in place: its
    result says its tool paused (``InterruptError``), so it ran, and no pause of it can
    be in doubt. Only a record the thread did not write (one of the code before kinds,
    whose data a tool filled with its own idempotency key) makes such a claim."""
    for i, interrupt in enumerate(interrupts):
        if interrupt.tool_call_id == tool_call_id and interrupt.kind is PauseKind.IN_DOUBT:
            interrupts[i] = msgspec.structs.replace(interrupt, kind=PauseKind.INTERRUPT)


def in_doubt_data(
    pending: PendingToolCall, reviews: ReviewLedger, *, paused_at: int
) -> dict[str, str]:
    """The data of an in-doubt pause: what a person needs to check the external system,
    with the arguments the call ran with (an approval that ran it may have edited them),
    and the version of the thread that records the pause: a call retried with the same
    idempotency key may be paused in doubt again, and a person's page of the first pause
    must not settle the second."""
    review = reviews.of_call(pending.call.id)
    arguments = pending.call.arguments
    if review is not None and review.runs_call:
        arguments = canonical_json(review.approved_arguments).decode()
    return {
        "tool_call_id": pending.call.id,
        "idempotency_key": pending.idempotency_key,
        "arguments": arguments,
        "paused_at_version": str(paused_at),
    }


def pauses_of(
    interrupts: Sequence[Interrupt],
    decided: Container[str],
    open_calls: Container[str],
    answered: Container[str],
    retries: Container[str],
) -> tuple[Pause, ...]:
    """Each pending interrupt, resolved once a person has dealt with it: a review
    decided (its id in ``decided``), a tool's pause answered, a call in doubt settled
    (no longer in ``open_calls``) or sent to run again (in ``retries``: asked for, or
    begun). The one rule both the thread and what a fork inherits (:func:`fork_point`)
    go by.

    A call has at most one tool's pause and one pause in doubt: the newest of each
    kind. A call in doubt that ran again and paused in its tool has two tool's pauses,
    the claim of doubt its result turned into one and the tool's own: the tool's own,
    the later, is the one that waits. A call whose retry began and was left in doubt
    again has two pauses in doubt: the retry dealt with the first, the second waits."""
    newest = {k: n for n, i in enumerate(interrupts) if (k := _superseding(i)) is not None}
    pauses = []
    for n, interrupt in enumerate(interrupts):
        call_id = interrupt.tool_call_id
        if (key := _superseding(interrupt)) is not None and newest[key] != n:
            continue
        if interrupt.kind is PauseKind.REVIEW:
            resolved = _review_id(interrupt) in decided
        elif interrupt.kind is PauseKind.IN_DOUBT:
            resolved = call_id not in open_calls or call_id in retries
        else:
            resolved = call_id in answered
        pauses.append(Pause(interrupt, resolved))
    return tuple(pauses)


def _superseding(interrupt: Interrupt) -> tuple[str, PauseKind] | None:
    """What a newer pause of the same call and kind supersedes this one by; None for a
    review, which its own id names."""
    if interrupt.kind is PauseKind.REVIEW:
        return None
    return interrupt.tool_call_id, interrupt.kind


def _review_id(interrupt: Interrupt) -> str:
    data = interrupt.data if isinstance(interrupt.data, dict) else {}
    review_id = data.get("review_id")
    return review_id if isinstance(review_id, str) else ""
