"""What of a provider's SDK client is secret, and how an error's text is shown without it.

An API may repeat the key it was sent in its error (a 401 that quotes it, a gateway's
429, an error event in a stream), and the SDK's error, and so the adapter's, would carry
it on into a log, a retry warning and the thread's ``RunFailed`` for good. The secrets
are the client's API key and token, the values of the headers it authenticates with
(its own and any the caller gave it that look like a credential), and the password and
query values of its base URL. :meth:`Secrets.hide` hides, in any text, each of them as
sent, percent-encoded or JSON-escaped, and any piece of one of :data:`_SHORTEST_PIECE`
characters or more (an API that quotes a part of the key); :meth:`Secrets.hidden` does
so in the text of every error of a raised error's chain, as a store's URL's secrets are
hidden (:func:`~covonaut_es.store._url_secrets.scrub_chain`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

import attrs

from covonaut_es.errors import CovonautError
from covonaut_es.store._url_secrets import scrub_chain

_SHORTEST_PIECE = 8
"""A piece of a secret this long is hidden wherever it stands; a secret shorter than
this is hidden only whole."""
_SHORTEST_HIDDEN = 3
"""A shorter value (``"x"`` for a local server that checks no key) is no secret; hidden
everywhere, it would make every message noise."""
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|cookie|password|signature", re.I)
_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")


@attrs.frozen
class Secrets:
    """The forms in which a provider's secrets may be shown.

    Attributes:
        forms: Each secret as sent and as encoded in URLs and JSON text.
    """

    forms: tuple[str, ...] = ()

    @classmethod
    def of_client(cls, client: object) -> Secrets:
        """The secrets ``client`` (an OpenAI or Anthropic SDK client) sends."""
        values = [getattr(client, "api_key", None), getattr(client, "auth_token", None)]
        headers = [getattr(client, "auth_headers", None), getattr(client, "default_headers", None)]
        for mapping in headers:
            if isinstance(mapping, Mapping):
                values += [v for k, v in mapping.items() if _CREDENTIAL_HEADER.search(str(k))]
        base_url = getattr(client, "base_url", None)
        if base_url is not None:
            values += _url_secrets(str(base_url))
        return cls.of(v for v in values if isinstance(v, str))

    @classmethod
    def of(cls, secrets: Iterable[str]) -> Secrets:
        """The forms of ``secrets``; of a header's value ``"Bearer <key>"``, the key's."""
        texts = {" ".join(secret.split()[1:]) or secret for secret in secrets}
        forms = {form for text in texts for form in _forms(text)}
        return cls(tuple(sorted((f for f in forms if len(f) >= _SHORTEST_HIDDEN), key=len)))

    def hide(self, text: str) -> str:
        """``text`` with every form of a secret, and every piece of one at least
        :data:`_SHORTEST_PIECE` characters long, replaced by ``***``."""
        hidden = [False] * len(text)
        for form in self.forms:
            size = min(len(form), _SHORTEST_PIECE)
            pieces = {form[start : start + size] for start in range(len(form) - size + 1)}
            for start in range(len(text) - size + 1):
                if text[start : start + size] in pieces:
                    hidden[start : start + size] = [True] * size
        runs = itertools.groupby(zip(text, hidden, strict=True), key=lambda pair: pair[1])
        return "".join("***" if hide else "".join(c for c, _ in run) for hide, run in runs)

    @contextlib.contextmanager
    def hidden(self) -> Iterator[None]:
        """Around a call to the API: the library's error raised in it has the secrets
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


def _forms(secret: str) -> set[str]:
    """``secret`` as sent, percent-encoded (escapes in either case), and JSON-escaped."""
    encoded = {quote(secret, safe=""), quote(secret), quote_plus(secret)}
    encoded |= {_PERCENT_ESCAPE.sub(lambda m: m.group().lower(), text) for text in encoded}
    return {
        secret,
        *encoded,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }


def _url_secrets(url: str) -> list[str]:
    """A base URL's password and query values (a gateway's key is often one), raw and
    decoded."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # an unreadable URL: the client would not have taken it
        return []
    values = [value for _, value in parse_qsl(parts.query, keep_blank_values=False)]
    if password:
        values += [password, unquote(password)]
    return values
