"""What a provider's SDK client sends of its own: which of it is secret, and whether
HTTP can send it.

An API may repeat the key it was sent in its error (a 401 that quotes it, a gateway's
429, an error event in a stream), and the SDK's error, and so the adapter's, would carry
it on into a log, a retry warning and the thread's ``RunFailed`` for good. The secrets
are the client's API key and token, the values of the headers it authenticates with
(its own and any the caller gave it that look like a credential), and the password and
query values of its base URL; :class:`~covonaut_es._secrets.Secrets` hides them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from urllib.parse import parse_qsl, urlsplit

from covonaut_es._secrets import Secrets, credentials, looks_secret
from covonaut_es.errors import ConfigurationError


def client_secrets(client: object) -> Secrets:
    """The secrets ``client`` (an OpenAI or Anthropic SDK client) sends."""
    values = [
        secret
        for _, header, value in _sent(client)
        if isinstance(value, str) and (header is None or looks_secret(header))
        for secret in ([value] if header is None else credentials(value))
    ]
    base_url = getattr(client, "base_url", None)
    if base_url is not None:
        values += _url_secrets(str(base_url))
    return Secrets.of(values)


def check_sendable(client: object) -> None:
    """Refuse a key or header value ``client`` could not send: HTTP sends header values
    as ASCII, and the error for one that is not quotes the whole header, key included;
    nor does it send a header value that begins or ends with a space (an empty key sent
    as ``Bearer ``, a key pasted with a space), which failed each request as a
    connection error.

    Raises:
        ConfigurationError: The API key, the token or a header value holds a character
            that is not printable ASCII, or a header value begins or ends with a space;
            the message names which (and the character's position and code point),
            never the value.
    """
    for what, header, value in _sent(client):
        if not isinstance(value, str):
            continue
        for position, char in enumerate(value):
            if not " " <= char <= "~":
                msg = (
                    f"the client's {what} holds U+{ord(char):04X} at position {position}, "
                    "which is not printable ASCII: HTTP cannot send it"
                )
                raise ConfigurationError(msg)
        if header is not None and value != value.strip(" "):
            msg = (
                f"the client's {what} begins or ends with a space, which HTTP cannot send: "
                "is its key empty, or pasted with a space?"
            )
            raise ConfigurationError(msg)


def _sent(client: object) -> Iterator[tuple[str, str | None, object]]:
    """What ``client`` sends with every request: its API key, its token and each of its
    headers, as (what it is, in a message; the header's name, or None; the value)."""
    yield "api_key", None, getattr(client, "api_key", None)
    yield "auth_token", None, getattr(client, "auth_token", None)
    for attribute in ("auth_headers", "default_headers"):
        headers = getattr(client, attribute, None)
        if isinstance(headers, Mapping):
            for name, value in headers.items():
                yield f"header {str(name)[:40]!r}", str(name), value


def _url_secrets(url: str) -> list[str]:
    """A base URL's password and the values of its query parameters that carry a
    credential (a gateway's key is often one)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # an unreadable URL: the client would not have taken it
        return []
    values = [v for k, v in parse_qsl(parts.query, keep_blank_values=False) if looks_secret(k)]
    if password:
        values.append(password)
    return values
