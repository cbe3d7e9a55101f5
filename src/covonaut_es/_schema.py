"""Validation of tool arguments against each tool's JSON Schema, with ``jsonschema``.

``jsonschema`` is used rather than hand-written checks because it implements the
whole specification (``$ref``, ``pattern``, ``allOf``, ``uniqueItems``...) and checks
the schema itself, so a typo such as ``{"type": "intger"}`` fails when the tool is made
instead of letting every argument through.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
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

# Keywords that apply a schema (or each of a list or a map of them) to the very value
# the schema applies to: a loop through these alone never reaches a smaller value, so
# validating by it recurses without end. ("type", "extends", "disallow": draft 3.)
_IN_PLACE = frozenset(
    {"not", "if", "then", "else", "allOf", "anyOf", "oneOf", "dependentSchemas"}
    | {"dependencies", "type", "extends", "disallow"}
)
# Keywords that apply a schema to a part of the value (a property, an item, a name).
_IN_PARTS = frozenset(
    {"properties", "patternProperties", "additionalProperties", "unevaluatedProperties"}
    | {"propertyNames", "items", "prefixItems", "additionalItems", "unevaluatedItems"}
    | {"contains"}
)
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
# Definitions are applied only through a reference, but are schemas: searched too.
_DEFINITIONS = ("$defs", "definitions")
# Maps whose keys are names (of properties, definitions), each value a schema.
_NAME_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas", "dependencies"})


class _ReferencesLoop(Exception):
    """A schema whose references loop on one value; its argument names the reference
    that closes the loop."""


class _IdNotText(Exception):
    """A schema whose ``$id`` ``referencing`` cannot read (it reads one as text,
    unchecked); its argument names the schema."""


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
    try:
        text = _kept_text(schema)
        return _checked(copy.deepcopy(schema)) if text is None else _checked_text(text)
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
    except _IdNotText as exc:  # under a keyword the meta-schema does not check
        msg = (
            f"tool {tool_name!r} has an invalid {what} schema: {exc} has an $id that is not "
            "text, so its references cannot be resolved; make each $id a URI string"
        )
        raise ConfigurationError(msg) from exc
    except _ReferencesLoop as exc:
        msg = (
            f"the {what} schema of tool {tool_name!r} has references that loop: {exc} "
            "applies the schema it is in to the same value again, so no value could be "
            "checked; make each reference reach a property or an item first"
        )
        raise ConfigurationError(msg) from exc


# The longest schema, as JSON, whose validator is kept once checked, and how many are
# kept: a server of tools sending ever new schemas holds at most 512 KiB of them, some
# 16 MiB as Python objects (tools' schemas are mostly well under 4 KiB).
_LONGEST_KEPT = 4 * 1024
_KEPT_SCHEMAS = 128


def _kept_text(schema: Mapping[str, Any]) -> str | None:
    """``schema`` as JSON, when JSON reads it back as the very same values: plain dicts
    keyed by text, lists, text, finite numbers, booleans and nulls, no dict or list in
    it twice, at most ``_LONGEST_KEPT`` long; else None. A tuple, an enum's member or a
    shared dict is told apart from its JSON by Python, and so by jsonschema's verdicts,
    messages or references."""
    seen: set[int] = set()
    pending: list[object] = [schema]
    while pending:
        value = pending.pop()
        if type(value) is dict or type(value) is list:
            if id(value) in seen or len(seen) >= _LONGEST_KEPT:
                return None
            seen.add(id(value))
            if type(value) is dict:
                if any(type(key) is not str for key in value):
                    return None
                pending.extend(value.values())
            else:
                pending.extend(value)
        elif type(value) is float:
            if not math.isfinite(value):
                return None
        elif type(value) not in (str, int, bool, type(None)):
            return None
    try:
        text = json.dumps(schema, separators=(",", ":"))
    except (ValueError, RecursionError):  # an int too long to write, nesting too deep
        return None
    return text if len(text) <= _LONGEST_KEPT else None


@functools.lru_cache(maxsize=_KEPT_SCHEMAS)
def _checked_text(text: str) -> ArgumentsValidator:
    """The validator of the schema written as ``text``: checking a schema against its
    meta-schema costs milliseconds, and an application builds its tools again for each
    agent it makes (each thread a worker or the inbox resumes). A refusal is not kept."""
    return _checked(json.loads(text))


def _checked(schema: Mapping[str, Any]) -> ArgumentsValidator:
    """The validator of ``schema`` (a copy of the caller's, which it keeps), checked
    against its draft's meta-schema and for references that loop on one value.

    Raises:
        jsonschema.exceptions.SchemaError: The schema is not valid JSON Schema.
        RecursionError: It nests too deep for ``jsonschema`` to check.
        _IdNotText: A schema in it has an ``$id`` that is not text.
        _ReferencesLoop: Its references loop on one value.
    """
    cls = _linear(
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    )
    cls.check_schema(dict(schema))
    validator = cls(schema, registry=_NO_REMOTE_SCHEMAS)
    loop = reference_loop(schema, cls)
    if loop is not None:
        raise _ReferencesLoop(loop)
    return validator


def reference_loop(schema: Mapping[str, Any], cls: type[ArgumentsValidator]) -> str | None:
    """The reference (named with its JSON path) that closes a loop of schemas applied
    to one value (through ``$ref``, ``$dynamicRef``, ``$recursiveRef``, ``allOf``,
    ``not``...), or None when every loop passes through a property or an item;
    ``cls`` is the validator of the schema's draft.

    Only the keywords the schema's draft applies are followed (an unknown keyword's
    value is a schema only where a reference reaches it). A reference that does not
    resolve is left to validation, which refuses it.

    Raises:
        _IdNotText: A schema reached has an ``$id`` that is not text.
    """
    spec = referencing.jsonschema.specification_with(
        cls.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT202012
    )
    applies = set(cls.VALIDATORS) | ({"then", "else"} if "if" in cls.VALIDATORS else set())
    walk = _Walk(spec, frozenset(applies & (_IN_PLACE | _IN_PARTS | set(_REFERENCES))))
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
        stack = [(id(first[0]), iter(_applied(first, walk, starts)))]
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
                stack.append((id(step[0]), iter(_applied(step, walk, starts))))
    return None


# A schema, its JSON path, and the resolver of its references (a `referencing` Resolver).
_Applied = tuple[Mapping[str, Any], str, Any]


@attrs.frozen
class _Walk:
    """How the schemas of one draft are walked: its ``referencing`` specification, and
    the keywords by which its validator applies schemas."""

    spec: referencing.Specification[Any]
    keywords: frozenset[str]


def _applied(at: _Applied, walk: _Walk, inner: list[_Applied]) -> list[_Applied]:
    """The schemas the schema ``at`` applies to its own value, each with its path and
    the resolver of its references; those it applies to a part of its value (a
    property, an item) and its definitions are added to ``inner``, to be searched from
    in their turn.

    Raises:
        _IdNotText: ``at``, or a schema a reference of it passes through, has an
            ``$id`` that is not text.
    """
    node, path, resolver = at
    try:
        resolver = resolver.in_subresource(walk.spec.create_resource(node))  # its own $id
    except ValueError:  # an $id that is no URI: resolving under it is validation's fault
        resolver = None
    except (TypeError, AttributeError) as exc:
        raise _IdNotText(f"the schema at {path}") from exc
    applied: list[_Applied] = []
    for key, value in node.items():
        if key not in walk.keywords and key not in _DEFINITIONS:
            continue
        if isinstance(value, list):
            found = [(item, f"{path}.{key}[{i}]") for i, item in enumerate(value)]
        elif isinstance(value, Mapping) and (key in _NAME_MAPS or key in _DEFINITIONS):
            found = [(item, f"{path}.{key}[{name!r}]") for name, item in value.items()]
        else:
            found = [(value, f"{path}.{key}")]
        schemas = [(item, where, resolver) for item, where in found if isinstance(item, Mapping)]
        if key in _IN_PLACE:
            applied += schemas
        else:
            inner += schemas
    for key in _REFERENCES:
        ref = node.get(key)
        if key not in walk.keywords or not isinstance(ref, str) or resolver is None:
            continue
        try:
            resolved = resolver.lookup(ref)
        except (referencing.exceptions.Unresolvable, ValueError):
            continue
        except (TypeError, AttributeError) as exc:
            raise _IdNotText(f"a schema on the way of {key} {ref!r} at {path}") from exc
        if isinstance(resolved.contents, Mapping):
            applied.append((resolved.contents, f"{key} {ref!r} at {path}", resolved.resolver))
    return applied


@functools.cache
def _linear(cls: type[ArgumentsValidator]) -> type[ArgumentsValidator]:
    """``cls`` with ``uniqueItems`` checked in time linear in the array's length:
    jsonschema compares every pair of items that are arrays or objects, and a model's
    4,000 small objects held the process for 23 seconds, outside any tool's timeout."""
    if "uniqueItems" not in cls.VALIDATORS:  # draft 3 has it; every later draft too
        return cls
    extended: type[ArgumentsValidator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        cls, validators={"uniqueItems": _unique_items}
    )
    return extended


