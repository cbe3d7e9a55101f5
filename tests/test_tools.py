"""Tools: their schemas are checked when made, their arguments validated with jsonschema."""

from __future__ import annotations

import contextlib
import enum
import json
import string
import unittest.mock
from typing import Any

import jsonschema
import mcp_types
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import covonaut_es._schema
from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, Store, Tool
from covonaut_es._schema import validation_error
from covonaut_es.errors import ConfigurationError, ToolServerError
from covonaut_es.mcp._policy import checked_listing, to_tool
from covonaut_es.messages import Role, ToolCall
from covonaut_es.tools import ArgumentsError, ToolContext, parse_arguments
from support import answer, call, ticking_clock

RICH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}},
    "properties": {
        "sku": {"$ref": "#/$defs/sku"},
        "tags": {"type": "array", "uniqueItems": True},
        "qty": {"allOf": [{"type": "integer"}, {"minimum": 1}]},
    },
    "required": ["sku"],
}


def _noop(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return "done"


def rich_tool() -> Tool:
    return Tool("order", "Orders", RICH_SCHEMA, _noop)


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ('{"sku": "abc-1234"}', "$.sku"),
        ('{"sku": "ABC-1234", "tags": ["a", "a"]}', "$.tags"),
        ('{"sku": "ABC-1234", "qty": 0}', "$.qty"),
        ('{"qty": 2}', "$"),
    ],
)
def test_ref_pattern_all_of_and_unique_items_are_enforced(arguments: str, path: str) -> None:
    """$ref, pattern, allOf and uniqueItems refuse arguments, naming the JSON path."""
    with pytest.raises(ArgumentsError) as raised:
        parse_arguments(rich_tool(), ToolCall("c1", "order", arguments))
    assert f"are invalid: {path}: " in str(raised.value)


def test_arguments_matching_a_rich_schema_are_accepted() -> None:
    """Arguments that satisfy every keyword are decoded and returned."""
    arguments = '{"sku": "ABC-1234", "tags": ["a", "b"], "qty": 2}'
    args = parse_arguments(rich_tool(), ToolCall("c1", "order", arguments))
    assert args == {"sku": "ABC-1234", "tags": ["a", "b"], "qty": 2}


def test_the_model_reads_the_best_matching_error() -> None:
    """Of several errors the model is told the most relevant one, with its path."""
    schema = {"type": "object", "properties": {"n": {"anyOf": [{"type": "integer"}]}}}
    tool = Tool("count", "Counts", schema, _noop)
    with pytest.raises(ArgumentsError) as raised:
        parse_arguments(tool, ToolCall("c1", "count", '{"n": "x"}'))
    assert str(raised.value) == (
        "arguments for 'count' are invalid: $.n: 'x' is not of type 'integer'"
    )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "intger"},
        {"type": "object", "required": "name"},
        {"minimum": "1"},
        {"$schema": 5},
        {"$id": 5},
    ],
)
def test_an_invalid_schema_is_refused_when_the_tool_is_made(schema: dict[str, Any]) -> None:
    """A schema that is not valid JSON Schema raises ConfigurationError naming the tool."""
    with pytest.raises(ConfigurationError, match=r"tool 'lookup' has an invalid parameters"):
        Tool("lookup", "Looks up", schema, _noop)


@pytest.mark.parametrize("schema", [None, [], "object"])
def test_parameters_that_are_not_a_schema_object_are_refused(schema: Any) -> None:
    """Parameters that are not a JSON object raise ConfigurationError naming the tool."""
    with pytest.raises(ConfigurationError, match=r"tool 'lookup' needs a JSON Schema object"):
        Tool("lookup", "Looks up", schema, _noop)


def test_a_remote_ref_is_never_fetched() -> None:
    """A $ref outside the schema refuses the call instead of making a network request."""
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
    tool = Tool("fetch", "Fetches", schema, _noop)
    with pytest.raises(ArgumentsError, match=r"schema cannot be applied.*must point inside"):
        parse_arguments(tool, ToolCall("c1", "fetch", '{"a": 1}'))


