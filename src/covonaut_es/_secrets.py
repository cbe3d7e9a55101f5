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
_QUARTER = SHORTEST_PIECE // 2
_URL_SAFE = str.maketrans("+/", "-_")
_CREDENTIAL_NAME = re.compile(
    r"auth|key|token|secret|cookie|pass|pwd|credential|signature|sig|code", re.I
)
_SCHEME = re.compile(r"([A-Za-z][\w.+-]*)\s+(\S+)")


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
    _quarters: frozenset[str] = attrs.field(factory=frozenset, eq=False, repr=False)
    _pieces: frozenset[str] = attrs.field(factory=frozenset, eq=False, repr=False)

    @classmethod
    def of(cls, secrets: Iterable[str]) -> Secrets:
        """The forms of ``secrets`` (of a header's value, give its :func:`credentials`)."""
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
                form[start : start + _QUARTER]
                for form in long
                for start in range(len(form) - _QUARTER + 1)
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
        the text's length, a step of it every four characters."""
        spans: list[tuple[int, int]] = []
        for form in self._short:
            spans += [
                (start, start + len(form))
                for start in _found(text, form)
                if _apart(text, start, start + len(form))
            ]
        # A piece's eight characters hold the four of the text from a multiple of
        # four, which are four of its form's: only there can a piece stand, within
        # four characters before them.
        quarters = range(0, len(text) - _QUARTER + 1, _QUARTER)
        for found in [at for at in quarters if text[at : at + _QUARTER] in self._quarters]:
            spans += [
                (start, start + SHORTEST_PIECE)
                for start in range(max(0, found - _QUARTER), found + 1)
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
    ``Authorization``, an ``api-key``, a ``token``, an Azure function's ``code``, an
    S3 ``X-Amz-Credential``), rather than a setting (an ``api-version``, a ``format``)
    whose value words in any message may repeat."""
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


def credentials(header_value: str) -> list[str]:
    """The secrets of a header's value: the credential after its scheme (``Bearer
    <key>``: the scheme is no secret, and its pieces would hide the words around the
    key wherever it is quoted), and of a ``Basic`` one also the password and the
    ``user:password`` pair it encodes (a user's name alone is no secret, and hidden it
    would hide that word wherever it stands); else the whole value."""
    scheme = _SCHEME.fullmatch(header_value.strip())
    if scheme is None:
        return [header_value]
    found = [scheme[2]]
    if scheme[1].lower() == "basic":
        try:
            pair = base64.b64decode(scheme[2], validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return found
        found += [pair, pair.partition(":")[2]]
    return found


def _forms(secret: str) -> set[str]:
    """``secret`` as given and percent-decoded, each as is, percent-encoded (escapes in
    either case), JSON-escaped and in base64 (:func:`_base64_forms`)."""
    forms: set[str] = set()
    for text in {secret, unquote(secret), unquote_plus(secret)}:
        encoded = {quote(text, safe=""), quote(text), quote_plus(text)}
        forms |= encoded | {_lower_escapes(form) for form in encoded}
        forms |= {text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}
        forms |= _base64_forms(text.encode("utf-8", "surrogatepass"))
    return forms


def _base64_forms(secret: bytes) -> set[str]:
    """The characters of base64 (and its URL-safe alphabet) that ``secret`` alone
    determines, wherever it stands in the text encoded: at each of the three offsets
    from a 3-byte boundary (``Basic`` of ``user:key``, a header echoed whole), the
    characters that also hold bits of the bytes around it are left out."""
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + secret).decode()
        start, end = -(-8 * offset // 6), 8 * (offset + len(secret)) // 6
        own = encoded[start:end]
        forms |= {own, own.translate(_URL_SAFE)}
    return forms


def _lower_escapes(text: str) -> str:
    """``text`` with each percent escape's hex digits in lower case."""
    parts = text.split("%")
    return parts[0] + "".join(f"%{part[:2].lower()}{part[2:]}" for part in parts[1:])
