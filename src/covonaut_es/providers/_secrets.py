"""What of a provider's SDK client is secret.

An API may repeat the key it was sent in its error (a 401 that quotes it, a gateway's
429, an error event in a stream), and the SDK's error, and so the adapter's, would carry
it on into a log, a retry warning and the thread's ``RunFailed`` for good. The secrets
are the client's API key and token, the values of the headers it authenticates with
(its own and any the caller gave it that look like a credential), and the password and
query values of its base URL; :class:`~covonaut_es._secrets.Secrets` hides them.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qsl, urlsplit

from covonaut_es._secrets import Secrets, credentials, looks_secret


def client_secrets(client: object) -> Secrets:
    """The secrets ``client`` (an OpenAI or Anthropic SDK client) sends."""
    values = [getattr(client, "api_key", None), getattr(client, "auth_token", None)]
    headers = [getattr(client, "auth_headers", None), getattr(client, "default_headers", None)]
    for mapping in headers:
        if isinstance(mapping, Mapping):
            values += [
                secret
                for k, v in mapping.items()
                if isinstance(v, str) and looks_secret(str(k))
                for secret in credentials(v)
            ]
    base_url = getattr(client, "base_url", None)
    if base_url is not None:
        values += _url_secrets(str(base_url))
    return Secrets.of(v for v in values if isinstance(v, str))


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
