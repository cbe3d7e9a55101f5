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
import hashlib
import hmac
from collections.abc import Mapping

from covonaut_es.errors import ConfigurationError

AES_KEY_SIZES = (16, 24, 32)
"""The lengths in bytes of an AES-128, AES-192 and AES-256 key."""

_AES_CIPHERS = ("eventsourcing.cipher:AESCipher", "eventsourcing.cryptography:AESCipher")
"""eventsourcing's AES ciphers (9.4); the first is the one it makes of a ``CIPHER_KEY``
given without a ``CIPHER_TOPIC``."""


_OWN_CIPHER_QUEUE_LABEL = b"covonaut-es review queue key of an application's own cipher v1"
"""Derives an AES key for the review queue from the key of a cipher that is no AES one."""


def queue_key(env: Mapping[str, str]) -> bytes | None:
    """The AES key the review queue of a store with this environment is sealed under:
    None without a ``CIPHER_KEY``; the store's own AES key for eventsourcing's AES
    ciphers; for a cipher of the application's own, an AES-256 key derived from its key.

    Raises:
        ConfigurationError: As :func:`key_material`.
    """
    material = key_material(env)
    if material is None or _is_aes(env):
        return material
    return hmac.new(material, _OWN_CIPHER_QUEUE_LABEL, hashlib.sha256).digest()


def _is_aes(env: Mapping[str, str]) -> bool:
    """Whether the store's cipher is one of eventsourcing's AES ciphers."""
    return (env.get("CIPHER_TOPIC") or _AES_CIPHERS[0]) in _AES_CIPHERS


def key_material(env: Mapping[str, str]) -> bytes | None:
    """The bytes a store derives what it keeps of its key from (the key's fingerprint,
    keyed stream ids, snapshot seals), from an eventsourcing environment: None without a
    ``CIPHER_KEY``; the AES key (:func:`aes_key`) for eventsourcing's AES ciphers, which
    it makes without a ``CIPHER_TOPIC`` too; the key's text as UTF-8 for a cipher of
    the application's own, which reads its key its own way.

    Raises:
        ConfigurationError: A cipher is named and no key given, or as
            :func:`aes_key` for an AES cipher's key.
    """
    key = env.get("CIPHER_KEY")
    if not key:
        if env.get("CIPHER_TOPIC"):  # a cipher named, and no key for it
            raise _refused("it is not set")
        return None
    if _is_aes(env):
        return aes_key(key)
    return key.encode("utf-8", "surrogatepass")


def aes_key(cipher_key: str, *, named: str = "CIPHER_KEY") -> bytes:
    """The AES key that ``cipher_key`` is the base64 of; ``named`` says where it was
    given, as a refusal names it (an application's setting, an argument, the variable
    an option names).

    Raises:
        ConfigurationError: It is not text, not base64 (strictly: only the alphabet and its
            padding, no space or line end), or not of 16, 24 or 32 bytes. The key is
            not shown.
    """
    if not isinstance(cipher_key, str):
        raise _refused(f"it is a {type(cipher_key).__name__}, not text", named)
    try:
        key = base64.b64decode(cipher_key, validate=True)
    except (binascii.Error, ValueError):  # ValueError: text that is no ASCII
        raise _refused("it is not base64", named) from None
    if len(key) not in AES_KEY_SIZES:
        raise _refused("it is not 16, 24 or 32 bytes long", named) from None
    if base64.b64encode(key).decode() != cipher_key:
        # Another text of the same bytes (its last character's unused bits set): what
        # is keyed on the text, a snapshot's seal, would differ.
        raise _refused("it is not base64 as create_cipher_key() writes it", named)
    return key


def _refused(found: str, named: str = "CIPHER_KEY") -> ConfigurationError:
    """The error refusing a cipher key given as ``named`` for what was ``found`` wrong
    with it; raise it unchained, since a decoder's own message may quote the key."""
    return ConfigurationError(
        f"the cipher key ({named}) is not one the cipher takes: {found}; expected "
        "the base64 of 16, 24 or 32 bytes, as create_cipher_key() returns (its alphabet "
        "and padding only: no space or line end)"
    )