def test_a_schema_refused_in_a_run_reaches_the_model(store: Store) -> None:
    """A call breaking a $ref'd pattern gets an error result and the tool never runs."""
    ran: list[dict[str, Any]] = []

    def order(ctx: ToolContext, args: dict[str, Any]) -> Any:
        ran.append(args)
        return "ordered"

    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "order", '{"sku": "x"}')), answer("ok")]),
            tools=[Tool("order", "Orders", RICH_SCHEMA, order)],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
        )
    )
    assert agent.run("go") == "ok"
    (result,) = [m.content for m in agent.messages if m.role is Role.TOOL]
    assert result.startswith("Error: arguments for 'order' are invalid: $.sku: 'x' does not match")
    assert ran == []


# A loop of schemas applied to one value: each link a keyword that applies its schema
# to the value itself, or a reference; drafts keep their definitions under their names.
# "dependent": a map of names to schemas applied to the value (dependentSchemas, or
# draft 7's and 4's dependencies).
_IN_PLACE_LINKS = st.sampled_from(
    ["$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "dependent"]
)
_DRAFTS = st.sampled_from(
    [
        (None, "$defs"),
        ("https://json-schema.org/draft/2020-12/schema", "$defs"),
        ("http://json-schema.org/draft-07/schema#", "definitions"),
        ("http://json-schema.org/draft-04/schema#", "definitions"),
    ]
)


def _link(keyword: str, ref: str, defs: str) -> dict[str, Any]:
    target = {"$ref": ref}
    if keyword == "$ref":
        return target
    if keyword in ("allOf", "anyOf", "oneOf"):
        return {keyword: [{"type": "object"}, target]}
    if keyword == "dependent":
        return {"dependentSchemas" if defs == "$defs" else "dependencies": {"p": target}}
    return {keyword: target}


@st.composite
def _looping_schemas(draw: st.DrawFn, under: str = "") -> tuple[dict[str, Any], bool]:
    """A schema with a chain of definitions, the last pointing back into the chain (or
    to the root); True when the loop applies schemas to one value without end, False
    when the loop passes through a property (a tree: valid). ``under``: the JSON
    pointer of the place the schema is put at, which its references point into."""
    dialect, defs = draw(_DRAFTS)
    links = draw(st.lists(_IN_PLACE_LINKS, min_size=1, max_size=4))
    back = draw(st.integers(-1, len(links) - 1))  # -1: back to the root
    nested = draw(st.booleans())  # the chain reached through a property, not the root
    through_a_property = draw(st.booleans())
    refs = [f"#{under}/{defs}/d{i}" for i in range(len(links))]
    chain = {}
    for i, keyword in enumerate(links):
        ref = refs[i + 1] if i + 1 < len(links) else (refs[back] if back >= 0 else f"#{under}")
        chain[f"d{i}"] = _link(keyword, ref, defs)
    if through_a_property:
        chain["d0"] = {"type": "object", "properties": {"child": chain["d0"]}}
    start = {"$ref": refs[0]}
    schema: dict[str, Any] = {defs: chain, "type": "object"}
    schema |= {"properties": {"p": start}} if nested else start
    if dialect is not None:
        schema["$schema"] = dialect
    # The loop holds d0 when it goes back to d0 or to the root; back to the root, it
    # passes through the property the chain hangs under, if any. Draft 4 has no "if"
    # (nor "then"): a link of those is never applied, and the loop is broken.
    ignored = "draft-04" in str(dialect) and {"if", "then"} & set(links[max(back, 0) :])
    through = (through_a_property and back <= 0) or (nested and back == -1)
    return schema, not ignored and not through


@settings(max_examples=50, deadline=None)
@given(_looping_schemas())
def test_a_schema_whose_references_loop_on_one_value_is_refused_when_the_tool_is_made(
    drawn: tuple[dict[str, Any], bool],
) -> None:
    """A loop of $ref, allOf, not, if, dependentSchemas... that never reaches a property
    or an item refuses the tool, naming it (every draft; from the root or under a
    property); a loop through a property is a tree, and its calls are validated without
    error. (A loop through dependentSchemas or dependencies was let through: helper-186.)"""
    schema, loops = drawn
    if loops:
        refused = r"parameters schema of tool 'walk' has references that loop"
        with pytest.raises(ConfigurationError, match=refused):
            Tool("walk", "Walks", schema, _noop)
        return
    tool = Tool("walk", "Walks", schema, _noop)
    with contextlib.suppress(ArgumentsError):
        parse_arguments(tool, ToolCall("c1", "walk", '{"p": {"child": {"child": {}}}}'))


@settings(max_examples=50, deadline=None)
@given(data=st.data(), drawn=_looping_schemas(under="/x-doc"), nested=st.booleans())
def test_a_loop_under_a_keyword_the_draft_does_not_apply_is_accepted(
    data: st.DataObject, drawn: tuple[dict[str, Any], bool], nested: bool
) -> None:
    """A loop-shaped schema (looping or not) under a keyword the draft does not know,
    which jsonschema never applies and no reference reaches, leaves the tool made and
    its calls validated without error. (helper-186)"""
    schema, _ = drawn
    dialect = schema.pop("$schema", None)
    legacy = dialect is not None and "2020-12" not in dialect  # draft 7 or 4
    unknown = data.draw(st.sampled_from(["x-doc", "meta", *(["dependentSchemas"] * legacy)]))
    text = json.dumps(schema).replace('"#/x-doc', f'"#/{unknown}')
    holder: dict[str, Any] = {"type": "object", unknown: json.loads(text)}
    wrapped = {"type": "object", "properties": {"p": holder}} if nested else holder
    if dialect is not None:
        wrapped["$schema"] = dialect
    tool = Tool("walk", "Walks", wrapped, _noop)
    with contextlib.suppress(ArgumentsError):
        parse_arguments(tool, ToolCall("c1", "walk", '{"p": {"p": 1, "child": {}}}'))


# Drafts and the keyword each reads a schema's identifier from.
_ID_KEYWORDS = st.sampled_from(
    [
        (None, "$id"),
        ("https://json-schema.org/draft/2020-12/schema", "$id"),
        ("http://json-schema.org/draft-07/schema#", "$id"),
        ("http://json-schema.org/draft-04/schema#", "id"),
    ]
)
_NOT_TEXT = (
    st.integers()
    | st.booleans()
    | st.floats(allow_nan=False)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)


@settings(max_examples=50, deadline=None)
@given(draft=_ID_KEYWORDS, value=_NOT_TEXT, nested=st.booleans(), referenced=st.booleans())
def test_an_id_that_is_not_text_is_refused_only_where_a_reference_reaches_it(
    draft: tuple[str | None, str], value: Any, nested: bool, referenced: bool
) -> None:
    """An identifier that is not text under a keyword the draft does not know is never
    read (the tool is made, its calls validated); reached by a $ref, it refuses the
    tool with ConfigurationError naming it, never a bare AttributeError from
    referencing. (Both escaped Tool() and an MCP listing: helper-186.)"""
    dialect, id_keyword = draft
    holder: dict[str, Any] = {"type": "string", "x-meta": {"inner": {id_keyword: value}}}
    if referenced:
        holder = {"$ref": "#/properties/p/x-meta/inner"} | {"x-meta": holder["x-meta"]}
    schema: dict[str, Any] = {"type": "object", "properties": {"p": holder}}
    if nested:
        schema = {"type": "object", "properties": {"q": schema}}
        if referenced:
            holder["$ref"] = "#/properties/q/properties/p/x-meta/inner"
    if dialect is not None:
        schema["$schema"] = dialect
    if referenced:
        with pytest.raises(ConfigurationError, match=r"tool 'ids'.* has an \$id that is not"):
            Tool("ids", "Ids", schema, _noop)
        return
    tool = Tool("ids", "Ids", schema, _noop)
    with contextlib.suppress(ArgumentsError):
        parse_arguments(tool, ToolCall("c1", "ids", '{"p": "x", "q": {"p": "x"}}'))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "$ref": "#"},
        {"$dynamicAnchor": "x", "$dynamicRef": "#x"},
        {"$anchor": "x", "$ref": "#x"},
        {
            "$id": "http://e/x",
            "properties": {"q": {"$ref": "a.json"}},
            "$defs": {"a": {"$id": "a.json", "$ref": "a.json"}},
        },
    ],
)
def test_a_loop_the_schema_check_let_through_is_a_refused_call_not_a_crash(
    schema: dict[str, Any],
) -> None:
    """A looping validator (a tool made before loops were refused, replayed) gives the
    model a refusal, as an unresolvable $ref does, never a RecursionError."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert validation_error(validator, {"q": 1}) == (
        "the tool's schema cannot be applied: its references loop without end"
    )


# Keywords that hold a schema one level down, in place or under a part of the value.
_NESTING = st.sampled_from(["not", "allOf", "anyOf", "oneOf", "if", "then", "items", "properties"])


def _nest(keyword: str, inner: dict[str, Any]) -> dict[str, Any]:
    if keyword in ("allOf", "anyOf", "oneOf"):
        return {keyword: [inner]}
    if keyword == "properties":
        return {keyword: {"p": inner}}
    return {keyword: inner}


@settings(max_examples=50, deadline=None)
@given(keywords=st.lists(_NESTING, min_size=1, max_size=4), depth=st.integers(1, 300))
def test_a_schema_nested_too_deep_to_check_is_refused_when_the_tool_is_made(
    keywords: list[str], depth: int
) -> None:
    """A finite schema nested deeper than jsonschema can check ("not" in "not", allOf
    chains... a hundred levels or so) refuses the tool with ConfigurationError naming
    it, never a bare RecursionError; one shallow enough is made, and its calls are
    validated without error. (helper-186)"""
    schema: dict[str, Any] = {"type": "object"}
    for level in range(depth):
        schema = _nest(keywords[level % len(keywords)], schema)
    try:
        tool = Tool("deep", "Nests", schema, _noop)
    except ConfigurationError as exc:
        assert "tool 'deep' has an invalid parameters schema: it nests too deep" in str(exc)
        return
    with contextlib.suppress(ArgumentsError):
        parse_arguments(tool, ToolCall("c1", "deep", '{"p": {"p": [1]}}'))


_NAME_CHARACTERS = string.ascii_letters + string.digits + "_-"
# Names near the rule's edges: look-alikes and other scripts, marks, spaces, dots.
_NAMES = st.text(
    st.sampled_from([*_NAME_CHARACTERS, "\u0435", "\u540d", "\u00b2", "\u0661", ".", " ", "\u200b"])
    | st.characters(),
    max_size=70,
)


@settings(max_examples=50, deadline=None)
@given(name=_NAMES, prefix=st.sampled_from(["", "srv_", "\u0455rv_"]))
def test_a_tool_name_is_what_every_provider_accepts_for_local_and_server_tools(
    name: str, prefix: str
) -> None:
    """A name of 1 to 64 ASCII letters, digits, '_' or '-' makes a tool; any other (a
    Cyrillic look-alike, another script, a superscript, a dot, over 64 characters) is
    refused naming it: for the application's tool a ConfigurationError, for a server's
    (its tool_prefix counted) the listing's ToolServerError."""
    accepted = 1 <= len(name) <= 64 and all(c in _NAME_CHARACTERS for c in name)
    if accepted:
        assert Tool(name, "d", {"type": "object"}, _noop).name == name
    else:
        with pytest.raises(ConfigurationError, match="a tool's name must be 1 to 64 ASCII"):
            Tool(name, "d", {"type": "object"}, _noop)
    listed = mcp_types.Tool.model_construct(
        name=name, description="d", input_schema={"type": "object"}, annotations=None
    )
    full = prefix + name
    served = 1 <= len(full) <= 64 and all(c in _NAME_CHARACTERS for c in full)
    try:
        (item,) = checked_listing("s", [listed])
        tool = to_tool(item, server="s", origin="o", prefix=prefix, override=None, func=_noop)
    except ToolServerError:
        assert not served
    else:
        assert served and tool.name == full


