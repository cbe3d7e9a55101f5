"""The upcasting rules: one step at a time, in order, strict about versions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from eventsourcing.domain import Aggregate
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import SchemaVersionError
from covonaut_es.domain import AgentThread, ThreadSnapshot
from covonaut_es.errors import (
    ConfigurationError,
    MissingUpcasterError,
    NewerSchemaError,
    StaleSnapshotError,
    UpcasterError,
)
from covonaut_es.migrations import Schema, aggregate_schema, schema_for
from support import ERROR_KINDS, error_of


def add_step(step: int, field: str) -> Any:
    """An upcaster for ``step -> step + 1`` that records itself in ``field``."""

    def upcast(document: dict[str, Any]) -> dict[str, Any]:
        return {**document, field: [*document.get(field, []), step], "_v": step + 1}

    return upcast


THREE = Schema("Sample", 3, {1: add_step(1, "steps"), 2: add_step(2, "steps")})


def test_upcasters_run_once_each_in_version_order() -> None:
    """Data at version 1 passes through 1 -> 2, then 2 -> 3, and nothing else."""
    upgraded = THREE.upgrade({"_v": 1, "x": 0}, where="test")
    assert upgraded == {"_v": 3, "x": 0, "steps": [1, 2]}


def test_current_data_is_left_alone() -> None:
    """Data at the current version runs no upcaster."""
    assert THREE.upgrade({"_v": 3, "x": 0}, where="test") == {"_v": 3, "x": 0}


def test_unversioned_data_is_version_zero_and_zero_to_one_is_the_identity() -> None:
    """Data without "_v" is version 0; 0 -> 1 changes nothing but the version."""
    assert THREE.upgrade({"x": 0}, where="test") == {"_v": 3, "x": 0, "steps": [1, 2]}


def test_data_newer_than_the_code_names_type_and_both_versions() -> None:
    """A stored version above the current one is refused, naming the type, the
    stored version and the supported one."""
    with pytest.raises(
        NewerSchemaError, match=r"Sample data has schema version 4.*up to version 3"
    ):
        THREE.upgrade({"_v": 4}, where="test")


@pytest.mark.parametrize("own", [False, True], ids=["library", "application"])
def test_each_hint_names_whose_code_to_change(own: bool) -> None:
    """A schema of the application's own class says to upgrade or change the
    application, never covonaut-es; one of the library's says to upgrade covonaut-es."""
    gappy = Schema("Mine", 3, {1: add_step(1, "steps")}, own=own)
    with pytest.raises(NewerSchemaError) as newer:
        gappy.upgrade({"_v": 4}, where="test")
    with pytest.raises(MissingUpcasterError) as missing:
        gappy.upgrade({"_v": 2}, where="test")
    with pytest.raises(ConfigurationError) as beyond:
        Schema("Mine", 1, {1: add_step(1, "steps")}, own=own)
    messages = (str(newer.value), str(missing.value), str(beyond.value))
    if own:
        assert "upgrade the application" in messages[0]
        assert "define a static method upcast_v2_v3(state) on Mine" in messages[1]
        assert "raise Mine's class_version" in messages[2]
        assert not any("covonaut" in message for message in messages)
    else:
        assert "upgrade covonaut-es" in messages[0]
        assert "covonaut_es.migrations" in messages[1]


@pytest.mark.parametrize("version", ["2", -1, None, True, 1.5])
def test_a_version_that_is_not_a_version_is_refused(version: object) -> None:
    """A "_v" that is not a non-negative integer is a SchemaVersionError."""
    with pytest.raises(SchemaVersionError, match="not a version"):
        THREE.upgrade({"_v": version}, where="test")


def test_a_missing_step_names_the_type_and_the_step() -> None:
    """Upgrading across a step without an upcaster raises MissingUpcasterError."""
    gap = Schema("Gappy", 3, {2: add_step(2, "steps")})
    with pytest.raises(
        MissingUpcasterError, match=r"Gappy has no upcaster for schema version 1 -> 2"
    ):
        gap.upgrade({"_v": 1}, where="test")


@pytest.mark.parametrize("returned", [3, 1, None, True])
def test_an_upcaster_returning_another_version_than_the_next_is_refused(
    returned: object,
) -> None:
    """An upcaster that skips a version, stays at its version or drops "_v" is
    refused, naming the step and what it returned."""
    schema = Schema("Skippy", 3, {1: lambda d: {**d, "_v": returned}, 2: add_step(2, "s")})
    with pytest.raises(
        SchemaVersionError, match=r"Skippy upcaster for 1 -> 2 returned schema version"
    ):
        schema.upgrade({"_v": 1}, where="test")


def test_an_upcaster_that_fails_is_named_and_chained() -> None:
    """An exception inside an upcaster becomes an UpcasterError naming the step."""

    def broken(document: dict[str, Any]) -> dict[str, Any]:
        return {**document, "_v": 2, "total": document["missing"]}

    schema = Schema("Broken", 2, {1: broken})
    with pytest.raises(UpcasterError, match=r"Broken upcaster for 1 -> 2 failed: KeyError") as info:
        schema.upgrade({"_v": 1}, where="test")
    assert isinstance(info.value.__cause__, KeyError)


