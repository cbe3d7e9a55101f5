"""Tools: their schemas are checked when made, their arguments validated with jsonschema."""

from __future__ import annotations

from typing import Any

import pytest

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, Store, Tool
from covonaut_es.errors import ConfigurationError
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
    "schema", [{"type": "intger"}, {"type": "object", "required": "name"}, {"minimum": "1"}]
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
