"""Translate store URLs into eventsourcing persistence settings."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import parse_qsl, unquote, urlsplit

from covonaut_es._text import whole_number
from covonaut_es.errors import ConfigurationError, StoreUnavailableError, StoreURLError
from covonaut_es.store._backend import MODULES, backend_for_env
from covonaut_es.store._url_secrets import redact, scrub

SCHEMES = ("memory", "sqlite", "postgresql")

SQLITE_PATH = "COVONAUT_SQLITE_PATH"
"""The environment key of a SQLite store's file path (``SQLITE_DBNAME`` may be a URI)."""

SQLITE_LOCK_WAIT_S = 30
"""How long a SQLite store's statement waits for another connection's write lock
before it fails with ``database is locked``, in seconds."""

READ_ONLY = "COVONAUT_READ_ONLY"
"""The environment key that is ``y`` for a store opened read-only (``?mode=ro``)."""

POSTGRES_PARAMS = "COVONAUT_POSTGRES_PARAMS"
"""The environment key of a PostgreSQL URL's further connection parameters, as JSON."""

COMPRESSOR_TOPIC = "COMPRESSOR_TOPIC"
"""eventsourcing's setting of the compressor its mapper uses."""
ZLIB_COMPRESSOR = "eventsourcing.compressor:ZlibCompressor"
ZSTD_COMPRESSOR = "covonaut_es.store._dictionary:ZstdDictionaryCompressor"
COMPRESSION_AS_RECORDED = "COVONAUT_COMPRESSION_AS_RECORDED"
"""Set (to ``y``) when the open takes its compression from the store's settings."""

Compression = Literal["zstd", "zlib", "none"]
"""How a store compresses its event payloads: zstd with the dictionary the package
ships (the default of a new store, ADR 0061), eventsourcing's zlib, or not at all."""
COMPRESSIONS: tuple[Compression, ...] = get_args(Compression)
"""The compressions a store may record."""
NEW_STORE_COMPRESSION: Compression = "zstd"
"""What a store opened without ``compress`` records when it is created."""
_COMPRESSORS: dict[str, str] = {"zstd": ZSTD_COMPRESSOR, "zlib": ZLIB_COMPRESSOR}

SQLITE_MODES = ("ro", "rw", "rwc")
_POSTGRES_FIELDS = ("dbname", "host", "port", "user", "password", "connect_timeout")


def persistence_env(url: str) -> dict[str, str]:
    """The eventsourcing environment for a store URL.

    Raises:
        StoreURLError: The scheme is unknown or a required part is missing.
    """
    shown = redact(url)
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in (*SCHEMES, "postgres"):
        msg = (
            f"store URL {shown!r} is not understood: expected memory:// (or memory://NAME), "
            "sqlite:///path/to/file.db or postgresql://user:password@host:port/dbname"
        )
        raise StoreURLError(msg)
    if scheme == "memory":
        return {
            "PERSISTENCE_MODULE": MODULES["memory"],
            "MEMORY_STORE_NAME": unquote(rest) or f"anonymous-{uuid.uuid4().hex}",
            "IS_SNAPSHOTTING_ENABLED": "y",
        }
    if scheme == "sqlite":
        return _sqlite_env(url, rest)
    return _postgres_env(url)


def _sqlite_env(url: str, rest: str) -> dict[str, str]:
    shown = redact(url)
    # sqlite:///relative.db and sqlite:////absolute.db, as SQLAlchemy spells them.
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unbalanced "[" in the host
        msg = f"SQLite store URL {shown!r} does not parse: {scrub(str(exc), url)}"
        raise StoreURLError(msg) from exc
    if parts.netloc or not rest.startswith("/") or parts.path in ("", "/"):
        msg = f"SQLite store URL {shown!r} needs a path: sqlite:///relative.db or sqlite:////abs.db"
        raise StoreURLError(msg)
    if parts.fragment:
        msg = f"SQLite store URL {shown!r} has a '#' fragment; write a '#' in the path as %23"
        raise StoreURLError(msg)
    path = Path(unquote(parts.path[1:]))
    if "\x00" in str(path):
        msg = f"SQLite store URL {shown!r}: the path contains a NUL byte, which no file name can"
        raise StoreURLError(msg)
    try:
        parent_exists, is_dir = path.parent.exists(), path.is_dir()
    except OSError as exc:  # a name too long, say
        problem = scrub(str(exc), url)
        msg = f"SQLite store URL {shown!r}: the path is not a valid file name ({problem})"
        raise StoreURLError(msg) from exc
    if not parent_exists:
        msg = f"SQLite store URL {shown!r}: directory {str(path.parent)!r} does not exist"
        raise StoreURLError(msg)
    if is_dir:
        msg = f"SQLite store URL {shown!r}: {str(path)!r} is a directory, expected a file"
        raise StoreURLError(msg)
    mode = _sqlite_mode(url, parts.query)
    env = {
        "PERSISTENCE_MODULE": MODULES["sqlite"],
        "SQLITE_DBNAME": str(path),
        SQLITE_PATH: str(path),
        "SQLITE_LOCK_TIMEOUT": str(SQLITE_LOCK_WAIT_S),
        "IS_SNAPSHOTTING_ENABLED": "y",
    }
    if mode == "ro":
        env["SQLITE_DBNAME"] = read_only_uri(path)
    elif mode or str(path).startswith("file:"):
        # sqlite3 opens with uri=True: a URI carries the mode, and a name that starts
        # with "file:" must not be taken for one.
        env["SQLITE_DBNAME"] = path.resolve().as_uri() + (f"?mode={mode}" if mode else "")
    if mode == "ro":
        env["CREATE_TABLE"] = "n"
        env[READ_ONLY] = "y"
    return env


