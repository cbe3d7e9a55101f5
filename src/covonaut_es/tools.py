"""Tools the model may call, and the context each call receives."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol, cast, runtime_checkable

import attrs
import msgspec

from covonaut_es import _logs
from covonaut_es._arguments import (
    check_callable,
    check_text,
    instance_of,
    positive_seconds,
    refuse,
    validated,
)
from covonaut_es._review_policy import ReviewPolicy, ReviewPolicyFunction, review_rules
from covonaut_es._schema import ArgumentsValidator, compile_schema, validation_error
from covonaut_es._strict_json import FOR_THE_MODEL, JsonRefused, strict_loads
from covonaut_es.domain import ReviewDecision, ReviewRules, ToolPin
from covonaut_es.domain._canonical import refuse_non_finite
from covonaut_es.errors import ConfigurationError, ToolArgumentsLimitError, ToolResultError
from covonaut_es.messages import JsonValue, ToolCall, ToolSpec

ToolFunction = Callable[["ToolContext", dict[str, Any]], Any]
"""``func(ctx, args)``: returns any JSON-encodable value, or raises ``InterruptError``."""

ApprovalPolicy = Callable[[dict[str, Any]], bool]
"""``policy(args)``: whether a call with these validated arguments needs approval."""

DeadlinePolicy = Callable[[dict[str, Any]], timedelta | None]
"""``policy(args)``: how long a review of a call with these arguments may wait for a
decision, or None for as long as it takes."""

logger = _logs.logger("covonaut_es")

MAX_ARGUMENTS_BYTES = 1_048_576
"""The largest arguments text (UTF-8 bytes) a call may have; a larger one is refused."""

MAX_ARGUMENTS_DEPTH = 64
"""The deepest nesting of arrays and objects a call's arguments may have."""


@attrs.frozen
class ToolContext:
    """What a tool function learns about the call it serves.

    Attributes:
        thread_id: The thread the call belongs to.
        tool_call_id: The model's id for this call.
        tool_name: The tool's name.
        idempotency_key: Stable for this call across restores and retries: pass it to
            external systems so a repeated call is recognised.
        approval: For a tool that requires approval, the recorded decision that
            authorized this very call (its ``digest`` is this call's operation digest);
            None otherwise.
        timeout: Seconds the call may run (its tool's ``timeout``, else
            ``AgentConfig.tool_timeout``), after which the run stops waiting for it and
            records it in doubt; None: no limit. A tool that can stop its own work then
            (a server's request, cancelled) reads it here.
    """

    thread_id: str
    tool_call_id: str
    tool_name: str
    idempotency_key: str
    approval: ReviewDecision | None = None
    timeout: float | None = None


def check_timeout(_: Any, attribute: attrs.Attribute[float | None], value: object) -> None:
    """A timeout is None or a positive, finite number of seconds (an attrs validator)."""
    check_seconds(attribute.name, value)


def check_seconds(name: str, value: object) -> None:
    """``name`` is None or a positive, finite number of seconds.

    Raises:
        ConfigurationError: Naming the setting and the value found.
    """
    if value is not None:
        positive_seconds(name, value)


MAX_REVIEW_DEADLINE = timedelta(days=36_525)
"""The longest a review may wait: a hundred years (a longer wait is no deadline, and one
near ``timedelta.max`` would overflow the time it ends)."""


def _is_wait(value: object) -> bool:
    """Whether ``value`` is a deadline's wait: a positive timedelta of at most
    :data:`MAX_REVIEW_DEADLINE`."""
    return isinstance(value, timedelta) and timedelta(0) < value <= MAX_REVIEW_DEADLINE


def _check_deadline(_: Any, __: attrs.Attribute[Any], value: object) -> None:
    if value is None or callable(value) or _is_wait(value):
        return
    refuse(
        "Tool.review_deadline",
        "a positive timedelta of at most a hundred years, a policy or None",
        value,
    )


# What OpenAI and Anthropic accept as a tool's name: ASCII only, so no look-alike
# (a Cyrillic U+0435 for the "e" of "delete") names a tool a reviewer reads as another.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _check_name(name: str, value: object) -> None:
    check_text(name, value)
    text = cast(str, value)
    if not _TOOL_NAME.fullmatch(text):
        shown = repr(text[:64]) + (f"... ({len(text)} characters)" if len(text) > 64 else "")
        msg = (
            "a tool's name must be 1 to 64 ASCII letters, digits, '_' or '-' (what model "
            f"providers accept), got {shown}; rename the tool"
        )
        raise ConfigurationError(msg)


