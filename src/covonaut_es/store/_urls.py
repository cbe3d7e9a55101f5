"""Translate store URLs into eventsourcing persistence settings."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from covonaut_es.errors import StoreURLError

SCHEMES = ("memory", "sqlite", "postgresql")


def persistence_env(url: str) -> dict[str, str]:
    """The eventsourcing environment for a store URL.

    Raises:
        StoreURLError: The scheme is unknown or a required part is missing.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in (*SCHEMES, "postgres"):
        msg = (
            f"store URL {url!r} is not understood: expected memory:// (or memory://NAME), "
            "sqlite:///path/to/file.db or postgresql://user:password@host:port/dbname"
        )
        raise StoreURLError(msg)
    if scheme == "memory":
        return {
            "PERSISTENCE_MODULE": "covonaut_es.store._memory",
            "MEMORY_STORE_NAME": unquote(rest) or f"anonymous-{uuid.uuid4().hex}",
            "IS_SNAPSHOTTING_ENABLED": "y",
        }
    if scheme == "sqlite":
        return _sqlite_env(url, rest)
    return _postgres_env(url)


def _sqlite_env(url: str, rest: str) -> dict[str, str]:
    # sqlite:///relative.db and sqlite:////absolute.db, as SQLAlchemy spells them.
    if not rest.startswith("/") or rest == "/":
        msg = f"SQLite store URL {url!r} needs a path: sqlite:///relative.db or sqlite:////abs.db"
        raise StoreURLError(msg)
    path = Path(unquote(rest[1:]))
    if not path.parent.exists():
        msg = f"SQLite store URL {url!r}: directory {str(path.parent)!r} does not exist"
        raise StoreURLError(msg)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "APPLICATION_RECORDER_TOPIC": "covonaut_es.store._polling:PollingSQLiteApplicationRecorder",
        "SQLITE_DBNAME": str(path),
        "SQLITE_LOCK_TIMEOUT": "30",
        "IS_SNAPSHOTTING_ENABLED": "y",
    }


def _postgres_env(url: str) -> dict[str, str]:
    parts = urlsplit(url)
    dbname = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not dbname:
        msg = f"PostgreSQL store URL {url!r} needs a host and a database name"
        raise StoreURLError(msg)
    try:
        port = parts.port or 5432
    except ValueError as exc:
        msg = f"PostgreSQL store URL {url!r} has an invalid port"
        raise StoreURLError(msg) from exc
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": parts.hostname,
        "POSTGRES_PORT": str(port),
        "POSTGRES_USER": unquote(parts.username or ""),
        "POSTGRES_PASSWORD": unquote(parts.password or ""),
        "POSTGRES_CONNECT_TIMEOUT": "5",
        "IS_SNAPSHOTTING_ENABLED": "y",
    }


def store_env(url: str, *, cipher_key: str | None = None, compress: bool = False) -> dict[str, str]:
    """The eventsourcing environment of a store: its URL's settings, plus encryption
    (AES-GCM under ``cipher_key``) and zlib compression when asked for."""
    env = persistence_env(url)
    if cipher_key is not None:
        env["CIPHER_TOPIC"] = "eventsourcing.cryptography:AESCipher"
        env["CIPHER_KEY"] = cipher_key
    if compress:
        env["COMPRESSOR_TOPIC"] = "eventsourcing.compressor:ZlibCompressor"
    return env


def canonical_url(url: str, env: Mapping[str, str]) -> str:
    """The URL that opens the same store again: an anonymous ``memory://`` store gets
    the name it was given, so that projections in this process can follow it."""
    if env["PERSISTENCE_MODULE"] == "covonaut_es.store._memory":
        return f"memory://{env['MEMORY_STORE_NAME']}"
    return url


def redact(url: str) -> str:
    """The URL with any password replaced, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()
