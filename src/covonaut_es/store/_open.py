"""Opening a store: from a URL and options to a :class:`~covonaut_es.store.Store`; and
how a follower of an application's log (the reviewer queue) opens that application
again, with the application's own settings (:func:`log_source`).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

import attrs
from eventsourcing.application import Application

from covonaut_es._arguments import check_text
from covonaut_es._clock import utc_now
from covonaut_es.errors import ConfigurationError
from covonaut_es.store._application import (
    CHAIN_KEY_ENV,
    STORE_APPLICATION_NAME,
    AgentApplication,
    ThreadsApplication,
    checked_chain_key,
)
from covonaut_es.store._backend import MODULES, backend_for_env, backend_of
from covonaut_es.store._chain_key import SEALS_NOTHING
from covonaut_es.store._cipher_keys import AES_KEY_SIZES, aes_key
from covonaut_es.store._store import Store
from covonaut_es.store._url_secrets import redact, secrets_hidden
from covonaut_es.store._urls import (
    Compression,
    canonical_url,
    store_env,
)


def create_cipher_key(num_bytes: int = 32) -> str:
    """A new random AES key for ``open_store(..., cipher_key=...)``: base64 text.

    Keep it secret and safe: without it the store cannot be read.
    """
    if num_bytes not in AES_KEY_SIZES:
        msg = f"an AES key has 16, 24 or 32 bytes, not {num_bytes}"
        raise ConfigurationError(msg)
    return base64.b64encode(secrets.token_bytes(num_bytes)).decode()


def open_store(
    url: str,
    *,
    max_checkpoints_per_thread: int = 0,
    cipher_key: str | None = None,
    compress: bool | Compression | None = None,
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
        compress: How a new store compresses its events: ``"zstd"``, each in a frame
            of its own with the dictionary the package ships (the default); ``"zlib"``
            (also ``True``), eventsourcing's compressor; ``"none"`` (also ``False``).
            Snapshots are zstd frames whatever it says. By default (None) an existing
            store is opened as it records it was created, and a new one uses
            ``"zstd"``; given, it must be what the store records.
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
    check_text("open_store(url)", url)
    if cipher_key is not None:
        aes_key(cipher_key, named="open_store(cipher_key=)")
    with secrets_hidden(url):  # the store is given the URL as its messages show it
        env = store_env(url, cipher_key=cipher_key, compress=compress, create_tables=create_tables)
        if chain_key is not None:
            env[CHAIN_KEY_ENV] = checked_chain_key(chain_key)
        return Store(
            canonical_url(url, env),
            env,
            max_checkpoints_per_thread=max_checkpoints_per_thread,
            clock=clock,
        )


@attrs.frozen
class LogSource:
    """How a follower of a store's log (the reviewer queue) opens the application that
    writes it, in a process or thread of its own.

    Attributes:
        application_class: The class to open: a store's own, or the user's.
        name: The application's name, which its followers record their positions under
            (and, on PostgreSQL, its tables are named after).
        env: Its persistence settings, each as the application reads it, on the
            store's back end of the same database (which a follower can subscribe to).
        shown: Names the log in messages (no password).
        url: The store's URL, which opens it again (None for an application of the
            user's own, opened from ``application_class`` and ``env``).
        cipher_key: The key its records are encrypted with, if they are.
        opens_store: The follower opens the store first, creating its tables: a store
            of :func:`open_store`'s; never an application of the user's own, whose
            tables are its own to create.
    """

    application_class: type[AgentApplication]
    name: str
    env: dict[str, str]
    shown: str
    url: str | None = None
    cipher_key: str | None = None
    opens_store: bool = False


def store_log(url: str, env: dict[str, str]) -> LogSource:
    """The log of the store at ``url``, opened with ``env`` (:func:`store_env`'s).

    Raises:
        NotAStoreError: The database is not a store (``ForeignSchemaError``: an
            application's tables), checked before anything reads or creates a table.
    """
    with secrets_hidden(url):
        backend_for_env(env).check_file(env, redact(url))
    opened_again = canonical_url(url, env)
    return LogSource(
        ThreadsApplication,
        STORE_APPLICATION_NAME,
        {**env, SEALS_NOTHING: "y"},  # a follower reads threads, and needs no chain key
        redact(opened_again),
        url=opened_again,
        cipher_key=env.get("CIPHER_KEY"),
        opens_store=True,
    )


def log_source(application: Application[UUID]) -> LogSource:
    """The log of an application of the user's own, as its environment configures it:
    the same tables, never a store's tables beside them.

    Raises:
        ConfigurationError: It is not an ``AgentApplication``, or it keeps its events in
            this process's memory, where no other application can follow them.
    """
    if not isinstance(application, AgentApplication):
        msg = (
            f"{type(application).__name__} is not an AgentApplication, so its log cannot "
            "be read for agent threads; make covonaut_es.AgentApplication its base class"
        )
        raise ConfigurationError(msg)
    backend = backend_of(application.factory)
    shown = f"application:{type(application).__name__}"
    if backend.name == "memory":
        msg = (
            f"{shown} keeps its events in this process's memory, where no follower can "
            "read them; configure it with PERSISTENCE_MODULE for SQLite or PostgreSQL"
        )
        raise ConfigurationError(msg)
    app_env = application.factory.env  # the Environment the application was made with
    prefix = f"{app_env.name.upper()}_" if app_env.name else ""
    # Each setting as the application reads it (its name-prefixed one first), so that an
    # application opened with these reads the same tables of the same database.
    env = {key: app_env.get(key) or "" for key in {k.removeprefix(prefix) for k in app_env}}
    for key in app_env.create_keys("PERSISTENCE_MODULE"):
        env[key] = MODULES[backend.name]  # eventsourcing's own SQLite cannot be followed
    # Whatever made its cipher: eventsourcing makes one of a CIPHER_KEY alone too.
    cipher_key = app_env.get("CIPHER_KEY") if application.mapper.cipher else None
    return LogSource(type(application), application.name, env, shown, cipher_key=cipher_key)