_A_BOOL = instance_of(bool, "True or False")


def check_approval(name: str, value: object) -> None:
    """``value`` of argument ``name`` is True, False or an approval policy.

    Raises:
        ConfigurationError: It is none of those.
    """
    if not isinstance(value, bool) and not callable(value):
        refuse(name, "True, False or a policy policy(args) -> bool", value)


def _check_review(name: str, value: object) -> None:
    if not isinstance(value, ReviewPolicy) and not callable(value):
        refuse(name, "a ReviewPolicy, a policy policy(args) -> ReviewPolicy, or None", value)


@attrs.frozen
class Tool:
    """A function the model may call.

    Attributes:
        name: The name the model uses: 1 to 64 ASCII letters, digits, ``_`` or ``-``
            (what OpenAI and Anthropic accept; a server tool's ``tool_prefix`` counts).
            Stored threads keep the names they recorded.
        description: What the tool does, for the model.
        parameters: JSON Schema of the arguments object (draft 2020-12 unless its
            ``$schema`` names another); it is checked when the tool is made, and
            arguments are validated against it with ``jsonschema`` before ``func``
            runs. ``$ref`` resolves within the schema only. The tool keeps a copy: a
            change to the mapping afterwards changes neither what the model is told
            nor what is validated.
        func: ``func(ctx, args)`` returning a JSON-encodable value (a string is passed
            to the model as is). Raise ``InterruptError`` to pause the run.
        read_only: A call changes nothing outside the program (a search, a lookup),
            so it needs no write-ahead: a plain turn whose calls are all of read-only
            tools is committed with their results, one commit for the turn instead of
            two, and a process that dies while they run restarts the turn from the
            model call, with nothing in doubt (ADR 0150).
        idempotent: Running the call twice is harmless, so a call left in doubt by a
            crash is retried automatically with the same idempotency key. Unset: as
            ``read_only`` when the tool is made (``attrs.evolve`` keeps the value).
        requires_approval: ``True``, or a policy ``policy(args) -> bool`` deciding per
            call: such a call runs only with an unused approval of its exact operation
            on record; without one, the run pauses for a review.
        run_on_approval: With ``requires_approval``: an approval runs the held-back
            call itself, with the reviewer's edits, when the thread resumes (no model
            call), its approval spent before it starts; a rejection or a response is
            the call's result. False (the default): the approval is recorded as the
            call's result, and authorizes the model's next call of the same operation.
        timeout: Seconds a call may run (default: ``AgentConfig.tool_timeout``). A call
            past it is recorded in doubt (it may have done its work), the run pauses on
            it for a person to settle, and the function is left to finish on its own:
            Python cannot stop a thread, so a blocking function that never returns
            keeps its thread, which the worker's heartbeat reports.
        pin: For a tool from a server (see :mod:`covonaut_es.mcp`), the tool exactly
            as its server listed it: recorded with each call, and covered by the
            digest an approval binds to. None for the application's own tools.
        review_deadline: How long a review of a call may wait for a decision: a
            positive ``timedelta``, or a policy ``policy(args) -> timedelta | None``
            deciding per call. Past it the review expires and fails closed (the call
            does not run). None (the default): a review waits as long as it takes.
        review: The :class:`ReviewPolicy` of this tool's reviews (who may decide,
            which decisions and edits, the text shown to the reviewer), or a function
            ``policy(args) -> ReviewPolicy`` choosing one per call; None: any verified
            reviewer may decide anything.
    """

    name: str = attrs.field(validator=validated(_check_name))
    description: str = attrs.field(validator=validated(check_text))
    parameters: Mapping[str, JsonValue]
    func: ToolFunction = attrs.field(validator=validated(check_callable))
    read_only: bool = attrs.field(kw_only=True, default=False, validator=_A_BOOL)
    idempotent: bool = attrs.field(
        kw_only=True,
        default=attrs.Factory(lambda tool: tool.read_only, takes_self=True),
        validator=_A_BOOL,
    )
    requires_approval: bool | ApprovalPolicy = attrs.field(
        kw_only=True, default=False, validator=validated(check_approval)
    )
    run_on_approval: bool = attrs.field(kw_only=True, default=False, validator=_A_BOOL)
    timeout: float | None = attrs.field(kw_only=True, default=None, validator=check_timeout)
    pin: ToolPin | None = attrs.field(
        kw_only=True, default=None, validator=instance_of(ToolPin, "a ToolPin", optional=True)
    )
    review_deadline: timedelta | DeadlinePolicy | None = attrs.field(
        kw_only=True, default=None, validator=_check_deadline
    )
    review: ReviewPolicy | ReviewPolicyFunction | None = attrs.field(
        kw_only=True, default=None, validator=validated(_check_review, optional=True)
    )
    _validator: ArgumentsValidator = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        """Check the parameters schema once, so a bad one fails here, naming the tool.

        Raises:
            ConfigurationError: ``parameters`` is not a valid JSON Schema of an object,
                or ``run_on_approval`` is set on a tool that never requires approval.
        """
        if self.run_on_approval and self.requires_approval is False:
            msg = (
                f"tool {self.name!r} sets run_on_approval=True but never requires approval, "
                "so no approval could run it; set requires_approval=True (or a policy) too"
            )
            raise ConfigurationError(msg)
        object.__setattr__(self, "_validator", compile_schema(self.name, self.parameters))
        kind = self.parameters.get("type", "object")
        if kind != "object":
            msg = (
                f"tool {self.name!r} has parameters whose schema describes no JSON object "
                f"(its 'type' is {kind!r}): a call's arguments are an object, and the model "
                "APIs take only object schemas; put the value in an object with one property"
            )
            raise ConfigurationError(msg)
        # What the model is told and what is pinned stay what the validator holds.
        object.__setattr__(self, "parameters", copy.deepcopy(self.parameters))

    @property
    def spec(self) -> ToolSpec:
        """How the model is told about this tool."""
        return ToolSpec(self.name, self.description, dict(self.parameters))

    def needs_approval(self, args: dict[str, Any]) -> bool:
        """Whether a call with these validated arguments needs an approval.

        A policy that raises fails closed: the call needs an approval.
        """
        if isinstance(self.requires_approval, bool):
            return self.requires_approval
        try:
            return bool(self.requires_approval(args))
        except Exception:
            logger.exception("approval policy of tool %r failed: approval required", self.name)
            return True

    def deadline_of(self, args: dict[str, Any]) -> timedelta | None:
        """How long a review of a call with these validated arguments may wait.

        A policy that raises, or gives neither None nor a positive ``timedelta`` of at
        most :data:`MAX_REVIEW_DEADLINE`, fails closed: the review expires at once, so
        no late decision can run the call.
        """
        deadline = self.review_deadline
        if deadline is None or isinstance(deadline, timedelta):
            return deadline
        try:
            found = deadline(args)
        except Exception:
            logger.exception("deadline policy of tool %r failed: the review expires", self.name)
            return timedelta(0)
        if found is None or _is_wait(found):
            return found
        logger.error(
            "deadline policy of tool %r gave %r, not None nor a positive timedelta of at "
            "most a hundred years: the review expires",
            self.name,
            found,
        )
        return timedelta(0)

    def review_rules(self, args: dict[str, Any]) -> ReviewRules | None:
        """What a review of a call with these validated arguments allows, recorded with
        its request (None: no policy). A policy function that raises fails closed."""
        return review_rules(self.name, self.review, args)


