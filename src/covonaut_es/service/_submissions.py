"""What a person submits: read and checked once, for every surface.

The inbox's form and JSON API, the command line and :class:`~covonaut_es.Agent` hand a
reviewer's decision, edited arguments, answer or settlement to the functions here, and
record only what they return. JSON is read strictly: a key given twice, a number JSON
cannot carry (``NaN``, ``Infinity``, ``1e400``, an integer beyond 64 bits), a lone
surrogate or a nesting deeper than tool arguments may have is refused with an
:class:`~covonaut_es.errors.InvalidDecisionError` that says which, where a lenient reader
would keep the last duplicate or turn a number into ``null``, and the decision would cover
a value nobody typed.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any

import attrs

from covonaut_es._strict_json import JsonRefused, Wording, strict_loads
from covonaut_es._text import is_blank, is_text
from covonaut_es.errors import InvalidDecisionError
from covonaut_es.tools import MAX_ARGUMENTS_DEPTH, json_depth

MAX_TEXT_CHARS = 10_000
"""The longest comment, reason, answer or result a person may submit."""


class Action(enum.StrEnum):
    """What a reviewer does with a pending review."""

    APPROVE = "approve"
    REJECT = "reject"
    RESPOND = "respond"


TEXT_FIELD: Mapping[Action, str] = {
    Action.APPROVE: "comment",
    Action.REJECT: "reason",
    Action.RESPOND: "answer",
}
"""The name each action gives its text, on every surface."""


@attrs.frozen
class ReviewSubmission:
    """A reviewer's decision on one review, checked; made by :func:`review_submission`.

    Attributes:
        action: Approve, reject or respond.
        text: The comment (approve), the reason (reject) or the answer (respond).
        arguments: For an approval, the reviewer's edit of the arguments; else None.
        digest: The operation digest the reviewer was shown, if the surface sent it: a
            decision on a review whose operation has another digest is refused.
    """

    action: Action
    text: str = ""
    arguments: dict[str, Any] | None = None
    digest: str | None = None


def review_submission(
    action: Action | str,
    *,
    text: object = "",
    arguments: object = None,
    digest: object = None,
    arguments_as_text: bool = True,
) -> ReviewSubmission:
    """A reviewer's decision, checked: the one reader every surface uses.

    Args:
        action: ``approve``, ``reject`` or ``respond``.
        text: The comment, reason or answer; a reason and an answer must not be blank.
        arguments: Edited arguments, only with ``approve``: JSON text (read strictly) or
            a mapping (which must be plain JSON); None: as requested.
        digest: The operation digest the reviewer saw (not blank), or None.
        arguments_as_text: Whether ``arguments`` may be JSON text; False where the
            surface received them as a JSON value (a JSON body), whose object they
            must be: a string holding one is refused, as the command line refuses the
            JSON text of a string.

    Raises:
        InvalidDecisionError: Naming the field and what is wrong with it.
    """
    try:
        action = Action(action)
    except ValueError:
        choices = ", ".join(a.value for a in Action)
        msg = f"unknown decision {action!r}: expected one of {choices}"
        raise InvalidDecisionError(msg) from None
    name = TEXT_FIELD[action]
    checked = person_text(text, name, required=action is not Action.APPROVE)
    edited = None
    if arguments is not None:
        if action is not Action.APPROVE:
            msg = f"only an approval takes edited arguments, not a decision to {action}"
            raise InvalidDecisionError(msg)
        edited = json_object(arguments, "the edited arguments", as_text=arguments_as_text)
    if digest is not None and not isinstance(digest, str):
        msg = f"the digest must be text, got {type(digest).__name__}"
        raise InvalidDecisionError(msg)
    if digest is not None and is_blank(digest):
        # An empty digest read as "none sent" would skip the check of the operation.
        msg = (
            "the digest is empty or shows nothing: send the operation digest the reviewer "
            "was shown, or leave the field out to decide without that check"
        )
        raise InvalidDecisionError(msg)
    return ReviewSubmission(action, checked, edited, digest)


def submitted_review(
    action: Action | str, fields: Mapping[str, object], *, json_body: bool = False
) -> ReviewSubmission:
    """A reviewer's decision from the fields a surface received (a JSON body, a form, a
    command line's options), each present only if it was sent: the action's text
    (:data:`TEXT_FIELD`), ``arguments`` and ``digest``. A field sent empty is checked as
    sent, never read as one left out, so every surface refuses alike. ``json_body``:
    the fields are a JSON body's values, so ``arguments`` must be an object, where a
    form and a command line send its JSON text.

    Raises:
        InvalidDecisionError: As :func:`review_submission`, or ``arguments`` or
            ``digest`` was sent as null (leave it out to approve the arguments as
            requested, or to decide without the check of the operation).
    """
    if "digest" in fields and fields["digest"] is None:
        # Read as left out, a null digest would skip the check of the operation.
        msg = (
            "the digest is null: send the operation digest the reviewer was shown, or "
            "leave the field out to decide without that check"
        )
        raise InvalidDecisionError(msg)
    arguments = fields.get("arguments")
    sent_null = "arguments" in fields and arguments is None
    name = next((TEXT_FIELD[a] for a in Action if a.value == action), "")
    return review_submission(
        action,
        text=fields.get(name, ""),
        arguments="null" if sent_null else arguments,  # refused as the JSON text null is
        digest=fields.get("digest"),
        arguments_as_text=sent_null or not json_body,
    )


def sent_pause(fields: Mapping[str, object]) -> object:
    """The pause token a command's fields name (``pause``), None when left out: the
    command then acts on whatever pause is pending, unchecked.

    Raises:
        InvalidDecisionError: The token was sent as null: read as left out, it would
            skip the check that the pause is still the one the person saw.
    """
    if "pause" in fields and fields["pause"] is None:
        msg = (
            "the pause is null: send the token of the pause you act on, as GET /api/pauses "
            "lists it (a pause listed with none was dealt with: reload the list), or leave "
            "the field out to act on whatever pause is pending"
        )
        raise InvalidDecisionError(msg)
    return fields.get("pause")


def person_text(value: object, name: str, *, required: bool = False) -> str:
    """A comment, reason, answer or result a person submitted, checked.

    Raises:
        InvalidDecisionError: It is no string, longer than :data:`MAX_TEXT_CHARS`, not
            valid text, or blank where ``required``.
    """
    if type(value) is not str:  # a subclass of str no event can hold either
        msg = f"the {name} must be text, got {type(value).__name__}"
        raise InvalidDecisionError(msg)
    if len(value) > MAX_TEXT_CHARS:
        msg = f"the {name} is {len(value)} characters, more than the {MAX_TEXT_CHARS} allowed"
        raise InvalidDecisionError(msg)
    if not is_text(value):
        msg = f"the {name} holds a lone surrogate, which is not text"
        raise InvalidDecisionError(msg)
    if required and is_blank(value):
        msg = (
            f"the {name} must not be empty or show nothing (only spaces, invisible or "
            "control characters): a decision without one is final and says nothing"
        )
        raise InvalidDecisionError(msg)
    return value


def json_object(value: object, what: str, *, as_text: bool = True) -> dict[str, Any]:
    """A JSON object a person submitted, as text (read by :func:`parse_json`; unless
    ``as_text`` is False) or already a mapping (which must hold plain JSON only); any
    other value (a list, a number a JSON body held where the object belongs) is refused.

    Raises:
        InvalidDecisionError: It is not one JSON object, or does not read strictly.
    """
    if not isinstance(value, (str | bytes | Mapping) if as_text else Mapping):
        msg = f"{what} must be one JSON object, got a JSON {_kind(value)}"
        raise InvalidDecisionError(msg)
    if isinstance(value, Mapping):
        _refuse_keys_not_text(value, what)
        try:
            value = json.dumps(dict(value), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            msg = f"{what} must hold JSON values only: {exc}"
            raise InvalidDecisionError(msg) from exc
    parsed = parse_json(value, what)
    if not isinstance(parsed, dict):
        msg = f"{what} must be one JSON object, got a JSON {_kind(parsed)}"
        raise InvalidDecisionError(msg)
    return parsed


def _refuse_keys_not_text(value: Mapping[Any, Any], what: str) -> None:
    # json.dumps writes a key 1 as "1" and None as "null": the decision would cover text
    # nobody typed. Each container is looked at once, so a cycle ends the walk (and
    # json.dumps then refuses it).
    stack: list[Any] = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen or not isinstance(item, Mapping | list | tuple):
            continue
        seen.add(id(item))
        if isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    msg = f"{what} must hold JSON values only: keys must be text, not {key!r}"
                    raise InvalidDecisionError(msg)
            stack.extend(item.values())
        else:
            stack.extend(item)


def parse_json(text: str | bytes, what: str) -> Any:
    """JSON text a person submitted, read strictly (see the module's docstring).

    Raises:
        InvalidDecisionError: Naming ``what`` and what is wrong with it.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            msg = f"{what} must be UTF-8 text: {exc}"
            raise InvalidDecisionError(msg) from exc
    if (depth := json_depth(text)) > MAX_ARGUMENTS_DEPTH + 1:
        msg = f"{what} must nest at most {MAX_ARGUMENTS_DEPTH + 1} deep, not {depth}"
        raise InvalidDecisionError(msg)
    try:
        value = strict_loads(text, _SUBMITTED)
    except JsonRefused as exc:
        raise InvalidDecisionError(f"{what} {exc}") from None
    except (ValueError, RecursionError) as exc:
        msg = f"{what} must be JSON: {exc}"
        raise InvalidDecisionError(msg) from exc
    if not is_text(json.dumps(value, ensure_ascii=False)):
        msg = f"{what} holds a lone surrogate (an escape such as \\ud800), which is not text"
        raise InvalidDecisionError(msg)
    return value


_SUBMITTED = Wording(
    twice=(
        "names the key {key!r} twice in one object; JSON readers keep one or the other, so "
        "write it once"
    ),
    constant="holds {name}, which is not a JSON number; write a finite number or a string",
    too_large="holds the number {text}, which no stored JSON number can carry",
    wide_integer="holds the integer {text}, beyond the 64 bits a stored number can carry",
)


def _kind(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
