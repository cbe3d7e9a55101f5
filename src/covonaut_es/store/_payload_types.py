"""What the msgspec mapper asks of a payload type before it encodes or decodes with it:
that msgspec can decode every field's annotation, and whether a payload may hold a float.
"""

from __future__ import annotations

import msgspec
import msgspec.inspect as mi

from covonaut_es.errors import SerializationError


def check_decodable(cls: type, payload: type[msgspec.Struct]) -> None:
    """Refuse an event class with a field whose annotation msgspec cannot decode (a
    union of ``str`` and ``datetime``, an enum of both text and integer values), naming
    the field: msgspec's own ``TypeError`` names neither it nor the class.

    Raises:
        SerializationError: Naming the class, the field, its annotation and why.
    """
    try:
        msgspec.json.Decoder(payload)
    except TypeError as exc:
        for field in msgspec.structs.fields(payload):
            try:
                msgspec.json.Decoder(field.type)
            except TypeError as refused:
                msg = (
                    f"event {cls.__qualname__}: its field {field.name!r} is annotated "
                    f"{field.type!r}, which the msgspec mapper cannot decode ({refused}); "
                    "annotate it with a type msgspec reads (one text-like type per union, "
                    "an enum of all text or all integer values)"
                )
                raise SerializationError(msg) from exc
        raise  # pragma: no cover - a whole refused where no field is


_FLOAT_FREE = (
    mi.StrType,
    mi.IntType,
    mi.BoolType,
    mi.NoneType,
    mi.DateTimeType,
    mi.EnumType,
    mi.LiteralType,
    mi.UnionType,
    mi.CollectionType,
    mi.DictType,
    mi.StructType,
)
"""The msgspec types whose values JSON writes without a float, given their parts do."""


def holds_floats(payload: type[msgspec.Struct]) -> bool:
    """Whether a payload of this type may hold a float: it names a float, or a type whose
    values are not checked as declared (``Any``, a custom type), anywhere. One that
    holds none is written by RFC 8785 as msgspec writes it, once sorted."""
    seen: set[type] = set()
    pending: list[mi.Type] = [mi.type_info(payload)]
    while pending:
        info = pending.pop()
        if not isinstance(info, _FLOAT_FREE):
            return True
        if isinstance(info, mi.StructType):
            if info.cls not in seen:
                seen.add(info.cls)
                pending += [field.type for field in info.fields]
        elif isinstance(info, mi.EnumType | mi.LiteralType):
            values = [m.value for m in info.cls] if isinstance(info, mi.EnumType) else info.values
            if not all(isinstance(v, str | int) for v in values):
                return True
        elif isinstance(info, mi.UnionType):
            pending += info.types
        elif isinstance(info, mi.CollectionType):
            pending.append(info.item_type)
        elif isinstance(info, mi.DictType):
            pending += [info.key_type, info.value_type]
    return False
