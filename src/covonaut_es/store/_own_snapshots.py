"""Snapshots of an :class:`~covonaut_es.AgentApplication`'s own aggregates (ADR 0046).

eventsourcing snapshots every aggregate with one ``Snapshot`` class whose state is a
plain dict, and rebuilds the aggregate by importing the module its stored topic names.
Such snapshots are stored as eventsourcing stores them (each value of a type JSON lacks
tagged by its transcoding), never sealed: a record's bytes are all that vouch for them.
An aggregate class may instead declare a snapshot class of its own, nested in it as
eventsourcing allows (``class Snapshot(AggregateSnapshot): pass``), which the
application binds to it: its state fields are the attributes annotated on the aggregate
class (as a dataclass-style eventsourcing aggregate declares them), decoded into their
types, and each snapshot is sealed to the stored row of the event at its version (and,
with a key, its bytes; ADR 0115), so that a forged one, or one copied from another
store or an older backup, is passed over. A state attribute without an
annotation is refused before the events that make the snapshot due are stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Self

from eventsourcing.domain import CanSnapshotAggregate

from covonaut_es.domain._eventsourcing import TIMES, state_of
from covonaut_es.domain._snapshot import StateSnapshot
from covonaut_es.errors import ConfigurationError, SerializationError


class AggregateSnapshot(StateSnapshot):
    """The base of an aggregate's snapshot class: nest ``class Snapshot(AggregateSnapshot):
    pass`` in an aggregate class of an :class:`~covonaut_es.AgentApplication`, and the
    application binds it to that class. Its state is decoded into the types the
    aggregate class annotates, and it rebuilds an instance of that class, whatever class
    its stored ``topic`` names."""

    @classmethod
    def take(cls, aggregate: Any) -> Self:
        """The snapshot of ``aggregate``'s state.

        Raises:
            SerializationError: The aggregate has attributes its class does not annotate.
        """
        check_annotated(aggregate)
        return super().take(aggregate)

    @classmethod
    def topic_of(cls, aggregate: Any) -> str:
        """The topic of the class this snapshot class is bound to."""
        return cls.topic_of_aggregate()

    @classmethod
    def topic_of_aggregate(cls) -> str:
        """The aggregate's topic, as eventsourcing names it in a snapshot."""
        return f"{cls.aggregate_class.__module__}:{cls.aggregate_class.__qualname__}"

    def mutate(self, _: None) -> Any:
        """The aggregate this snapshot holds.

        Raises:
            SerializationError: Its stored topic names another aggregate class.
        """
        if self.topic != self.topic_of_aggregate():
            msg = (
                f"snapshot of {self.originator_id} at version {self.originator_version}: "
                f"its aggregate topic {self.topic!r} is not {self.topic_of_aggregate()!r}, "
                "the class its snapshot class holds"
            )
            raise SerializationError(msg)
        return super().mutate(None)


def snapshot_class(aggregate_class: type) -> type[AggregateSnapshot]:
    """The snapshot class ``aggregate_class`` declares (a nested ``Snapshot`` class
    subclassing :class:`AggregateSnapshot`), bound to it.

    Raises:
        ConfigurationError: It declares none, or one bound to another class.
    """
    declared = getattr(aggregate_class, "Snapshot", None)
    name = aggregate_class.__qualname__
    if not (isinstance(declared, type) and issubclass(declared, AggregateSnapshot)):
        msg = (
            f"{name} has no snapshot class the mapper can decode: declare one in it, "
            "'class Snapshot(covonaut_es.store.AggregateSnapshot): pass'"
        )
        raise ConfigurationError(msg)
    bound = declared.__dict__.get("aggregate_class", aggregate_class)
    if bound is not aggregate_class:
        msg = (
            f"{name}'s snapshot class {declared.__qualname__} holds {bound.__qualname__} "
            f"already: declare one of its own in {name}"
        )
        raise ConfigurationError(msg)
    declared.aggregate_class = aggregate_class  # the class it is nested in
    return declared


def declared_snapshots(aggregate_classes: Iterable[type]) -> list[type[AggregateSnapshot]]:
    """The snapshot classes of those of ``aggregate_classes`` that declare one."""
    return [snapshot_class(cls) for cls in aggregate_classes if _declares(cls)]


def snapshot_classes(aggregate_classes: Iterable[type]) -> list[type[CanSnapshotAggregate[Any]]]:
    """The snapshot classes the ``aggregate_classes`` are snapshotted with: the one each
    declares, bound to it, or else eventsourcing's own nested ``Snapshot``."""
    found: list[type[CanSnapshotAggregate[Any]]] = []
    for cls in aggregate_classes:
        if _declares(cls):
            found.append(snapshot_class(cls))
            continue
        stock = getattr(cls, "Snapshot", None)
        if isinstance(stock, type) and issubclass(stock, CanSnapshotAggregate):
            found.append(stock)
    return list(dict.fromkeys(found))


def _declares(aggregate_class: type) -> bool:
    declared = getattr(aggregate_class, "Snapshot", None)
    return isinstance(declared, type) and declared_snapshot(declared)


def declared_snapshot(cls: type) -> bool:
    """Whether ``cls`` is a snapshot class an aggregate declares: sealed, its state
    decoded into the types the aggregate class annotates (rather than eventsourcing's
    own, tagged by transcodings and never sealed)."""
    return issubclass(cls, AggregateSnapshot)


def annotated(aggregate_class: type) -> frozenset[str]:
    """The state attributes ``aggregate_class`` declares a type for (its own class-level
    annotations, which the mapper decodes a snapshot's state by)."""
    own = getattr(aggregate_class, "__annotations__", {})
    return frozenset(name for name in own if not name.isupper())


def check_annotated(aggregate: Any) -> None:
    """Refuse an aggregate with state attributes its class does not annotate.

    Raises:
        SerializationError: Naming the class and the attributes.
    """
    cls = type(aggregate)
    missing = sorted(state_of(aggregate).keys() - {*TIMES, *annotated(cls)})
    if missing:
        msg = (
            f"cannot snapshot {cls.__qualname__} {aggregate.id}: its attributes {missing} "
            "have no annotation on the class, so their types could not be read back; "
            f"annotate them on {cls.__qualname__} (e.g. 'amount: Decimal'), or leave "
            f"{cls.__qualname__} out of snapshotting_intervals"
        )
        raise SerializationError(msg)


def check_intervals(
    intervals: Mapping[type, int], own: Iterable[type], library: Iterable[type]
) -> None:
    """Refuse ``snapshotting_intervals`` naming a class the application does not list,
    or one that declares a snapshot class but annotates none of its state; bind the
    snapshot classes declared.

    Raises:
        ConfigurationError: Naming the class and what to do.
    """
    own, library = set(own), set(library)
    for cls in intervals:
        if cls in library:
            continue
        if cls not in own:
            msg = (
                f"snapshotting_intervals names {cls.__qualname__}, which is not in the "
                "application's aggregate_classes: its snapshots could not be read back; "
                "add it there"
            )
            raise ConfigurationError(msg)
        if not _declares(cls):
            continue  # snapshotted as eventsourcing snapshots it, by the mapper's tags
        snapshot_class(cls)
        if not annotated(cls):
            msg = (
                f"snapshotting_intervals names {cls.__qualname__}, whose class annotates "
                "none of its attributes: a snapshot's state is decoded by those "
                f"annotations; declare them on {cls.__qualname__} (e.g. 'amount: Decimal')"
            )
            raise ConfigurationError(msg)
