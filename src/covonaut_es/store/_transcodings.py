"""The application's own value types, read and written through the transcodings it
registers, the way eventsourcing declares them.

An eventsourcing application registers a ``Transcoding`` per type of its own in
``register_transcodings`` (``EmailAddressAsStr`` in eventsourcing's ``BankAccounts``).
The msgspec mapper takes them from the application's ``JSONTranscoder``: in the events of
the application's own aggregates, a value of such a type is stored as eventsourcing
stores it, ``{"_type_": name, "_data_": encoded}``, and read back through its
transcoding whatever the field's annotation says; every other value is read in its
declared type. The stock transcodings of ``UUID``, ``Decimal`` and ``datetime`` are left
to msgspec, which reads those by declared type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import msgspec
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Transcoder,
    Transcoding,
    UUIDAsHex,
)

from covonaut_es.errors import ConfigurationError
from covonaut_es.migrations import VERSION_KEY, Schema, Upcaster
from covonaut_es.store._codec import Codec

_STOCK = (UUIDAsHex, DecimalAsStr, DatetimeAsISO)
_TYPE, _DATA = "_type_", "_data_"


class Transcodings:
    """The transcodings of an application's own types, by type and by name.

    Args:
        transcodings: Each ``Transcoding`` to apply; a later one of a type or name
            replaces an earlier, as on a ``JSONTranscoder``.
    """

    def __init__(self, transcodings: Iterable[Transcoding] = ()) -> None:
        self._by_type: dict[type, Transcoding] = {}
        self._by_name: dict[str, Transcoding] = {}
        for transcoding in transcodings:
            self._by_type[transcoding.type] = transcoding
            self._by_name[transcoding.name] = transcoding

    @classmethod
    def of(cls, transcoder: Transcoder | None, *, stock: bool = False) -> Transcodings:
        """The transcodings registered on an eventsourcing ``JSONTranscoder``, but for
        eventsourcing's stock ones unless ``stock``; for None, the stock ones if
        ``stock``.

        Raises:
            ConfigurationError: ``transcoder`` is another kind of transcoder, whose
                encoding the msgspec mapper cannot take over.
        """
        if transcoder is None:
            return cls(kind() for kind in _STOCK) if stock else cls()
        if not isinstance(transcoder, JSONTranscoder):
            msg = (
                f"the msgspec mapper takes the transcodings of an eventsourcing "
                f"JSONTranscoder, found a {type(transcoder).__qualname__}; register your "
                "types' Transcoding objects in your application's register_transcodings"
            )
            raise ConfigurationError(msg)
        registered = transcoder.types.values()
        return cls(t for t in registered if stock or not isinstance(t, _STOCK))

    def __bool__(self) -> bool:
        return bool(self._by_type)

    def tagged(self, value: Any) -> Any:
        """``value`` with each value of a registered type, in lists, tuples and dicts
        too, replaced by its tagged encoding."""
        transcoding = self._by_type.get(type(value))
        if transcoding is not None:
            return {_TYPE: transcoding.name, _DATA: self.tagged(transcoding.encode(value))}
        if type(value) in (list, tuple):
            return type(value)(self.tagged(item) for item in value)
        if type(value) is dict:
            return {key: self.tagged(item) for key, item in value.items()}
        return value

    def untagged(self, value: Any) -> tuple[Any, bool]:
        """``value`` read as plain JSON, with each tagged encoding of a registered name
        decoded by its transcoding; and whether there was one."""
        if isinstance(value, list):
            items = [self.untagged(item) for item in value]
            return [item for item, _ in items], any(found for _, found in items)
        if not isinstance(value, dict):
            return value, False
        if value.keys() == {_TYPE, _DATA}:
            transcoding = self._by_name.get(value[_TYPE])
            if transcoding is not None:
                return transcoding.decode(self.untagged(value[_DATA])[0]), True
        pairs = {key: self.untagged(item) for key, item in value.items()}
        return {key: item for key, (item, _) in pairs.items()}, any(
            found for _, found in pairs.values()
        )

    def read(self, value: Any, name: str) -> tuple[Any, bool]:
        """As :meth:`untagged`, for the field ``name`` of stored data.

        Raises:
            msgspec.ValidationError: A transcoding failed on what the data holds under
                its name (only the error's type is told: the data may be secret).
        """
        try:
            return self.untagged(value)
        except Exception as exc:  # a transcoding's own code, on hostile or damaged data
            msg = f"a transcoding failed to read it ({type(exc).__name__}) - at `$.{name}`"
            raise msgspec.ValidationError(msg) from exc


class TranscodedCodec(Codec):
    """The codec of an application's event class when the application registers
    transcodings: values of its types are tagged, and read back by their tags.

    It reads every payload as plain JSON first, then each field in its declared type
    (a value its transcoding read stays as it is, where that type refuses it).
    """

    def __init__(
        self, schema: Schema, payload_type: type[msgspec.Struct], transcodings: Transcodings
    ) -> None:
        super().__init__(schema, payload_type)
        self.transcodings = transcodings
        self._struct_fields = msgspec.structs.fields(payload_type)

    def _payload(self, obj: object) -> dict[str, Any]:
        payload: dict[str, Any] = self.transcodings.tagged(super()._payload(obj))
        return payload

    def _field_encoding(self, value: Any) -> bytes:
        return msgspec.json.encode(self.transcodings.tagged(value))

    def read_back(self, payload: bytes) -> dict[str, Any]:
        return self.typed(msgspec.json.decode(payload))

    def decode_current(self, data: bytes | memoryview) -> dict[str, Any] | None:
        return None  # each payload is read by decode_older, as plain JSON first

    def typed(self, state: dict[str, Any]) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for field in self._struct_fields:
            if field.name not in state:
                if field.required:
                    msg = f"Object missing required field `{field.name}`"
                    raise msgspec.ValidationError(msg)
                has_default = field.default is not msgspec.NODEFAULT
                fields[field.name] = field.default if has_default else field.default_factory()
                continue
            value, transcoded = self.transcodings.read(state[field.name], field.name)
            try:
                fields[field.name] = msgspec.convert(value, field.type, dec_hook=_as_it_is)
            except msgspec.ValidationError as exc:
                if not transcoded:
                    msg = str(exc).replace(" - at `$", f" - at `$.{field.name}")
                    if " - at `" not in msg:
                        msg = f"{msg} - at `$.{field.name}`"
                    raise msgspec.ValidationError(msg) from exc
                fields[field.name] = value  # read by its transcoding, as eventsourcing does
        del fields[VERSION_KEY]
        return fields


def _as_it_is(expected: type, value: Any) -> Any:
    """A value a transcoding decoded, where its declared type is the value's own."""
    if isinstance(value, expected):
        return value
    msg = f"Expected `{expected.__qualname__}`, got `{type(value).__qualname__}`"
    raise TypeError(msg)


class OwnSnapshotCodec(Codec):
    """The codec of snapshots of the application's own aggregates, whose state declares
    no types: it is stored as eventsourcing stores it, each value of a type JSON lacks
    tagged by its transcoding (eventsourcing's stock ones of ``UUID``, ``Decimal`` and
    ``datetime`` too), and read back by those tags. The aggregate's ``class_version``
    stays in the state, as eventsourcing's ``Snapshot.take`` put it; a read upgrades the
    state to the aggregate's current version by its ``upcast_vN_vN+1`` methods under the
    one-step rules, as it does an event, so that one written by newer code, or an
    upcaster that fails, is a typed error naming the record.

    Args:
        schema: The snapshot class's schema.
        transcodings: The transcodings the state is tagged with.
        aggregates: The schema of each aggregate class, by its topic.
    """

    def __init__(
        self, schema: Schema, transcodings: Transcodings, aggregates: Mapping[str, Schema]
    ) -> None:
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
            ("timestamp", datetime),
            ("topic", str),
            ("state", dict[str, Any]),
            (VERSION_KEY, int, 0),
        ]
        super().__init__(schema, msgspec.defstruct(f"{schema.name}Payload", fields))
        self.transcodings = transcodings
        self.aggregates = aggregates

    def _payload(self, obj: object) -> dict[str, Any]:
        payload = super()._payload(obj)
        payload["state"] = self.transcodings.tagged(payload["state"])
        return payload

    def read_back(self, payload: bytes) -> dict[str, Any]:
        return self.typed(msgspec.json.decode(payload))

    def decode_current(self, data: bytes | memoryview) -> dict[str, Any] | None:
        return None  # each payload is read by decode_older, as plain JSON first

    def typed(self, state: dict[str, Any]) -> dict[str, Any]:
        fields = super().typed(state)
        fields["state"] = self.transcodings.read(fields["state"], "state")[0]
        return fields

    def upgraded(
        self, state: dict[str, Any], *, where: str, migrators: Mapping[int, Upcaster]
    ) -> dict[str, Any]:
        fields = super().upgraded(state, where=where, migrators=migrators)
        aggregate = self.aggregates.get(fields["topic"])
        if aggregate is None:
            return fields  # not an aggregate this store knows: the mapper refuses it
        # Versioned as eventsourcing's Snapshot.take versions it: absent means 1.
        state = dict(fields["state"])
        upgraded, _ = aggregate.upgrade_state(state, state.pop(_CLASS_VERSION, 1), where=where)
        if aggregate.version > 1:
            upgraded[_CLASS_VERSION] = aggregate.version  # applying it upcasts no further
        fields["state"] = upgraded
        return fields


_CLASS_VERSION = "class_version"
"""Where eventsourcing's ``Snapshot.take`` records its aggregate's version in the state."""
