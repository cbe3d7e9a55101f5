"""The private names of an eventsourcing aggregate, named here and nowhere else.

An eventsourcing ``Aggregate`` keeps its id, version, times and unsaved events in
attributes of its own ``__dict__``, behind read-only properties. Snapshots read and
write them directly, and so does the fold of a thread's events, which cannot afford the
properties' calls on every event. The domain's snapshots and the thread's fold import
this module, and the store imports it for its own aggregates' snapshots and their codec
(ADR 0122).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate

T = TypeVar("T")

# eventsourcing 9.5.6 (pinned below 9.6): Aggregate.__base_init__ sets _id, _version,
# _created_on, _modified_on and _pending_events, which its properties of those names
# (less the underscore) read; Aggregate._create makes an aggregate by a created event of
# the caller's choice.

A = TypeVar("A", bound=Aggregate)

NOT_STATE = frozenset({"_id", "_version", "_pending_events"})
"""An aggregate's attributes that are no part of its state: a snapshot records the id
and version in fields of its own, and keeps no unsaved events."""

TIMES = ("_created_on", "_modified_on")
"""The state attributes every eventsourcing aggregate has, whatever its class declares."""

VERSION = "_version"
"""What an aggregate's ``version`` reads, which the fold writes into its ``__dict__``."""

MODIFIED_ON = "_modified_on"
"""What an aggregate's ``modified_on`` reads, which the fold writes into its
``__dict__``."""


def state_of(aggregate: Any, derived: Iterable[str] = ()) -> dict[str, Any]:
    """``aggregate``'s state: its attributes but those of :data:`NOT_STATE` and the
    ``derived`` ones (recomputed when asked, so never kept)."""
    left_out = NOT_STATE.union(derived)
    return {k: v for k, v in vars(aggregate).items() if k not in left_out}


def rebuild(cls: type[T], state: Mapping[str, Any], aggregate_id: UUID, version: int) -> T:
    """An instance of ``cls`` holding ``state`` (as :func:`state_of` gives it), the
    aggregate ``aggregate_id`` at ``version`` with no unsaved events, made without
    calling ``cls``'s ``__init__``."""
    aggregate: T = object.__new__(cls)
    aggregate.__dict__.update(state, _id=aggregate_id, _version=version, _pending_events=[])
    return aggregate


def move_to(aggregate: Any, *, aggregate_id: UUID, version: int, modified_on: datetime) -> None:
    """Make ``aggregate`` the aggregate ``aggregate_id`` at ``version``, last modified
    at ``modified_on``, its state otherwise kept."""
    aggregate.__dict__.update(_id=aggregate_id, _version=version, _modified_on=modified_on)


def created(cls: type[A], event_class: type[Any], **fields: Any) -> A:
    """A new aggregate of ``cls``, its creation recorded by the event ``event_class``
    (one of ``cls``'s created events) with ``fields``."""
    return cls._create(event_class, **fields)


def become(aggregate: Any, other: Any) -> None:
    """Make ``aggregate`` be ``other``: its id, version, state and unsaved events."""
    aggregate.__dict__.clear()
    aggregate.__dict__.update(other.__dict__)
