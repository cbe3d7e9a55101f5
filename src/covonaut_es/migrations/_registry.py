"""The library's schema registry: the current version and the upcasters of every stored type.

A stored type declares the version the code writes as ``class_version`` (eventsourcing's
convention): each event class nested in :class:`~covonaut_es.AgentThread`, the aggregate
itself for its snapshots, :class:`~covonaut_es.domain.StateDocument` for named states, and the
event that records a named state in a thread store.
The upcasters live here, one function per step, keyed by the version they upgrade from.
ADR 0007 says when a change needs a new version and how to add a step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
from eventsourcing.domain import CanSnapshotAggregate

from covonaut_es.domain import AgentThread, PauseKind, StateDocument, ThreadSnapshot
from covonaut_es.domain._named_states import StateSaved
from covonaut_es.domain._submissions import InputSubmitted, InputTaken
from covonaut_es.errors import ConfigurationError, MissingUpcasterError, StaleSnapshotError
from covonaut_es.migrations._upcasting import VERSION_KEY, Schema, Upcaster

# Version 2: per-message usage. An assistant message carries the usage the provider
# reported for it (Message.usage), so that what each answer cost is in the state.


def message_appended_v1_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """MessageAppended v2 keeps the usage inside its message instead of beside it."""
    usage = payload.pop("usage", None)
    if usage is not None:
        payload["message"] = {**payload["message"], "usage": usage}
    return {**payload, VERSION_KEY: 2}


def thread_snapshot_v1_v2(state: dict[str, Any]) -> dict[str, Any]:
    """A v1 snapshot's messages have no usage, and only the events know it: rebuild."""
    msg = (
        "ThreadSnapshot v1 predates per-message usage, which only the thread's events "
        "hold, so it cannot be upgraded to v2"
    )
    raise StaleSnapshotError(msg)


def state_document_v1_v2(document: dict[str, Any]) -> dict[str, Any]:
    """A v1 document predates per-message usage: its messages keep none (its total
    usage is whole), and its version tells a reader that absence means unrecorded."""
    return {**document, VERSION_KEY: 2}


# ToolCalled version 2 names its call by id: the assistant message before it holds the
# call, and the idempotency key is derived (ADR 0023).


def tool_called_v1_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """ToolCalled v2 keeps the call's id only: the assistant message that asked for it
    holds the call, and its idempotency key is derived as every stored v1 key was
    (``covonaut_es.domain._calls.event_key``, unchanged since keys were first stored)."""
    call = payload.pop("call", None)
    if not isinstance(call, dict) or not isinstance(call.get("id"), str):
        found = "an object without one" if isinstance(call, dict) else type(call).__name__
        msg = (
            "a v1 ToolCalled keeps its call under 'call', an object with a string 'id'; "
            f"found {found}"
        )
        raise ValueError(msg)
    payload.pop("idempotency_key", None)
    return {**payload, "tool_call_id": call["id"], VERSION_KEY: 2}


# Pauses have a kind (version 2 of Interrupted and Forked, 3 of the snapshot). Code before
# told them apart by the keys of their data, which is the tool's; the kind is guessed from
# those keys here only, and the thread checks the guess when it applies the interrupt.


def legacy_pause_kind(interrupt: Any) -> str:
    """The kind a version-1 interrupt was read as: a review when its data has the form
    of the review request the old code wrote for that call, in doubt when it has the
    form of the old code's in-doubt pause of that call, else a tool's pause.

    The whole form is asked for, not one key: the data is a tool's, often the model's
    arguments, and the reviewer queue lists a pause under this guess (the thread checks
    it again, see ``checked_kind``)."""
    if not isinstance(interrupt, dict):
        return PauseKind.INTERRUPT.value
    data = interrupt.get("data")
    if not isinstance(data, dict) or data.get("tool_call_id") != interrupt.get("tool_call_id"):
        return PauseKind.INTERRUPT.value
    if isinstance(data.get("review_id"), str) and isinstance(data.get("digest"), str):
        return PauseKind.REVIEW.value
    if (
        data.get("in_doubt") is True
        and isinstance(data.get("idempotency_key"), str)
        and isinstance(data.get("arguments"), str)
    ):
        return PauseKind.IN_DOUBT.value
    return PauseKind.INTERRUPT.value


