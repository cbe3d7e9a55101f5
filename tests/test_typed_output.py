"""Typed final answers: validated, sent back when refused, recorded, read back typed."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import datetime
from typing import Any

import attrs
import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
)
from covonaut_es.domain import AgentThread, TypedOutput
from covonaut_es.errors import ConfigurationError, OutputValidationError
from covonaut_es.runtime._output import OUTPUT_NAME, AnswerRefused, OutputShape
from covonaut_es.tools import MAX_ARGUMENTS_DEPTH
from support import OBJECT_SCHEMA, answer, call, echo_tool, ticking_clock


class Verdict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    label: str
    score: float


@attrs.frozen
class Invoice:
    number: str
    total: int = attrs.field(validator=attrs.validators.ge(0))
    due: datetime | None = None


TICKET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "priority": {"enum": ["low", "high"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["priority"],
}


def typed_agent(store: Store, script: list[Any], output_type: object, **options: Any) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            model="m",
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
            output_type=output_type,
            **options,
        )
    )


def test_struct_answer_is_validated_recorded_and_read_back(store: Store) -> None:
    """A Struct answer comes back typed; the thread records its JSON value with the end
    of the run, and an agent restored from the store gives the same value back."""
    agent = typed_agent(store, [answer('{"label": "spam", "score": 0.5}')], Verdict)
    assert agent.run("classify this") == '{"label": "spam", "score": 0.5}'
    assert agent.output == Verdict("spam", 0.5)
    assert agent.result is not None
    assert (agent.result.status, agent.result.output) == ("finished", Verdict("spam", 0.5))
    assert agent.state.output == TypedOutput({"label": "spam", "score": 0.5})
    finished = [e for e in store.history("t") if isinstance(e, AgentThread.RunFinished)]
    assert [e.typed for e in finished] == [TypedOutput({"label": "spam", "score": 0.5})]
    assert store.replay_state("t").output == agent.state.output
    assert "typed value" in [entry.summary for entry in store.replay("t")][-1]
    restored = typed_agent(store, [], Verdict)
    assert restored.output == Verdict("spam", 0.5)


def test_a_refused_answer_goes_back_with_the_reason(store: Store) -> None:
    """An answer that does not validate reaches the model again with the error as a user
    message; it is never the output; the next valid answer is."""
    provider_script = [answer('{"label": 3, "score": 1}'), answer('{"label": "ham", "score": 1}')]
    agent = typed_agent(store, provider_script, Verdict)
    agent.run("classify")
    correction = agent.messages[-2]
    assert correction.role is Role.USER
    assert "Expected `str`, got `int` - at `$.label`" in correction.content
    assert agent.output == Verdict("ham", 1.0)
    finished = [e for e in store.history("t") if isinstance(e, AgentThread.RunFinished)]
    assert len(finished) == 1


def test_past_the_bound_the_run_fails_typed_and_recorded(store: Store) -> None:
    """After output_retries refusals the run fails with OutputValidationError, recorded
    in the thread as a failed run; no output is recorded."""
    script = [answer("not json"), answer("[1]"), answer('{"label": "x"}')]
    agent = typed_agent(store, script, Verdict, output_retries=1)
    with pytest.raises(OutputValidationError, match="refused 2 times, more than output_retries=1"):
        agent.run("classify")
    assert agent.status is ThreadStatus.ERROR
    assert (agent.state.error or "").startswith("OutputValidationError: ")
    assert agent.output is None
    assert agent.result is not None and agent.result.status == "failed"
    assert agent.result.output is None
    assert store.state_at("t").output is None


def test_a_refusal_on_the_last_turn_fails_the_run(store: Store) -> None:
    """A refused answer on the last turn max_turns allows fails the run, naming it."""
    agent = typed_agent(store, [answer("{}")], Verdict, max_turns=1)
    with pytest.raises(OutputValidationError, match="on turn 1, the last one max_turns=1"):
        agent.run("classify")


def test_attrs_answer_is_converted_with_its_validators(store: Store) -> None:
    """An attrs class is filled by msgspec: its validators refuse, its datetimes parse,
    and the recorded value is the class's own JSON form (defaults filled in)."""
    script = [answer('{"number": "A-1", "total": -5}'), answer('{"number": "A-1", "total": 7}')]
    agent = typed_agent(store, script, Invoice)
    agent.run("extract")
    assert "must be >= 0" in agent.messages[-2].content
    assert agent.output == Invoice("A-1", 7)
    assert agent.state.output == TypedOutput({"number": "A-1", "total": 7, "due": None})


def test_json_schema_answer_is_the_validated_data(store: Store) -> None:
    """A dict output type is a JSON Schema checked with jsonschema; the output is the
    JSON data itself, extra fields kept as the schema allows them."""
    script = [answer('{"priority": "urgent"}'), answer('{"priority": "high", "extra": [1]}')]
    agent = typed_agent(store, script, TICKET_SCHEMA)
    agent.run("triage")
    assert "$.priority: 'urgent' is not one of ['low', 'high']" in agent.messages[-2].content
    assert agent.output == {"priority": "high", "extra": [1]}