Failing = Callable[[dict[str, Any]], Any]


def _parcel(fails: Failing) -> type[Aggregate]:
    """An application's aggregate at version 2 whose upcasters, its own (for its
    snapshots) and its event's, are ``fails``."""

    class Parcel(Aggregate):
        class_version = 2
        upcast_v1_v2 = staticmethod(fails)

        class Registered(Aggregate.Created):
            class_version = 2
            upcast_v1_v2 = staticmethod(fails)

    return Parcel


STORED: dict[str, Callable[[Failing, bool], tuple[Schema, bool, int, dict[int, Failing]]]] = {
    # what is read: its schema, whether it is a snapshot's, the step that fails, and
    # the migrators that make it fail (none where the schema's own upcaster does)
    "a schema": lambda fails, own: (Schema("Failing", 2, {1: fails}, own=own), False, 1, {}),
    "a snapshot's schema": lambda fails, own: (
        Schema("Failing", 2, {1: fails}, own=own, snapshot=True),
        True,
        1,
        {},
    ),
    "the thread's event": lambda fails, own: (
        schema_for(AgentThread.MessageAppended),
        False,
        1,
        {1: fails},
    ),
    "the thread's snapshot": lambda fails, own: (schema_for(ThreadSnapshot), True, 2, {2: fails}),
    "an application's event": lambda fails, own: (
        schema_for(_parcel(fails).Registered),
        False,
        1,
        {},
    ),
    "an application's snapshot": lambda fails, own: (
        aggregate_schema(_parcel(fails)),
        True,
        1,
        {},
    ),
}


@settings(max_examples=50, deadline=None)
@given(
    kind=st.sampled_from(ERROR_KINDS),
    own=st.booleans(),
    text=st.text(max_size=20),
    stored=st.sampled_from(sorted(STORED)),
    migrator=st.booleans(),
)
def test_every_error_an_upcaster_raises_names_the_record(
    kind: type[Exception], own: bool, text: str, stored: str, migrator: bool
) -> None:
    """Whatever an upcaster raises (a builtin, or one of covonaut-es's errors), be it
    the schema's own or an application's migrator, of an event or of a snapshot, the
    error that comes out names the record and the step and chains it: a
    StaleSnapshotError of a snapshot's stays one (a cache passes its snapshot over),
    any other, an event's StaleSnapshotError included, is an UpcasterError."""
    raised = error_of(kind, text)

    def fails(document: dict[str, Any]) -> Any:
        raise raised

    schema, snapshot, step, migrators = STORED[stored](fails, own)
    stale = kind is StaleSnapshotError and snapshot
    expected = StaleSnapshotError if stale else UpcasterError
    with pytest.raises(expected) as info:
        schema.upgrade(
            {"_v": step}, where="record 7", migrators={step: fails} if migrator else migrators
        )
    assert type(info.value) is expected
    assert str(info.value).startswith("record 7: ")
    assert info.value.__cause__ is raised
    if expected is UpcasterError:
        failed = f"{schema.name} upcaster for {step} -> {step + 1} failed: {kind.__name__}"
        assert failed in str(info.value)


def test_an_upcaster_must_return_a_dict() -> None:
    """An upcaster that returns something other than a dict is an UpcasterError."""
    schema = Schema("Listy", 2, {1: lambda d: [d]})  # type: ignore[arg-type,return-value]
    with pytest.raises(UpcasterError, match="returned a list"):
        schema.upgrade({"_v": 1}, where="test")


def test_a_migrator_replaces_the_schemas_own_upcaster_for_its_step() -> None:
    """An application's migrator runs instead of the library's for that step only."""
    upgraded = THREE.upgrade(
        {"_v": 0}, where="test", migrators={0: add_step(0, "app"), 2: add_step(2, "app")}
    )
    assert upgraded == {"_v": 3, "app": [0, 2], "steps": [1]}


@pytest.mark.parametrize("step", [-1, 3, 7, "1", True])
def test_upcasters_for_steps_the_schema_does_not_have_are_refused(step: object) -> None:
    """An upcaster keyed by a version outside 0..current-1 could never run: refused."""
    with pytest.raises(ConfigurationError, match="not a step of Sample"):
        Schema("Sample", 3, {step: add_step(1, "s")})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="not a step of Sample"):
        THREE.check_steps({step: add_step(1, "s")}, what="migrators")  # type: ignore[dict-item]


def test_an_upcaster_must_be_callable() -> None:
    """A migrator that is not callable is refused when it is configured."""
    with pytest.raises(ConfigurationError, match="1 -> 2 is not callable"):
        THREE.check_steps({1: "upcast_v1_v2"}, what="migrators")  # type: ignore[dict-item]


def test_missing_steps_lists_every_gap() -> None:
    """missing_steps names each step from 1 to the current version without an upcaster."""
    assert Schema("Gappy", 4, {2: add_step(2, "s")}).missing_steps() == (1, 3)
    assert THREE.missing_steps() == ()