class ArgumentsError(ValueError):
    """A tool call's arguments are not valid JSON or do not match the schema."""


@runtime_checkable
class ToolSource(Protocol):
    """Where tools come from besides ``AgentConfig.tools``: a server of tools, such as
    :class:`covonaut_es.mcp.MCPServer`.

    ``tools()`` may connect to the server the first time; it raises
    ``ToolServerError`` when the server cannot be reached or lists what no server may.
    """

    @property
    def name(self) -> str:
        """The name the application gave the source, for messages and reviews."""

    def tools(self) -> Sequence[Tool]:
        """The source's tools, as the model is offered them."""


def parse_arguments(tool: Tool, call: ToolCall) -> dict[str, Any]:
    """Decode and validate a call's JSON arguments.

    Raises:
        ToolArgumentsLimitError: The arguments are larger than ``MAX_ARGUMENTS_BYTES``
            or nested deeper than ``MAX_ARGUMENTS_DEPTH``; checked before decoding.
        ArgumentsError: With a message meant for the model (a key given twice in an
            object among them: what ran would not be what every reader of the text
            takes it to say).
    """
    text = call.arguments or "{}"
    check_arguments_limits(tool.name, text)
    try:
        args = msgspec.json.decode(text)
        strict_loads(text, FOR_THE_MODEL)  # msgspec keeps the last of a key given twice
    except msgspec.ValidationError as exc:  # a number that overflows to infinity
        error = f"hold a number JSON cannot carry ({exc}); use a finite number"
    except (msgspec.DecodeError, JsonRefused) as exc:
        error = f"are not valid JSON: {exc}"
    else:
        if isinstance(args, dict):
            invalid = validation_error(tool._validator, args)
            if invalid is None:
                return args
            error = f"are invalid: {invalid}"
        else:
            error = f"must be a JSON object, got {type(args).__name__}"
    msg = f"arguments for {tool.name!r} {error}"
    raise ArgumentsError(msg)


