"""The library's schema registry and check_upcasters()."""

from __future__ import annotations

import pytest

from covonaut_es import AgentThread, MissingUpcasterError, check_upcasters, open_store
from covonaut_es.migrations import event_classes, registry
from covonaut_es.upcasting import Schema


def test_the_librarys_registry_has_every_step() -> None:
    """check_upcasters() passes for the registry this code ships (run by the suite)."""
    check_upcasters()


def test_the_registry_covers_every_stored_type() -> None:
    """Every event type, the snapshot and the state document have a schema."""
    names = {schema.name for schema in registry()}
    assert {cls.__qualname__ for cls in event_classes()} <= names
    assert {"ThreadSnapshot", "StateDocument"} <= names


def test_check_upcasters_names_every_gap() -> None:
    """A registry with gaps raises MissingUpcasterError naming each type and step."""
    schemas = [Schema("A", 3, {2: lambda d: {**d, "_v": 3}}), Schema("B", 2), Schema("C", 1)]
    with pytest.raises(MissingUpcasterError, match=r"A 1 -> 2, B 1 -> 2;"):
        check_upcasters(schemas)


def test_a_version_bumped_without_its_upcaster_fails_when_a_store_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A class_version raised without an upcaster is refused before any data is read,
    not when old data turns up."""
    monkeypatch.setattr(AgentThread.TurnStarted, "class_version", 2, raising=False)
    with pytest.raises(MissingUpcasterError, match=r"AgentThread.TurnStarted 1 -> 2"):
        open_store("memory://")
