"""Validation of tool arguments against the JSON Schema subset tools declare.

Tool parameter schemas in practice use a small part of JSON Schema: ``type``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``enum``, ``const``,
length and range bounds, ``anyOf``/``oneOf``. This validator covers exactly that and
reports the first problem with its JSON path, which the model then reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TYPE_CHECKS: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def validation_error(value: Any, schema: Mapping[str, Any], path: str = "$") -> str | None:
    """The first way ``value`` violates ``schema``, or None when it conforms."""
    expected = schema.get("type")
    if expected is not None:
        types = expected if isinstance(expected, list) else [expected]
        if not any(_TYPE_CHECKS.get(t, lambda _: True)(value) for t in types):
            return f"{path}: expected {' or '.join(types)}, got {_json_type(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}: {value!r} is not one of {schema['enum']!r}"
    if "const" in schema and value != schema["const"]:
        return f"{path}: expected {schema['const']!r}, got {value!r}"
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            matches = [s for s in schema[keyword] if validation_error(value, s, path) is None]
            if not matches or (keyword == "oneOf" and len(matches) > 1):
                return f"{path}: does not match {keyword} of the schema"
    if isinstance(value, dict):
        return _object_error(value, schema, path)
    if isinstance(value, list):
        return _array_error(value, schema, path)
    if isinstance(value, str):
        return _bounds_error(len(value), schema, path, "minLength", "maxLength", "length")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _bounds_error(value, schema, path, "minimum", "maximum", "value")
    return None


def _object_error(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> str | None:
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            return f"{path}: missing required property {name!r}"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            error = validation_error(item, properties[name], f"{path}.{name}")
        elif extra is False:
            error = f"{path}: unexpected property {name!r}"
        elif isinstance(extra, Mapping):
            error = validation_error(item, extra, f"{path}.{name}")
        else:
            error = None
        if error:
            return error
    return None


def _array_error(value: list[Any], schema: Mapping[str, Any], path: str) -> str | None:
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            error = validation_error(item, items, f"{path}[{index}]")
            if error:
                return error
    return _bounds_error(len(value), schema, path, "minItems", "maxItems", "length")


def _bounds_error(
    measure: float, schema: Mapping[str, Any], path: str, low: str, high: str, what: str
) -> str | None:
    if low in schema and measure < schema[low]:
        return f"{path}: {what} {measure} is below the {low} {schema[low]}"
    if high in schema and measure > schema[high]:
        return f"{path}: {what} {measure} is above the {high} {schema[high]}"
    return None


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return type(value).__name__
