"""The reviewer token an HTTP request carries, for the HTTP apps (the inbox's API, the
AG-UI endpoint): ``Authorization: Bearer <token>``."""

from __future__ import annotations


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization`` header's value, its scheme ``Bearer`` in any
    case; None for another scheme or an empty token."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