def test_tools_run_before_the_typed_answer(store: Store) -> None:
    """A typed agent still calls its tools; only the final answer is validated, and the
    request tells the model the answer's shape."""
    provider = ScriptedProvider(
        [call(("c1", "echo", '{"text": "x"}')), answer('{"label": "a", "score": 0}')]
    )
    agent = Agent(
        AgentConfig(
            provider=provider,
            tools=[echo_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            output_type=Verdict,
        )
    )
    agent.run("go")
    assert agent.output == Verdict("a", 0.0)
    spec = provider.requests[0].output
    assert spec is not None and (spec.name, spec.strict) == (OUTPUT_NAME, True)
    assert spec.schema["required"] == ["label", "score"]


def test_an_untyped_run_after_a_typed_one_has_no_output(store: Store) -> None:
    """The output is that of the last finished run: an untyped run clears it, and an
    agent without output_type reads the recorded JSON data."""
    typed_agent(store, [answer('{"label": "a", "score": 1}')], Verdict).run("one")
    assert typed_agent(store, [], None).output == {"label": "a", "score": 1}
    untyped = typed_agent(store, [answer("plain")], None)
    untyped.run("two")
    assert untyped.output is None


def test_a_recorded_output_that_no_longer_fits_the_type_is_a_typed_error(store: Store) -> None:
    """Reading a recorded output into another type raises OutputValidationError."""
    typed_agent(store, [answer('{"label": "a", "score": 1}')], Verdict).run("one")
    with pytest.raises(OutputValidationError, match=r"does not fit AgentConfig\.output_type"):
        _ = typed_agent(store, [], Invoice).output


@pytest.mark.parametrize(
    ("output_type", "found"),
    [
        (int, "must be a msgspec.Struct class, an attrs class or a JSON Schema"),
        ({"type": "array"}, "must describe a JSON object"),
        ({"type": "objekt"}, "invalid parameters schema"),
    ],
)
def test_invalid_output_types_are_refused_at_configuration(output_type: object, found: str) -> None:
    """An output type that is no class, a non-object schema or an invalid schema is a
    ConfigurationError when the config is made."""
    with pytest.raises(ConfigurationError, match=found):
        AgentConfig(provider=ScriptedProvider(), output_type=output_type)


def test_a_tool_may_not_take_the_answers_name() -> None:
    """A typed agent's tools may not be named like the typed answer."""
    tool = Tool(OUTPUT_NAME, "clash", OBJECT_SCHEMA, lambda ctx, args: "x")
    with pytest.raises(ConfigurationError, match="rename the tool"):
        AgentConfig(provider=ScriptedProvider(), tools=[tool], output_type=Verdict)


def test_strict_mode_only_where_the_schema_fits_it() -> None:
    """A closed Struct with every field required is strict; a default, an open object
    or a keyword strict mode lacks is not."""

    class Open(msgspec.Struct):
        label: str

    assert OutputShape.of(Verdict).spec.strict
    assert not OutputShape.of(Open).spec.strict
    assert not OutputShape.of(Invoice).spec.strict
    closed = {**TICKET_SCHEMA, "required": ["priority", "tags"], "additionalProperties": False}
    assert OutputShape.of(closed).spec.strict
    assert not OutputShape.of({**closed, "minProperties": 1}).spec.strict


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('{"label": "a", "label": "b", "score": 1}', "appears more than once"),
        ('{"label": "a", "score": NaN}', "NaN is not a JSON number"),
        ('{"label": "a", "score": 1e400}', "too large for a JSON number"),
        ('{"label": "\\ud800", "score": 1}', "cannot be recorded"),
        ("[" * (MAX_ARGUMENTS_DEPTH + 1) + "]" * (MAX_ARGUMENTS_DEPTH + 1), "nested 65 deep"),
        ('{"label": "' + "x" * 1_100_000 + '", "score": 1}', "bytes, more than the"),
        ('{"label": "a", "score": 1, "more": 2}', "unknown field `more`"),
    ],
    ids=["duplicate", "nan", "overflow", "surrogate", "deep", "huge", "extra"],
)
def test_hostile_answers_are_refused(text: str, found: str) -> None:
    """Duplicate keys, non-finite numbers, unstorable text, depth and size past the
    limits, and unknown fields of a closed type are refusals, never a crash."""
    with pytest.raises(AnswerRefused, match=found):
        OutputShape.of(Verdict).check(text)


def test_a_refusal_quoting_a_huge_value_is_clipped() -> None:
    """The reason sent back to the model is bounded even when it quotes the answer."""
    with pytest.raises(AnswerRefused) as refused:
        OutputShape.of(TICKET_SCHEMA).check(json.dumps({"priority": "x" * 100_000}))
    assert len(str(refused.value)) < 700


