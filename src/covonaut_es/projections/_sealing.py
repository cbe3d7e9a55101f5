"""Sealing the reviewer queue of an encrypted store.

When the store has a cipher key, the queue's tables hold no thread id, reason, tool
argument or other item text in clear: each item is encrypted with eventsourcing's
``AESCipher`` (AES-GCM) under the store's own key, and the ids the view must look rows
up by are kept as keyed digests (HMAC-SHA256 under a key derived from the cipher key),
which reveal only which rows share a value.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from eventsourcing.utils import Environment

from covonaut_es.errors import ConfigurationError

_INDEX_KEY_LABEL = b"covonaut-es review queue index digests v1"
"""Derives the digest key from the cipher key; changing it orphans every sealed view."""


class QueueSealer:
    """Encrypts queue items and digests their ids under one store's key.

    Args:
        key: The AES key to seal under (:func:`~covonaut_es.store._cipher_keys.queue_key`:
            the store's own, or one derived from an application's own cipher's key).

    Raises:
        ConfigurationError: The ``encryption`` extra is missing.
    """

    def __init__(self, key: bytes) -> None:
        try:
            from eventsourcing.cryptography import AESCipher
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            msg = (
                "an encrypted store's review queue needs the 'cryptography' package: "
                "pip install 'covonaut-es[encryption]'"
            )
            raise ConfigurationError(msg) from exc
        text = base64.b64encode(key).decode()
        self._cipher = AESCipher(Environment(env={AESCipher.CIPHER_KEY: text}))
        self._index_key = hmac.new(key, _INDEX_KEY_LABEL, hashlib.sha256).digest()

    def digest(self, value: str) -> str:
        """The keyed digest that stands for ``value`` in an indexed column."""
        data = value.encode("utf-8", "surrogatepass")
        return hmac.new(self._index_key, data, hashlib.sha256).hexdigest()

    def seal(self, plaintext: bytes) -> bytes:
        """Encrypt ``plaintext`` (a fresh nonce each time)."""
        return self._cipher.encrypt(plaintext)

    def open(self, sealed: object) -> bytes:
        """Decrypt what :meth:`seal` made, as a driver reads it back.

        Raises:
            ValueError: It is no bytes (a SQLite cell holds whatever a writer put in it:
                ``bytes()`` of an integer would build that many zero bytes), or was
                sealed under another key, or was altered.
        """
        if not isinstance(sealed, bytes | memoryview):
            msg = f"a sealed value is bytes, not {type(sealed).__name__}"
            raise ValueError(msg)
        return self._cipher.decrypt(bytes(sealed))
