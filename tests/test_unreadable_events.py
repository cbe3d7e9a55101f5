"""The write path refuses what the read path cannot read: an event holding a value its
declared type would not decode is refused, typed and named, before anything is stored."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from eventsourcing.domain import Aggregate, event
from eventsourcing.utils import get_topic
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import AgentApplication, AgentThread, Message, Role, Store, UnreadableEventError
from covonaut_es.domain import ThreadSnapshot
from covonaut_es.store._chain import CHAIN_FIELD
from covonaut_es.store._codec import library_event_classes
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._urls import persistence_env
from support import agent_on, answer, call

NOW = datetime(2026, 5, 6, tzinfo=UTC)
WRONG_VALUES = (42, "text", 1.5, None, True)
"""Values of plain types, each of which some field of some event does not declare."""


class Notebook(Aggregate):
    """A user's aggregate whose note declares ``str``."""

    @event("Noted")
    def note(self, text: str) -> None:
        self.text = text


class Notebooks(AgentApplication):
    aggregate_classes = (Notebook,)


def test_a_user_message_of_the_wrong_type_is_refused_and_the_thread_still_loads(
    store: Store,
) -> None:
    agent = agent_on(store, "t1", [call(("c1", "review", "{}")), answer("done")])
    agent.run("go")
    head = store.head_version("t1")
    thread = store.load("t1")
    # Past the domain's own check (steer refuses it): the store's is the one tried here.
    thread.trigger_event(thread.Steered, message=Message(Role.USER, 42), timestamp=NOW)  # type: ignore[arg-type]
    with pytest.raises(UnreadableEventError) as raised:
        store.save(thread)
    error = raised.value
    assert (error.event, error.field, error.expected, error.found) == (
        "AgentThread.Steered",
        "message.content",
        "str",
        "int",
    )
    assert store.head_version("t1") == head
    assert store.load("t1").version == head
    agent.steer("carry on")
    assert agent.resume() == "done"


def test_an_own_event_of_the_wrong_type_is_refused_and_the_aggregate_still_loads(
    store_url: str,
) -> None:
    app = Notebooks(env=persistence_env(store_url))
    try:
        book = Notebook()
        app.save(book)
        book.note(42)  # type: ignore[arg-type]
        with pytest.raises(UnreadableEventError) as raised:
            app.save(book)
        error = raised.value
        assert (error.event, error.field, error.expected, error.found) == (
            "Notebook.Noted",
            "text",
            "str",
            "int",
        )
        assert app.repository.get(book.id).version == 1
    finally:
        app.close()


EVENT_CLASSES = sorted(
    (
        cls
        for cls in library_event_classes()
        if cls not in (AgentThread.Event, ThreadSnapshot)  # a base class; not an event
    ),
    key=lambda cls: cls.__qualname__,
)

JSON_VALUES = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5)


def values_of(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of a declared type that JSON carries as they are: no NaN, no integer
    beyond 64 bits, ``Any`` as plain JSON scalars."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return JSON_VALUES
    if annotation is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if annotation is int:
        return st.integers(-(2**63), 2**63 - 1)
    if origin in (types.UnionType, typing.Union):
        return st.one_of(*(values_of(arg) for arg in args))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(values_of(args[0]), max_size=2).map(tuple)
        return st.tuples(*(values_of(arg) for arg in args))
    if origin is list:
        return st.lists(values_of(args[0]), max_size=2)
    if origin is dict:
        return st.dictionaries(values_of(args[0]), values_of(args[1]), max_size=2)
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return st.builds(
            annotation,
            **{f.name: values_of(f.type) for f in msgspec.structs.fields(annotation)},
        )
    return st.from_type(annotation)


@st.composite
def events(draw: st.DrawFn) -> Any:
    """An event of any class the library stores, of valid field values."""
    cls = draw(st.sampled_from(EVENT_CLASSES))
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {"originator_id": draw(st.uuids()), "originator_version": 1}
    for field in dataclasses.fields(cls):
        if field.name == "originator_topic":  # checked on reading, against the allowlist
            fields[field.name] = get_topic(AgentThread)
        elif field.name not in fields:
            fields[field.name] = draw(values_of(hints[field.name]))
    made = object.__new__(cls)
    object.__setattr__(made, "__dict__", fields)
    return made


@settings(max_examples=150, deadline=None)
@given(original=events(), data=st.data())
def test_an_event_with_a_field_of_the_wrong_type_is_refused_or_reads_back_equal(
    original: Any, data: st.DataObject
) -> None:
    """An event of each stored class with one field replaced by a value of another
    type: the mapper refuses it, typed and naming that field, or what it stores
    decodes to the same fields, sealed into a chain or not."""
    mapper = MsgspecMapper()
    assert vars(mapper.to_domain_event(mapper.to_stored_event(original)))  # valid as made
    name = data.draw(
        st.sampled_from(sorted(k for k in vars(original) if not k.startswith("originator_")))
    )
    value = data.draw(st.sampled_from(WRONG_VALUES))
    changed = object.__new__(type(original))
    object.__setattr__(changed, "__dict__", {**vars(original), name: value})
    for encode in (mapper.to_stored_event, lambda e: mapper.to_sealed_event(e, "", None)[0]):
        try:
            record = encode(changed)
        except UnreadableEventError as error:
            assert error.event == type(original).__qualname__
            assert re.split(r"[.\[]", error.field)[0] == name
            continue
        decoded = vars(mapper.to_domain_event(record))
        decoded.pop(CHAIN_FIELD)
        assert decoded == vars(changed)


def test_a_value_its_enum_does_not_have_is_refused_naming_the_field(store: Store) -> None:
    agent = agent_on(store, "t1", [call(("c1", "review", "{}")), answer("done")])
    agent.run("go")
    thread = store.load("t1")
    # Past the domain's own check (steer refuses it): the store's is the one tried here.
    thread.trigger_event(thread.Steered, message=Message("boss", "hi"), timestamp=NOW)  # type: ignore[arg-type]
    with pytest.raises(UnreadableEventError) as raised:
        store.save(thread)
    assert (raised.value.field, raised.value.found) == ("message.role", "str")
    assert "'boss'" in raised.value.expected
    assert store.load("t1").version == store.head_version("t1")