_THREAD_NUMBERS = itertools.count()
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)
_VALID = st.fixed_dictionaries(
    {"label": st.text(max_size=8), "score": st.floats(allow_nan=False, allow_infinity=False)}
)
_TEXT = st.one_of(
    _VALID.map(json.dumps),
    _JSON.map(json.dumps),
    st.fixed_dictionaries({"label": _JSON, "score": _JSON}).map(json.dumps),
    st.fixed_dictionaries({"priority": _JSON, "tags": _JSON}).map(json.dumps),
    st.fixed_dictionaries({"number": _JSON, "total": _JSON, "due": _JSON}).map(json.dumps),
    st.text(max_size=40),
    st.sampled_from(["NaN", "-Infinity", "1e999", '{"a":1,"a":1}', '"\\udfff"', "[" * 80]),
)
_CASES = st.one_of(
    st.tuples(st.just(Verdict), _TEXT),
    st.tuples(st.just(Invoice), _TEXT),
    st.tuples(
        st.just(Invoice),
        st.fixed_dictionaries(
            {"number": st.text(max_size=8), "total": st.integers(min_value=0)},
            optional={"due": st.none() | st.datetimes().map(lambda d: d.isoformat())},
        ).map(json.dumps),
    ),
    st.tuples(st.just(TICKET_SCHEMA), _TEXT),
    st.tuples(
        st.just(TICKET_SCHEMA),
        st.fixed_dictionaries(
            {"priority": st.sampled_from(["low", "high"])},
            optional={"tags": st.lists(st.text(max_size=4)), "other": _JSON},
        ).map(json.dumps),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_CASES)
def test_any_text_is_a_refusal_or_a_value_that_reads_back(case: tuple[object, str]) -> None:
    """Whatever the model answers, the check refuses it typed or gives a value that the
    store can hold and that reads back into the type as the same value."""
    output_type, text = case
    shape = OutputShape.of(output_type)
    try:
        recorded = shape.check(text)
    except AnswerRefused:
        event("refused")
        return
    event("accepted")
    encoded = msgspec.json.encode(recorded)
    assert msgspec.json.decode(encoded, type=TypedOutput) == recorded
    # An export carries it (and every store imports it): integers within 64 bits.
    msgspec.msgpack.encode(recorded)
    value = shape.typed(recorded)
    if isinstance(output_type, dict):
        assert value == json.loads(text)
    else:
        assert isinstance(value, output_type)  # type: ignore[arg-type]
        assert msgspec.to_builtins(value) == recorded.value


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(answers=st.lists(_TEXT, min_size=1, max_size=3))
def test_an_invalid_answer_is_never_recorded_as_the_output(
    store: Store, answers: list[str]
) -> None:
    """Through a run on a real store: the recorded output is None or the validation of
    the answer the run finished with, never a refused one."""
    thread_id = f"h{next(_THREAD_NUMBERS)}"  # a fresh thread: no earlier run's output
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([answer(text) for text in answers]),
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            output_type=Verdict,
            output_retries=len(answers) - 1,
        )
    )
    try:
        final = agent.run("go")
    except OutputValidationError:
        event("the run failed")
        assert agent.status is ThreadStatus.ERROR
        assert store.state_at(thread_id).output is None
        return
    event("the run finished")
    assert store.state_at(thread_id).output == OutputShape.of(Verdict).check(final)
    assert agent.output == msgspec.json.decode(final, type=Verdict)


def test_an_async_streamed_run_checks_the_answer_alike(store: Store) -> None:
    """arun with streamed answers refuses and accepts as run does."""
    script = [answer('{"label": "a"}'), answer('{"label": "a", "score": 2}')]
    pieces: list[Any] = []
    agent = typed_agent(store, script, Verdict, on_delta=pieces.append)
    assert asyncio.run(agent.arun("go")) == '{"label": "a", "score": 2}'
    assert agent.output == Verdict("a", 2.0)
    assert "Object missing required field `score`" in agent.messages[-2].content
    assert pieces


def test_the_output_is_a_copy_of_what_was_recorded(store: Store) -> None:
    """Changing the value agent.output gave changes nothing recorded."""
    agent = typed_agent(store, [answer('{"priority": "low", "tags": ["a"]}')], TICKET_SCHEMA)
    agent.run("triage")
    agent.output["tags"].append("changed")
    assert agent.output == {"priority": "low", "tags": ["a"]}


def test_a_type_whose_value_does_not_read_back_refuses_the_answer(store: Store) -> None:
    """A class whose JSON form does not convert back is a recorded failed run, never a
    crash nor a recorded output."""

    class Shouted(msgspec.Struct):
        word: str

        def __post_init__(self) -> None:
            if self.word.endswith("!"):
                raise ValueError("already shouted")
            self.word = self.word.upper() + "!"  # so its JSON form is refused on read

    agent = typed_agent(store, [answer('{"word": "hi"}')], Shouted, output_retries=0)
    with pytest.raises(OutputValidationError, match="cannot be recorded: the recorded output"):
        agent.run("shout")
    assert agent.status is ThreadStatus.ERROR
    assert agent.state.output is None
