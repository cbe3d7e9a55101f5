"""Validation of tool arguments against each tool's JSON Schema, with ``jsonschema``.

``jsonschema`` is used rather than hand-written checks because it implements the
whole specification (``$ref``, ``pattern``, ``allOf``, ``uniqueItems``...) and checks
the schema itself, so a typo such as ``{"type": "intger"}`` fails when the tool is made
instead of letting every argument through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions

from covonaut_es.errors import ConfigurationError

ArgumentsValidator = jsonschema.protocols.Validator
"""A compiled validator of one tool's arguments."""

# An empty registry: a "$ref" resolves inside the schema itself, and a remote one is an
# error rather than a network request made while validating a model's arguments.
_NO_REMOTE_SCHEMAS: referencing.Registry[Any] = referencing.Registry()


def compile_schema(tool_name: str, schema: Mapping[str, Any]) -> ArgumentsValidator:
    """Check ``schema`` against its draft's meta-schema (2020-12 unless ``$schema``
    names another) and return its validator.

    Raises:
        ConfigurationError: The schema is not a valid JSON Schema.
    """
    if not isinstance(schema, Mapping):
        msg = (
            f"tool {tool_name!r} needs a JSON Schema object as its parameters, got "
            f"{type(schema).__name__}; pass e.g. {{'type': 'object', 'properties': {{...}}}}"
        )
        raise ConfigurationError(msg)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(dict(schema))
    except jsonschema.exceptions.SchemaError as exc:
        path = exc.json_path
        msg = (
            f"tool {tool_name!r} has an invalid parameters schema: at {path}: {exc.message}; "
            "fix the schema so it is valid JSON Schema"
        )
        raise ConfigurationError(msg) from exc
    return cls(schema, registry=_NO_REMOTE_SCHEMAS)


def validation_error(validator: ArgumentsValidator, value: Any) -> str | None:
    """The best-matching way ``value`` violates the schema, with its JSON path, or None
    when it conforms."""
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except referencing.exceptions.Unresolvable as exc:
        # Found only when a value reaches the "$ref": the call is refused, not run.
        return f"the tool's schema cannot be applied: {exc}; its $ref must point inside it"
    if error is None:
        return None
    return f"{error.json_path}: {error.message}"
