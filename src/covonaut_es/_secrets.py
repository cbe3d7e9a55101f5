"""Secrets in text: each in the forms a message may quote it, and that text shown
without them.

A service the library talks to may repeat what it was sent in its error (a model API
that quotes its key in a 401, a gateway or an MCP server that quotes the request): the
error's text would carry the secret on into a log, a retry warning, a tool's result and
a thread's record for good. Who knows what is secret makes its :class:`Secrets` (the
model providers from their SDK client, an MCP server from its URL, headers and
environment); :meth:`Secrets.hide` hides each secret, in each form, and each piece of one
at least :data:`SHORTEST_PIECE` characters long; :func:`scrub_chain` does so in the
text of every error of a raised error's chain (a store's URL uses it too).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import attrs

from covonaut_es._text import exception_text
from covonaut_es.errors import CovonautError

SHORTEST_PIECE = 8
"""A piece of a secret this long is hidden wherever it stands (an API that quotes a part
of the key); a secret shorter than this is hidden only whole."""
SHORTEST_HIDDEN = 3
"""A shorter value (``"x"`` for a local server that checks no key) is no secret: hidden
everywhere, it would make every message noise."""

_HIDDEN = "***"
_BLOCK = SHORTEST_PIECE // 2
_CREDENTIAL_NAME = re.compile(r"auth|key|token|secret|cookie|password|signature|sig", re.I)
_SCHEME = re.compile(r"[A-Za-z][\w.+-]*\s+(\S+)")


@attrs.frozen
class Secrets:
    """The forms in which some secrets may be quoted, and how a text is shown without
    them.

    Attributes:
        forms: Each secret as given, percent-decoded, percent-encoded (escapes in either
            case), JSON-escaped and in base64; shortest first.
    """

    forms: tuple[str, ...] = ()
    _short: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False)
    _blocks: frozenset[str] = attrs.field(factory=frozenset, eq=False, repr=False)
    _pieces: frozenset[str] = attrs.field(factory=frozenset, eq=False, repr=False)

    @classmethod
    def of(cls, secrets: Iterable[str]) -> Secrets:
        """The forms of ``secrets`` (of a header's value, give :func:`credential` of it)."""
        texts = set(secrets)
        forms = sorted(
            {form for text in texts for form in _forms(text) if len(form) >= SHORTEST_HIDDEN},
            key=len,
        )
        long = [form for form in forms if len(form) >= SHORTEST_PIECE]
        return cls(
            tuple(forms),
            tuple(form for form in forms if len(form) < SHORTEST_PIECE),
            frozenset(
                form[start : start + _BLOCK]
                for form in long
                for start in range(0, len(form) - _BLOCK + 1, _BLOCK)
            ),
            frozenset(
                form[start : start + SHORTEST_PIECE]
                for form in long
                for start in range(len(form) - SHORTEST_PIECE + 1)
            ),
        )

    def hide(self, text: str) -> str:
        """``text`` with every form of a secret, and every piece of one at least
        :data:`SHORTEST_PIECE` characters long, replaced by ``***``; a shorter secret only
        where it stands apart from letters and digits (``"json"`` of a URL's
        ``?format=json`` is no reason to hide every word "json"). Its time is linear in
        the text's length: a piece is looked for only around a block of a secret found
        by ``str.find``."""
        spans: list[tuple[int, int]] = []
        for form in self._short:
            spans += [
                (start, start + len(form))
                for start in _found(text, form)
                if _apart(text, start, start + len(form))
            ]
        # Each piece holds a whole block of its form (blocks are cut every _BLOCK
        # characters, half a piece): it stands within _BLOCK characters before one.
        for block in self._blocks:
            for found in _found(text, block):
                spans += [
                    (start, start + SHORTEST_PIECE)
                    for start in range(max(0, found - _BLOCK), found + 1)
                    if text[start : start + SHORTEST_PIECE] in self._pieces
                ]
        if not spans:
            return text
        shown: list[str] = []
        shown_to = 0
        for start, end in sorted(spans):
            if start > shown_to:
                shown += [text[shown_to:start], _HIDDEN]
            elif not shown:
                shown.append(_HIDDEN)
            shown_to = max(shown_to, end)
        shown.append(text[shown_to:])
        return "".join(shown)

    @contextlib.contextmanager
    def hidden(self) -> Iterator[None]:
        """Around a call to a service: the library's error raised in it has the secrets
        hidden in its text and in the text of each error it was raised from or during.

        Raises:
            CovonautError: What the call raised, its chain scrubbed.
        """
        try:
            yield
        except CovonautError as exc:
            if self.forms:
                scrub_chain(exc, self.hide)
            raise


def scrub_chain(error: BaseException, scrubbed: Callable[[str], str]) -> None:
    """Replace the text of ``error``, and of each error it was raised from or during, by
    ``scrubbed`` of it, where that differs; an error whose text is not its args (its
    text cannot be replaced) is cut from the chain, with the errors behind it."""
    earlier: BaseException | None = None
    link: BaseException | None = error
    while link is not None:
        if (hidden := scrubbed(exception_text(link))) != exception_text(link):
            link.args = (hidden,)
            if earlier is not None and scrubbed(exception_text(link)) != exception_text(link):
                earlier.__cause__, earlier.__suppress_context__ = None, True
                break
        earlier, link = link, link.__cause__ or link.__context__


def looks_secret(name: str) -> bool:
    """Whether a header or a URL's query parameter of this name carries a credential (an
    ``Authorization``, an ``api-key``, a ``token``), rather than a setting (an
    ``api-version``, a ``format``) whose value words in any message may repeat."""
    return _CREDENTIAL_NAME.search(name) is not None


def _found(text: str, part: str) -> Iterator[int]:
    """Where ``part`` starts in ``text``, each place, overlapping ones too."""
    start = text.find(part)
    while start != -1:
        yield start
        start = text.find(part, start + 1)


def _apart(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` has no letter or digit right before or after it."""
    before = start == 0 or not text[start - 1].isalnum()
    return before and (end == len(text) or not text[end].isalnum())


def credential(header_value: str) -> str:
    """The secret of a header's value: the credential after its scheme (``Bearer
    <key>``: the scheme is no secret, and its pieces would hide the words around the
    key wherever it is quoted), else the whole value."""
    scheme = _SCHEME.fullmatch(header_value.strip())
    return header_value if scheme is None else scheme[1]


def _forms(secret: str) -> set[str]:
    """``secret`` as given and percent-decoded, each as is, percent-encoded (escapes in
    either case), JSON-escaped and in base64."""
    forms: set[str] = set()
    for text in {secret, unquote(secret), unquote_plus(secret)}:
        encoded = {quote(text, safe=""), quote(text), quote_plus(text)}
        forms |= encoded | {_lower_escapes(form) for form in encoded}
        forms |= {
            text,
            json.dumps(text)[1:-1],
            json.dumps(text, ensure_ascii=False)[1:-1],
            base64.b64encode(text.encode("utf-8", "surrogatepass")).decode(),
        }
    return forms


def _lower_escapes(text: str) -> str:
    """``text`` with each percent escape's hex digits in lower case."""
    parts = text.split("%")
    return parts[0] + "".join(f"%{part[:2].lower()}{part[2:]}" for part in parts[1:])
