"""Every number read from outside (a header, a query, a URL, a stored row) is read by
one function, which takes ASCII digits only and bounds their count: ``str.isdigit``
alone took superscripts and other scripts' digits, which ``int`` then refused with a
ValueError, and a number of more than 4,300 digits, which ``int`` refuses too."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from covonaut_es._text import whole_number

DIGITS_OF_EVERY_SCRIPT = st.characters(categories=["Nd", "No"])


@settings(max_examples=200, deadline=None)
@given(
    st.text(st.sampled_from("0123456789") | DIGITS_OF_EVERY_SCRIPT | st.characters(), max_size=25)
    | st.integers(0, 10**30).map(str),
    st.integers(1, 25),
)
@example("²", 19)
@example("٣", 19)
@example("1" * 5000, 19)
@example("", 19)
def test_a_whole_number_is_ascii_digits_within_their_count(text: str, most: int) -> None:
    number = whole_number(text, most_digits=most)
    if text.isascii() and text.isdigit() and len(text) <= most:
        assert number == int(text)
    else:
        assert number is None