def on_read_only_media(env: Mapping[str, str]) -> bool:
    """Whether ``env`` opens a SQLite file that exists on a file system mounted
    read-only (a backup's media), with no write-ahead log beside it: no one can change
    it, and SQLite can only read it as :func:`read_only_uri` says. A directory only this
    process may not write to is not such: another user may be writing the file."""
    path = env.get(SQLITE_PATH)
    if not path or not os.path.isfile(path) or os.path.exists(f"{path}-wal"):
        return False
    try:
        flags = os.statvfs(Path(path).resolve().parent).f_flag
    except OSError:
        return False
    return bool(flags & os.ST_RDONLY)


def read_only_uri(path: Path) -> str:
    """The URI sqlite3 opens a SQLite file with to read it and never write it.

    A file in a directory no one may write to (a backup's read-only media) is opened as
    immutable when no write-ahead log lies beside it: SQLite could not make the
    shared-memory file a WAL-mode file is read with, and no writer can change the file,
    since a writer needs a journal or log beside it too. With a log there, it is opened
    as any other (and fails to open): immutable would read past what the log holds.
    """
    uri = f"{path.resolve().as_uri()}?mode=ro"
    directory = path.resolve().parent
    if not os.access(directory, os.W_OK) and not Path(f"{path}-wal").exists():
        uri += "&immutable=1"
    return uri


def _sqlite_mode(url: str, query: str) -> str | None:
    shown = redact(url)
    try:
        params = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    except ValueError as exc:
        msg = f"SQLite store URL {shown!r} has a malformed query: {scrub(str(exc), url)}"
        raise StoreURLError(msg) from exc
    mode = params.pop("mode", None)
    if params or (mode is not None and mode not in SQLITE_MODES):
        found = ", ".join(f"{k}={v}" for k, v in params.items()) or f"mode={mode}"
        msg = (
            f"SQLite store URL {shown!r}: unsupported query parameter {found}; the only one "
            f"supported is mode={'|'.join(SQLITE_MODES)} (ro opens the file read-only)"
        )
        raise StoreURLError(msg)
    return mode


def _postgres_env(url: str) -> dict[str, str]:
    shown = redact(url)
    try:
        from psycopg import Error as PsycopgError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError as exc:
        msg = f"PostgreSQL store URL {shown!r} needs psycopg: install 'covonaut-es[postgres]'"
        raise StoreURLError(msg) from exc
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(url).items()}
    except PsycopgError as exc:
        msg = f"PostgreSQL store URL {shown!r} is not understood: {scrub(str(exc), url)}"
        raise StoreURLError(msg) from exc
    if not params.get("host") or not params.get("dbname"):
        msg = f"PostgreSQL store URL {shown!r} needs a host and a database name"
        raise StoreURLError(msg)
    port = _whole_number(params.get("port", "5432"), "port", url, least=1, most=_MAX_PORT)
    timeout = _whole_number(
        params.get("connect_timeout", "5"), "connect_timeout", url, least=1, most=_MAX_TIMEOUT_S
    )
    extra = {k: v for k, v in params.items() if k not in _POSTGRES_FIELDS}
    return {
        "PERSISTENCE_MODULE": MODULES["postgres"],
        "POSTGRES_DBNAME": params["dbname"],
        "POSTGRES_HOST": params["host"],
        "POSTGRES_PORT": port,
        "POSTGRES_USER": params.get("user", ""),
        "POSTGRES_PASSWORD": params.get("password", ""),
        "POSTGRES_CONNECT_TIMEOUT": timeout,
        POSTGRES_PARAMS: json.dumps(extra, sort_keys=True),
        # One connection kept open, up to 15 under concurrent use (eventsourcing keeps 5):
        # its pool hands them out in turn, so each statement and the insert function
        # were prepared and compiled cold on every one of them, a few ms each time.
        "POSTGRES_POOL_SIZE": "1",
        "POSTGRES_MAX_OVERFLOW": "14",
        "IS_SNAPSHOTTING_ENABLED": "y",
    }


_MAX_PORT = 65535
_MAX_TIMEOUT_S = 2**31 - 1  # libpq reads connect_timeout into a C int


