"""Values a programmer (or a model, through them) hands the public API that a thread
cannot hold as given are refused where they are given, with a typed error, and nothing
is queued or saved; what is taken reads back as it was given (helper-245).

Three doors, each tried with generated values, well-formed and hostile alike:
``Agent.steer`` (a message that no store can keep was queued and failed the next run
after its input was stored; a tool's result or an assistant's call made up by steering
was recorded, a conversation no model's API takes), the state stores'
``write_state`` (NaN was saved as null, an object or a lone surrogate raised a bare
``TypeError``) and ``canonical_json`` (NaN and None had one canonical form).
"""

from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    CovonautError,
    FileStateStore,
    MemoryStateStore,
    Message,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Tool,
    ToolCall,
    canonical_json,
    open_store,
)
from covonaut_es.errors import InvalidRunInputError
from covonaut_es.messages import Usage

TEXT = st.one_of(st.text(max_size=8), st.just("a\ud800b"), st.just("\x00"))
"""Text, a lone surrogate (which no store keeps) among it."""

MESSAGES = st.builds(
    Message,
    role=st.one_of(st.sampled_from(Role), st.just("root"), st.just("user")),
    content=st.one_of(TEXT, st.integers(), st.none()),
    tool_calls=st.one_of(
        st.just(()), st.just((ToolCall("q", "echo", "{}"),)), st.sampled_from([None, [], ""])
    ),
    tool_call_id=st.one_of(st.none(), st.just("zz"), st.just("c0")),
    name=st.one_of(st.none(), TEXT, st.integers()),
    usage=st.one_of(st.none(), st.just(Usage(1, 1))),
    id=st.one_of(st.none(), st.just("m1"), st.integers()),
)


def _steered_agent() -> tuple[Agent, Any]:
    store = open_store("memory://")
    config = AgentConfig(
        provider=ScriptedProvider(respond=lambda request: ProviderResponse(content="fin")),
        tools=[Tool("echo", "Echo", {"type": "object"}, lambda ctx, args: "r")],
        checkpoint=CheckpointSettings(store=store, thread_id="t"),
    )
    agent = Agent(config)
    agent.run("hi")
    return agent, store


@settings(max_examples=150, deadline=None)
@given(message=st.one_of(MESSAGES, TEXT))
def test_a_steering_message_is_refused_when_given_or_recorded_as_a_conversation_models_take(
    message: Any,
) -> None:
    agent, store = _steered_agent()
    try:
        agent.steer(message)
    except InvalidRunInputError:
        steered = False
    else:
        steered = True
    assert steered or not _well_formed(message)  # a good one is never refused (helper-251)
    assert agent.run("next") == "fin"  # the next run is never failed by what was steered
    state = store.state_at("t")
    assert state == store.replay_state("t")
    assert store.verify("t").ok
    *_, before, last = state.messages
    assert last.content == "fin"
    if steered:  # taken: recorded after the run's input, before its model call, as given
        given = message if isinstance(message, Message) else Message(Role.USER, message)
        assert before == given
        assert given.role in (Role.USER, Role.SYSTEM) and not given.tool_calls
        assert type(before.role) is Role  # recorded as a replay reads it
        before = state.messages[-3]
    assert before.content == "next"
    called = {c.id for m in state.messages if m.role is Role.ASSISTANT for c in m.tool_calls}
    answered = [m.tool_call_id for m in state.messages if m.role is Role.TOOL]
    assert set(answered) == called and len(answered) == len(called)


def _well_formed(message: Any) -> bool:
    """Whether ``message`` is what a steering message may be: a user's or a system's
    message of text, calling and answering nothing, without usage or an id, its text
    and name valid Unicode."""
    if isinstance(message, str):
        message = Message(Role.USER, message)
    texts = [message.content, message.name or ""]
    return (
        message.role in (Role.USER, Role.SYSTEM)
        and message.tool_calls == ()
        and (message.tool_call_id, message.usage, message.id) == (None, None, None)
        and all(type(text) is str and _encodes(text) for text in texts)
    )


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(),  # NaN and the infinities among them
        TEXT,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
        # Any mapping is a document, not only a dict (helper-251).
        st.dictionaries(st.text(max_size=4), inner, max_size=3).map(MappingProxyType),
    ),
    max_leaves=8,
)
HOSTILE = st.one_of(JSON_VALUES, st.just(object()), st.integers(min_value=2**64))


def _as_dicts(value: Any) -> Any:
    """``value`` with each mapping a dict, as a reader of its JSON gets it."""
    if isinstance(value, MappingProxyType | dict):
        return {key: _as_dicts(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_dicts(item) for item in value]
    return value


def _holds_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, MappingProxyType | dict):
        return any(_holds_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_non_finite(v) for v in value)
    return False


def _holds_a_wide_integer(value: Any) -> bool:
    """Whether ``value`` holds an integer past 64 bits, which no import reads back."""
    try:
        msgspec.msgpack.encode(value)
    except OverflowError:
        return True
    except (TypeError, ValueError):  # no data at all: refused for that
        return False
    return False


def _state_stores(directory: Path) -> dict[str, Any]:
    return {
        "Store": open_store("memory://"),
        "MemoryStateStore": MemoryStateStore(),
        "FileStateStore": FileStateStore(directory),
    }


@pytest.mark.parametrize("kind", ["Store", "MemoryStateStore", "FileStateStore"])
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=HOSTILE)
def test_a_state_document_is_saved_as_it_reads_back_or_refused_with_nothing_saved(
    tmp_path: Path, kind: str, value: Any
) -> None:
    states = _state_stores(tmp_path / "states")[kind]
    states.write_state("doc", {"kept": 1})
    document = {"value": value}
    expected = _as_dicts(document)
    try:
        states.write_state("doc", document)
    except CovonautError:
        refusable = _holds_non_finite(value) or _holds_a_wide_integer(expected)
        assert refusable or not _round_trips(expected)
        assert states.read_state("doc") == {"kept": 1}  # nothing saved in its place
        return
    assert not _holds_non_finite(value)  # NaN is never saved as null
    assert not _holds_a_wide_integer(expected)  # nor what no import reads back
    assert states.read_state("doc") == msgspec.json.decode(msgspec.json.encode(expected))


def _round_trips(value: Any) -> bool:
    try:
        msgspec.json.decode(msgspec.json.encode(value))
    except (TypeError, ValueError, msgspec.MsgspecError):
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(first=HOSTILE, second=HOSTILE)
def test_canonical_json_gives_one_form_only_to_values_that_read_back_alike(
    first: Any, second: Any
) -> None:
    forms = []
    for value in (first, second):
        try:
            forms.append(canonical_json(value))
        except CovonautError:
            assert _holds_non_finite(value) or not _round_trips(value)
            return
        assert not _holds_non_finite(value)
    if forms[0] == forms[1]:
        decoded = [msgspec.json.decode(msgspec.json.encode(v)) for v in (first, second)]
        assert decoded[0] == decoded[1]