def _unique_items(
    validator: ArgumentsValidator, unique: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.exceptions.ValidationError]:
    if not (unique and validator.is_type(instance, "array")):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _equality_key(item)
        if key in seen:
            yield jsonschema.exceptions.ValidationError("has non-unique elements")
            return
        seen.add(key)


def _equality_key(value: Any) -> Any:
    """A hashable key that is equal for two JSON values exactly when JSON Schema's
    equality holds (``1`` and ``1.0`` equal, ``true`` and ``1`` not, objects whatever
    the order of their keys)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, int | float):
        return ("number", value)  # 1 == 1.0, and they hash alike
    if isinstance(value, list):
        return ("array", tuple(_equality_key(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _equality_key(v)) for k, v in value.items()))
    return ("text", value)


def validation_error(validator: ArgumentsValidator, value: Any) -> str | None:
    """The best-matching way ``value`` violates the schema, with its JSON path, or None
    when it conforms."""
    try:
        error = _best_error(validator, value)
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


def _best_error(
    validator: ArgumentsValidator, value: Any
) -> jsonschema.exceptions.ValidationError | None:
    """The error jsonschema judges most relevant of those ``value`` makes, or None."""
    found: jsonschema.exceptions.ValidationError | None
    try:
        found = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except TypeError:  # jsonschema 4.26 hashes a draft-3 "type" that is a schema
        found = next(iter(validator.iter_errors(value)), None)
    return found
