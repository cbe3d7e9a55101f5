"""Canonical JSON: the bytes every digest of the domain is taken over."""

from __future__ import annotations

from typing import Any

import msgspec


def canonical_json(value: Any) -> bytes:
    """JSON with object keys sorted (by code point) at every level, no whitespace, UTF-8.

    Equal parsed values give equal bytes, whatever the key order and spacing of the
    text they were parsed from. Numbers keep their kind: ``40`` and ``40.0`` differ.
    """
    return msgspec.json.encode(value, order="sorted")
