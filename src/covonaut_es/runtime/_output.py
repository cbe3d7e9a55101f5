"""Typed final answers: the shape the model is told, the check of its answer, and the
typed value read back from the thread.

An ``output_type`` is a ``msgspec.Struct`` class, an attrs class, or a JSON Schema (a
dict). A class is validated by ``msgspec.convert`` (the class's own rules, constraints
and validators included) and told to the model as ``msgspec.json.schema``; a JSON Schema
by ``jsonschema``, as tool arguments are. What is recorded is JSON data, never an object:
the aggregate stays pure and a replay needs no application class to read the thread.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import msgspec

from covonaut_es._schema import ArgumentsValidator, compile_schema, validation_error
from covonaut_es._strict_json import FOR_THE_MODEL, strict_loads
from covonaut_es._text import exception_text
from covonaut_es.domain import TypedOutput
from covonaut_es.errors import ConfigurationError, OutputValidationError
from covonaut_es.messages import JsonValue, OutputSpec
from covonaut_es.tools import json_limits_problem

OUTPUT_NAME = "final_answer"
"""The name the model knows the answer's shape by: the OpenAI response format's, the
Anthropic output tool's. No tool of a typed agent may have it."""

MAX_ERROR_CHARS = 600
"""The longest explanation of a refused answer sent back to the model: a refusal may
quote the model's own (hostile, possibly huge) value."""

# Keywords OpenAI's strict structured outputs do not take; a schema with one is sent
# without strict, and the answer is validated here either way.
_NOT_STRICT = frozenset(
    {
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "patternProperties",
        "unevaluatedProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "default",
    }
)


class AnswerRefused(ValueError):
    """A final answer does not match the output type; the message is for the model."""


@attrs.frozen
class OutputShape:
    """An ``AgentConfig.output_type``, compiled once.

    Attributes:
        output_type: The type as configured.
        spec: What the model is told.
    """

    output_type: object
    spec: OutputSpec
    _validator: ArgumentsValidator | None = attrs.field(repr=False, eq=False)

    @classmethod
    def of(cls, output_type: object) -> OutputShape:
        """Compile ``output_type``.

        Raises:
            ConfigurationError: It is no Struct class, attrs class nor JSON Schema, or
                its schema is invalid or not an object schema.
        """
        if isinstance(output_type, Mapping):
            schema = dict(output_type)
            validator: ArgumentsValidator | None = compile_schema(OUTPUT_NAME, schema)
        elif isinstance(output_type, type) and (
            issubclass(output_type, msgspec.Struct) or attrs.has(output_type)
        ):
            schema = _class_schema(output_type)
            validator = None
        else:
            msg = (
                "AgentConfig.output_type must be a msgspec.Struct class, an attrs class or "
                f"a JSON Schema (a dict), got {output_type!r}"
            )
            raise ConfigurationError(msg)
        if schema.get("type") != "object":
            msg = (
                f"AgentConfig.output_type's schema must describe a JSON object (its 'type' is "
                f"{schema.get('type')!r}): the model APIs take only object schemas for a "
                "structured answer; wrap the value in an object with one field"
            )
            raise ConfigurationError(msg)
        spec = OutputSpec(OUTPUT_NAME, schema, strict=_fits_strict(schema))
        return cls(output_type, spec, validator)

    def check(self, text: str) -> TypedOutput:
        """The value of a model's final answer, validated, as recorded.

        Raises:
            AnswerRefused: The answer is not JSON of the shape, or cannot be recorded
                faithfully; the message says why, for the model.
        """
        problem = json_limits_problem(text)
        if problem is not None:
            raise AnswerRefused(f"the answer was refused: {problem}")
        value = _parsed(text)
        if self._validator is not None:
            invalid = validation_error(self._validator, value)
            if invalid is not None:
                raise AnswerRefused(_clipped(f"the answer does not match the schema: {invalid}"))
            _check_recordable(value)  # then it reads back as the same, valid value
            return TypedOutput(value)
        try:
            value = msgspec.to_builtins(self._converted(value))
        except (msgspec.MsgspecError, TypeError, ValueError) as exc:
            msg = _clipped(f"the answer does not match the schema: {exception_text(exc)}")
            raise AnswerRefused(msg) from exc
        _check_recordable(value)
        recorded = TypedOutput(value)
        try:  # a class's JSON form must convert back: checked before recording, not after
            self.typed(recorded)
        except OutputValidationError as exc:
            raise AnswerRefused(f"the answer cannot be recorded: {exc}") from exc
        return recorded

    def typed(self, recorded: TypedOutput) -> Any:
        """A recorded output in the configured type: an instance of the class, or the
        JSON data a JSON Schema describes (validated again on read). Either is a fresh
        copy: changing it changes nothing recorded.

        Raises:
            OutputValidationError: The recorded value does not fit the configured type
                (the type changed since the run was recorded).
        """
        value = msgspec.json.decode(msgspec.json.encode(recorded.value))
        try:
            if self._validator is None:
                return self._converted(value)
            invalid = validation_error(self._validator, value)
            if invalid is None:
                return value
            reason = invalid
        except (msgspec.MsgspecError, TypeError, ValueError) as exc:
            reason = exception_text(exc)
        msg = (
            f"the recorded output does not fit AgentConfig.output_type {self._type_name()}: "
            f"{_clipped(reason)}; read it as JSON data from state.output, or configure the "
            "type it was recorded with"
        )
        raise OutputValidationError(msg)

    def correction(self, refused: AnswerRefused) -> str:
        """The message that sends a refused answer back to the model."""
        return (
            f"Your final answer was not accepted: {refused}. Answer again with only a JSON "
            f"object that matches the {OUTPUT_NAME} schema."
        )

    def _converted(self, value: JsonValue) -> Any:
        assert isinstance(self.output_type, type)
        return msgspec.convert(value, self.output_type)

    def _type_name(self) -> str:
        kind = self.output_type
        return kind.__qualname__ if isinstance(kind, type) else "(a JSON Schema)"


