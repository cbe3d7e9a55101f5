"""An application's own aggregate that gained an attribute loads as its events give
it: a snapshot written before is passed over, whatever the attribute's annotation
(docs/embedding.md). helper-252: one annotated ``str | None`` (or a list, a dict)
decoded with the attribute missing read as empty, and was trusted, so ``note`` loaded
as None where the events, through ``__init__``, give "none yet"."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path
from uuid import UUID

import pytest

from support import run_python

SRC = Path(__file__).resolve().parent.parent / "src"

SOURCE = """
import typing
from eventsourcing.domain import Aggregate, event
from covonaut_es import AgentApplication
from covonaut_es.store import AggregateSnapshot

class Order(Aggregate):
    item: str
    count: int
    NOTE_ANNOTATION

    class Snapshot(AggregateSnapshot):
        pass

    @event("Placed")
    def __init__(self, item: str) -> None:
        self.item = item
        self.count = 0
        NOTE_INIT

    @event("Bumped")
    def bump(self) -> None:
        self.count += 1

class Shop(AgentApplication):
    aggregate_classes = (Order,)
    snapshotting_intervals = {Order: 2}
"""
GAINED = [  # the attribute's annotation, and what __init__ starts it at
    ("str | None", '"none yet"'),
    ("str | None", "None"),
    ("list[str]", '["first"]'),
    ("list[str]", "[]"),
    ("dict[str, int]", '{"a": 1}'),
    ("str", '"none yet"'),
]

WRITER = """
import sys, types
module = types.ModuleType(sys.argv[2])
sys.modules[sys.argv[2]] = module
exec(sys.argv[3], module.__dict__)
app = module.Shop(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": sys.argv[1]})
order = module.Order("lamp")
order.bump()
app.save(order)  # version 2: a snapshot, before Order gained 'note'
order.bump()
app.save(order)
assert len(list(app.snapshots.get(order.id))) == 1
print(order.id)
app.close()
"""
"""Writes the older class's aggregate in a process of its own: eventsourcing defines a
class under a topic once per process."""


@pytest.mark.parametrize(("annotation", "start"), GAINED)
def test_a_snapshot_written_before_an_attribute_was_gained_is_passed_over(
    tmp_path: Path, annotation: str, start: str
) -> None:
    name = f"own_snapshot_shop_{GAINED.index((annotation, start))}"  # the topics name it
    path = str(tmp_path / "s.db")
    older = SOURCE.replace("NOTE_ANNOTATION", "").replace("NOTE_INIT", "")
    written = run_python("-c", WRITER, path, name, older, env={"PYTHONPATH": str(SRC)})
    order_id = UUID(written.stdout.split()[-1])
    module = types.ModuleType(name)
    sys.modules[name] = module
    later = SOURCE.replace("NOTE_ANNOTATION", f"note: {annotation}")
    exec(later.replace("NOTE_INIT", f"self.note = {start}"), module.__dict__)
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": path}
    app = module.Shop(env=env)
    replayed = module.Shop(env={**env, "IS_SNAPSHOTTING_ENABLED": "n"})
    try:
        from_events, loaded = replayed.repository.get(order_id), app.repository.get(order_id)
        assert (from_events.count, from_events.note) == (2, eval(start))
        assert (loaded.count, loaded.note) == (2, eval(start))
    finally:
        app.close()
        replayed.close()
        sys.modules.pop(name, None)


CLASS_VALUES = [  # an annotation the class gives a value, and the value
    ("str | None", "None"),
    ("typing.ClassVar[str]", '"order"'),
    ("typing.Final[str]", '"order"'),
]


@pytest.mark.parametrize(("annotation", "value"), CLASS_VALUES)
def test_a_snapshot_of_an_attribute_the_class_gives_a_value_and_never_set_is_read_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, annotation: str, value: str
) -> None:
    """Unchanged class, ``note`` given a value by the class and set by no event: each
    snapshot lacks ``note`` and is read back with it missing, so the class's value
    shows, as the replay gives it (helper-254: once snapshots stopped defaulting new
    attributes, none decoded with the very class that wrote it; helper-255: a
    ``ClassVar`` or ``Final`` one made every snapshot's save raise a bare TypeError)."""
    name = f"own_snapshot_shop_class_value_{CLASS_VALUES.index((annotation, value))}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    source = SOURCE.replace("NOTE_ANNOTATION", f"note: {annotation} = {value}")
    exec(source.replace("NOTE_INIT", ""), module.__dict__)
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "s.db")}
    app = module.Shop(env=env)
    try:
        order = module.Order("lamp")
        for _ in range(5):
            order.bump()
        app.save(order)
        with caplog.at_level(logging.WARNING):
            snapshots = [s.originator_version for s in app.snapshots.get(order.id)]
            loaded = app.repository.get(order.id)
        assert snapshots == [2, 4, 6]
        assert (loaded.count, loaded.note) == (5, eval(value))
        assert "passed over" not in caplog.text, "the snapshots just written do not decode"
    finally:
        app.close()
        sys.modules.pop(name, None)