# A JSON string with its escapes: removed before counting brackets, so brackets inside
# strings do not count towards the nesting depth. Possessive, and an unterminated string
# runs to the end: a failed match would be retried from every later quote, which takes
# quadratic time on a hostile text of escaped quotes.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings
    aside), found in one pass without decoding it."""
    depth = deepest = 0
    for bracket in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def check_arguments_limits(tool_name: str, text: str) -> None:
    """Refuse arguments text over the size or depth limit, without decoding it (a
    deeply nested document would exhaust the decoder's recursion).

    Raises:
        ToolArgumentsLimitError: Naming the limit, what was found and what to do.
    """
    problem = json_limits_problem(text)
    if problem is not None:
        msg = (
            f"arguments for {tool_name!r} were refused: {problem}; pass smaller, flatter arguments"
        )
        raise ToolArgumentsLimitError(msg)


def json_limits_problem(text: str) -> str | None:
    """How a JSON text breaks the size (``MAX_ARGUMENTS_BYTES``) or depth
    (``MAX_ARGUMENTS_DEPTH``) limit, found without decoding it; None within both."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ARGUMENTS_BYTES:
        return f"{size} bytes, more than the {MAX_ARGUMENTS_BYTES} allowed"
    deepest = json_depth(text)
    if deepest > MAX_ARGUMENTS_DEPTH:
        return f"nested {deepest} deep, more than the {MAX_ARGUMENTS_DEPTH} levels allowed"
    return None


_BINARY = (bytes, bytearray, memoryview)


def _refuse_binary(plain: Any) -> None:
    """Refuse bytes anywhere in ``plain`` (a value msgspec made plain, bytes kept)."""
    if isinstance(plain, _BINARY):
        msg = (
            f"{type(plain).__name__} is not text; decode it (or encode it as base64) and "
            "return the text"
        )
        raise TypeError(msg)
    if isinstance(plain, dict):
        for key, item in plain.items():
            _refuse_binary(key)
            _refuse_binary(item)
    elif isinstance(plain, list | tuple):
        for item in plain:
            _refuse_binary(item)


def result_text(value: Any) -> str:
    """A tool's return value as the text the model reads: a string as it is, anything
    else as JSON.

    Raises:
        ToolResultError: The value cannot be recorded faithfully: it is of a type JSON
            cannot carry, recursive, holds NaN or infinity, bytes, or a lone surrogate.
    """
    try:
        if isinstance(value, str):
            text = str.__str__(value)  # a subclass of str, which no event holds, as str
        else:
            # Kept as they are, to be refused: msgspec would write them as base64 text,
            # which the model would read as the result.
            plain = msgspec.to_builtins(value, builtin_types=_BINARY)
            _refuse_binary(plain)
            refuse_non_finite(plain)
            text = msgspec.json.encode(plain).decode()
        text.encode("utf-8")  # a lone surrogate could not be stored
    except (TypeError, ValueError, RecursionError, msgspec.EncodeError) as exc:
        msg = f"the tool returned a value that cannot be recorded as JSON: {exc}"
        raise ToolResultError(msg) from exc
    return text