def output_of(recorded: TypedOutput | None, shape: OutputShape | None) -> Any:
    """The typed output of a thread's last finished run, from what the thread recorded
    (``ThreadState.output``) and the agent's compiled output type
    (``AgentConfig.output_shape``): an instance of the class, or, for a JSON Schema or
    without an output type, the recorded JSON data; None when that run's answer was
    not typed.

    Raises:
        OutputValidationError: The recorded value does not fit the output type.
    """
    if recorded is None:
        return None
    if shape is None:
        return msgspec.json.decode(msgspec.json.encode(recorded.value))  # a copy
    return shape.typed(recorded)


def _class_schema(output_type: type) -> dict[str, Any]:
    """The class's JSON Schema with its root inlined: msgspec makes the root a ``$ref``,
    and the APIs want an object schema at the top (the ``$defs`` stay for references)."""
    try:
        schema: dict[str, Any] = msgspec.json.schema(output_type)
    except (TypeError, ValueError) as exc:
        msg = f"AgentConfig.output_type {output_type.__qualname__} has no JSON Schema: {exc}"
        raise ConfigurationError(msg) from exc
    ref = schema.get("$ref", "")
    definitions: dict[str, Any] = schema.get("$defs", {})
    root = definitions.get(ref.removeprefix("#/$defs/"))
    if root is None:
        return schema
    if len(definitions) == 1 and ref not in msgspec.json.encode(root).decode():
        return dict(root)  # nothing refers to a definition
    return {**root, "$defs": definitions}


def _fits_strict(schema: dict[str, Any]) -> bool:
    """Whether OpenAI's strict mode takes the schema: every object closed with all its
    properties required, and no keyword strict mode lacks."""
    for node in _nodes(schema):
        if _NOT_STRICT.intersection(node):
            return False
        if node.get("type") == "object" or "properties" in node:
            properties = node.get("properties", {})
            closed = node.get("additionalProperties") is False
            if not closed or set(node.get("required", ())) != set(properties):
                return False
    return True


def _nodes(schema: Any) -> Iterator[dict[str, Any]]:
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _parsed(text: str) -> JsonValue:
    """The answer's JSON value. A key given twice, NaN or infinity are refused: what
    is recorded must be what any reader of the answer's text would take it to say."""
    try:
        return strict_loads(text, FOR_THE_MODEL)
    except RecursionError:  # pragma: no cover - the depth limit is checked first
        raise AnswerRefused("the answer is nested too deeply") from None
    except ValueError as exc:  # JsonRefused and JSONDecodeError among them
        raise AnswerRefused(_clipped(f"the answer is not valid JSON: {exc}")) from None


def _check_recordable(value: JsonValue) -> None:
    """Refuse a value the thread could not store as it is (a lone surrogate in a
    string, say): it must come back from its JSON equal."""
    try:
        same = msgspec.json.decode(msgspec.json.encode(value)) == value
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError) as exc:
        raise AnswerRefused(_clipped(f"the answer cannot be recorded: {exc}")) from None
    if not same:
        raise AnswerRefused("the answer cannot be recorded: it does not read back the same")


def _clipped(text: str) -> str:
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return text[:MAX_ERROR_CHARS] + "…"
