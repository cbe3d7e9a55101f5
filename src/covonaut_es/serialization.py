"""msgspec encoding behind eventsourcing's ``Mapper``.

The stock mapper hands an event's ``__dict__`` to a transcoder and gets plain dicts and
strings back for nested values. This mapper keeps eventsourcing's pipeline (topic,
compression, encryption, upcasting on read) but encodes with msgspec and decodes each
stored payload into a msgspec Struct generated from the event class's own annotations,
so nested Structs, enums and datetimes come back as the types they were.

Every payload carries its schema version under ``"_v"``: the ``class_version`` of the
event class, or for snapshots of the aggregate class. Data without one is
version 0, and 0 -> 1 is the identity (B24). Data newer than the code is refused (B23);
older data is upgraded one step at a time by ``upcast_vN_vN+1`` static methods (B22).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.domain import CanSnapshotAggregate, DomainEventProtocol
from eventsourcing.persistence import Cipher, Compressor, Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, resolve_topic

from covonaut_es.errors import MissingUpcasterError, SchemaVersionError, SerializationError
from covonaut_es.integrity import CHAIN_KEY, UNCHAINED

VERSION_KEY = "_v"
_IDENTITY_FIELDS = frozenset({"originator_id", "originator_version"})


class JsonTranscoder(Transcoder):
    """Untyped msgspec JSON, used where a payload must be read before its type is known."""

    def encode(self, obj: Any) -> bytes:
        return msgspec.json.encode(obj)

    def decode(self, data: bytes) -> Any:
        return msgspec.json.decode(data)


def schema_version(cls: type) -> int:
    """The schema version the running code writes for an event or aggregate class."""
    return int(getattr(cls, "class_version", 1))


class _Codec:
    """Encodes and decodes the payload of one stored class."""

    def __init__(self, owner: type, payload_type: type[msgspec.Struct]) -> None:
        self.owner = owner  # the class whose class_version and upcasters apply
        self.version = schema_version(owner)
        self.decoder = msgspec.json.Decoder(payload_type)
        self.payload_type = payload_type
        self.field_names = tuple(n for n in payload_type.__struct_fields__ if n != VERSION_KEY)

    def encode(self, obj: object) -> bytes:
        state = {k: v for k, v in vars(obj).items() if k not in _IDENTITY_FIELDS}
        state[VERSION_KEY] = self.version
        return msgspec.json.encode(state)

    def decode(self, data: bytes, *, where: str) -> dict[str, Any]:
        try:
            payload = self.decoder.decode(data)
        except msgspec.DecodeError:  # includes ValidationError
            # Not in today's shape: an older version to upcast, or bad data.
            return self._decode_older(data, where=where)
        if getattr(payload, VERSION_KEY) != self.version:
            return self._decode_older(data, where=where)
        return self._fields(payload)

    def _fields(self, payload: msgspec.Struct) -> dict[str, Any]:
        return {name: getattr(payload, name) for name in self.field_names}

    def _upcast(self, payload: dict[str, Any], stored: int) -> dict[str, Any]:
        return upcast(self.owner, payload, stored, self.version)

    def _decode_older(self, data: bytes, *, where: str) -> dict[str, Any]:
        try:
            state = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            msg = f"{where}: stored payload is not valid JSON: {exc}"
            raise SerializationError(msg) from exc
        if not isinstance(state, dict):
            msg = f"{where}: stored payload is a {type(state).__name__}, expected an object"
            raise SerializationError(msg)
        stored = state.pop(VERSION_KEY, 0)
        name = self.owner.__qualname__
        if not isinstance(stored, int) or stored > self.version:
            msg = (
                f"{where}: {name} data has schema version {stored!r}, but this code "
                f"supports up to version {self.version}; upgrade covonaut-es to read it"
            )
            raise SchemaVersionError(msg)
        state = self._upcast(state, stored)
        state[VERSION_KEY] = self.version
        try:
            payload = msgspec.convert(state, self.payload_type)
        except msgspec.ValidationError as exc:
            msg = f"{where}: {name} data (schema version {stored}) does not decode: {exc}"
            raise SerializationError(msg) from exc
        return self._fields(payload)


class _SnapshotCodec(_Codec):
    """A snapshot's ``state`` is decoded typed, then handed on as the dict that
    eventsourcing's snapshot protocol expects."""

    def _fields(self, payload: msgspec.Struct) -> dict[str, Any]:
        fields = super()._fields(payload)
        fields["state"] = msgspec.structs.asdict(fields["state"])
        return fields

    def _upcast(self, payload: dict[str, Any], stored: int) -> dict[str, Any]:
        # Aggregate upcasters see the aggregate's state, not the snapshot envelope.
        payload["state"] = upcast(self.owner, payload.get("state", {}), stored, self.version)
        return payload