def test_a_thread_that_recorded_a_name_now_refused_stays_readable(store: Store) -> None:
    """The rule is for new tools: a thread whose model called a name outside it (as an
    older version's tool could be named) is stored, read and resumed as it was."""
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "d\u0435lete_\u540d", "{}")), answer("ok")]),
            tools=[rich_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
        )
    )
    assert agent.run("go") == "ok"
    names = [getattr(e, "tool_name", None) for e in store.history("t")]
    assert "d\u0435lete_\u540d" in names
    assert list(store.load("t").messages) == list(agent.messages)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 2.5])
    | st.text(max_size=2),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(_JSON_VALUES, max_size=6))
def test_unique_items_is_judged_as_jsonschema_judges_it_without_comparing_pairs(
    items: list[Any],
) -> None:
    """A tool's ``uniqueItems`` accepts and refuses exactly the arrays jsonschema's own
    check does (``1`` and ``1.0`` alike, ``true`` and ``1`` not, objects in any key
    order), and never through jsonschema's check, which compares every pair of items:
    4,000 small objects a model sent held the process for 23 seconds."""
    schema = {"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}
    expected = jsonschema.Draft202012Validator(schema).is_valid({"x": items})
    tool = Tool("t", "d", schema, _noop)
    with unittest.mock.patch.object(jsonschema._keywords, "uniq", _never):
        found = validation_error(tool._validator, {"x": items})
    assert (found is None) is expected
    assert found is None or found == "$.x: has non-unique elements"


class _Number(enum.IntEnum):
    ONE = 1


# Schemas that JSON writes alike though Python tells them apart (a tuple for an
# array, ``1`` for ``1.0``, ``true`` or an enum's member, keys in another order, one
# dict twice), and keywords whose values jsonschema checks.
_TWINNED = st.sampled_from([1, 1.0, True, 0, "1", None, _Number.ONE])
_SCHEMAS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["integer", "number", "string", "array", "object"]),
        "minimum": _TWINNED,
        "const": _TWINNED | _JSON_VALUES,
        "enum": st.lists(_TWINNED, min_size=1, max_size=3).flatmap(
            lambda items: st.sampled_from([items, tuple(items)])
        ),
        "required": st.sampled_from([["a"], ("a",), [], "a"]),
        "uniqueItems": _TWINNED,
        "pattern": st.sampled_from(["^a", "^b"]),
        "minLength": st.sampled_from([2, 5]),
        "properties": st.just({"a": {"type": "integer"}}),
    },
).flatmap(lambda schema: st.permutations(list(schema.items())).map(dict))


