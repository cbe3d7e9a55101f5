"""An application's own events, with field values of many types, matching their
annotations or not: every save either stores what reads back equal, or is refused,
typed, with nothing stored."""

from __future__ import annotations

import enum
import typing
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import msgspec
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import JSONTranscoder, StoredEvent, Transcoding
from eventsourcing.tests.domain import EmailAddress
from eventsourcing.utils import get_topic
from hypothesis import event, given, settings
from hypothesis import strategies as st

from covonaut_es import AgentApplication, SerializationError, UnreadableEventError


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Point:
    """A value type of the application's own, which msgspec does not encode."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return type(other) is Point and other.x == self.x

    def __hash__(self) -> int:
        return hash(self.x)

    def __repr__(self) -> str:
        return f"Point({self.x})"


class PointAsInt(Transcoding):
    type = Point
    name = "point"

    def encode(self, obj: Point) -> int:
        return obj.x

    def decode(self, data: int) -> Point:
        return Point(data)


class EmailAsText(Transcoding):
    type = EmailAddress
    name = "email"

    def encode(self, obj: EmailAddress) -> str:
        return obj.address

    def decode(self, data: str) -> EmailAddress:
        return EmailAddress(data)


class Ledger(Aggregate):
    """An aggregate whose one event declares a field of each kind of type."""

    class Entered(Aggregate.Event):
        text: str
        count: int
        ratio: float
        flag: bool
        amount: Decimal
        at: datetime
        ref: UUID
        tags: tuple[str, ...]
        items: list[int]
        scores: dict[str, int]
        kinds: frozenset[str]
        maybe: int | None
        colour: Colour
        email: EmailAddress
        point: Point | None
        anything: Any


FIELDS = sorted(
    set(typing.get_type_hints(Ledger.Entered)) - set(typing.get_type_hints(Aggregate.Event))
)


class Ledgers(AgentApplication):
    aggregate_classes = (Ledger,)


class TranscodedLedgers(Ledgers):
    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        transcoder.register(PointAsInt())
        transcoder.register(EmailAsText())


SCALARS = (
    st.text(max_size=4)
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.booleans()
    | st.none()
    | st.decimals(allow_nan=False, places=2, max_value=10**6, min_value=-(10**6))
    | st.datetimes(timezones=st.none() | st.just(UTC))
    | st.uuids()
    | st.binary(max_size=3)
    | st.sampled_from(Colour)
    | st.builds(EmailAddress, st.text(max_size=4))
    | st.builds(Point, st.integers(-5, 5))
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.lists(inner, max_size=2).map(tuple)
        | st.dictionaries(st.text(max_size=2) | st.integers(0, 3), inner, max_size=2)
        | st.frozensets(st.text(max_size=2) | st.integers(0, 3), max_size=2)
    ),
    max_leaves=4,
)
FITTING = {
    "text": st.text(max_size=4),
    "count": st.integers(-(2**63), 2**63 - 1),
    "ratio": st.floats(allow_nan=False, allow_infinity=False),
    "flag": st.booleans(),
    "amount": st.decimals(allow_nan=False, allow_infinity=False, places=3),
    "at": st.datetimes(timezones=st.just(UTC)),
    "ref": st.uuids(),
    "tags": st.lists(st.text(max_size=2), max_size=2).map(tuple),
    "items": st.lists(st.integers(0, 9), max_size=2),
    "scores": st.dictionaries(st.text(max_size=2), st.integers(0, 9), max_size=2),
    "kinds": st.frozensets(st.text(max_size=2), max_size=2),
    "maybe": st.none() | st.integers(0, 9),
    "colour": st.sampled_from(Colour),
    "email": st.builds(EmailAddress, st.text(max_size=4)),
    "point": st.none() | st.builds(Point, st.integers(-5, 5)),
    "anything": st.none() | st.text(max_size=3) | st.lists(st.integers(0, 3), max_size=2),
}


@st.composite
def entries(draw: st.DrawFn) -> dict[str, Any]:
    """The fields of an entry: each a value of its declared type but for up to three,
    which take values of any type."""
    misfits = draw(st.sets(st.sampled_from(FIELDS), max_size=3))
    return {name: draw(VALUES if name in misfits else FITTING[name]) for name in FIELDS}


@settings(max_examples=150, deadline=None)
@given(fields=entries(), transcoded=st.booleans())
def test_an_entry_is_stored_to_read_back_equal_or_refused_with_nothing_stored(
    fields: dict[str, Any], transcoded: bool
) -> None:
    """Saved, the entry reads back equal from the store (on SQLite); refused, it is an
    ``UnreadableEventError`` naming one of its fields, and the store holds nothing new."""
    application = TranscodedLedgers if transcoded else Ledgers
    error = saved_or_refused(application, fields)
    if error is None:
        event("saved")
        return
    assert error.event == "Ledger.Entered"
    assert error.field.split(".")[0].split("[")[0] in FIELDS
    event("refused")


def saved_or_refused(
    application: type[AgentApplication], fields: dict[str, Any]
) -> UnreadableEventError | None:
    """Save an entry of ``fields`` in a new ``application`` on SQLite: None once it reads
    back equal, else the ``UnreadableEventError`` that refused it, the store holding
    nothing new."""
    app = application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": ":memory:"}
    )
    try:
        ledger = Ledger()
        app.save(ledger)
        ledger.trigger_event(Ledger.Entered, **fields)
        try:
            app.save(ledger)
        except UnreadableEventError as error:
            assert app.recorder.max_notification_id() == 1
            assert app.repository.get(ledger.id).version == 1
            return error
        (read,) = app.events.get(ledger.id, gt=1)
        for name, value in fields.items():
            assert getattr(read, name) == value, name
        return None
    finally:
        app.close()


def test_a_tuple_where_a_list_is_declared_is_refused_naming_it() -> None:
    """A value msgspec would read back as something else (a tuple as a list) is refused,
    naming the field and both types."""
    app = Ledgers(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": ":memory:"})
    try:
        ledger = Ledger()
        fields = {name: None for name in FIELDS}
        ledger.trigger_event(Ledger.Entered, **{**fields, "items": (1, 2)})
        try:
            app.save(ledger)
        except UnreadableEventError as error:
            assert error.field != "items" or (error.found, error.expected[:4]) == ("tuple", "list")
        else:
            raise AssertionError("saved")
    finally:
        app.close()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
TAGS = st.builds(
    lambda name, data: {"_type_": name, "_data_": data},
    st.sampled_from(["point", "email", "other"]),
    JSON,
)


@settings(max_examples=150, deadline=None)
@given(
    payload=st.dictionaries(
        st.sampled_from([*FIELDS, "_v", "timestamp", "extra"]), JSON | TAGS, max_size=20
    ),
    snapshot=st.booleans(),
)
def test_a_hostile_stored_entry_or_snapshot_is_read_or_refused_typed(
    payload: dict[str, Any], snapshot: bool
) -> None:
    """A stored entry or snapshot of the application's own, of any JSON (tags of its
    transcodings included, with data they do not expect), decodes or is a
    ``SerializationError``; nothing else escapes, and a snapshot names no aggregate
    outside the allowlist."""
    app = TranscodedLedgers(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    app.close()
    mapper = app.mapper
    topic = get_topic(Ledger.Snapshot if snapshot else Ledger.Entered)
    if snapshot:
        payload = {"timestamp": "2026-01-01T00:00:00Z", "topic": "os:system", "state": payload}
    record = StoredEvent(uuid4(), 2, topic, msgspec.json.encode(payload))
    try:
        read = mapper.to_domain_event(record)
    except SerializationError:
        return
    assert not snapshot, "a snapshot naming an aggregate outside the allowlist was read"
    assert isinstance(read, Ledger.Entered)
