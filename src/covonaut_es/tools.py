"""Tools the model may call, and the context each call receives."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import msgspec

from covonaut_es.schema import validation_error
from covonaut_es.values import JsonValue, ToolCall, ToolSpec

ToolFunction = Callable[["ToolContext", dict[str, Any]], Any]
"""``func(ctx, args)``: returns any JSON-encodable value, or raises ``InterruptError``."""


@attrs.frozen
class ToolContext:
    """What a tool function learns about the call it serves.

    Attributes:
        thread_id: The thread the call belongs to.
        tool_call_id: The model's id for this call.
        tool_name: The tool's name.
        idempotency_key: Stable for this call across restores and retries: pass it to
            external systems so a repeated call is recognised (B5).
    """

    thread_id: str
    tool_call_id: str
    tool_name: str
    idempotency_key: str


def _check_name(_: Any, __: attrs.Attribute[str], value: str) -> None:
    if not value or not value.replace("_", "").replace("-", "").isalnum():
        msg = f"tool name must be letters, digits, '_' or '-', got {value!r}"
        raise ValueError(msg)


@attrs.frozen
class Tool:
    """A function the model may call.

    Attributes:
        name: The name the model uses.
        description: What the tool does, for the model.
        parameters: JSON Schema of the arguments object; arguments are validated
            against it before ``func`` runs.
        func: ``func(ctx, args)`` returning a JSON-encodable value (a string is passed
            to the model as is). Raise ``InterruptError`` to pause the run.
        idempotent: Running the call twice is harmless, so a call left in doubt by a
            crash is retried automatically with the same idempotency key.
    """

    name: str = attrs.field(validator=_check_name)
    description: str
    parameters: Mapping[str, JsonValue]
    func: ToolFunction = attrs.field(validator=attrs.validators.is_callable())
    idempotent: bool = attrs.field(kw_only=True, default=False)

    @property
    def spec(self) -> ToolSpec:
        """How the model is told about this tool."""
        return ToolSpec(self.name, self.description, dict(self.parameters))


class ArgumentsError(ValueError):
    """A tool call's arguments are not valid JSON or do not match the schema."""


def parse_arguments(tool: Tool, call: ToolCall) -> dict[str, Any]:
    """Decode and validate a call's JSON arguments.

    Raises:
        ArgumentsError: With a message meant for the model.
    """
    try:
        args = msgspec.json.decode(call.arguments or "{}")
    except msgspec.DecodeError as exc:
        msg = f"arguments for {tool.name!r} are not valid JSON: {exc}"
        raise ArgumentsError(msg) from exc
    if not isinstance(args, dict):
        msg = f"arguments for {tool.name!r} must be a JSON object"
        raise ArgumentsError(msg)
    error = validation_error(args, tool.parameters)
    if error:
        msg = f"invalid arguments for {tool.name!r}: {error}"
        raise ArgumentsError(msg)
    return args


def result_text(value: Any) -> str:
    """A tool's return value as the text the model reads."""
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()
