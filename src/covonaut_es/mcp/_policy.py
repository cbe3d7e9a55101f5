"""What an MCP server's tool becomes: our ``Tool``, with its policy and its limits.

A server's listing is hostile input: its names, descriptions, schemas and hints are
checked here, once, and a listing that breaks a limit is refused whole with a
``ToolServerError``. Hints are defaults; the application's overrides always win, so a
server can never lower a policy the application set.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import msgspec

from covonaut_es._arguments import instance_of, positive_seconds, validated
from covonaut_es._schema import compile_schema
from covonaut_es.domain import ToolPin, canonical_json
from covonaut_es.domain._canonical import json_data
from covonaut_es.errors import (
    ConfigurationError,
    MCPToolError,
    NonFiniteNumberError,
    NotJSONDataError,
    ToolResultError,
    ToolServerError,
)
from covonaut_es.messages import JsonValue
from covonaut_es.tools import ApprovalPolicy, Tool, ToolFunction, check_approval

MAX_TOOLS = 256
"""The most tools one server may list."""

MAX_DESCRIPTION_CHARS = 8_192
"""The longest description of a listed tool."""

MAX_SCHEMA_BYTES = 65_536
"""The largest input schema (canonical JSON, bytes) of a listed tool."""

MAX_RESULT_BYTES = 1_048_576
"""The default bound on a call's result text (UTF-8 bytes); see ``MCPServer``."""


# Where a JSON Schema keeps what is not a schema: values (never applied to arguments)
# and maps whose keys are names (of properties, definitions), not keywords.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
_NAME_MAPS = frozenset(
    {
        "properties",
        "patternProperties",
        "$defs",
        "definitions",
        "dependentSchemas",
        "dependentRequired",
        "dependencies",
    }
)
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")

_OPTIONAL_BOOL = instance_of(bool, "True, False or None", optional=True)


@attrs.frozen
class ToolPolicy:
    """The application's word on one server tool; each field left None takes the
    server's hint.

    Attributes:
        requires_approval: ``True``/``False`` or a policy ``policy(args) -> bool``.
            Unset: the tool needs an approval unless the server marks it read-only
            and not destructive.
        idempotent: Whether a call left in doubt may run again with its key. Unset:
            the server's ``idempotentHint`` or ``readOnlyHint``.
        timeout: Seconds a call may run; unset: the server's, then the agent's.
        run_on_approval: An approved call runs on resume with the reviewer's edits,
            without another model call (see ``Tool.run_on_approval``); it applies to
            the calls that need approval. Unset: False.

    Raises:
        ConfigurationError: A field is neither None nor of its type (a timeout of no
            positive number of seconds), naming it.
    """

    requires_approval: bool | ApprovalPolicy | None = attrs.field(
        default=None, validator=validated(check_approval, optional=True)
    )
    idempotent: bool | None = attrs.field(default=None, validator=_OPTIONAL_BOOL)
    timeout: float | None = attrs.field(
        default=None, validator=validated(positive_seconds, optional=True)
    )
    run_on_approval: bool | None = attrs.field(default=None, validator=_OPTIONAL_BOOL)


