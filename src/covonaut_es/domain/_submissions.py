"""Input handed to a thread for a worker to run, as a thread store records it.

Each thread has a stream of submissions beside its own stream: ``store.submit``
appends an :class:`InputSubmitted`, and the runner that takes the input appends an
:class:`InputTaken` naming the thread's version it found, before it starts the run.
Keeping them out of the thread's stream lets an application submit while a run is
going, without a version conflict with the runner's saves.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID, uuid5

from eventsourcing.domain import DomainEvent
from eventsourcing.utils import register_topic

from covonaut_es.domain._ids import check_thread_id

SUBMISSION_NAMESPACE = UUID("b7f0c2de-4a51-4e8b-93c7-5d2a6e1f0c94")
"""Namespace of the uuid5 that maps a thread id to its submissions' stream id. Never
change it."""


def submission_stream_id(thread_id: str) -> UUID:
    """The id of the stream of inputs submitted to ``thread_id``, which may be a thread
    stored under an id earlier versions accepted."""
    return uuid5(SUBMISSION_NAMESPACE, check_thread_id(thread_id, new=False))


@dataclass(frozen=True)  # also applied by eventsourcing's metaclass; spelled out for mypy
class InputSubmitted(DomainEvent):
    """An application handed ``text`` to ``thread_id``, as a user message to run."""

    TOPIC = "covonaut.submission.InputSubmitted"

    # Redeclared: the generic annotation inherited from eventsourcing reads as Any to
    # msgspec, which then cannot decode the id.
    originator_id: UUID
    thread_id: str
    text: str


@dataclass(frozen=True)
class InputTaken(DomainEvent):
    """A runner took the submission at stream version ``submitted_version`` while the
    thread stood at ``thread_version`` (0: not started); the run it starts follows."""

    TOPIC = "covonaut.submission.InputTaken"

    originator_id: UUID
    thread_id: str
    submitted_version: int
    thread_version: int


def takes_further(event: InputTaken, taken: int) -> bool:
    """Whether ``event`` takes a submission after the one at stream version ``taken``
    (0: none was taken): the one rule of what has been taken. Only such a take counts;
    one recorded out of date (its runner lost the thread to one that took further
    first, before this rule was kept at the write) moves nothing back (ADR 0105)."""
    return event.submitted_version > taken


register_topic(InputSubmitted.TOPIC, InputSubmitted)
register_topic(InputTaken.TOPIC, InputTaken)
