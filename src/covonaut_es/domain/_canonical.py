"""Canonical JSON: the bytes every digest of the domain is taken over.

Two forms. :func:`jcs` is RFC 8785, the JSON Canonicalization Scheme: what the hash
chain and the operation digest cover since ADR 0048, so that anyone can recompute them
with a JSON library and a page of code. :func:`canonical_json` is msgspec's sorted
encoding: what they covered before, which links and digests recorded then keep, and
what texts shown to people and the pins of tools are made of.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

from covonaut_es.errors import NonFiniteNumberError, NotJSONDataError
from covonaut_es.messages import STORED_INTEGERS


def refuse_non_finite(value: Any, *, where: str = "") -> None:
    """Refuse NaN and infinities anywhere in ``value`` (plain JSON-like data): msgspec
    writes them as ``null``, and RFC 8785 has none, so the value would not say what it
    says, and its digest would be None's.

    Raises:
        NonFiniteNumberError: Naming ``where`` (what the value is) and the number.
        NotJSONDataError: ``value`` holds itself.
    """
    _Plain(where, recorded=False).of(value)


def json_data(value: Any, *, where: str) -> Any:
    """``value`` as the plain JSON data a thread records of it, and digests: objects
    with text keys, arrays, text, numbers, booleans and null.

    A set or frozenset becomes an array of its items in the order of their RFC 8785
    forms, so that neither the process's string hashing nor a mix of item types decides
    the order: the digest of a value and the digest of the data recorded of it are one.
    Any other object is written as msgspec writes it (a Struct or dataclass as an
    object, a datetime or UUID as text, bytes as base64 text), then checked the same way.

    Raises:
        NonFiniteNumberError: ``value`` holds NaN or an infinity, anywhere.
        NotJSONDataError: ``value`` holds what JSON cannot carry: a key that is not
            text (``{1: ...}`` would be written as ``{"1": ...}``, one digest for two
            operations), a structure that holds itself, an object msgspec cannot
            encode, an integer beyond 64 bits, a lone surrogate. Names ``where``.
    """
    plain = _Plain(where, recorded=True).of(value)
    try:
        return msgspec.json.decode(msgspec.json.encode(plain))
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        msg = f"{where}: not JSON data ({exc})"
        raise NotJSONDataError(msg) from exc


class _Plain:
    """One walk of a value into plain data, refusing what JSON cannot carry."""

    def __init__(self, where: str, *, recorded: bool) -> None:
        # ``recorded``: the value becomes data a thread records, whose keys must be text
        # and whose integers must fit the 64 bits every stored reader takes.
        self.where = where
        self.recorded = recorded
        self.open: set[int] = set()  # the containers being walked: one met again holds itself

    def of(self, value: Any) -> Any:
        try:
            return self._plain(value)
        except RecursionError as exc:
            raise self._refusal("nested too deeply") from exc

    def _plain(self, value: Any) -> Any:
        if isinstance(value, float):
            if not math.isfinite(value):
                prefix = f"{self.where}: " if self.where else ""
                msg = f"{prefix}{value} is not a JSON number; give it as a string or None"
                raise NonFiniteNumberError(msg)
            return value
        if self.recorded and isinstance(value, int) and value not in STORED_INTEGERS:
            raise self._refusal("an integer beyond the 64 bits a stored number can carry")
        if value is None or isinstance(value, str | int):
            return value
        if not isinstance(value, Mapping | list | tuple | set | frozenset):
            try:
                builtins = msgspec.to_builtins(value, order="deterministic")
            except (TypeError, ValueError, msgspec.EncodeError) as exc:
                raise self._refusal(str(exc)) from exc
            return self._plain(builtins)
        if id(value) in self.open:
            raise self._refusal("it holds itself")
        self.open.add(id(value))
        try:
            if isinstance(value, Mapping):  # a dict, or any mapping the caller's own
                return {self._key(key): self._plain(item) for key, item in value.items()}
            items = [self._plain(item) for item in value]
            if isinstance(value, set | frozenset):
                try:
                    items.sort(key=jcs)
                except (TypeError, ValueError, msgspec.EncodeError) as exc:
                    raise self._refusal(str(exc)) from exc
            return items
        finally:
            self.open.discard(id(value))

    def _key(self, key: Any) -> Any:
        if self.recorded and not isinstance(key, str):
            raise self._refusal(f"keys must be text, not {type(key).__name__}")
        self._plain(key)
        return key

    def _refusal(self, why: str) -> NotJSONDataError:
        prefix = f"{self.where}: " if self.where else ""
        return NotJSONDataError(f"{prefix}not JSON data ({why})")


def canonical_json(value: Any) -> bytes:
    """JSON with object keys sorted (by code point) at every level, no whitespace, UTF-8.

    Equal parsed values give equal bytes, whatever the key order and spacing of the
    text they were parsed from. Numbers keep their kind: ``40`` and ``40.0`` differ.

    Raises:
        NonFiniteNumberError: ``value`` holds NaN or an infinity, which msgspec writes
            as null: the form of None.
        NotJSONDataError: ``value`` holds an object msgspec cannot encode, or a lone
            surrogate.
    """
    try:
        encoded = msgspec.json.encode(value, order="sorted")
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise NotJSONDataError(f"not JSON data ({exc})") from exc
    if b"null" in encoded:  # a NaN written as null is told from None only by a walk
        refuse_non_finite(value)
    return encoded


def es_number(value: float) -> str:
    """A finite float as ECMAScript's ``Number.prototype.toString`` writes it, which is
    how RFC 8785 writes every number (section 3.2.2.3): the shortest digits that read
    back as the same float (Python's ``repr`` finds them), integral values without a
    fraction (``3``, ``1e+21`` from there on), ``0.000001`` and ``1e-7`` on either side
    of the switch to an exponent, and ``0`` for minus zero.

    Raises:
        ValueError: ``value`` is NaN or infinite, which JSON cannot hold.
    """
    if not math.isfinite(value):
        msg = f"a JSON number is finite, found {value!r}"
        raise ValueError(msg)
    if value == 0:
        return "0"
    # repr's digits are the ones wanted; only their layout may differ.
    text = repr(value)
    if "e" not in text:  # from 1e-4 to 1e16 repr writes what ECMAScript does, but "3.0"
        return text[:-2] if text.endswith(".0") else text
    if not 1e-6 <= abs(value) < 1e21:  # both write an exponent: "1e-07" is "1e-7"
        mantissa, _, exponent = text.partition("e")
        return f"{mantissa}e{int(exponent):+d}"
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    significant = (whole + fraction).lstrip("0")
    # value = 0.<significant> * 10**point
    point = len(whole) + int(exponent or 0) - (len(whole) + len(fraction) - len(significant))
    digits = significant.rstrip("0")
    sign = "-" if value < 0 else ""
    if len(digits) <= point <= 21:
        return sign + digits + "0" * (point - len(digits))
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    shown = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{shown}e{point - 1:+d}"


def _es_raw(text: str) -> msgspec.Raw:
    return msgspec.Raw(es_number(float(text)))


_ES_NUMBERS = msgspec.json.Decoder(float_hook=_es_raw)
"""Reads JSON with each number that has a fraction or an exponent already written as
RFC 8785 writes it; integers stay Python ints, written exactly."""

_SUPPLEMENTARY = tuple(bytes([b]) for b in range(0xF0, 0xF5))
_PRIVATE_TO_BMP_END = (b"\xee", b"\xef")


def jcs_text(text: bytes) -> bytes:
    """The RFC 8785 canonical form of the JSON text ``text`` (UTF-8), without its
    whitespace: object members sorted by their names' UTF-16 code units, strings with
    only ``"``, ``\\`` and the controls escaped (``\\n``-style where JSON has one,
    ``\\u00xx`` otherwise), numbers as :func:`es_number` writes them.

    Integers written without a fraction or exponent are written exactly, however large:
    RFC 8785 leaves numbers beyond an IEEE double's precision to the application, and
    a chain must not let one be changed unseen. Below 2**53 this is RFC 8785's form.

    Raises:
        ValueError: ``text`` is not JSON, or holds a number too large for a double
            (``1e400``), or text that is not Unicode (a lone surrogate).
    """
    try:
        tree = _ES_NUMBERS.decode(text)
        if _orders_differ(text):
            return msgspec.json.encode(_utf16_sorted(tree))
        return msgspec.json.encode(tree, order="sorted")
    except (msgspec.DecodeError, msgspec.EncodeError, UnicodeError, RecursionError) as exc:
        msg = f"not canonical JSON: {exc}"
        raise ValueError(msg) from exc


def jcs_of_sorted(text: bytes, *, floats: bool = True) -> bytes:
    """:func:`jcs_text` of ``text``, which is msgspec's sorted encoding of a value: that
    very text when the value held no float (``floats`` false) and its names sort alike
    by code points and by UTF-16 code units, since then RFC 8785 writes what msgspec
    wrote (the same escapes, integers exactly), and decoding it to write it again would
    give the same bytes.

    Raises:
        ValueError: As :func:`jcs_text`.
    """
    if not floats and not _orders_differ(text):
        return text
    return jcs_text(text)


def jcs(value: Any) -> bytes:
    """The RFC 8785 canonical form of ``value`` as msgspec encodes it to JSON (Structs
    as objects, datetimes as RFC 3339 text; NaN and infinities as ``null``, as the
    store writes them): see :func:`jcs_text`."""
    return jcs_text(msgspec.json.encode(value))


def _orders_differ(text: bytes) -> bool:
    """Whether code point order (msgspec's) might differ from UTF-16's for a name in
    ``text``: only a character above U+FFFF against one from U+E000 to U+FFFF sorts
    differently, and an escape could spell either."""
    if b"\\u" in text:
        return True
    if text.isascii():
        return False
    return any(b in text for b in _SUPPLEMENTARY) and any(b in text for b in _PRIVATE_TO_BMP_END)


def _utf16_sorted(value: Any) -> Any:
    if isinstance(value, dict):
        names = sorted(value, key=lambda name: name.encode("utf-16-be"))
        return {name: _utf16_sorted(value[name]) for name in names}
    if isinstance(value, list):
        return [_utf16_sorted(item) for item in value]
    return value