@attrs.frozen
class Hints:
    """A listed tool's annotations, as booleans: each is True only when the server
    said so (MCP's own default for an unmarked tool is "destructive")."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    @classmethod
    def of(cls, annotations: Any) -> Hints:
        """Read the hints from the SDK's ``ToolAnnotations`` (or None): a value that is
        not a boolean counts as absent."""

        def flag(name: str, default: bool) -> bool:
            value = getattr(annotations, name, None)
            return value if isinstance(value, bool) else default

        return cls(
            read_only=flag("read_only_hint", False),
            destructive=flag("destructive_hint", False),
            idempotent=flag("idempotent_hint", False),
        )


def effective_policy(hints: Hints, override: ToolPolicy | None) -> ToolPolicy:
    """The policy a tool runs under: the override's fields, and the hints' defaults for
    those it leaves unset. A tool needs approval unless it is marked read-only (and
    not also destructive); ``idempotentHint`` (or read-only) allows a retry."""
    override = override or ToolPolicy()
    requires = override.requires_approval
    if requires is None:
        requires = hints.destructive or not hints.read_only
    idempotent = override.idempotent
    if idempotent is None:
        idempotent = hints.idempotent or hints.read_only
    # No hint says whether an approval runs the call: only the application does.
    runs = bool(override.run_on_approval) and requires is not False
    return ToolPolicy(requires, idempotent, override.timeout, runs)


@attrs.frozen
class Listing:
    """One listed tool, as the SDK gave it, reduced to plain values."""

    name: str
    description: str
    parameters: dict[str, Any]
    hints: Hints


def checked_listing(server: str, tools: list[Any]) -> list[Listing]:
    """The server's tool list, within the limits.

    Raises:
        ToolServerError: Too many tools, a name listed twice, a description or a schema
            too large, a schema that is not a JSON object or holds what a thread cannot
            record (NaN, an infinity or an integer past 64 bits, which the SDK reads from
            the wire, a lone surrogate), or an output schema that is not valid JSON
            Schema or whose references loop.
    """
    if len(tools) > MAX_TOOLS:
        msg = (
            f"MCP server {server!r} lists {len(tools)} tools, more than the {MAX_TOOLS} "
            "allowed; split it, or serve fewer tools"
        )
        raise ToolServerError(msg)
    listed: list[Listing] = []
    for tool in tools:
        name, description = tool.name, tool.description or tool.title or ""
        schema = tool.input_schema
        if not isinstance(name, str) or not isinstance(description, str):
            msg = f"MCP server {server!r} lists a tool whose name or description is not text"
            raise ToolServerError(msg)
        if len(description) > MAX_DESCRIPTION_CHARS:
            msg = (
                f"MCP server {server!r} describes tool {name!r} in {len(description)} "
                f"characters, more than the {MAX_DESCRIPTION_CHARS} allowed"
            )
            raise ToolServerError(msg)
        if not isinstance(schema, dict):
            msg = (
                f"MCP server {server!r} gives tool {name!r} an input schema that is not an "
                f"object; expected a JSON object of at most {MAX_SCHEMA_BYTES} bytes"
            )
            raise ToolServerError(msg)
        # The SDK checks each result against the output schema: a regex there runs on
        # what the server answers, as one in the input schema on the model's arguments.
        for kind, checked in (("input", schema), ("output", tool.output_schema or {})):
            try:  # pinned and recorded as it is: what no import reads is refused here
                size = len(canonical_json(checked))
                if kind == "input" and size > MAX_SCHEMA_BYTES:
                    msg = (
                        f"MCP server {server!r} gives tool {name!r} an input schema of "
                        f"{size} bytes; expected a JSON object of at most {MAX_SCHEMA_BYTES} "
                        "bytes"
                    )
                    raise ToolServerError(msg)
                json_data(checked, where=f"its {kind} schema")
            except (NonFiniteNumberError, NotJSONDataError) as exc:
                msg = f"MCP server {server!r} gives tool {name!r} a schema no thread records: {exc}"
                raise ToolServerError(msg) from exc
            refused = _refusal_of(name, kind, checked) if isinstance(checked, dict) else None
            if refused is not None:
                msg = f"MCP server {server!r} gives tool {name!r} an {kind} schema with {refused}"
                raise ToolServerError(msg)
        listed.append(Listing(name, description, schema, Hints.of(tool.annotations)))
    names = [item.name for item in listed]
    if len(set(names)) != len(names):
        msg = f"MCP server {server!r} lists a tool name twice: {sorted(names)}"
        raise ToolServerError(msg)
    return listed


def check_overrides(
    server: str, overrides: Mapping[str, ToolPolicy], listed: list[Listing], prefix: str
) -> None:
    """Every override names a listed tool, by the server's name for it.

    Raises:
        ConfigurationError: A key names no listed tool (the name the model sees, with
            the prefix, or a typo): ignored, it left the tool to the server's hints.
    """
    names = sorted(item.name for item in listed)
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        hint = f", without the tool_prefix {prefix!r}" if prefix else ""
        msg = (
            f"MCPServer {server!r} has overrides for {unknown}, which it does not list; "
            f"it lists {names}: key overrides by the server's tool names{hint}"
        )
        raise ConfigurationError(msg)


def _refusal_of(name: str, kind: str, schema: dict[str, Any]) -> str | None:
    """Why tool ``name``'s ``kind`` ("input" or "output") schema refuses the listing:
    a regular expression, or (output only: the input schema is checked as any tool's,
    by ``compile_schema`` when the tool is made) what ``compile_schema`` refuses, an
    invalid schema or references that loop on one value; None if neither."""
    found = _regex_in(schema)
    if found is not None:
        return (
            f"{found}: a server's regular expression could take unbounded time to match, "
            "so none is run and the listing is refused; ask for the tool without pattern "
            "and patternProperties"
        )
    if kind == "output" and (unique := _unique_items_in(schema)) is not None:
        # The SDK checks each result against the output schema with jsonschema, whose
        # uniqueItems compares every pair of items: quadratic in a result's length.
        return (
            f"'uniqueItems' at {unique}: the MCP SDK checks every result against it in "
            "time that grows with the square of its length, so the listing is refused; "
            "ask for the tool's output schema without uniqueItems"
        )
    if kind == "output":
        try:
            compile_schema(name, schema, "output")
        except ConfigurationError as exc:
            return f"a fault, so no result could be checked and the listing is refused: {exc}"
    return None


def _unique_items_in(schema: Any) -> str | None:
    """Where a schema asks for ``uniqueItems``, by its JSON path; None when nowhere."""
    for path, node in _schema_positions(schema):
        if node.get("uniqueItems") is True:
            return path
    return None


def _regex_in(schema: Any) -> str | None:
    """Where a server's schema would have ``jsonschema`` run a regular expression (a
    ``pattern`` or ``patternProperties``), or a ``$ref`` that points into a value, named
    by its JSON path; None when it has neither.

    Python's ``re`` cannot be bounded, and one expression such as ``^(a+)+$`` holds the
    interpreter for minutes on an argument of 35 characters (ADR 0094). Every position
    is read as a schema, conservatively (an unknown keyword's value too, since a
    ``$ref`` may point there), except the names of a name map and the values of
    ``enum``, ``const``, ``default`` and ``examples``, which are never applied; so a
    ``$ref`` into one of those is refused as well.
    """
    for path, node in _schema_positions(schema):
        if isinstance(node.get("pattern"), str):
            return f"'pattern' at {path}"
        if isinstance(node.get("patternProperties"), dict):
            return f"'patternProperties' at {path}"
        for keyword in _REFERENCES:
            ref = node.get(keyword)
            if isinstance(ref, str) and _points_into_a_value(ref):
                return f"a {keyword} into a value ({ref!r}) at {path}"
    return None


def _schema_positions(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each object a validator may read as a schema, with its JSON path (iteratively:
    a hostile schema may nest deeper than Python recurses)."""
    stack: list[tuple[str, Any]] = [("$", schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(node))
        elif isinstance(node, dict):
            yield path, node
            for key, value in node.items():
                if key in _NAME_MAPS and isinstance(value, dict):
                    stack.extend((f"{path}.{key}[{name!r}]", item) for name, item in value.items())
                elif key not in _DATA_KEYWORDS:
                    stack.append((f"{path}.{key}", value))


def _points_into_a_value(ref: str) -> bool:
    """Whether a reference's JSON pointer passes through a value keyword, read as
    ``referencing`` reads it (keywords and names alternate after a name map)."""
    fragment = urllib.parse.urldefrag(ref).fragment
    if not fragment.startswith("/"):
        return False  # the whole resource, or an anchor: both schemas
    keyword = True
    for raw in urllib.parse.unquote(fragment[1:]).split("/"):
        segment = raw.replace("~1", "/").replace("~0", "~")
        if keyword and segment in _DATA_KEYWORDS:
            return True
        keyword = not (keyword and segment in _NAME_MAPS)
    # Ending on a name map itself (#/properties, #/$defs) makes a schema of it, whose
    # names the walk read as names (a "patternProperties" property, say): refused too.
    return not keyword


def to_tool(
    listing: Listing,
    *,
    server: str,
    origin: str,
    prefix: str,
    override: ToolPolicy | None,
    func: ToolFunction,
) -> Tool:
    """Our ``Tool`` for a listed tool: its schema checked as any tool's, its policy
    from hints and override, pinned to the server and the listing.

    Raises:
        ToolServerError: The name is not one our tools may have, the listing holds
            text UTF-8 cannot (a lone surrogate), or the schema is not a valid JSON
            Schema.
    """
    policy = effective_policy(listing.hints, override)
    parameters: Mapping[str, JsonValue] = listing.parameters
    try:
        # A lone surrogate in the listing fails the pin's encoding (a ValueError): the
        # tool is refused as one whose name breaks the rule is.
        pin = ToolPin.of(
            server=server,
            origin=origin,
            tool=listing.name,
            description=listing.description,
            parameters=listing.parameters,
        )
        return Tool(
            prefix + listing.name,
            listing.description,
            parameters,
            func,
            idempotent=bool(policy.idempotent),
            requires_approval=True
            if policy.requires_approval is None
            else policy.requires_approval,
            timeout=policy.timeout,
            run_on_approval=bool(policy.run_on_approval),
            pin=pin,
        )
    except (ValueError, ConfigurationError) as exc:
        msg = f"MCP server {server!r} lists tool {listing.name!r}, which was refused: {exc}"
        raise ToolServerError(msg) from exc


def result_value(result: Any, *, tool: str, max_bytes: int) -> str:
    """The text the model reads from a ``CallToolResult``: its text blocks, else its
    structured content as JSON; other blocks are named, not passed on.

    Raises:
        MCPToolError: The server's tool reported an error (``isError``).
        ToolResultError: The text is larger than ``max_bytes``.
    """
    parts: list[str] = []
    for block in result.content or ():
        text = getattr(block, "text", None)
        if getattr(block, "type", None) == "text" and isinstance(text, str):
            parts.append(text)
        else:
            kind = getattr(block, "mime_type", None) or getattr(block, "type", "content")
            parts.append(f"[{kind} content omitted]")
    if not parts and result.structured_content is not None:
        parts.append(msgspec.json.encode(result.structured_content).decode())
    text = "\n".join(parts)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        msg = (
            f"MCP tool {tool!r} answered {size} bytes, more than the {max_bytes} allowed; "
            "the call ran, its result was not kept: ask for less, or raise max_result_bytes"
        )
        raise ToolResultError(msg)
    if result.is_error:
        raise MCPToolError(text or "the tool reported an error without a message")
    return text