def _with_kind(interrupt: Any) -> Any:
    if not isinstance(interrupt, dict):
        return interrupt  # the typed decode names what is wrong with it
    return {**interrupt, "kind": legacy_pause_kind(interrupt)}


def interrupted_v1_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Interrupted v2 records its interrupt's kind; a v1 record's is guessed from its data
    (the thread rejects a guess it does not bear out, see ``checked_kind``)."""
    return {**payload, "interrupt": _with_kind(payload.get("interrupt")), VERSION_KEY: 2}


def forked_v1_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Forked v2 records the kinds of the interrupts it inherits, as the reviewer queue
    lists them; a v1 record's are guessed from their data."""
    interrupts = payload.get("interrupts")
    if isinstance(interrupts, list):
        payload = {**payload, "interrupts": [_with_kind(i) for i in interrupts]}
    return {**payload, VERSION_KEY: 2}


def thread_snapshot_v2_v3(state: dict[str, Any]) -> dict[str, Any]:
    """A v3 snapshot holds the kinds of its pauses and the people's answers and retry
    requests (none before v3). A v2 snapshot whose interrupts all read as tools' pauses
    upgrades as it is; one that may hold a review or a call in doubt is rebuilt from the
    events, which alone establish those kinds."""
    interrupts = state.get("interrupts")
    if not isinstance(interrupts, list) or any(
        legacy_pause_kind(i) != PauseKind.INTERRUPT for i in interrupts
    ):
        msg = (
            "ThreadSnapshot v2 predates typed pauses and holds interrupts whose kinds only "
            "the thread's events establish, so it cannot be upgraded to v3"
        )
        raise StaleSnapshotError(msg)
    return {
        **state,
        "answers": {},
        "retries_requested": [],
        "retry_requested": False,
        VERSION_KEY: 3,
    }


# ToolCallRetried version 2: a retry begun deals with its call's pause in doubt, and a
# call left in doubt again is paused anew (ADR 0066). A record of version 1 revived the
# old pause, and reads so.


def tool_call_retried_v1_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """ToolCallRetried v2 says whether its retry revived the call's pause: a v1 record's
    did (the thread then waited on that pause again)."""
    return {**payload, "revives_pause": True, VERSION_KEY: 2}


def thread_snapshot_v3_v4(state: dict[str, Any]) -> dict[str, Any]:
    """A v4 snapshot's open calls keep the tool a server listed when each was made (its
    ``ToolPinned``). A v3 snapshot without open calls upgrades as it is; one with open
    calls is rebuilt from the events, which alone hold their pins."""
    if state.get("open_calls"):
        msg = (
            "ThreadSnapshot v3 predates the pins of open calls, which only the thread's "
            "events hold, so one with open calls cannot be upgraded to v4"
        )
        raise StaleSnapshotError(msg)
    return {**state, VERSION_KEY: 4}


EVENT_UPCASTERS: dict[type, Mapping[int, Upcaster]] = {
    AgentThread.MessageAppended: {1: message_appended_v1_v2},
    AgentThread.ToolCalled: {1: tool_called_v1_v2},
    AgentThread.Interrupted: {1: interrupted_v1_v2},
    AgentThread.Forked: {1: forked_v1_v2},
    AgentThread.ToolCallRetried: {1: tool_call_retried_v1_v2},
}
"""Upcasters of the stored event types, by event class."""

SNAPSHOT_UPCASTERS: Mapping[int, Upcaster] = {
    1: thread_snapshot_v1_v2,
    2: thread_snapshot_v2_v3,
    3: thread_snapshot_v3_v4,
}
"""Upcasters of the thread's snapshot state (``AgentThread.class_version``)."""

STATE_DOCUMENT_UPCASTERS: Mapping[int, Upcaster] = {1: state_document_v1_v2}
"""Upcasters of named state documents (``StateDocument.class_version``)."""


