"""The one way secrets are hidden in text (``covonaut_es._secrets``), for the model
providers, MCP servers and a store's URL alike."""

from __future__ import annotations

import base64
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es._secrets import SHORTEST_PIECE, Secrets, _apart, credentials


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


@settings(max_examples=100, deadline=None)
@given(
    secret=st.binary(min_size=8, max_size=40),
    before=st.binary(max_size=20),
    after=st.binary(max_size=20),
    url_safe=st.booleans(),
)
def test_a_secret_in_base64_is_hidden_wherever_it_stands_in_what_was_encoded(
    secret: bytes, before: bytes, after: bytes, url_safe: bool
) -> None:
    """Property: base64 of a text that holds a secret (a server echoing its request's
    headers encoded: ``Authorization: Bearer <token>``) shows no piece of the characters
    the secret alone determines, whatever its offset from a 3-byte boundary; it was
    hidden only at offset 0 (helper-186)."""
    encode = base64.urlsafe_b64encode if url_safe else base64.b64encode
    text = secret.decode("latin-1")  # any bytes, as the text of one secret
    encoded = encode(before + text.encode() + after).decode()
    offset, size = len(before), len(text.encode())
    own = encoded[-(-8 * offset // 6) : 8 * (offset + size) // 6]
    shown = Secrets.of([text]).hide(encoded)
    assert not any(own[i : i + SHORTEST_PIECE] in shown for i in range(len(own) - 7))


def test_a_basic_headers_user_password_and_pair_are_its_secrets() -> None:
    """A ``Basic`` header's password and pair are hidden decoded, as a URL's are: a
    gateway may quote what it read (helper-186). The user's name alone is no secret: a
    short one (``api``, Mailgun's) hid that word in every message (helper-188)."""
    header = "Basic " + base64.b64encode(b"alice:s3cret-pass").decode()
    assert credentials(header)[1:] == ["alice:s3cret-pass", "s3cret-pass"]
    hider = Secrets.of(credentials(header))
    assert hider.hide("user alice, password s3cret-pass") == "user alice, password ***"
    assert hider.hide("alice:s3cret-pass") == "***"
    assert credentials("Bearer tok-123456") == ["tok-123456"]
    assert credentials("a whole value") == ["a whole value"]