def _whole_number(value: str, name: str, url: str, *, least: int, most: int) -> str:
    """``value``, a URL's ``name``, checked to be a whole number from ``least`` to
    ``most`` in ASCII digits (:func:`~covonaut_es._text.whole_number`), leading zeros
    aside.

    Raises:
        StoreURLError: It is not, named with the URL's secrets hidden.
    """
    significant = value.lstrip("0") or value[:1]  # libpq takes 05432 for 5432
    number = whole_number(significant, most_digits=len(str(most)))
    if number is None or not least <= number <= most:
        msg = (
            f"PostgreSQL store URL {redact(url)!r} has an invalid {name} {scrub(value, url)!r}:"
            f" expected a whole number from {least} to {most}"
        )
        raise StoreURLError(msg)
    return str(number)


def postgres_params(env: Mapping[str, str]) -> dict[str, str]:
    """The further libpq parameters (``sslmode`` and the like) of a PostgreSQL store's
    URL, each passed to every connection."""
    params: dict[str, str] = json.loads(env.get(POSTGRES_PARAMS) or "{}")
    return params


def store_env(
    url: str,
    *,
    cipher_key: str | None = None,
    compress: bool | Compression | None = False,
    create_tables: bool = True,
) -> dict[str, str]:
    """The eventsourcing environment of a store: its URL's settings, plus encryption
    (AES-GCM under ``cipher_key``) and the compression asked for (``True`` is zlib,
    ``False`` none, as before stores recorded zstd); with ``compress=None``, the
    compression the store records (see
    :func:`~covonaut_es.store._settings.check_settings`), zstd for a new one. Without
    ``create_tables``, an existing store's, opened to be read: no table is created.

    Raises:
        ConfigurationError: ``compress`` names no compression.
        StoreUnavailableError: Without ``create_tables``, or read-only (``?mode=ro``),
            there is no SQLite file at the URL's path.
    """
    env = persistence_env(url)
    if not create_tables:
        env["CREATE_TABLE"] = "n"
    if not create_tables or env.get(READ_ONLY) == "y":  # ?mode=ro creates no file either
        require_sqlite_file(env.get(SQLITE_PATH), f"store {redact(url)}")
    if not create_tables and on_read_only_media(env):
        # Read as ?mode=ro reads it: SQLite cannot make the shared-memory file it
        # reads a WAL-mode file with there (a backup's read-only media).
        env["SQLITE_DBNAME"] = read_only_uri(Path(env[SQLITE_PATH]))
        env[READ_ONLY] = "y"
    if cipher_key is not None:
        env["CIPHER_TOPIC"] = "eventsourcing.cryptography:AESCipher"
        env["CIPHER_KEY"] = cipher_key
    if compress is None:
        env[COMPRESSION_AS_RECORDED] = "y"
    return with_compression(env, NEW_STORE_COMPRESSION if compress is None else compress)


def with_compression(env: Mapping[str, str], compress: bool | str) -> dict[str, str]:
    """``env`` with the compressor of ``compress`` (``True`` is zlib, ``False`` none).

    Raises:
        ConfigurationError: ``compress`` names no compression.
    """
    name = ("zlib" if compress else "none") if isinstance(compress, bool) else compress
    if name not in COMPRESSIONS:
        msg = (
            f"compress={compress!r} names no compression: expected one of "
            f"{list(COMPRESSIONS)}, True (zlib), False (none) or None (as the store records, "
            f"{NEW_STORE_COMPRESSION} for a new one)"
        )
        raise ConfigurationError(msg)
    settled = dict(env)
    settled.pop(COMPRESSOR_TOPIC, None)
    if name in _COMPRESSORS:
        settled[COMPRESSOR_TOPIC] = _COMPRESSORS[name]
    return settled


def compression_of(env: Mapping[str, str]) -> str:
    """The compression an environment's compressor gives (any other compressor than
    the library's is taken for zlib, as eventsourcing's own is)."""
    topic = env.get(COMPRESSOR_TOPIC)
    if not topic:
        return "none"
    return next((name for name, known in _COMPRESSORS.items() if known == topic), "zlib")


def canonical_url(url: str, env: Mapping[str, str]) -> str:
    """The URL that opens the same store again: an anonymous ``memory://`` store gets
    the name it was given, so that projections in this process can follow it."""
    return backend_for_env(env).canonical_url(url, env)


def require_sqlite_file(path: str | None, where: str) -> None:
    """Refuse a SQLite file at ``path`` that does not exist, for an open that must not
    create one: SQLite would create an empty file under a misspelt name. None, an
    in-memory database and a ``file:`` URI (which says itself whether to create) are
    not checked.

    Raises:
        StoreUnavailableError: Naming ``where`` and the path.
    """
    if not path or path == ":memory:" or path.startswith("file:"):
        return
    if not os.path.exists(path):
        msg = f"{where}: there is no SQLite file {path!r} to open; check its name"
        raise StoreUnavailableError(msg)
