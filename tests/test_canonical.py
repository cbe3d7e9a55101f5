"""RFC 8785 canonical JSON: its numbers against RFC 8785's published vectors and an
independent, exact definition of ECMAScript's ``Number::toString``; its text against a
plain reading of the RFC."""

from __future__ import annotations

import json
import math
import struct
from fractions import Fraction
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es.domain._canonical import es_number, jcs, jcs_of_sorted, jcs_text

# RFC 8785, Appendix B: IEEE 754 doubles (hex) and how the scheme writes them.
APPENDIX_B = {
    "0000000000000000": "0",
    "8000000000000000": "0",
    "0000000000000001": "5e-324",
    "8000000000000001": "-5e-324",
    "7fefffffffffffff": "1.7976931348623157e+308",
    "ffefffffffffffff": "-1.7976931348623157e+308",
    "4340000000000000": "9007199254740992",
    "c340000000000000": "-9007199254740992",
    "4430000000000000": "295147905179352830000",
    "44b52d02c7e14af5": "9.999999999999997e+22",
    "44b52d02c7e14af6": "1e+23",
    "44b52d02c7e14af7": "1.0000000000000001e+23",
    "444b1ae4d6e2ef4e": "999999999999999700000",
    "444b1ae4d6e2ef4f": "999999999999999900000",
    "444b1ae4d6e2ef50": "1e+21",
    "3eb0c6f7a0b5ed8c": "9.999999999999997e-7",
    "3eb0c6f7a0b5ed8d": "0.000001",
    "41b3de4355555553": "333333333.3333332",
    "41b3de4355555554": "333333333.33333325",
    "41b3de4355555555": "333333333.3333333",
    "41b3de4355555556": "333333333.3333334",
    "41b3de4355555557": "333333333.33333343",
    "becbf647612f3696": "-0.0000033333333333333333",
    "43143ff3c1cb0959": "1424953923781206.2",
}
NOT_NUMBERS = ("7fffffffffffffff", "7ff0000000000000", "fff0000000000000")


def double(bits: str) -> float:
    return float(struct.unpack(">d", bytes.fromhex(bits))[0])


@pytest.mark.parametrize(("bits", "expected"), APPENDIX_B.items())
def test_numbers_are_written_as_rfc_8785_appendix_b_says(bits: str, expected: str) -> None:
    """Every finite vector of the RFC's Appendix B, alone and inside a document."""
    assert es_number(double(bits)) == expected
    assert jcs([double(bits)]) == f"[{expected}]".encode()


@pytest.mark.parametrize("bits", NOT_NUMBERS)
def test_nan_and_the_infinities_are_refused(bits: str) -> None:
    """NaN and infinity have no JSON form: refused, as the RFC says."""
    with pytest.raises(ValueError, match="finite"):
        es_number(double(bits))


def reads_back(decimal: Fraction, x: float) -> bool:
    """Whether the decimal reads as the double ``x`` (correctly rounded)."""
    try:
        return float(decimal) == x
    except OverflowError:
        return False


def ecmascript(x: float) -> str:
    """``Number::toString(x)`` from ECMA-262 7.1.12.1 by exact search: the fewest
    digits ``k`` of an ``s`` with ``s * 10**(n - k)`` reading back as ``x``, the
    closest such ``s`` (ties to even), then the spec's layout. No ``repr``."""
    if x == 0:
        return "0"
    if x < 0:
        return "-" + ecmascript(-x)
    exact = Fraction(x)
    for k in range(1, 18):
        candidates = []
        for n in range(math.floor(math.log10(x)), math.floor(math.log10(x)) + 3):
            scale = Fraction(10) ** (n - k)
            nearest = round(exact / scale)
            for s in (nearest - 1, nearest, nearest + 1):
                if 10 ** (k - 1) <= s < 10**k and reads_back(s * scale, x):
                    candidates.append((abs(s * scale - exact), s % 2, s, n))
        if candidates:
            _, _, s, n = min(candidates)
            break
    digits = str(s)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"


@settings(max_examples=400, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(0, 2**64 - 1).map(lambda bits: double(f"{bits:016x}")).filter(math.isfinite)
)
def test_numbers_match_an_exact_reading_of_ecmascript(x: float) -> None:
    """Any finite double is written as the exact search through ECMA-262 writes it."""
    assert es_number(x) == ecmascript(x)


def plain_rfc_8785(value: Any) -> str:
    """RFC 8785 read plainly: names sorted by UTF-16 code units, the six short escapes
    and ``\\u00xx`` for the other controls, every other character as itself."""
    if isinstance(value, dict):
        names = sorted(value, key=lambda name: name.encode("utf-16-be"))
        return (
            "{" + ",".join(f"{plain_rfc_8785(n)}:{plain_rfc_8785(value[n])}" for n in names) + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(plain_rfc_8785(item) for item in value) + "]"
    if isinstance(value, str):
        short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
        short["\r"] = "\\r"
        return (
            '"'
            + "".join(short.get(c, f"\\u{ord(c):04x}" if ord(c) < 0x20 else c) for c in value)
            + '"'
        )
    if value is True or value is False or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, int):
        return str(value)
    return ecmascript(value)


CHARACTERS = [
    "a",
    "b",
    "\x00",
    "\x1f",
    '"',
    "\\",
    "é",
    "\u2028",
    "\ue000",
    "\ufb01",
    "\uffff",
    "😀",
    "\U0010ffff",
]
"""Characters JSON escapes, and ones that sort apart by code point and by UTF-16."""
NAMES = st.text(st.sampled_from(CHARACTERS), max_size=3)


def _documents(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """JSON documents of these scalars, with names that escape and sort apart."""
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(NAMES | st.text(max_size=4), children, max_size=4)
        ),
        max_leaves=12,
    )


_SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text()
JSON = _documents(_SCALARS | st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_documents_match_a_plain_reading_of_rfc_8785(value: Any) -> None:
    """Any JSON value, given as a value or as text in any spelling (escaped or not,
    spaced, members in any order), gives the bytes a plain reading of the RFC gives."""
    expected = plain_rfc_8785(value).encode()
    assert jcs(value) == expected
    assert jcs_text(json.dumps(value).encode()) == expected  # every non-ASCII escaped
    spaced = json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True)
    assert jcs_text(spaced.encode()) == expected


WITHOUT_FLOATS = _documents(_SCALARS | st.text(st.sampled_from(CHARACTERS)))


@settings(max_examples=200, deadline=None)
@given(WITHOUT_FLOATS)
def test_sorted_text_without_floats_is_taken_as_rfc_8785_only_where_it_is(value: Any) -> None:
    """msgspec's sorted text of a value without floats, taken as it is where that is
    RFC 8785's form, gives the bytes the full rewrite gives, whatever its names and
    strings hold (controls, escapes, characters that sort apart in UTF-16)."""
    text = msgspec.json.encode(value, order="sorted")
    assert jcs_of_sorted(text, floats=False) == jcs_text(text) == jcs(value)


@pytest.mark.parametrize("text", [b"[1e400]", b'["\\ud800"]', b"[NaN]", b'{"a":1', b"[" * 100_000])
def test_text_that_is_not_json_rfc_8785_can_write_is_refused(text: bytes) -> None:
    """Numbers beyond a double, lone surrogates, non-JSON and deep nesting: ValueError."""
    with pytest.raises(ValueError, match="not canonical JSON"):
        jcs_text(text)
