"""The options that say which store a command reads, declared once for every command,
and opening the store they name.

``--store`` (default ``$COVONAUT_ES_STORE``), ``--cipher-key-env``, ``--chain-key-env``
and ``--compressed`` (rarely needed: a store records its compression) mean the same to
every subcommand, and every subcommand that prints rows also takes ``--json``
(:func:`add_store_command`).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import TypeVar

from covonaut_es.cli._command import Command, Subcommands, UsageError, add_command
from covonaut_es.cli._output import add_json_option
from covonaut_es.store import Store, open_store

T = TypeVar("T")

STORE_ENV = "COVONAUT_ES_STORE"
"""The environment variable every command reads the store's URL from."""


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """Declare ``--store``, ``--cipher-key-env``, ``--chain-key-env`` and
    ``--compressed`` on a subcommand."""
    parser.add_argument(
        "--store",
        default=os.environ.get(STORE_ENV),
        metavar="URL",
        help=f"memory://NAME, sqlite:///path or postgresql://... (default: ${STORE_ENV})",
    )
    parser.add_argument(
        "--cipher-key-env",
        metavar="VAR",
        help="the environment variable holding the store's cipher key",
    )
    parser.add_argument(
        "--chain-key-env",
        metavar="VAR",
        help="the environment variable holding the key the store seals its chain with",
    )
    parser.add_argument(
        "--compressed",
        action="store_const",
        const=True,
        help="the store is compressed (default: as the store records it; given, it must be)",
    )


def add_store_command(
    subcommands: Subcommands, name: str, command: Command, *, help_: str
) -> argparse.ArgumentParser:
    """Declare a subcommand that reads the store the options name and prints ``--json``
    or a table; returns its parser for its own arguments."""
    parser = add_command(subcommands, name, command, help_=help_)
    add_store_options(parser)
    add_json_option(parser)
    return parser


def store_url(args: argparse.Namespace) -> str:
    """The store's URL; a usage error when neither ``--store`` nor the variable gives one."""
    if not args.store:
        msg = f"no store: pass --store URL or set ${STORE_ENV}"
        raise UsageError(msg)
    url: str = args.store
    return url


def cipher_key(args: argparse.Namespace) -> str | None:
    """The cipher key from the variable ``--cipher-key-env`` names, if it names one."""
    return _key_from_variable("--cipher-key-env", args.cipher_key_env)


def chain_key(args: argparse.Namespace) -> str | None:
    """The chain key from the variable ``--chain-key-env`` names, if it names one."""
    return _key_from_variable("--chain-key-env", args.chain_key_env)


def webhook_secret(args: argparse.Namespace) -> str | None:
    """The webhook's signing secret from the variable ``--webhook-secret-env`` names."""
    return _key_from_variable("--webhook-secret-env", args.webhook_secret_env)


def _key_from_variable(option: str, name: str | None) -> str | None:
    """The secret in the environment variable ``name`` that ``option`` gave, if any."""
    if not name:
        return None
    if not _VARIABLE_NAME.fullmatch(name):
        # Shown back, it would print a key passed by mistake in the variable's place.
        msg = (
            f"{option} takes the name of an environment variable (letters, digits "
            "and _), not the key itself; what was given is not shown"
        )
        raise UsageError(msg)
    key = os.environ.get(name)
    if not key:
        msg = f"the environment variable {name} is not set"
        raise UsageError(msg)
    return key


_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def open_from(args: argparse.Namespace, *, writes: bool = False, create: bool = False) -> Store:
    """Open the store the options name. Only with ``create`` (``import``) are a missing
    SQLite file and missing tables created: any other command refuses a mistyped path, or
    a database that is not a store, instead of giving it a store's tables. A command that
    ``writes`` (``fork``, ``approve``, ``reviews --follow``) then opens it as a writer, so
    that a cipher key or compression other than the store's is refused before anything
    is written."""
    url = store_url(args)
    options = {
        "cipher_key": cipher_key(args),
        "chain_key": chain_key(args),
        "compress": args.compressed,
    }
    if create:
        return open_store(url, **options)
    reader = open_store(url, **options, create_tables=False)
    try:
        next(reader.thread_ids(), None)  # reads the log: not a store fails here
    except BaseException:
        reader.close()
        raise
    if not writes:
        return reader
    reader.close()
    return open_store(url, **options)


def read_thread(args: argparse.Namespace, read: Callable[[Store, str], T]) -> T:
    """Open the store the options name, ``read`` the thread the command names from it
    (``args.thread``), and close the store again."""
    with open_from(args) as store:
        return read(store, args.thread)
