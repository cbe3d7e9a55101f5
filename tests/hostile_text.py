"""Text as a hostile model, client or file may hold it, for generated tests."""

from __future__ import annotations

from hypothesis import strategies as st


def hostile_text(*, min_size: int = 0, max_size: int = 8) -> st.SearchStrategy[str]:
    """Text with lone surrogates (a JSON ``"\\ud800"`` escape, decoded), NUL and other
    control characters among ordinary ones. A list of characters joined: ``st.text``
    over this alphabet drew no surrogate in 100 examples (hypothesis 6.170), and
    ``st.characters`` leaves them out unless asked for by code point or category."""
    return st.lists(
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
        | st.characters(max_codepoint=0x1F)
        | st.characters(),
        min_size=min_size,
        max_size=max_size,
    ).map("".join)


_BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def no_token_character(*, argv: bool = False) -> st.SearchStrategy[str]:
    """A character no reviewer token holds: a lone surrogate, a control or format
    character, a space, a non-ASCII letter, or ASCII punctuation outside base64url
    (padding, ``+`` and ``/`` aside: PyJWT reads them as base64). With ``argv``, only
    what a command line carries: no NUL, and only the surrogates a byte that is no
    UTF-8 decodes to (U+DC80 to U+DCFF)."""
    surrogates = (0xDC80, 0xDCFF) if argv else (0xD800, 0xDFFF)
    return (
        st.characters(min_codepoint=surrogates[0], max_codepoint=surrogates[1])
        | st.characters(categories=["Cc", "Cf", "Zs", "Zl", "Zp"], exclude_characters="\x00")
        | st.characters(min_codepoint=0x80)
        | st.sampled_from("!\"#$%&'()*,:;<>?@[\\]^`{|}~ \t\n\x1b")
    ).filter(lambda char: char not in _BASE64URL)


@st.composite
def spoiled_tokens(draw: st.DrawFn, token: str, *, argv: bool = False) -> str:
    """``token`` with :func:`no_token_character` put in at any position."""
    at = draw(st.integers(0, len(token)))
    return token[:at] + draw(no_token_character(argv=argv)) + token[at:]
