"""A resume from a chat front end: AG-UI resume entries, checked whole, then recorded as
verified decisions.

Each entry answers one open interrupt by its id: a review by its review id, a tool's
pause by its pause token. Every entry is checked before anything is recorded (ids known,
open and each answered once, every open interrupt answered, each payload read by the
service layer's one reader of what people submit, each review's decision carrying the
digest of the operation it was shown), then all are recorded together through
:class:`~covonaut_es.service.ThreadService` under the reviewer the request's credential
verifies as (ADR 0034), which checks each decision as every surface's is: the
reviewer's scopes, then the digest, so that a refused digest confirms no guess.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import ag_ui.core as agui
import attrs

from covonaut_es.domain import Pause, PauseKind
from covonaut_es.errors import InvalidDecisionError
from covonaut_es.service import (
    TEXT_FIELD,
    Action,
    PauseAnswer,
    Reviewer,
    ReviewSubmission,
    ThreadService,
    json_object,
    person_text,
    submitted_review,
)

CANCELLED = "Cancelled in the chat by the reviewer."
"""The reason a review's cancelled entry rejects it with, when it gives none."""


@attrs.frozen
class Answer:
    """One resume entry, checked: a review's decision, or a tool's pause's answer."""

    interrupt_id: str
    pause: Pause
    submission: ReviewSubmission | None = None
    answer: str = ""


def checked(
    entries: Sequence[agui.ResumeEntry],
    open_pauses: Mapping[str, Pause],
    thread_id: str,
) -> list[Answer]:
    """The entries, each checked, or the first refusal; nothing is recorded here.

    Args:
        entries: The resume entries of the run request.
        open_pauses: The thread's pauses waiting for a person, by interrupt id.
        thread_id: The thread, for the messages.

    Raises:
        InvalidDecisionError: Naming the entry and what is wrong with it.
    """
    ids = [entry.interrupt_id for entry in entries]
    if twice := sorted(key for key, times in Counter(ids).items() if times > 1):
        msg = f"the resume answers interrupts {twice[:5]} more than once: answer each once"
        raise InvalidDecisionError(msg)
    if unknown := [key for key in ids if key not in open_pauses]:
        msg = (
            f"interrupt {unknown[0]!r} is not open on thread {thread_id!r} (open: "
            f"{sorted(open_pauses)}): it was answered already, or belongs to another thread"
        )
        raise InvalidDecisionError(msg)
    if left := sorted(set(open_pauses) - set(ids)):
        msg = f"the resume must answer every open interrupt of the run; it leaves out {left}"
        raise InvalidDecisionError(msg)
    return [_answer(entry, open_pauses[entry.interrupt_id]) for entry in entries]


def record(
    service: ThreadService, thread_id: str, answers: Sequence[Answer], reviewer: Reviewer
) -> None:
    """Record the checked answers under ``reviewer`` in one save through the service
    layer: all of them, or none when one is refused."""
    service.decide_together(
        thread_id,
        decisions={a.interrupt_id: a.submission for a in answers if a.submission is not None},
        answers=[
            PauseAnswer(a.pause.interrupt.tool_call_id, a.answer, a.interrupt_id)
            for a in answers
            if a.submission is None
        ],
        reviewer=reviewer,
    )


def _answer(entry: agui.ResumeEntry, pause: Pause) -> Answer:
    where = f"the payload of interrupt {entry.interrupt_id!r}"
    if pause.kind is PauseKind.IN_DOUBT:
        msg = (
            f"interrupt {entry.interrupt_id!r} is a call in doubt: whether it ran is settled "
            "by checking the external system, in the reviewer inbox or the command line"
        )
        raise InvalidDecisionError(msg)
    cancelled = entry.status == "cancelled"
    # The payload is the request's JSON itself: an object, never text holding one.
    payload = json_object(
        {} if entry.payload is None and cancelled else entry.payload, where, as_text=False
    )
    if pause.kind is PauseKind.INTERRUPT:
        if cancelled:
            msg = f"interrupt {entry.interrupt_id!r} is a tool's pause: answer it, resolved"
            raise InvalidDecisionError(msg)
        _refuse_other_keys(payload, {"answer"}, where)
        answer = person_text(payload.get("answer"), "answer", required=True)
        return Answer(entry.interrupt_id, pause, answer=answer)
    # Its digest is checked where every surface's is, after the reviewer's scopes.
    return Answer(
        entry.interrupt_id, pause, submission=_decision(payload, cancelled=cancelled, where=where)
    )


def _decision(payload: dict[str, Any], *, cancelled: bool, where: str) -> ReviewSubmission:
    """A review's decision: approved (``comment``, ``editedArgs``), rejected
    (``reason``), or answered in the tool's place (``answer``, not approved); a cancelled
    entry rejects. Always with the ``digest`` the reviewer was shown."""
    if "digest" not in payload:
        msg = (
            f"{where} has no digest: a decision is bound to the operation digest the "
            "interrupt's metadata carries (covonaut.digest)"
        )
        raise InvalidDecisionError(msg)
    approved = payload.get("approved", False if cancelled else None)
    if not isinstance(approved, bool):
        msg = f'{where} must say "approved": true or false, got {approved!r}'
        raise InvalidDecisionError(msg)
    if cancelled or not approved:
        action = Action.RESPOND if "answer" in payload else Action.REJECT
    else:
        action = Action.APPROVE
    if cancelled and action is Action.RESPOND:
        msg = f"{where}: a cancelled interrupt cannot answer in the tool's place"
        raise InvalidDecisionError(msg)
    text_field = TEXT_FIELD[action]
    allowed = {"approved", "digest", text_field} | ({"editedArgs"} if approved else set())
    _refuse_other_keys(payload, allowed, where)
    fields = {
        text_field: payload.get(text_field, CANCELLED if cancelled else ""),
        "digest": payload["digest"],
    }
    if "editedArgs" in payload:
        fields["arguments"] = payload["editedArgs"]
    return submitted_review(action, fields, json_body=True)


def _refuse_other_keys(payload: dict[str, Any], allowed: set[str], where: str) -> None:
    if unknown := sorted(set(payload) - allowed):
        msg = (
            f"{where} holds {unknown}, which this answer does not take (it takes {sorted(allowed)})"
        )
        raise InvalidDecisionError(msg)
