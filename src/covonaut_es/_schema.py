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
import referencing.jsonschema

from covonaut_es.errors import ConfigurationError

ArgumentsValidator = jsonschema.protocols.Validator
"""A compiled validator of one tool's arguments."""

# An empty registry: a "$ref" resolves inside the schema itself, and a remote one is an
# error rather than a network request made while validating a model's arguments.
_NO_REMOTE_SCHEMAS: referencing.Registry[Any] = referencing.Registry()

# Keywords that apply a schema to the very value the schema applies to: a loop through
# these alone never reaches a smaller value, so validating by it recurses without end.
_IN_PLACE = ("not", "if", "then", "else")
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
# Values that are data, never applied (walked past), and maps whose keys are names.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
_NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})


def compile_schema(
    tool_name: str, schema: Mapping[str, Any], what: str = "parameters"
) -> ArgumentsValidator:
    """Check ``schema`` against its draft's meta-schema (2020-12 unless ``$schema``
    names another) and for references that loop on one value, and return its
    validator; ``what`` names the schema in messages ("parameters", "output").

    Raises:
        ConfigurationError: The schema is not a valid JSON Schema, nests too deep for
            ``jsonschema`` to check, or its references loop on one value (see
            :func:`reference_loop`).
    """
    if not isinstance(schema, Mapping):
        msg = (
            f"tool {tool_name!r} needs a JSON Schema object as its {what}, got "
            f"{type(schema).__name__}; pass e.g. {{'type': 'object', 'properties': {{...}}}}"
        )
        raise ConfigurationError(msg)
    dialect = schema.get("$schema")
    if dialect is not None and not isinstance(dialect, str):  # validator_for reads it unchecked
        msg = (
            f"tool {tool_name!r} has an invalid {what} schema: at $['$schema']: a "
            f"{type(dialect).__name__}, not a URI; name a draft, or leave $schema out"
        )
        raise ConfigurationError(msg)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(dict(schema))
        validator = cls(schema, registry=_NO_REMOTE_SCHEMAS)
    except jsonschema.exceptions.SchemaError as exc:
        path = exc.json_path
        msg = (
            f"tool {tool_name!r} has an invalid {what} schema: at {path}: {exc.message}; "
            "fix the schema so it is valid JSON Schema"
        )
        raise ConfigurationError(msg) from exc
    except RecursionError as exc:  # jsonschema checks a schema recursively
        msg = (
            f"tool {tool_name!r} has an invalid {what} schema: it nests too deep for "
            "jsonschema to check (a hundred levels or so); flatten the schema"
        )
        raise ConfigurationError(msg) from exc
    loop = reference_loop(schema)
    if loop is not None:
        msg = (
            f"the {what} schema of tool {tool_name!r} has references that loop: {loop} "
            "applies the schema it is in to the same value again, so no value could be "
            "checked; make each reference reach a property or an item first"
        )
        raise ConfigurationError(msg)
    return validator


def reference_loop(schema: Mapping[str, Any]) -> str | None:
    """The reference (named with its JSON path) that closes a loop of schemas applied
    to one value (through ``$ref``, ``$dynamicRef``, ``$recursiveRef``, ``allOf``,
    ``not``...), or None when every loop passes through a property or an item.

    A reference that does not resolve is left to validation, which refuses it.
    """
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    spec = referencing.jsonschema.specification_with(
        cls.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT202012
    )
    root = dict(schema)
    starts: list[_Applied] = [
        (root, "$", _NO_REMOTE_SCHEMAS.resolver_with_root(spec.create_resource(root)))
    ]
    done: set[int] = set()
    # Depth first from each schema, iteratively (a hostile schema may nest deeper than
    # Python recurses): a schema met again on the path applies itself to its own value.
    while starts:
        first = starts.pop()
        if id(first[0]) in done:
            continue
        on_path = {id(first[0])}
        stack = [(id(first[0]), iter(_applied(first, spec, starts)))]
        while stack:
            seen, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                on_path.discard(seen)
                done.add(seen)
                stack.pop()
            elif id(step[0]) in on_path:
                return step[1]
            elif id(step[0]) not in done:
                on_path.add(id(step[0]))
                stack.append((id(step[0]), iter(_applied(step, spec, starts))))
    return None


# A schema, its JSON path, and the resolver of its references (a `referencing` Resolver).
_Applied = tuple[Mapping[str, Any], str, Any]


def _applied(
    at: _Applied, spec: referencing.Specification[Any], inner: list[_Applied]
) -> list[_Applied]:
    """The schemas the schema ``at`` applies to its own value, each with its path and
    the resolver of its references; those it applies to a part of its value (a
    property, an item) are added to ``inner``, to be searched from in their turn."""
    node, path, resolver = at
    try:
        resolver = resolver.in_subresource(spec.create_resource(node))  # its own $id, if any
    except ValueError:  # an $id that is no URI: resolving under it is validation's fault
        resolver = None
    same: list[tuple[Any, str]] = []
    for key, value in node.items():
        if key in _DATA_KEYWORDS or key in _REFERENCES:
            continue
        if isinstance(value, list):
            found = [(item, f"{path}.{key}[{i}]") for i, item in enumerate(value)]
        elif isinstance(value, Mapping) and key in _NAME_MAPS:
            found = [(item, f"{path}.{key}[{name!r}]") for name, item in value.items()]
        else:
            found = [(value, f"{path}.{key}")]
        if key in _IN_PLACE or key in _IN_PLACE_LISTS or key in _IN_PLACE_MAPS:
            same += found
        else:
            inner += [(item, where, resolver) for item, where in found if isinstance(item, Mapping)]
    applied = [(item, where, resolver) for item, where in same if isinstance(item, Mapping)]
    for key in _REFERENCES:
        ref = node.get(key)
        if not isinstance(ref, str) or resolver is None:
            continue
        try:
            resolved = resolver.lookup(ref)
        except (referencing.exceptions.Unresolvable, ValueError):
            continue
        if isinstance(resolved.contents, Mapping):
            applied.append((resolved.contents, f"{key} {ref!r} at {path}", resolved.resolver))
    return applied


def validation_error(validator: ArgumentsValidator, value: Any) -> str | None:
    """The best-matching way ``value`` violates the schema, with its JSON path, or None
    when it conforms."""
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except referencing.exceptions.Unresolvable as exc:
        # Found only when a value reaches the "$ref": the call is refused, not run.
        return f"the tool's schema cannot be applied: {exc}; its $ref must point inside it"
    except RecursionError:
        # A loop of references that a tool made before they were refused (a pinned
        # schema replayed) or that reference_loop cannot see: refused, not run.
        return "the tool's schema cannot be applied: its references loop without end"
    if error is None:
        return None
    return f"{error.json_path}: {error.message}"