def class_version(cls: type) -> int:
    """The schema version the running code writes for a stored class."""
    return int(getattr(cls, "class_version", 1))


def event_classes() -> Iterator[type[AgentThread.Event]]:
    """Every event type of the thread, in declaration order."""
    for value in vars(AgentThread).values():
        is_event = isinstance(value, type) and issubclass(value, AgentThread.Event)
        if is_event and value is not AgentThread.Event:
            yield value


def schema_for(cls: type) -> Schema:
    """The schema of a stored class: a thread event, the thread's snapshot, a snapshot
    class an aggregate declares (versioned as that aggregate), or another class, whose
    upcasters are its ``upcast_vN_vN+1`` methods (eventsourcing's convention).

    Raises:
        ConfigurationError: A class defines an ``upcast_vN_vN+1`` method for a step at
            or beyond its ``class_version``, or one that is not callable.
    """
    if issubclass(cls, ThreadSnapshot):
        return thread_snapshot_schema()
    aggregate = getattr(cls, "aggregate_class", None)
    if isinstance(aggregate, type):
        # A declared snapshot holds its aggregate's state, at the aggregate's version.
        return attrs.evolve(aggregate_schema(aggregate), name=cls.__qualname__)
    upcasters = EVENT_UPCASTERS.get(cls)
    if upcasters is not None or cls in _LIBRARY_CLASSES:
        return Schema(cls.__qualname__, class_version(cls), upcasters or {})
    return Schema(
        cls.__qualname__,
        class_version(cls),
        convention_upcasters(cls),
        own=True,
        snapshot=issubclass(cls, CanSnapshotAggregate),
    )


def aggregate_schema(cls: type) -> Schema:
    """The schema of an application's aggregate class, which its snapshots' state is
    written at: its ``class_version`` and its ``upcast_vN_vN+1`` methods.

    Raises:
        ConfigurationError: It has an ``upcast_vN_vN+1`` method for a step at or beyond
            its ``class_version``, or one that is not callable.
    """
    return Schema(
        cls.__qualname__, class_version(cls), convention_upcasters(cls), own=True, snapshot=True
    )


def convention_upcasters(cls: type) -> dict[int, Upcaster]:
    """The upcasters a class declares the eventsourcing way: for each step ``N`` below
    its ``class_version``, a static method ``upcast_vN_vN+1(state)`` that changes the
    state it is given to the next version. Each becomes an upcaster of our rules (one
    step, checked): it sees the stored fields without ``"_v"``. One for a later step is
    taken too, for its :class:`Schema` to refuse (its ``class_version`` was not raised
    with it), unless it is inherited from a class of another version.

    Raises:
        ConfigurationError: An ``upcast_vN_vN+1`` attribute is not callable (a number,
            say): wrapped, it would fail only when old data is first read.
    """
    steps: dict[int, Upcaster] = {}
    for step in sorted({*range(1, class_version(cls)), *_later_steps(cls)}):
        name = convention_name(step)
        method = getattr(cls, name, None)
        if method is None:
            continue
        if not callable(method):
            msg = (
                f"{cls.__qualname__}.{name} is not callable (it is of type "
                f"{type(method).__name__}); define it as a static method {name}(state) "
                "that changes the state it is given in place"
            )
            raise ConfigurationError(msg)
        steps[step] = _from_convention(method, step, f"{cls.__qualname__}.{name}")
    return steps


_CONVENTION_NAME = re.compile(r"upcast_v(\d+)_v(\d+)")


def _later_steps(cls: type) -> set[int]:
    """The steps at or beyond ``cls``'s version that it has ``upcast_vN_vN+1`` methods
    for, defined at its version (eventsourcing redefines an aggregate's nested event
    classes as subclasses, which inherit them)."""
    version, later = class_version(cls), set()
    for owner in cls.__mro__:
        if class_version(owner) != version:
            continue  # its methods step another class's versions
        for name in vars(owner):
            found = name.startswith("upcast_v") and _CONVENTION_NAME.fullmatch(name)
            if found and int(found[2]) == int(found[1]) + 1 and int(found[1]) >= version:
                later.add(int(found[1]))
    return later