def _shared(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with one dict under two keys."""
    inner = {"type": "integer"}
    return {**schema, "properties": {"a": inner, "b": inner}}


def _never_kept(schema: object) -> None:
    return None


def _made(schema: dict[str, Any]) -> tuple[str, Tool | None]:
    """A tool whose one property ``v`` has ``schema`` (its parameters describe an
    object), or the message refusing it."""
    try:
        return "", Tool("t", "d", {"type": "object", "properties": {"v": schema}}, _noop)
    except ConfigurationError as refused:
        return str(refused), None


@settings(max_examples=150, deadline=None)
@given(
    schemas=st.lists(_SCHEMAS | _SCHEMAS.map(_shared), min_size=1, max_size=4),
    values=st.lists(_JSON_VALUES, max_size=4),
)
@example(schemas=[{"required": ["a"]}, {"required": ("a",)}], values=[{}])
@example(schemas=[{"const": 1}, {"const": True}, {"const": _Number.ONE}], values=[1, True, 2])
@example(
    schemas=[{"pattern": "^a", "minLength": 5}, {"minLength": 5, "pattern": "^a"}], values=["b"]
)
def test_a_schema_checked_once_is_judged_as_a_fresh_check_judges_it(
    schemas: list[dict[str, Any]], values: list[Any]
) -> None:
    """Tools made again with an equal schema share the validator checked the first time
    (the check costs milliseconds; an application makes its tools for each agent), yet
    each tool is refused with the message, and judges arguments with the messages, that
    a check of its own schema made afresh gives: a schema is never taken for one JSON
    writes alike (a tuple for an array, ``true`` for ``1``, keys in another order)."""
    for schema in schemas + schemas:  # the second time from the validators kept
        kept_message, kept = _made(schema)
        with unittest.mock.patch.object(covonaut_es._schema, "_kept_text", _never_kept):
            fresh_message, fresh = _made(schema)
        assert kept_message == fresh_message
        if kept is not None and fresh is not None:
            for value in values:
                judged = validation_error(kept._validator, {"v": value})
                assert judged == validation_error(fresh._validator, {"v": value})
        for earlier in schemas:  # what the next schema finds kept
            _made(earlier)


@pytest.mark.parametrize("size", [100, 100_000])
def test_a_schema_changed_after_its_tool_is_made_changes_nothing_of_the_tool(size: int) -> None:
    """A tool keeps a copy of its schema, kept validator or not (a long one is checked
    afresh): what the model is told and what is validated stay what it was made with."""
    schema: dict[str, Any] = {
        "type": "object",
        "description": "x" * size,
        "properties": {"n": {"type": "integer", "maximum": 100}},
    }
    tool = Tool("t", "d", schema, _noop)
    schema["properties"]["n"]["maximum"] = 10
    assert tool.spec.parameters["properties"]["n"]["maximum"] == 100
    assert validation_error(tool._validator, {"n": 50}) is None


_DRAFT_3_TYPES = st.lists(
    st.sampled_from(["integer", "string", "object", "array", "null", "any"])
    | st.fixed_dictionaries({"type": st.sampled_from(["string", "integer"])}),
    min_size=1,
    max_size=3,
    unique_by=json.dumps,
)


@settings(max_examples=100, deadline=None)
@given(types=_DRAFT_3_TYPES, value=_JSON_VALUES)
@example(types=["integer", {"type": "string"}], value=1.5)
def test_arguments_against_any_draft_3_type_are_judged_or_refused_never_a_crash(
    types: list[Any], value: Any
) -> None:
    """A draft-3 ``type`` may list schemas beside names (a server may send one): the
    model's arguments are taken or refused with ``ArgumentsError``, never another error
    out of the run (jsonschema's ``best_match`` hashed such a type)."""
    schema = {
        "$schema": "http://json-schema.org/draft-03/schema#",
        "type": "object",
        "properties": {"a": {"type": types}},
    }
    tool = Tool("t", "d", schema, _noop)
    with contextlib.suppress(ArgumentsError):
        parse_arguments(tool, ToolCall("c1", "t", json.dumps({"a": value})))


def _never(container: object) -> bool:
    raise AssertionError("jsonschema's pairwise uniqueItems check ran")


@pytest.mark.parametrize("idempotent", [None, True, False])
@pytest.mark.parametrize("read_only", [True, False])
def test_a_read_only_tool_is_idempotent_unless_it_says_otherwise(
    read_only: bool, idempotent: bool | None
) -> None:
    """Running a read-only call twice is harmless, so one left in doubt runs again by
    default; a tool that says it is not idempotent is taken at its word."""
    options = {} if idempotent is None else {"idempotent": idempotent}
    tool = Tool("t", "T", {"type": "object"}, lambda ctx, args: "", read_only=read_only, **options)
    assert tool.read_only is read_only
    assert tool.idempotent is (read_only if idempotent is None else idempotent)


_TYPES = ("object", "string", "number", "integer", "boolean", "array", "null")


@given(
    kind=st.none()
    | st.sampled_from(_TYPES)
    | st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3, unique=True),
    from_server=st.booleans(),
)
@example(kind="string", from_server=False)
def test_a_tool_is_made_only_with_parameters_that_describe_an_object(
    kind: str | list[str] | None, from_server: bool
) -> None:
    """A call's arguments are a JSON object, and the model APIs take only object schemas:
    parameters whose ``type`` is anything but ``"object"`` (or absent) are refused when
    the tool is made, naming it, as ``output_type`` refuses such a schema; a server's
    listing of one is refused with ``ToolServerError``. Such a tool was made, and no
    call of it could ever run (helper-232)."""
    schema: dict[str, Any] = {} if kind is None else {"type": kind}
    refused = kind not in (None, "object")
    if from_server:
        listed = mcp_types.Tool(name="lookup", description="Look up", inputSchema=schema)
        made: Any = contextlib.nullcontext()
        with pytest.raises(ToolServerError, match="lookup") if refused else made:
            (listing,) = checked_listing("s", [listed])
            to_tool(listing, server="s", origin="stdio:x", prefix="", override=None, func=print)
        return
    with pytest.raises(ConfigurationError, match="lookup") if refused else contextlib.nullcontext():
        tool = Tool("lookup", "Look up", schema, lambda ctx, args: "found")
        assert parse_arguments(tool, ToolCall("c1", "lookup", "{}")) == {}


def test_two_tools_of_one_name_are_a_configuration_error_naming_the_setting() -> None:
    """Tools of one name would be one to the model: refused with ``ConfigurationError``
    naming ``AgentConfig.tools`` and the name, as every setting's (it was a bare
    ``ValueError``, helper-232)."""
    tool = Tool("lookup", "Look up", {"type": "object"}, lambda ctx, args: "found")
    with pytest.raises(ConfigurationError, match=r"AgentConfig\.tools .*'lookup'"):
        AgentConfig(provider=ScriptedProvider([]), tools=[tool, tool])
