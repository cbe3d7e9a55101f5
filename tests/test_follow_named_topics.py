"""A process application that names the topics it follows the eventsourcing way
(``follow_topics = [get_topic(EventClass)]``) is given exactly the events of those
classes, also of a leader that names the topics it notifies of so
(``notify_topics``): the store writes a library class's records under a short code
(ADR 0064), which the topic named is not, and such a follower was given none
(helper-252), nor such a leader's follower (helper-254)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import ProcessingEvent
from eventsourcing.system import ProcessApplication, SingleThreadedRunner, System
from eventsourcing.utils import get_topic

from covonaut_es import AgentApplication, AgentThread, Store
from support import converse

WRITTEN = [
    AgentThread.StartedWithInput,
    AgentThread.TurnAnsweredWithCalls,
    AgentThread.ToolResultCheckpointed,
    AgentThread.TurnAnswered,
    AgentThread.RunFinishedCheckpointed,
]
"""Classes a run of :func:`~support.converse` writes."""


class Desk(AgentApplication):
    pass


def _follower(followed: type) -> type:
    """A process application following ``followed``'s topic, noting what it is given;
    at module level, where eventsourcing finds it by its topic."""

    def policy(self: Any, domain_event: Any, processing_event: ProcessingEvent[UUID]) -> None:
        type(self).seen.append(type(domain_event).__qualname__)

    name = f"Follows{followed.__name__}"
    namespace = {"follow_topics": [get_topic(followed)], "policy": policy, "seen": []}
    namespace |= {"__module__": __name__, "__qualname__": name}
    cls = type(name, (AgentApplication, ProcessApplication), namespace)
    globals()[name] = cls
    return cls


FOLLOWERS = {followed: _follower(followed) for followed in WRITTEN}


def _notifying(followed: type) -> type:
    """A leader that notifies its followers of ``followed``'s records only."""
    name = f"Notifies{followed.__name__}"
    namespace = {"notify_topics": [get_topic(followed)], "__module__": __name__}
    cls = type(name, (AgentApplication,), namespace | {"__qualname__": name})
    globals()[name] = cls
    return cls


LEADERS = {followed: _notifying(followed) for followed in WRITTEN}


@pytest.mark.parametrize("notifying", [False, True], ids=["leader", "notifying leader"])
@pytest.mark.parametrize("followed", WRITTEN, ids=lambda cls: cls.__qualname__)
def test_a_follower_naming_a_thread_events_topic_is_given_exactly_those_events(
    followed: type, notifying: bool
) -> None:
    follows = FOLLOWERS[followed]
    follows.seen.clear()  # type: ignore[attr-defined]
    desk = LEADERS[followed] if notifying else Desk
    runner: SingleThreadedRunner[UUID] = SingleThreadedRunner(System([[desk, follows]]))
    runner.start()
    try:
        threads = Store.from_application(runner.get(desk))
        converse(threads, "t-1")
        written = [type(e).__qualname__ for e in threads.history("t-1")]
        seen = follows.seen  # type: ignore[attr-defined]
        assert seen and seen == [name for name in written if name == followed.__qualname__]
    finally:
        runner.stop()
