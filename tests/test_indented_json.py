"""What the inbox shows of a value (a review's arguments, a pause's data, the edit box):
JSON that parses back to the value, laid out on lines for its top levels only, so that
its size stays within a small multiple of the value's, however deep it nests."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es._text import INDENTED_LEVELS, indented_json

_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)


def _nested(value: Any, depth: int) -> Any:
    for n in range(depth):
        value = [value, n] if n % 2 else {"k": value, "n": n}
    return value


@settings(max_examples=200, deadline=None)
@given(value=_VALUES | st.builds(_nested, _VALUES, st.integers(0, 120)))
def test_shown_json_reads_back_and_grows_with_the_value_not_its_depth(value: Any) -> None:
    shown = indented_json(value)
    assert json.loads(shown) == value
    compact = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # Each line is indented at most the top levels' width, and holds some of the value.
    assert len(shown) <= (2 * INDENTED_LEVELS + 4) * len(compact) + 2
    if value == json.loads(json.dumps(value)) and _depth(value) <= INDENTED_LEVELS:
        assert shown == json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _depth(value: Any) -> int:
    if isinstance(value, list | dict) and value:
        items = value.values() if isinstance(value, dict) else value
        return 1 + max(_depth(item) for item in items)
    return 0
