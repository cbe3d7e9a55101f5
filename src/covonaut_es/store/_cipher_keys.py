"""A store's cipher key, read once and strictly: the base64 text of an AES key.

eventsourcing's AES ciphers decode their key leniently: a character outside base64's
alphabet (a space, a line end, a ``!``) is dropped. Everything the store derives from
the key (its recorded fingerprint, its keyed stream ids, the review queue's index key)
must be derived from the bytes the cipher encrypts with, or two keys could share a
fingerprint while encrypting differently. So a key is taken only when the strict
reading and the lenient one cannot differ: :func:`aes_key` is the one check of it.
"""

from __future__ import annotations

import base64
import binascii

from covonaut_es.errors import ConfigurationError

AES_KEY_SIZES = (16, 24, 32)
"""The lengths in bytes of an AES-128, AES-192 and AES-256 key."""


def aes_key(cipher_key: str) -> bytes:
    """The AES key that ``cipher_key`` is the base64 of.

    Raises:
        ConfigurationError: It is not text, not base64 (strictly: only the alphabet and its
            padding, no space or line end), or not of 16, 24 or 32 bytes. The key is
            not shown.
    """
    if not isinstance(cipher_key, str):
        raise refused_cipher_key(f"it is a {type(cipher_key).__name__}, not text")
    try:
        key = base64.b64decode(cipher_key, validate=True)
    except (binascii.Error, ValueError):  # ValueError: text that is no ASCII
        raise refused_cipher_key("it is not base64") from None
    if len(key) not in AES_KEY_SIZES:
        raise refused_cipher_key("it is not 16, 24 or 32 bytes long") from None
    return key


def refused_cipher_key(found: str) -> ConfigurationError:
    """The error refusing a cipher key for what was ``found`` wrong with it; raise it
    unchained, since a decoder's own message may quote the key."""
    return ConfigurationError(
        f"the cipher key (CIPHER_KEY) is not one the cipher takes: {found}; expected "
        "the base64 of 16, 24 or 32 bytes, as create_cipher_key() returns (its alphabet "
        "and padding only: no space or line end)"
    )
