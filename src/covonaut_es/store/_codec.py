"""The codec of each stored class: its payload encoded with msgspec and decoded into a
msgspec Struct generated from the class's own annotations, so that nested Structs, enums
and datetimes come back as the types they were.

Every payload carries its schema version under ``"_v"``: the ``class_version`` of the
event class, or for snapshots of the aggregate class. Older data is upgraded in memory
by the upcasters of :mod:`covonaut_es.migrations` under the rules of
:mod:`covonaut_es.migrations._upcasting`; data newer than the code is refused. What a
payload's reader would not read back as it was given is refused when it is encoded.

Events are JSON. A snapshot is msgpack in one zstd frame (ADR 0022); snapshots written
before that are JSON and still read, told apart by the frame's magic bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import decimal
import inspect
import re
import typing
from collections.abc import Iterator, Mapping
from datetime import datetime
from functools import cache
from typing import Any

import msgspec
from eventsourcing.domain import CanMutateAggregate, CanSnapshotAggregate

from covonaut_es.domain import AgentThread, ThreadSnapshot
from covonaut_es.domain._eventsourcing import TIMES
from covonaut_es.domain._named_states import StateSaved
from covonaut_es.domain._submissions import InputSubmitted, InputTaken
from covonaut_es.errors import SerializationError, StaleSnapshotError
from covonaut_es.migrations import VERSION_KEY, Schema, Upcaster, schema_for, stored_version
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store import _zstd
from covonaut_es.store._chain import CHAIN_FIELD, UNCHAINED
from covonaut_es.store._payload_types import check_decodable, holds_floats
from covonaut_es.store._read_back import ABSENT, difference, misread, unreadable, unsupported
from covonaut_es.store._snapshot_seals import unsealed

_IDENTITY_FIELDS = frozenset({"originator_id", "originator_version"})
_NOT_GIVEN = _IDENTITY_FIELDS | {CHAIN_FIELD}
_UNREADABLE_HINT = (
    "; it is damaged, or encrypted or compressed and read without the store's cipher key "
    "or compress option"
)


class Codec:
    """Encodes and decodes the payload of one stored class."""

    def __init__(
        self, schema: Schema, payload_type: type[msgspec.Struct], *, floats: bool = True
    ) -> None:
        self.schema = schema
        self.decoder = msgspec.json.Decoder(payload_type)
        self.payload_type = payload_type
        self.floats = floats
        """Whether a payload it reads back may hold a float (False only where its types
        hold none: see :func:`holds_floats`)."""
        self._chained = b'{"%s":%d,"%s":' % (
            VERSION_KEY.encode(),
            schema.version,
            CHAIN_FIELD.encode(),
        )

    def encode(self, obj: object) -> bytes:
        try:
            encoded = msgspec.json.encode(self._payload(obj))
        except (TypeError, UnicodeEncodeError, RecursionError) as exc:
            fields = {k: v for k, v in vars(obj).items() if k not in _IDENTITY_FIELDS}
            raise unsupported(type(obj), fields, self._field_encoding) from exc
        return self.readable(encoded, obj)

    def _field_encoding(self, value: Any) -> bytes:
        """One field's value encoded as :meth:`encode` encodes it in a payload."""
        return msgspec.json.encode(value)

    def readable(self, payload: bytes, obj: object) -> bytes:
        """``payload``, the encoding of event ``obj``, once the reader of its class has
        read it back equal to ``obj``'s fields: a value msgspec encodes
        but its declared type refuses (``42`` where a field is ``str``) would be stored
        and then fail every read, and one it reads as something else (a tuple where a
        field is a ``list``) would come back changed.

        Raises:
            UnreadableEventError: Naming the event, the field, and both types.
        """
        given = dict(vars(obj))
        for name in _NOT_GIVEN:
            # The chain hash a decoded event holds is the store's, replaced when sealed.
            given.pop(name, None)
        try:
            read = self.read_back(payload)
        except msgspec.ValidationError as exc:
            raise unreadable(type(obj), given, str(exc)) from exc
        read.pop(CHAIN_FIELD, None)
        # A signalling NaN (Decimal('sNaN')) raises when compared; unequal, it is named.
        # Only a type that holds floats may hold a Decimal (holds_floats).
        with _signalling_nan_unequal() if self.floats else contextlib.nullcontext():
            if read != given:  # one comparison on the way to a save; the search is for errors
                for name, value in given.items():
                    path = difference(read.get(name, ABSENT), value, name)
                    if path is not None:
                        raise misread(type(obj), read, given, path)
        return payload

    def read_back(self, payload: bytes) -> dict[str, Any]:
        """The fields of a payload just encoded, as its readers will read them.

        Raises:
            msgspec.ValidationError: Its declared types refuse a value.
        """
        return self._fields(self.decoder.decode(payload))

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
        ``where``. One of the library's own types that says it is of today's version
        is damaged: it is refused with the typed decoder's error, never decoded untyped,
        which would build whatever its bytes hold for upcasters it does not need. (An
        application's own event may hold, where its annotation names another type, a
        value its transcoder reads, which only the untyped read finds.)"""
        version, problem = (None, None) if self.schema.own else self.current_problem(data)
        if problem is not None:
            msg = (
                f"{where}: {self.schema.name} data (schema version {version}) does not "
                f"decode: {problem}"
            )
            raise SerializationError(msg)
        return self.upgraded(
            self.decode_untyped(data, where=where), where=where, migrators=migrators
        )

    def current_problem(self, data: bytes | memoryview) -> tuple[object, str | None]:
        """The schema version a payload says it was written at, read alone (None when it
        says none, or does not read), and, when that is today's, why the typed decoder
        refuses the payload (None when it reads it: a payload of today's shape that a
        codec reads otherwise, as one without its class's version)."""
        return self._current_problem(data, _VERSION_OF_JSON, self.decoder)

    def _current_problem(
        self, body: bytes | memoryview, versions: _Decoder, typed: _Decoder
    ) -> tuple[object, str | None]:
        try:
            version = versions.decode(body).version
        except (msgspec.DecodeError, RecursionError):
            return None, None
        if type(version) is not int or version != self.schema.version:  # not True
            return version, None
        try:
            typed.decode(body)
        except (msgspec.DecodeError, RecursionError) as exc:
            return version, str(exc) or type(exc).__name__
        return version, None

    def upgraded(
        self, state: dict[str, Any], *, where: str, migrators: Mapping[int, Upcaster]
    ) -> dict[str, Any]:
        """The fields of a payload read by :meth:`decode_untyped` (which upcasters may
        change), upcast to today's shape and typed, or a
        :class:`~covonaut_es.errors.SerializationError` naming ``where``."""
        refuse_stock_mapper_data(state, name=self.schema.name, where=where)
        stored = stored_version(state)
        state = self._upgrade(state, where, migrators)
        try:
            return self.typed(state)
        except msgspec.ValidationError as exc:
            msg = (
                f"{where}: {self.schema.name} data (schema version {stored}) does not decode: {exc}"
            )
            raise SerializationError(msg) from exc

    def typed(self, state: dict[str, Any]) -> dict[str, Any]:
        """The fields of a payload of today's version read as plain JSON values, each
        in its declared type.

        Raises:
            msgspec.ValidationError: A declared type refuses a value.
        """
        return self._fields(msgspec.convert(state, self.payload_type))

    def decode_untyped(self, data: bytes | memoryview, *, where: str) -> dict[str, Any]:
        """The payload as plain JSON values, for upcasters and version checks: one of at
        most :data:`MOST_UNTYPED_CONTAINERS` arrays and objects, which no payload this
        library writes comes near, so that a planted one never builds millions of them.

        Raises:
            SerializationError: It is not an object of this codec's format, or holds
                more arrays and objects.
        """
        containers = _containers(bytes(data))
        if containers > MOST_UNTYPED_CONTAINERS:
            msg = (
                f"{where}: stored payload holds {containers} arrays and objects, more than "
                f"the {MOST_UNTYPED_CONTAINERS} an older payload may: it was altered"
            )
            raise SerializationError(msg)
        return decode_object(data, where=where, hint=_UNREADABLE_HINT)


class _VersionOf(msgspec.Struct):
    version: Any = msgspec.field(default=None, name=VERSION_KEY)


_Decoder = msgspec.json.Decoder[Any] | msgspec.msgpack.Decoder[Any]
_VERSION_OF_JSON = msgspec.json.Decoder(_VersionOf)
_VERSION_OF_PACKED = msgspec.msgpack.Decoder(_VersionOf)
"""Read a payload's schema version alone: msgspec passes over its other fields without
building them."""

MOST_UNTYPED_CONTAINERS = 1_000_000
"""The most arrays and objects a payload decoded untyped (to upcast it) may hold."""

_JSON_TOKENS = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?|([\[{])')
"""A string (to its end, or to the end of the text when it has none) or an opening
bracket (the group): read left to right, each byte once, and possessively, so that the
engine keeps no state to go back to (it kept some for each escape of a string)."""


def _containers(data: bytes) -> int:
    """The arrays and objects of JSON ``data``: its opening brackets outside strings,
    counted in one pass (a pattern that skipped strings by substitution tried each
    quote of an unterminated one again, in time quadratic in its length)."""
    return sum(1 for token in _JSON_TOKENS.finditer(data) if token.start(1) >= 0)


SNAPSHOT_SIZE_LIMIT = 256 * 1024 * 1024
"""The most bytes a compressed snapshot may hold once decompressed: a larger state is
stored as JSON, so that a damaged or hostile frame never makes a reader allocate more."""

MOST_UNTYPED_SNAPSHOT = 1024 * 1024
"""The most bytes an older compressed snapshot, decoded untyped to upcast it, may hold
once decompressed (see :meth:`SnapshotCodec.decode_untyped`); a larger one is stale, its
thread rebuilt from the events."""


class SnapshotCodec(Codec):
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

    def current_problem(self, data: bytes | memoryview) -> tuple[object, str | None]:
        try:
            body = unsealed(data)[1]
            if body[:4] != _zstd.MAGIC:
                return super().current_problem(body)
            packed = _zstd.decompress(body, limit=SNAPSHOT_SIZE_LIMIT)
        except (SerializationError, ValueError):
            return None, None
        return self._current_problem(packed, _VERSION_OF_PACKED, self.packed_decoder)

    def decode_untyped(self, data: bytes | memoryview, *, where: str) -> dict[str, Any]:
        try:
            body = unsealed(data)[1]
        except SerializationError as exc:
            msg = f"{where}: {exc}"
            raise SerializationError(msg) from exc
        if body[:4] != _zstd.MAGIC:
            return super().decode_untyped(body, where=where)
        try:
            packed = _zstd.decompress(body, limit=SNAPSHOT_SIZE_LIMIT)
        except ValueError as exc:
            msg = f"{where}: stored snapshot is not a readable compressed snapshot: {exc}"
            raise SerializationError(msg) from exc
        if len(packed) > MOST_UNTYPED_SNAPSHOT:
            # Passed over, the thread rebuilt from its events: msgpack holds an empty
            # array in one byte, which decodes to a Python list fifty times its size.
            msg = (
                f"{where}: an older snapshot of {len(packed)} bytes, more than the "
                f"{MOST_UNTYPED_SNAPSHOT} one is decoded untyped to be upgraded"
            )
            raise StaleSnapshotError(msg)
        try:
            # Through JSON (datetimes become text), so that upcasters see a snapshot
            # alike whichever format it was written in; only older snapshots come here.
            as_json = msgspec.json.encode(msgspec.msgpack.decode(packed))
        # msgspec.DecodeError is a ValueError; RecursionError: nested beyond its depth
        except (ValueError, TypeError, RecursionError) as exc:
            msg = f"{where}: stored snapshot is not a readable compressed snapshot: {exc}"
            raise SerializationError(msg) from exc
        return decode_object(as_json, where=where)

    def _fields(self, payload: msgspec.Struct) -> dict[str, Any]:
        fields = super()._fields(payload)
        state = msgspec.structs.asdict(fields["state"])
        fields["state"] = {name: v for name, v in state.items() if v is not msgspec.UNSET}
        return fields

    def _upgrade(
        self, payload: dict[str, Any], where: str, migrators: Mapping[int, Upcaster]
    ) -> dict[str, Any]:
        # Upcasters see the aggregate's state, versioned, not the snapshot's envelope.
        state = payload.get("state")
        if not isinstance(state, dict):
            msg = f"{where}: the snapshot's state is a {type(state).__name__}, expected an object"
            raise SerializationError(msg)
        payload["state"], payload[VERSION_KEY] = self.schema.upgrade_state(
            state, stored_version(payload), where=where, migrators=migrators
        )
        return payload


_CLASS_VERSION = "class_version"


class DeclaredSnapshotCodec(SnapshotCodec):
    """The codec of a snapshot class an application's aggregate declares: its ``"_v"``
    is the aggregate's ``class_version``, which its ``upcast_vN_vN+1`` methods upgrade
    the state from, as for eventsourcing's own snapshots.

    Snapshots written before that recorded no aggregate version: their ``"_v"`` was
    the snapshot class's, 1, whatever the aggregate's. Each is written with
    ``"class_version"`` now, beside ``"_v"``; one without it is read as before by an
    aggregate at version 1, and passed over by any other, since its state may be of any
    version up to the one that wrote it (ADR 0089).
    """

    def _payload(self, obj: object) -> dict[str, Any]:
        return {**super()._payload(obj), _CLASS_VERSION: self.schema.version}

    def _current_fields(self, payload: msgspec.Struct) -> dict[str, Any] | None:
        if not getattr(payload, _CLASS_VERSION) and self.schema.version > 1:
            return None  # named by decode_older
        return super()._current_fields(payload)

    def _fields(self, payload: msgspec.Struct) -> dict[str, Any]:
        fields = super()._fields(payload)
        del fields[_CLASS_VERSION]
        return fields

    def _upgrade(
        self, payload: dict[str, Any], where: str, migrators: Mapping[int, Upcaster]
    ) -> dict[str, Any]:
        if not payload.get(_CLASS_VERSION) and self.schema.version > 1:
            msg = (
                f"{where}: {self.schema.name} was written before snapshots recorded their "
                f"aggregate's class_version, which is {self.schema.version} now, so the "
                "version of its state is unknown"
            )
            raise StaleSnapshotError(msg)
        return super()._upgrade(payload, where, migrators)


def refuse_stock_mapper_data(state: Mapping[str, Any], *, name: str, where: str) -> None:
    """Refuse a payload that eventsourcing's own mapper wrote (an application that was
    a stock ``Application`` before it became an ``AgentApplication``): its version is
    under ``"class_version"``, not ``"_v"``, so it would be read as version 0 and upcast
    again, and its timestamp is tagged by eventsourcing's transcoder.

    Raises:
        SerializationError: It has no ``"_v"``, and a ``"class_version"`` or a tagged
            timestamp, naming ``where`` and what to do.
    """
    if VERSION_KEY in state:
        return
    timestamp = state.get("timestamp")
    if _CLASS_VERSION in state:
        found = f"'{_CLASS_VERSION}': {state[_CLASS_VERSION]!r} where this store writes '_v'"
    elif isinstance(timestamp, dict) and "_type_" in timestamp:
        found = "a timestamp tagged by eventsourcing's transcoder where this store writes text"
    else:
        return
    msg = (
        f"{where}: {name} data was written by eventsourcing's own mapper ({found}), which "
        "an AgentApplication's mapper does not read; read it with the stock Application, "
        "or copy its events into a new AgentApplication's database by saving each one "
        "the stock application reads (see 'Your own eventsourcing application' in "
        "docs/embedding.md)"
    )
    raise SerializationError(msg)


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
    hints = _resolved_hints(cls, "event")
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


def _resolved_hints(cls: type, kind: str) -> dict[str, Any]:
    """The annotations of ``cls``, a ``kind`` class, resolved as the mapper decodes by.

    Raises:
        SerializationError: One names a type that is not there when the code runs (one
            imported under ``typing.TYPE_CHECKING``, with ``from __future__ import
            annotations``); nothing was stored.
    """
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError, AttributeError) as exc:
        msg = (
            f"{kind} {cls.__qualname__} has an annotation that does not resolve when the "
            f"code runs ({type(exc).__name__}: {exc}); the msgspec mapper decodes by "
            "these types, so import each where the class is defined (not only under "
            "typing.TYPE_CHECKING)"
        )
        raise SerializationError(msg) from exc


def _aggregate_state_fields(aggregate_cls: type, *, defaults: bool) -> list[tuple[str, Any, Any]]:
    """The fields of an aggregate's snapshot state; with ``defaults``, those that
    :func:`_state_default` gives one may be missing from a snapshot; else only those
    the class gives a value of its own, which an aggregate that never set one does not
    hold (:func:`_unset_unless_set`)."""
    hints = _state_hints(aggregate_cls)
    fields: list[tuple[str, Any, Any]] = [(name, datetime, msgspec.NODEFAULT) for name in TIMES]
    if defaults:
        return fields + [(name, hint, _state_default(hint)) for name, hint in hints.items()]
    return fields + [_unset_unless_set(aggregate_cls, name, h) for name, h in hints.items()]


def _state_hints(aggregate_cls: type) -> dict[str, Any]:
    """The types of the state attributes ``aggregate_cls`` declares: its own
    annotations, but a class's constants (upper case, or ``ClassVar``), and a ``Final``
    one's type unwrapped (helper-255: a ``ClassVar[str]`` made every snapshot's save
    raise a bare TypeError)."""
    hints = _resolved_hints(aggregate_cls, "aggregate")
    state: dict[str, Any] = {}
    for name in aggregate_cls.__annotations__:
        hint = hints[name]
        if name.isupper() or hint is typing.ClassVar or typing.get_origin(hint) is typing.ClassVar:
            continue
        if hint is typing.Final or typing.get_origin(hint) is typing.Final:
            hint = typing.get_args(hint)[0] if typing.get_args(hint) else Any
        state[name] = hint
    return state


def _unset_unless_set(aggregate_cls: type, name: str, annotation: Any) -> tuple[str, Any, Any]:
    """An application's aggregate's state field: one whose class gives it a value
    (``note: str | None = None``) is missing from the state of an aggregate that never
    set it, and stays missing (``UNSET``), so the class's value shows; any other is
    required, and a snapshot without it (written before the class gained it) does not
    decode and is passed over (helper-252, helper-254)."""
    if any(name in vars(cls) for cls in aggregate_cls.__mro__[:-1]):
        return name, typing.Union[annotation, msgspec.UnsetType], msgspec.UNSET  # noqa: UP007
    return name, annotation, msgspec.NODEFAULT


def _state_default(annotation: Any) -> Any:
    """Optional, collection and all-default Struct state fields default to empty, so
    that a thread's snapshots written before such a field was added still decode (the
    library gives each new field of a thread that start, or a new version); any other
    new field needs a version. An application's own aggregate has none: its
    ``__init__`` may start a new field otherwise, so a snapshot without the field does
    not decode and is passed over, the aggregate rebuilt from its events."""
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
def codec_for(cls: type) -> Codec:
    """The codec of an event or snapshot class, built once from its annotations."""
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
        state_fields = _aggregate_state_fields(
            aggregate_cls, defaults=issubclass(cls, ThreadSnapshot)
        )
        state_type = msgspec.defstruct(f"{aggregate_cls.__name__}State", state_fields, kw_only=True)
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
            ("timestamp", datetime),
            ("topic", str),
            ("state", state_type),
            (VERSION_KEY, int, 0),
        ]
        if issubclass(cls, ThreadSnapshot):
            return SnapshotCodec(schema, msgspec.defstruct(f"{cls.__qualname__}Payload", fields))
        fields.append((_CLASS_VERSION, int, 0))  # 0: written before it was recorded
        payload = msgspec.defstruct(f"{cls.__qualname__}Payload", fields)
        return DeclaredSnapshotCodec(schema, payload)
    payload = payload_type(typing.cast("type", cls))
    return Codec(schema, payload, floats=holds_floats(payload))


@cache
def payload_type(cls: type) -> type[msgspec.Struct]:
    """The Struct an event class's payloads decode into, built once from its
    annotations.

    Raises:
        SerializationError: A field has no type annotation.
    """
    # The chain hash travels with every event's payload, outside its dataclass fields.
    chain_field = (CHAIN_FIELD, str, UNCHAINED)
    payload = msgspec.defstruct(
        f"{cls.__qualname__}Payload",
        [*_field_types(cls), chain_field, (VERSION_KEY, int, 0)],
        kw_only=True,  # fields with defaults may come before those without
    )
    check_decodable(cls, payload)
    return payload


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


def _signalling_nan_unequal() -> contextlib.AbstractContextManager[decimal.Context]:
    """A decimal context in which comparing a signalling NaN is unequal, not an error."""
    context = decimal.getcontext().copy()
    context.traps[decimal.InvalidOperation] = False
    return decimal.localcontext(context)
