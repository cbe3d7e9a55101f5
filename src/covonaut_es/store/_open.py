"""Opening a store: from a URL and options to a :class:`~covonaut_es.store.Store`."""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Callable
from datetime import datetime

from covonaut_es._clock import utc_now
from covonaut_es.errors import ConfigurationError, StoreUnavailableError
from covonaut_es.store._application import CHAIN_KEY_ENV, checked_chain_key
from covonaut_es.store._store import Store
from covonaut_es.store._urls import SQLITE_PATH, canonical_url, redact, store_env


def create_cipher_key(num_bytes: int = 32) -> str:
    """A new random AES key for ``open_store(..., cipher_key=...)``: base64 text.

    Keep it secret and safe: without it the store cannot be read.
    """
    if num_bytes not in (16, 24, 32):
        msg = f"an AES key has 16, 24 or 32 bytes, not {num_bytes}"
        raise ConfigurationError(msg)
    return base64.b64encode(secrets.token_bytes(num_bytes)).decode()


def open_store(
    url: str,
    *,
    max_checkpoints_per_thread: int = 0,
    cipher_key: str | None = None,
    compress: bool | None = None,
    create_tables: bool = True,
    clock: Callable[[], datetime] = utc_now,
    chain_key: str | None = None,
) -> Store:
    """Open a thread store.

    Args:
        url: ``memory://`` (this process only, lost at exit; ``memory://NAME`` is
            shared by stores and projections of this process that use the same name),
            ``sqlite:///path.db``
            (a file; ``sqlite:////abs/path.db`` for an absolute path; ``?mode=ro``
            opens it read-only) or ``postgresql://user:password@host:port/dbname``
            (needs the ``postgres`` extra; every libpq parameter in its query, such
            as ``?sslmode=require``, reaches each connection).
        max_checkpoints_per_thread: Keep only this many newest checkpoints per thread;
            0 keeps all. Evicting a checkpoint never deletes events.
        cipher_key: Encrypt stored events and snapshots with AES-GCM under this key
            (base64 of 16, 24 or 32 bytes; see :func:`create_cipher_key`). Needs the
            ``encryption`` extra.
        compress: Compress stored events and snapshots with zlib (True) or not
            (False). By default (None) an existing store is opened as it records it
            was created, and a new one is not compressed.
        create_tables: Create the store's tables (and a SQLite file) when they are
            missing. Tools that must not write pass False.
        clock: The time of the events the store itself writes (forks, labels,
            abandonments) when the call passes no ``now``.
        chain_key: Seal the hash chain with HMAC-SHA256 under this secret (at least 16
            characters), so that write access to the database without it cannot seal
            altered events again; open the store with it to verify (ADRs 0013, 0029).
            The first open that may write with a key adopts it: from then on every
            new event must be sealed with it, and opens that may write need it.

    Raises:
        StoreURLError: The URL's scheme is unknown or the URL is malformed.
        ConfigurationError: An option is invalid or its optional package is missing.
        StoreSettingsError: The cipher key or compression is not the one the store was
            created with (``CipherKeyMismatchError``, ``CompressionMismatchError``), or
            the store adopted a chain key and the open may write without it
            (``ChainKeyRequiredError``), or the chain key given is another
            (``ChainKeyMismatchError``).
        NotAStoreError: The database is not a store, or holds another application's
            tables (``ForeignSchemaError``).
        ReadOnlyStoreError: The SQLite file is read-only and the open may write.
        StoreUnavailableError: The database cannot be reached.
    """
    env = store_env(url, cipher_key=cipher_key, compress=compress)
    if chain_key is not None:
        env[CHAIN_KEY_ENV] = checked_chain_key(chain_key)
    if not create_tables:
        env["CREATE_TABLE"] = "n"
        sqlite_file = env.get(SQLITE_PATH)
        if sqlite_file is not None and not os.path.exists(sqlite_file):
            msg = f"store {redact(url)}: there is no SQLite file {sqlite_file!r} to open"
            raise StoreUnavailableError(msg)
    return Store(
        canonical_url(url, env),
        env,
        max_checkpoints_per_thread=max_checkpoints_per_thread,
        clock=clock,
    )
