"""The one way secrets are hidden in text (``covonaut_es._secrets``), for the model
providers, MCP servers and a store's URL alike."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es._secrets import SHORTEST_PIECE, Secrets, _apart


def _hidden_by_definition(secrets: Secrets, text: str) -> str:
    """``Secrets.hide`` as its docstring says, position by position: every piece of a
    long form, every short form standing apart."""
    hidden = [False] * len(text)
    for form in secrets.forms:
        size = min(len(form), SHORTEST_PIECE)
        pieces = {form[i : i + size] for i in range(len(form) - size + 1)}
        for start in range(len(text) - size + 1):
            if text[start : start + size] in pieces and (
                size == SHORTEST_PIECE or _apart(text, start, start + size)
            ):
                hidden[start : start + size] = [True] * size
    shown = []
    for index, character in enumerate(text):
        if not hidden[index]:
            shown.append(character)
        elif index == 0 or not hidden[index - 1]:
            shown.append("***")
    return "".join(shown)


_SECRET = st.text(string.ascii_letters + string.digits + "-_+/=%@: ", min_size=3, max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    secrets=st.lists(_SECRET, min_size=1, max_size=3),
    parts=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(0, 60))
        | st.text(string.printable, max_size=12),
        max_size=12,
    ),
)
def test_hide_is_its_definition_on_text_that_quotes_pieces_of_secrets(
    secrets: list[str], parts: list[tuple[int, int, int] | str]
) -> None:
    """Property: ``hide`` (which looks for pieces only around a block of a secret that
    ``str.find`` finds, to stay linear in the text) hides exactly what hiding every
    piece position by position hides, on text made of filler and slices of the
    secrets' forms."""
    hider = Secrets.of(secrets)
    forms = hider.forms
    text = "".join(
        part if isinstance(part, str) else forms[part[0] % len(forms)][part[1] : part[2]]
        for part in parts
    )
    assert hider.hide(text) == _hidden_by_definition(hider, text)


def test_no_secrets_hide_nothing() -> None:
    assert Secrets().hide("any text at all") == "any text at all"
    assert Secrets.of(["ab"]).hide("ab cd") == "ab cd"  # under three characters: no secret
