"""What a pause's copy of a review shows, checked against what an approval binds to.

An approval is checked against the thread's review request (its digest, its arguments).
Two stored events carry copies of pauses for readers that do not fold the thread: the
``Interrupted`` event that pauses on a review holds the request as its data, and a
fork's ``Forked`` event repeats the interrupts it inherits. The reviewer queue and every
surface built on it show those copies. A copy that says something else than the thread
holds would show a reviewer one operation and have them approve another, so:

* folding a thread refuses a copy that disagrees with what it holds
  (:func:`check_review_copy`, :func:`check_recorded_pauses`), and a request whose digest
  is not its operation's (:func:`check_request_digest`): a load and a verify raise on
  the row;
* the queue, which reads the copies without folding, shows a review's arguments only
  when they digest to the digest it shows (:func:`shown_operation_fits`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from covonaut_es.domain._canonical import canonical_json
from covonaut_es.domain._reviews import ReviewLedger, ReviewRequest, operation_digest
from covonaut_es.domain._tool_pins import ToolPin
from covonaut_es.domain._values import Interrupt, Pause, PauseKind
from covonaut_es.errors import CovonautError


def check_review_copy(interrupt: Interrupt, reviews: ReviewLedger) -> None:
    """Raise unless a review's pause, or any pause on a call a review awaits, repeats
    the request of that review, as a review's pause.

    The review is the one that awaits the pause's call, else (for a review's pause) the
    one its data names: a call held back by a review never ran, so its only pause is the
    review's, and a copy relabelled as a tool's pause or a call in doubt would show other
    data under the review's digest. A pause that names no review of the thread is left to
    :func:`~covonaut_es.domain._pauses.checked_kind`, which reads it as a tool's pause
    (the data is then the tool's, as in a record of version 1 whose kind was guessed).

    Raises:
        ValueError: The pause's call, tool or data is not the request's (naming the
            fields that differ); the fold reports it as the altered row it is.
    """
    data = interrupt.data if isinstance(interrupt.data, dict) else {}
    named = data.get("review_id")
    review = reviews.awaiting(interrupt.tool_call_id)
    if review is None and interrupt.kind is PauseKind.REVIEW and isinstance(named, str):
        review = reviews.get(named)
    if review is None:
        return
    request = review.request
    copies: tuple[tuple[str, Any, Any], ...] = (
        ("kind", str(interrupt.kind), str(PauseKind.REVIEW)),
        ("call", interrupt.tool_call_id, request.tool_call_id),
        ("tool", interrupt.tool_name, request.tool_name),
        ("data", interrupt.data, request.to_data()),
    )
    differ = [name for name, copy, held in copies if canonical_json(copy) != canonical_json(held)]
    if differ:
        msg = (
            f"the pause on call {interrupt.tool_call_id!r} claims review "
            f"{request.review_id!r} but its {', '.join(differ)} differ from the review's "
            "request, which an approval is checked against"
        )
        raise ValueError(msg)


def check_recorded_pauses(recorded: Sequence[Interrupt], pauses: Sequence[Pause]) -> None:
    """Raise unless the interrupts a fork's first event recorded are what the grafted
    thread waits on: each one a pause the thread holds unresolved, exactly, and every
    review the thread waits on among them.

    A fork written before ADR 0060 may have recorded fewer of the other pauses than the
    thread's rule gives (a call in doubt sent to run again), so only a review left out
    is refused.

    Raises:
        ValueError: Naming the first interrupt recorded that the thread does not hold,
            or the review it waits on that is not recorded.
    """
    waiting = [p.interrupt for p in pauses if not p.resolved]
    held = {canonical_json(i) for i in waiting}
    copies = {canonical_json(i) for i in recorded}
    for interrupt in recorded:
        if canonical_json(interrupt) not in held:
            msg = (
                f"the fork records a {interrupt.kind} pause on call "
                f"{interrupt.tool_call_id!r} that the thread it grafts onto does not wait on "
                "as recorded"
            )
            raise ValueError(msg)
    for interrupt in waiting:
        if interrupt.kind is PauseKind.REVIEW and canonical_json(interrupt) not in copies:
            msg = (
                f"the fork's thread waits on the review of call {interrupt.tool_call_id!r}, "
                "which the fork does not record"
            )
            raise ValueError(msg)


def check_request_digest(request: ReviewRequest) -> None:
    """Raise unless a review request's digest is its operation's: an approval is checked
    against the digest and runs the arguments, so the two must be one operation.

    Raises:
        ValueError: They are not (the fold reports the altered row).
    """
    if not _operation_fits(request.tool_name, request.arguments, request.tool, request.digest):
        msg = (
            f"review {request.review_id!r} asks to approve digest {request.digest!r}, which "
            f"is not the digest of its operation (tool {request.tool_name!r} and its arguments)"
        )
        raise ValueError(msg)


def shown_operation_fits(tool_name: str, data: Any) -> bool:
    """Whether a review's pause data shows the operation its digest covers: its
    arguments (and its server's tool, whose pin must digest to itself) digest to the
    digest it holds, which is the one an approval is checked against."""
    if not isinstance(data, dict):
        return False
    arguments, digest = data.get("arguments"), data.get("digest")
    if not isinstance(arguments, dict) or not isinstance(digest, str):
        return False
    tool = data.get("tool")
    if tool is not None:
        try:
            tool = msgspec.convert(tool, ToolPin)
        except msgspec.ValidationError:
            return False
    return _operation_fits(tool_name, arguments, tool, digest)


def _operation_fits(
    tool_name: str, arguments: dict[str, Any], tool: ToolPin | None, digest: str
) -> bool:
    try:  # the one form ``digest`` was recorded in: a digest of the other never equals it
        fits = digest == operation_digest(tool_name, arguments, tool, like=digest)
    except CovonautError:  # arguments that are not JSON data digest to nothing
        return False
    return fits and (tool is None or _pin_fits(tool))


def _pin_fits(tool: ToolPin) -> bool:
    listed = ToolPin.of(
        server=tool.server,
        origin=tool.origin,
        tool=tool.tool,
        description=tool.description,
        parameters=tool.parameters,
    )
    return listed.digest == tool.digest
