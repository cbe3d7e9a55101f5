"""Every list of event classes the library follows or reads the log by is filtered by
topic, and a record is stored under its own class's topic: a filter that names a class
and not one of its subclasses never sees that subclass's records (nor does a lookup by
exact class). Each list names every
subclass of each class it names, so that an event class added later under one of them
(as ``RunStartedWithInput`` and ``StartedWithInput`` were, ADRs 0079 and 0081) is read
wherever its parents are, or the list says why not."""

from __future__ import annotations

import pytest

from covonaut_es.domain import AgentThread
from covonaut_es.projections._items import QUEUE_EVENT_TYPES
from covonaut_es.runtime._tracing import _NOTED
from covonaut_es.store._codec import library_event_classes
from covonaut_es.store._reader import _FIRST_EVENTS
from covonaut_es.store._records import OPENING_EVENTS
from covonaut_es.store._review_index import HOLDING
from covonaut_es.workers._deadlines import DEADLINE_TRACKED
from covonaut_es.workers._ready import TRACKED

STORED = tuple(dict.fromkeys(library_event_classes()))
"""Every class the library stores records of (an alias, such as ``Created``, once)."""


FILTERS: dict[str, tuple[type, ...]] = {
    "the workers' ready threads": TRACKED,
    "the workers' review deadlines": DEADLINE_TRACKED,
    "the reviewer queue": QUEUE_EVENT_TYPES,
    "the store's listing of threads": _FIRST_EVENTS,
    "the reviewer queue's naming of threads begun afresh": OPENING_EVENTS,
    "the index of the threads holding a review": HOLDING,
    "a traced run's span events (looked up by exact class)": tuple(_NOTED),
}


LEFT_OUT: dict[str, dict[type, str]] = {
    "the reviewer queue's naming of threads begun afresh": {
        AgentThread.StartedFromState: "the queue follows it, and it names its thread",
    },
}
"""The subclasses a list leaves out on purpose, and why."""


@pytest.mark.parametrize("name", FILTERS)
def test_a_filter_by_topic_names_every_subclass_of_each_class_it_names(name: str) -> None:
    listed, left_out = set(FILTERS[name]), LEFT_OUT.get(name, {})
    for cls in listed:
        missing = [
            sub.__qualname__
            for sub in STORED
            if issubclass(sub, cls) and sub not in listed and sub not in left_out
        ]
        assert not missing, f"{name} follows {cls.__qualname__} but not {missing}"
    assert not listed & set(left_out)


def test_the_stored_classes_hold_the_newest_events() -> None:
    assert {AgentThread.StartedWithInput, AgentThread.RunStartedWithInput} <= set(STORED)