def convention_name(step: int) -> str:
    """The name eventsourcing gives the upcaster of ``step`` -> ``step + 1``."""
    return f"upcast_v{step}_v{step + 1}"


def _from_convention(method: Callable[[dict[str, Any]], object], step: int, name: str) -> Upcaster:
    def upcast(document: dict[str, Any]) -> dict[str, Any]:
        state = {key: value for key, value in document.items() if key != VERSION_KEY}
        returned = method(state)
        if returned is not None:
            # eventsourcing ignores it too: a method written to return the new state
            # would otherwise leave the old one in place, unchanged and unnoticed.
            msg = (
                f"{name} returned a {type(returned).__name__}; it must change the state "
                "it is given in place and return None"
            )
            raise TypeError(msg)
        return {**state, VERSION_KEY: step + 1}

    return upcast


def _to_convention(upcaster: Upcaster, step: int) -> Callable[[dict[str, Any]], None]:
    """``upcaster`` as eventsourcing's stock mapper calls an ``upcast_vN_vN+1`` method:
    on state it changes in place, for every step up to the class's version, since our
    payloads carry their version under ``"_v"``, which the stock mapper does not read."""

    def upcast(state: dict[str, Any]) -> None:
        version = state.get(VERSION_KEY, 0)
        if not isinstance(version, int) or version > step:
            return  # written at a later version (or not ours to judge: the mapper does)
        upgraded = upcaster({**state, VERSION_KEY: step})
        state.clear()
        state.update(upgraded)

    return upcast


# eventsourcing's stock Mapper (a stock application reading a thread, a follower without
# our mapper) upcasts by calling these methods on the event class; they run our steps.
for _cls, _steps in EVENT_UPCASTERS.items():
    for _step, _upcaster in _steps.items():
        setattr(_cls, convention_name(_step), staticmethod(_to_convention(_upcaster, _step)))


def thread_snapshot_schema() -> Schema:
    """The schema of the thread's snapshots: the aggregate's state."""
    return Schema(
        ThreadSnapshot.__qualname__,
        class_version(AgentThread),
        SNAPSHOT_UPCASTERS,
        snapshot=True,
    )


def state_document_schema() -> Schema:
    """The schema of named state documents."""
    return Schema(
        StateDocument.__qualname__, class_version(StateDocument), STATE_DOCUMENT_UPCASTERS
    )


_LIBRARY_CLASSES = frozenset({*event_classes(), StateSaved, InputSubmitted, InputTaken})
"""The library's stored classes that are versioned by ``class_version``."""


def registry() -> tuple[Schema, ...]:
    """The schema of every type the library stores."""
    return (
        *(schema_for(cls) for cls in event_classes()),
        schema_for(StateSaved),
        schema_for(InputSubmitted),
        schema_for(InputTaken),
        thread_snapshot_schema(),
        state_document_schema(),
    )


def check_upcasters(schemas: Iterable[Schema] | None = None) -> None:
    """Check that every stored type has an upcaster for each step up to its version.

    Stores run this when they open, before any data is read, so a version bumped
    without its upcaster fails at once rather than when old data turns up.

    Args:
        schemas: The schemas to check; by default the library's whole registry.

    Raises:
        MissingUpcasterError: Naming every type and step without an upcaster.
    """
    gapped = [
        (schema, step)
        for schema in (registry() if schemas is None else schemas)
        for step in schema.missing_steps()
    ]
    if gapped:
        gaps = ", ".join(f"{schema.name} {step} -> {step + 1}" for schema, step in gapped)
        where = (
            "define a static method upcast_vN_vN+1(state) per step on each class, as "
            "eventsourcing does (see docs/embedding.md)"
            if all(schema.own for schema, _ in gapped)
            else "add one function per step to covonaut_es.migrations (see ADR 0007)"
        )
        msg = f"these schema steps have no upcaster: {gaps}; {where}"
        raise MissingUpcasterError(msg)
