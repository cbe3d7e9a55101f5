"""What a provider's SDK client sends of its own: which of it is secret, whether HTTP
can send it, and whether it authenticates at all.

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

import attrs

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
    for what, _, value in _sent(client):
        if not isinstance(value, str):
            continue
        for position, char in enumerate(value):
            if not " " <= char <= "~":
                msg = (
                    f"the client's {what} holds U+{ord(char):04X} at position {position}, "
                    "which is not printable ASCII: HTTP cannot send it"
                )
                raise ConfigurationError(msg)
    for what, value in _headers(client).values():
        if isinstance(value, str) and value != value.strip(" "):
            msg = (
                f"the client's {what} begins or ends with a space, which HTTP cannot send: "
                "is its key empty, or pasted with a space?"
            )
            raise ConfigurationError(msg)


@attrs.frozen
class Credentials:
    """Where a vendor SDK's client keeps what it authenticates with.

    Attributes:
        client: The SDK's own client class, whose credentials the others describe. A
            client of another class (a cloud platform's: Azure, Bedrock, Vertex,
            Foundry) authenticates its platform's way, which its SDK checks when the
            client is built.
        variables: The environment variables the SDK reads a key or token from.
        headers: The names, in lower case, of the headers a request authenticates with;
            the SDK puts its client's key or token in one of them.
        attributes: The client's attributes for a credential the SDK adds to each
            request itself (a provider of tokens, a key given as a callable), any one
            of which, set, authenticates the client.
        omittable: Whether the SDK sends the requests of a client that explicitly
            omits its ``Authorization`` header (``Omit``): the caller authenticates
            them past the SDK.
    """

    client: type
    variables: tuple[str, ...]
    headers: tuple[str, ...]
    attributes: tuple[str, ...] = ()
    omittable: bool = False

    def held_by(self, client: object) -> bool:
        """Whether ``client`` has something to authenticate with, as its SDK judges
        before it sends a request: an attribute set, or a header with a value (an empty
        key is none), or ``Authorization`` omitted where the SDK allows it; a client of
        a platform's class, always."""
        if type(client) is not self.client:
            return True
        if any(getattr(client, name, None) for name in self.attributes):
            return True
        return any(
            _carries_credential(value)
            if isinstance(value, str)
            else self.omittable and name == "authorization"
            for name, (_, value) in _headers(client).items()
            if name in self.headers
        )


def _carries_credential(value: str) -> bool:
    """Whether a header's value has a credential in it: the SDKs send an empty key as
    ``Bearer ``, which authenticates nothing (and which HTTP cannot send)."""
    return bool(value.removeprefix("Bearer ").strip())


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


def _headers(client: object) -> dict[str, tuple[str, object]]:
    """The headers ``client`` sends, by their names in lower case, each as (what it is, in
    a message; the value): the SDK merges its own and the caller's as they come, the
    later of one name (in any case) winning, so an omitted Authorization header is not
    sent with the key."""
    return {header.lower(): (what, value) for what, header, value in _sent(client) if header}


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
