"""msgspec encoding behind eventsourcing's ``Mapper``.

The stock mapper hands an event's ``__dict__`` to a transcoder and gets plain dicts and
strings back for nested values. This mapper keeps eventsourcing's pipeline (topic,
compression, encryption, upcasting on read) but encodes with msgspec and decodes each
stored payload into a msgspec Struct generated from the event class's own annotations,
so nested Structs, enums and datetimes come back as the types they were.

Every payload carries its schema version under ``"_v"``: the ``class_version`` of the
event class, or for snapshots of the aggregate class. Older data is upgraded in memory
by the upcasters of :mod:`covonaut_es.migrations` under the rules of
:mod:`covonaut_es.migrations._upcasting`; data newer than the code is refused.

Events are JSON. A snapshot is msgpack in one zstd frame (ADR 0022); snapshots written
before that are JSON and still read, told apart by the frame's magic bytes.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.domain import CanMutateAggregate, CanSnapshotAggregate, DomainEventProtocol
from eventsourcing.persistence import Cipher, Compressor, Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic

from covonaut_es.domain import AgentThread, ThreadSnapshot
from covonaut_es.domain._named_states import StateSaved
from covonaut_es.domain._submissions import InputSubmitted, InputTaken
from covonaut_es.errors import SerializationError, UnreadableEventError
from covonaut_es.migrations import (
    VERSION_KEY,
    Schema,
    Upcaster,
    check_upcasters,
    schema_for,
    stored_version,
)
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store import _zstd
from covonaut_es.store._chain import CHAIN_FIELD, UNCHAINED, canonical_fields, link_hash
from covonaut_es.store._snapshot_seals import SEALED, unsealed

_IDENTITY_FIELDS = frozenset({"originator_id", "originator_version"})
_UNREADABLE_HINT = (
    "; it is damaged, or encrypted or compressed and read without the store's cipher key "
    "or compress option"
)


class JsonTranscoder(Transcoder):
    """Untyped msgspec JSON, used where a payload must be read before its type is known."""

    def encode(self, obj: Any) -> bytes:
        return msgspec.json.encode(obj)

    def decode(self, data: bytes) -> Any:
        return msgspec.json.decode(data)


class _Codec:
    """Encodes and decodes the payload of one stored class."""

    def __init__(self, schema: Schema, payload_type: type[msgspec.Struct]) -> None:
        self.schema = schema
        self.decoder = msgspec.json.Decoder(payload_type)
        self.payload_type = payload_type
        self._chained = b'{"%s":%d,"%s":' % (
            VERSION_KEY.encode(),
            schema.version,
            CHAIN_FIELD.encode(),
        )

    def encode(self, obj: object) -> bytes:
        return self.readable(msgspec.json.encode(self._payload(obj)), obj)

    def readable(self, payload: bytes, obj: object) -> bytes:
        """``payload``, the encoding of event ``obj``, once the decoder its readers use
        has read it: a value msgspec encodes but its declared type refuses (``42``
        where a field is ``str``) would be stored and then fail every read.

        Raises:
            UnreadableEventError: Naming the event, the field, and both types.
        """
        try:
            self.decoder.decode(payload)
        except msgspec.ValidationError as exc:
            raise _unreadable(type(obj), vars(obj), str(exc)) from exc
        return payload

    def _payload(self, obj: object) -> dict[str, Any]:
        state = {k: v for k, v in vars(obj).items() if k not in _IDENTITY_FIELDS}
        state[VERSION_KEY] = self.schema.version
        return state

    def with_chain(self, event: object, fields: bytes, chain: str) -> bytes:
        """The payload to store for ``event`` from its :func:`canonical_fields` and its
        chain hash: the same bytes with the schema version and the hash put first, once
        :meth:`readable`."""
        rest = b"}" if fields == b"{}" else b"," + fields[1:]
        return self.readable(self._chained + msgspec.json.encode(chain) + rest, event)

    def decode(
        self, data: bytes, *, where: str, migrators: Mapping[int, Upcaster] = NO_MIGRATORS
    ) -> dict[str, Any]:
        fields = self.decode_current(data)
        if fields is None:
            return self.decode_older(data, where=where, migrators=migrators)
        return fields

    def decode_current(self, data: bytes | memoryview) -> dict[str, Any] | None:
        """The fields of a payload in today's shape; None for anything else (an older
        version to upcast, or bad data), which :meth:`decode_older` then reads and names."""
        try:
            payload = self.decoder.decode(data)
        except (msgspec.DecodeError, RecursionError):  # includes ValidationError
            return None
        return self._current_fields(payload)

    def _current_fields(self, payload: msgspec.Struct) -> dict[str, Any] | None:
        if getattr(payload, VERSION_KEY) != self.schema.version:
            return None
        return self._fields(payload)

    def _fields(self, payload: msgspec.Struct) -> dict[str, Any]:
        fields = msgspec.structs.asdict(payload)
        del fields[VERSION_KEY]
        return fields

    def _upgrade(
        self, payload: dict[str, Any], where: str, migrators: Mapping[int, Upcaster]
    ) -> dict[str, Any]:
        return self.schema.upgrade(payload, where=where, migrators=migrators)

    def decode_older(
        self, data: bytes, *, where: str, migrators: Mapping[int, Upcaster]
    ) -> dict[str, Any]:
        """The fields of a payload that :meth:`decode_current` did not read: upcast to
        today's shape, or a :class:`~covonaut_es.errors.SerializationError` naming
        ``where``."""
        return self.upgraded(
            self.decode_untyped(data, where=where), where=where, migrators=migrators
        )

    def upgraded(
        self, state: dict[str, Any], *, where: str, migrators: Mapping[int, Upcaster]
    ) -> dict[str, Any]:
        """The fields of a payload read by :meth:`decode_untyped` (which upcasters may
        change), upcast to today's shape and typed, or a
        :class:`~covonaut_es.errors.SerializationError` naming ``where``."""
        stored = stored_version(state)
        state = self._upgrade(state, where, migrators)
        try:
            payload = msgspec.convert(state, self.payload_type)
        except msgspec.ValidationError as exc:
            msg = (
                f"{where}: {self.schema.name} data (schema version {stored}) does not decode: {exc}"
            )
            raise SerializationError(msg) from exc
        return self._fields(payload)

    def decode_untyped(self, data: bytes | memoryview, *, where: str) -> dict[str, Any]:
        """The payload as plain JSON values, for upcasters and version checks.

        Raises:
            SerializationError: It is not an object of this codec's format.
        """
        return decode_object(data, where=where, hint=_UNREADABLE_HINT)


SNAPSHOT_SIZE_LIMIT = 256 * 1024 * 1024
"""The most bytes a compressed snapshot may hold once decompressed: a larger state is
stored as JSON, so that a damaged or hostile frame never makes a reader allocate more."""


class _SnapshotCodec(_Codec):
    """A snapshot's ``state`` is decoded typed, then handed on as the dict that
    eventsourcing's snapshot protocol expects.

    It is written as msgpack in a zstd frame: on the benchmark's thread a quarter of the
    JSON's bytes, and faster to decode (ADR 0022). A state msgpack cannot hold (an
    integer beyond 64 bits in a JSON value) or larger than :data:`SNAPSHOT_SIZE_LIMIT`
    is written as JSON, which every reader reads as well.
    """

    def __init__(self, schema: Schema, payload_type: type[msgspec.Struct]) -> None:
        super().__init__(schema, payload_type)
        self.packed_decoder = msgspec.msgpack.Decoder(payload_type)

    def encode(self, obj: object) -> bytes:
        payload = self._payload(obj)
        try:
            packed = msgspec.msgpack.encode(payload)
        except OverflowError:
            return msgspec.json.encode(payload)
        if len(packed) > SNAPSHOT_SIZE_LIMIT:
            return msgspec.json.encode(payload)
        return _zstd.compress(packed)

    def decode_current(self, data: bytes | memoryview) -> dict[str, Any] | None:
        try:
            body = unsealed(data)[1]  # the seal is checked where a snapshot is trusted
        except SerializationError:
            return None  # named by decode_older
        if body[:4] != _zstd.MAGIC:
            return super().decode_current(body)
        try:
            payload = self.packed_decoder.decode(_zstd.decompress(body, limit=SNAPSHOT_SIZE_LIMIT))
        except (ValueError, RecursionError):  # DecodeError among them; named by decode_older
            return None
        return self._current_fields(payload)

    def decode_untyped(self, data: bytes | memoryview, *, where: str) -> dict[str, Any]:
        try:
            body = unsealed(data)[1]
        except SerializationError as exc:
            msg = f"{where}: {exc}"
            raise SerializationError(msg) from exc
        if body[:4] != _zstd.MAGIC:
            return super().decode_untyped(body, where=where)
        try:
            decoded = msgspec.msgpack.decode(_zstd.decompress(body, limit=SNAPSHOT_SIZE_LIMIT))
            # Through JSON (datetimes become text), so that upcasters see a snapshot
            # alike whichever format it was written in; only older snapshots come here.
            as_json = msgspec.json.encode(decoded)
        # msgspec.DecodeError is a ValueError; RecursionError: nested beyond its depth
        except (ValueError, TypeError, RecursionError) as exc:
            msg = f"{where}: stored snapshot is not a readable compressed snapshot: {exc}"
            raise SerializationError(msg) from exc
        return decode_object(as_json, where=where)

    def _fields(self, payload: msgspec.Struct) -> dict[str, Any]:
        fields = super()._fields(payload)
        fields["state"] = msgspec.structs.asdict(fields["state"])
        return fields

    def _upgrade(
        self, payload: dict[str, Any], where: str, migrators: Mapping[int, Upcaster]
    ) -> dict[str, Any]:
        # Upcasters see the aggregate's state, versioned, not the snapshot's envelope.
        state = payload.get("state")
        if not isinstance(state, dict):
            msg = f"{where}: the snapshot's state is a {type(state).__name__}, expected an object"
            raise SerializationError(msg)
        state = {**state, VERSION_KEY: stored_version(payload)}
        state = self.schema.upgrade(state, where=where, migrators=migrators)
        payload[VERSION_KEY] = state.pop(VERSION_KEY)
        payload["state"] = state
        return payload


_EXPECTED_GOT = re.compile(r"Expected `(?P<expected>.+?)`, got `(?P<found>.+?)`")
_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")


def _unreadable(cls: type, state: Mapping[str, Any], error: str) -> UnreadableEventError:
    """The error for an event of class ``cls`` and fields ``state`` that its typed
    decoder refused with msgspec's ``error`` (``Expected `str`, got `int` - at
    `$.message.content```)."""
    at = _AT.search(error)
    path = at["path"] if at else ""
    types = _EXPECTED_GOT.search(error)
    if types:
        return UnreadableEventError(cls.__qualname__, path, types["expected"], types["found"])
    # Another refusal (a value its enum does not have, say): what msgspec said, and the
    # type of the value at that path.
    value: Any = state
    for step in re.findall(r"[^.\[\]]+", path):
        value = value[int(step)] if isinstance(value, (list, tuple)) else _member(value, step)
    detail = error[: at.start()] if at else error
    return UnreadableEventError(
        cls.__qualname__, path, f"its type ({detail})", type(value).__name__
    )


def _member(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)


def decode_object(data: bytes | memoryview, *, where: str, hint: str = "") -> dict[str, Any]:
    """Decode stored JSON that must be an object; ``hint`` follows a JSON error.

    Raises:
        SerializationError: The bytes are not JSON, or not a JSON object.
    """
    try:
        decoded = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:  # nested beyond msgspec's depth
        msg = f"{where}: stored payload is not valid JSON ({exc}){hint}"
        raise SerializationError(msg) from exc
    if not isinstance(decoded, dict):
        msg = f"{where}: stored payload is a {type(decoded).__name__}, expected an object"
        raise SerializationError(msg)
    return decoded


def _field_types(cls: type) -> list[tuple[str, Any] | tuple[str, Any, Any]]:
    """Each field of an event class with its type, and its default when it has one: a
    field added with a default (the schema evolution that needs no version) reads as
    that default from records written before it."""
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        (f.name, hints.get(f.name, inspect.Parameter.empty))
        if f.default is dataclasses.MISSING
        else (f.name, hints.get(f.name, inspect.Parameter.empty), f.default)
        for f in dataclasses.fields(cls)
        if f.name not in _IDENTITY_FIELDS
    ]
    untyped = [field[0] for field in fields if field[1] is inspect.Parameter.empty]
    if untyped:
        # Refused before anything is stored: an untyped field would be written fine and
        # then come back as whatever JSON makes of it, or not decode at all.
        msg = (
            f"event {cls.__qualname__} has fields without a type annotation: {untyped}; "
            "the msgspec mapper decodes every field into its declared type, so annotate "
            "each one (for an @event method, annotate its parameters)"
        )
        raise SerializationError(msg)
    return fields


def _aggregate_state_fields(aggregate_cls: type) -> list[tuple[str, Any, Any]]:
    hints = typing.get_type_hints(aggregate_cls)
    own = [name for name in aggregate_cls.__annotations__ if not name.isupper()]
    fields: list[tuple[str, Any, Any]] = [
        ("_created_on", datetime, msgspec.NODEFAULT),
        ("_modified_on", datetime, msgspec.NODEFAULT),
    ]
    return fields + [(name, hints[name], _state_default(hints[name])) for name in own]


def _state_default(annotation: Any) -> Any:
    """Optional, collection and all-default Struct state fields default to empty, so
    that snapshots written before such a field was added still decode; any other new
    field needs a version."""
    origin = typing.get_origin(annotation) or annotation
    if origin in (list, dict) or _all_defaults(origin):
        return msgspec.field(default_factory=origin)
    if type(None) in typing.get_args(annotation):
        return None
    return msgspec.NODEFAULT


def _all_defaults(cls: Any) -> bool:
    return (
        isinstance(cls, type)
        and issubclass(cls, msgspec.Struct)
        and not any(f.required for f in msgspec.structs.fields(cls))
    )


@cache
def codec_for(cls: type) -> _Codec:
    """The codec of an event or snapshot class, built once from its annotations."""
    version_field = (VERSION_KEY, int, 0)
    schema = schema_for(cls)
    if issubclass(cls, CanSnapshotAggregate):
        aggregate_cls: type | None = getattr(cls, "aggregate_class", None)
        if aggregate_cls is None:
            msg = (
                f"snapshot class {cls.__qualname__} does not name the aggregate class whose "
                "state it holds (an aggregate_class attribute), so the msgspec mapper cannot "
                "decode that state into its types; take no snapshots of that aggregate "
                "(leave it out of snapshotting_intervals)"
            )
            raise SerializationError(msg)
        state_type = msgspec.defstruct(
            f"{aggregate_cls.__name__}State", _aggregate_state_fields(aggregate_cls), kw_only=True
        )
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
            ("timestamp", datetime),
            ("topic", str),
            ("state", state_type),
            version_field,
        ]
        return _SnapshotCodec(schema, msgspec.defstruct(f"{cls.__qualname__}Payload", fields))
    # The chain hash travels with every event's payload, outside its dataclass fields.
    chain_field = (CHAIN_FIELD, str, UNCHAINED)
    payload_type = msgspec.defstruct(
        f"{cls.__qualname__}Payload",
        [*_field_types(cls), chain_field, version_field],
        kw_only=True,  # fields with defaults may come before those without
    )
    return _Codec(schema, payload_type)


def aggregate_event_classes(aggregate_cls: type) -> Iterator[type]:
    """The event classes an aggregate class declares or inherits (its ``@event``
    methods' classes among them)."""
    for name in dir(aggregate_cls):
        value = getattr(aggregate_cls, name, None)
        if isinstance(value, type) and issubclass(value, CanMutateAggregate):
            yield value


def library_event_classes() -> Iterator[type]:
    """Every class the library itself stores: the thread's events and snapshot, named
    states, and inputs submitted to threads."""
    yield from aggregate_event_classes(AgentThread)
    yield ThreadSnapshot
    yield StateSaved
    yield InputSubmitted
    yield InputTaken


class MsgspecMapper(Mapper[UUID]):
    """A ``Mapper`` that encodes with msgspec and decodes into the declared types.

    Compression and encryption run as in eventsourcing's own mapper, after encoding and
    before decoding. Creating one checks the upcaster registry, so that a missing step
    fails before any data is read.

    A stored record's topic is looked up in an allowlist, never imported: the
    library's own classes plus ``event_classes`` and the events of
    ``aggregate_classes``. A record of any other topic is a
    :class:`~covonaut_es.errors.SerializationError`, and an event outside the list is
    refused before it is written, since it could not be read back. So is a created
    event naming an aggregate type other than a thread or one of ``aggregate_classes``:
    eventsourcing would import whatever module that name says.
    """

    def __init__(
        self,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
        *,
        event_classes: Iterable[type] = (),
        aggregate_classes: Iterable[type] = (),
    ):
        check_upcasters()
        super().__init__(JsonTranscoder(), compressor=compressor, cipher=cipher)
        aggregates = [AgentThread, *aggregate_classes]
        classes = [
            *library_event_classes(),
            *event_classes,
            *(event for cls in aggregates[1:] for event in aggregate_event_classes(cls)),
        ]
        self._classes: dict[str, type] = {get_topic(cls): cls for cls in classes}
        self._aggregate_topics = frozenset(get_topic(cls) for cls in aggregates)
        self._writable: dict[type, tuple[_Codec, str]] = {}  # what _listed found, by class

    def event_class(self, topic: str, *, where: str) -> type:
        """The class a stored topic names, from the allowlist; nothing is imported.

        Raises:
            SerializationError: The topic is not one this mapper reads.
        """
        cls = self._classes.get(topic)
        if cls is None:
            msg = (
                f"{where}: its type {topic!r} is unknown to this store (expected a "
                "covonaut topic or an event of an aggregate class the application lists "
                "in aggregate_classes); it was not imported. Add the aggregate class to "
                "your AgentApplication's aggregate_classes if the record is yours"
            )
            raise SerializationError(msg)
        return cls

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        codec, topic = self._listed(domain_event)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=self.stored_payload(codec.encode(domain_event)),
        )

    def to_sealed_event(
        self, domain_event: DomainEventProtocol[UUID], previous: str, key: bytes | None
    ) -> tuple[StoredEvent, str]:
        """The record of a thread's event sealed into its chain after ``previous`` (with
        ``key`` when given): its fields are encoded once, in canonical form, hashed,
        and stored as those very bytes with the hash. Returns the record and the hash."""
        codec, topic = self._listed(domain_event)
        fields = canonical_fields(vars(domain_event))
        version = domain_event.originator_version
        chain = link_hash(previous, topic, version, codec.schema.version, fields, key)
        record = StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=self.stored_payload(codec.with_chain(domain_event, fields, chain)),
        )
        return record, chain

    def _listed(self, domain_event: DomainEventProtocol[UUID]) -> tuple[_Codec, str]:
        """The codec and topic of an event this mapper may write.

        Raises:
            SerializationError: Its class is not in the allowlist, or its topic names
                another class there.
        """
        cls = type(domain_event)
        listed = self._writable.get(cls)
        if listed is not None:
            return listed
        codec = codec_for(cls)  # first: it names fields without a type
        topic = get_topic(cls)
        if self._classes.get(topic) is not cls:  # described only on the way to an error
            where = f"event {cls.__qualname__} of {domain_event.originator_id}"
            self.event_class(topic, where=where)  # raises if the topic is not listed
            msg = f"{where}: topic {topic!r} names another class in this store's allowlist"
            raise SerializationError(msg)
        self._writable[cls] = codec, topic
        return codec, topic

    def stored_payload(self, plain: bytes) -> bytes:
        """The bytes to store for an encoded payload: compressed, then encrypted, as
        configured. The inverse of :meth:`plain_payload`. A snapshot the codec has
        compressed already, or sealed (ADR 0030), is not compressed again."""
        if self.compressor and not plain.startswith((_zstd.MAGIC, SEALED)):
            plain = self.compressor.compress(plain)
        if self.cipher:
            plain = self.cipher.encrypt(plain)
        return plain

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        return self.decode(stored_event)

    def decode(
        self, stored_event: StoredEvent, *, migrators: Mapping[int, Upcaster] = NO_MIGRATORS
    ) -> DomainEventProtocol[UUID]:
        """Decode a stored record, upgrading it in memory to the current schema.

        Args:
            stored_event: The record as the recorder holds it.
            migrators: The application's upcasters for this record's type; each
                replaces the library's own for its step.

        Raises:
            SerializationError: The record cannot be read (a subclass says why:
                ``SchemaVersionError``, ``MissingUpcasterError``, ``UpcasterError``,
                ``StaleSnapshotError``).
        """
        return self.decode_plain(stored_event, self.plain_payload(stored_event), migrators)

    def decode_plain(
        self,
        stored_event: StoredEvent,
        payload: bytes,
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> DomainEventProtocol[UUID]:
        """As :meth:`decode`, from the record's :meth:`plain_payload` read already."""
        # The record's description is built only on the way to an error: it costs as
        # much as the decode itself.
        cls = self._classes.get(stored_event.topic) or self.event_class(
            stored_event.topic, where=_where(stored_event)
        )
        codec = codec_for(cls)
        state = codec.decode_current(payload)
        if state is None:
            state = codec.decode_older(payload, where=_where(stored_event), migrators=migrators)
        return self._event(cls, stored_event, state)

    def decode_fields(
        self,
        stored_event: StoredEvent,
        fields: dict[str, Any],
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> DomainEventProtocol[UUID]:
        """As :meth:`decode`, from the record's :meth:`payload_fields` read already, so
        that a reader of both (an audit) decrypts and decodes each record once.
        ``fields`` is the upcasters' to change.

        Raises:
            SerializationError: As :meth:`decode`.
        """
        cls = self._classes.get(stored_event.topic) or self.event_class(
            stored_event.topic, where=_where(stored_event)
        )
        where = _where(stored_event)
        state = codec_for(cls).upgraded(fields, where=where, migrators=migrators)
        return self._event(cls, stored_event, state)

    def _event(
        self, cls: type, stored_event: StoredEvent, state: dict[str, Any]
    ) -> DomainEventProtocol[UUID]:
        """The event of class ``cls`` that ``stored_event`` holds, from its decoded
        fields."""
        created = state.get("originator_topic")
        if created is not None and created not in self._aggregate_topics:
            msg = (
                f"{_where(stored_event)}: it creates an aggregate of type {created!r}, "
                "unknown to this store; it was not imported. Add the aggregate class to "
                "your AgentApplication's aggregate_classes if the record is yours"
            )
            raise SerializationError(msg)
        originator_id = stored_event.originator_id
        state["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
        )
        state["originator_version"] = stored_event.originator_version
        event: object = object.__new__(cls)
        object.__setattr__(event, "__dict__", state)
        return typing.cast("DomainEventProtocol[UUID]", event)

    def payload_fields(self, stored_event: StoredEvent) -> dict[str, Any]:
        """A stored record's payload as plain JSON values, before any upgrade (to read
        its schema version, say), whichever format its codec wrote.

        Raises:
            SerializationError: It cannot be decrypted, decompressed or decoded.
        """
        cls = self._classes.get(stored_event.topic)
        data, where = self.plain_payload(stored_event), _where(stored_event)
        if cls is None:
            return decode_object(data, where=where)
        return codec_for(cls).decode_untyped(data, where=where)

    def plain_payload(self, stored_event: StoredEvent) -> bytes:
        """The stored payload decrypted and decompressed: the bytes the codec wrote.

        Raises:
            SerializationError: The key is wrong or the bytes are corrupt.
        """
        data = stored_event.state
        try:
            if self.cipher:
                data = self.cipher.decrypt(data)
            if self.compressor and not _compressed_snapshot(stored_event.topic, data):
                data = self.compressor.decompress(data)
        except Exception as exc:
            msg = (
                f"{_where(stored_event)}: cannot decrypt or decompress it "
                f"(wrong key or corrupt data): {exc}"
            )
            raise SerializationError(msg) from exc
        return data


def _compressed_snapshot(topic: str, data: bytes) -> bool:
    """Whether decrypted stored bytes are a snapshot its codec compressed, or a sealed
    one, which the store's own compressor left alone. No zlib stream starts with the
    zstd magic or the seal's (their first two bytes fail zlib's header check), so a
    snapshot the store's compressor compressed before ADR 0022 is still told apart."""
    return topic == ThreadSnapshot.TOPIC and data.startswith((_zstd.MAGIC, SEALED))


def _where(stored_event: StoredEvent) -> str:
    return (
        f"stored event {stored_event.topic!r} of stream {stored_event.originator_id} "
        f"at version {stored_event.originator_version}"
    )