def upcast(cls: type, state: dict[str, Any], stored: int, current: int) -> dict[str, Any]:
    """Upgrade ``state`` from version ``stored`` to ``current``, one step at a time."""
    for step in range(stored, current):
        if step == 0:
            continue  # data written without a version is version 0 (B24)
        upcaster: Callable[[dict[str, Any]], None] | None = getattr(
            cls, f"upcast_v{step}_v{step + 1}", None
        )
        if upcaster is None:
            msg = (
                f"{cls.__qualname__} has no upcaster for schema version {step} -> {step + 1}; "
                f"add a static method upcast_v{step}_v{step + 1}(state)"
            )
            raise MissingUpcasterError(msg)
        upcaster(state)
    return state


def _field_types(cls: type) -> list[tuple[str, Any]]:
    hints = typing.get_type_hints(cls)
    fields = [
        (f.name, hints.get(f.name, inspect.Parameter.empty))
        for f in dataclasses.fields(cls)
        if f.name not in _IDENTITY_FIELDS
    ]
    untyped = [name for name, hint in fields if hint is inspect.Parameter.empty]
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
        return _SnapshotCodec(
            aggregate_cls, msgspec.defstruct(f"{cls.__qualname__}Payload", fields)
        )
    # The chain hash travels with every event's payload, outside its dataclass fields.
    chain_field = (CHAIN_KEY, str, UNCHAINED)
    payload_type = msgspec.defstruct(
        f"{cls.__qualname__}Payload", [*_field_types(cls), chain_field, version_field]
    )
    return _Codec(cls, payload_type)


class MsgspecMapper(Mapper[UUID]):
    """A ``Mapper`` that encodes with msgspec and decodes into the declared types.

    Compression and encryption run as in eventsourcing's own mapper, after encoding and
    before decoding.
    """

    def __init__(self, compressor: Compressor | None = None, cipher: Cipher | None = None):
        super().__init__(JsonTranscoder(), compressor=compressor, cipher=cipher)

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        cls = type(domain_event)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=get_topic(cls),
            state=self.stored_payload(codec_for(cls).encode(domain_event)),
        )

    def stored_payload(self, plain: bytes) -> bytes:
        """The bytes to store for an encoded payload: compressed, then encrypted, as
        configured. The inverse of :meth:`plain_payload`."""
        if self.compressor:
            plain = self.compressor.compress(plain)
        if self.cipher:
            plain = self.cipher.encrypt(plain)
        return plain

    def plain_payload(self, stored_event: StoredEvent) -> bytes:
        """The stored payload decrypted and decompressed: the JSON the codec wrote.

        Raises:
            SerializationError: The key is wrong or the bytes are corrupt.
        """
        data = stored_event.state
        try:
            if self.cipher:
                data = self.cipher.decrypt(data)
            if self.compressor:
                data = self.compressor.decompress(data)
        except Exception as exc:
            msg = (
                f"{_where(stored_event)}: cannot decrypt or decompress it "
                f"(wrong key or corrupt data): {exc}"
            )
            raise SerializationError(msg) from exc
        return data

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        where = _where(stored_event)
        try:
            cls = resolve_topic(stored_event.topic)
        except Exception as exc:
            msg = f"{where}: its type is unknown to this code: {exc}"
            raise SerializationError(msg) from exc
        state = codec_for(cls).decode(self.plain_payload(stored_event), where=where)
        originator_id = stored_event.originator_id
        state["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
        )
        state["originator_version"] = stored_event.originator_version
        event = object.__new__(cls)
        object.__setattr__(event, "__dict__", state)
        return typing.cast(DomainEventProtocol[UUID], event)


def _where(stored_event: StoredEvent) -> str:
    return (
        f"stored event {stored_event.topic!r} of {stored_event.originator_id} "
        f"at version {stored_event.originator_version}"
    )
