"""The thread's snapshot, and the fold that loads a thread from its events.

A :class:`ThreadSnapshot` holds the whole state of an
:class:`~covonaut_es.domain.AgentThread` at one version, so that loading the thread
folds only the events after it. The aggregate's module makes it its snapshot class.
"""

from __future__ import annotations

from typing import Any, ClassVar

from eventsourcing.domain import Aggregate, Snapshot
from eventsourcing.utils import get_topic, register_topic

RESULT_CALL_IDS = "_result_call_ids_memo"
"""Where a thread keeps the call ids of its tool messages: derived from its messages,
so no snapshot holds it."""

_NOT_STATE = ("_id", "_version", "_pending_events", RESULT_CALL_IDS)


class ThreadSnapshot(Snapshot):
    """A snapshot of an :class:`AgentThread`, decoded with the thread's own types.

    Its timestamp is the thread's last modification, so taking it reads no clock.
    """

    TOPIC = "covonaut.thread.Snapshot"
    # Set where the aggregate is defined with this class as its snapshot class (the
    # aggregate imports this module, so this module cannot name it).
    aggregate_class: ClassVar[type[Aggregate]]

    @classmethod
    def take(cls, aggregate: Any) -> ThreadSnapshot:
        state = {k: v for k, v in vars(aggregate).items() if k not in _NOT_STATE}
        return cls(
            originator_id=aggregate.id,
            originator_version=aggregate.version,
            timestamp=aggregate.modified_on,
            topic=get_topic(type(aggregate)),
            state=state,
        )

    def mutate(self, _: None) -> Aggregate:
        thread = object.__new__(self.aggregate_class)
        thread.__dict__.update(
            self.state,
            _id=self.originator_id,
            _version=self.originator_version,
            _pending_events=[],
        )
        return thread


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
