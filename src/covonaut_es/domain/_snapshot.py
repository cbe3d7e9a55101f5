"""The thread's snapshot, and the fold that loads a thread from its events.

A :class:`ThreadSnapshot` holds the whole state of an
:class:`~covonaut_es.domain.AgentThread` at one version, so that loading the thread
folds only the events after it. The aggregate's module makes it its snapshot class.
Its base, :class:`StateSnapshot`, is the store's snapshots of an application's own
aggregates' too: one way of taking and rebuilding an aggregate's state.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from eventsourcing.domain import Aggregate, Snapshot
from eventsourcing.utils import get_topic, register_topic

from covonaut_es.domain._eventsourcing import rebuild, state_of

RESULT_CALL_IDS = "_result_call_ids_memo"
"""Where a thread keeps the call ids of its tool messages: derived from its messages,
so no snapshot holds it."""


class StateSnapshot(Snapshot):
    """A snapshot whose state is its aggregate's own attributes, rebuilt into an
    instance of :attr:`aggregate_class`. Its timestamp is the aggregate's last
    modification, so taking it reads no clock.

    A subclass binds :attr:`aggregate_class` and says the topic it records.
    """

    aggregate_class: ClassVar[type]
    DERIVED: ClassVar[tuple[str, ...]] = ()
    """Attributes recomputed when asked, which a snapshot does not keep."""

    @classmethod
    def take(cls, aggregate: Any) -> Self:
        return cls(
            originator_id=aggregate.id,
            originator_version=aggregate.version,
            timestamp=aggregate.modified_on,
            topic=cls.topic_of(aggregate),
            state=state_of(aggregate, cls.DERIVED),
        )

    @classmethod
    def topic_of(cls, aggregate: Any) -> str:
        """The topic of ``aggregate``'s class, as the snapshot records it."""
        return get_topic(type(aggregate))

    def mutate(self, _: None) -> Any:
        return rebuild(
            self.aggregate_class, self.state, self.originator_id, self.originator_version
        )


class ThreadSnapshot(StateSnapshot):
    """A snapshot of an :class:`AgentThread`, decoded with the thread's own types."""

    TOPIC = "covonaut.thread.Snapshot"
    # Set where the aggregate is defined with this class as its snapshot class (the
    # aggregate imports this module, so this module cannot name it).
    aggregate_class: ClassVar[type[Aggregate]]
    DERIVED = (RESULT_CALL_IDS,)


register_topic(ThreadSnapshot.TOPIC, ThreadSnapshot)

_ABSENT = object()


def differing_fields(left: Aggregate, right: Aggregate) -> tuple[str, ...]:
    """The names of the attributes in which two threads differ: every one a snapshot
    keeps (so one added to the aggregate is compared without being listed here), and
    their ids and versions.

    Values compare by equality, so the same state decoded from a snapshot or folded from
    events compares equal whatever container or time zone each came in.
    """
    first, second = ThreadSnapshot.take(left), ThreadSnapshot.take(right)
    names = [
        name
        for name, a, b in (
            ("id", first.originator_id, second.originator_id),
            ("version", first.originator_version, second.originator_version),
        )
        if a != b
    ]
    for name in dict.fromkeys([*first.state, *second.state]):
        if first.state.get(name, _ABSENT) != second.state.get(name, _ABSENT):
            names.append(name.lstrip("_"))
    return tuple(names)
