"""The options that say which store a command reads, declared once for every command,
and opening the store they name.

``--store`` (default ``$COVONAUT_ES_STORE``), ``--cipher-key-env``, ``--chain-key-env``
and ``--compressed`` (rarely needed: a store records its compression) mean the same to
every subcommand, and every subcommand that prints rows also takes ``--json``
(:func:`add_store_command`). ``--application MODULE:CLASS`` (default
``$COVONAUT_ES_APPLICATION``) names the user's own eventsourcing application instead: it
is opened as it opens itself, with its own settings from the environment, and the
command reads the threads in its tables (never a store's tables beside them). Which of
the two a command reads is decided once, by :func:`_source`: what is typed wins over
either variable.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import TypeVar

import attrs
from eventsourcing.popo import POPOFactory
from eventsourcing.utils import Environment

from covonaut_es.cli._command import Command, Subcommands, UsageError, add_command
from covonaut_es.cli._imports import imported
from covonaut_es.cli._output import add_json_option
from covonaut_es.errors import CovonautError
from covonaut_es.projections import ReviewQueue
from covonaut_es.store import AgentApplication, Store, open_store
from covonaut_es.store._cipher_keys import aes_key
from covonaut_es.store._urls import require_sqlite_file

T = TypeVar("T")

STORE_ENV = "COVONAUT_ES_STORE"
"""The environment variable every command reads the store's URL from."""

APPLICATION_ENV = "COVONAUT_ES_APPLICATION"
"""The environment variable every command reads the user's application class from."""


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """Declare ``--store``, ``--application``, ``--cipher-key-env``,
    ``--chain-key-env`` and ``--compressed`` on a subcommand."""
    parser.add_argument(
        "--store",
        metavar="URL",
        help=f"memory://NAME, sqlite:///path or postgresql://... (default: ${STORE_ENV})",
    )
    parser.add_argument(
        "--application",
        metavar="MODULE:CLASS",
        help=(
            "instead of --store: your eventsourcing application (a subclass of "
            "covonaut_es.AgentApplication), opened with its own settings from the "
            f"environment, PERSISTENCE_MODULE and the rest (default: ${APPLICATION_ENV})"
        ),
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
        help=(
            "the store is compressed with zlib (default: as the store records it, zstd for "
            "a new one; given, it must be)"
        ),
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


@attrs.frozen
class _Source:
    """What a command reads: a store by URL, or an application by class (one of them),
    and how it was named (``--store``, ``$COVONAUT_ES_APPLICATION``...) for errors."""

    url: str | None
    application: str | None
    named_by: str


def _source(args: argparse.Namespace) -> _Source:
    """The store or application the command reads: ``--store`` or ``--application`` as
    typed (not both), else the one of ``$COVONAUT_ES_STORE`` and
    ``$COVONAUT_ES_APPLICATION`` that is set.

    Raises:
        UsageError: Both options are typed, or neither is and both variables are set;
            or an application is named beside an option only a store takes.
    """
    given = []
    if args.store is not None and args.application is not None:
        source, given = _Source(None, args.application, "--application"), ["--store"]
    elif args.store is not None:
        return _Source(args.store, None, "--store")
    elif args.application is not None:
        source = _Source(None, args.application, "--application")
    else:
        url, application = os.environ.get(STORE_ENV), os.environ.get(APPLICATION_ENV)
        if url and application:
            msg = (
                f"both ${STORE_ENV} and ${APPLICATION_ENV} are set, and each names what "
                "to read: unset one, or type --store URL or --application MODULE:CLASS, "
                "which wins over both"
            )
            raise UsageError(msg)
        if not application:
            return _Source(url or None, None, f"${STORE_ENV}")
        source = _Source(None, application, f"${APPLICATION_ENV}")
    given += [option for option, name in _STORE_ONLY.items() if getattr(args, name)]
    if given:
        msg = (
            f"{source.named_by} names an application, which takes its settings from its "
            f"environment: {', '.join(given)} cannot be given with it (set the "
            "application's own CIPHER_KEY, COMPRESSOR_TOPIC or store setting instead)"
        )
        raise UsageError(msg)
    return source


def store_url(args: argparse.Namespace) -> str:
    """The store's URL, from ``--store`` or ``$COVONAUT_ES_STORE``.

    Raises:
        UsageError: Neither gives one.
    """
    url = _source(args).url
    if not url:
        msg = (
            f"no store: pass --store URL or set ${STORE_ENV}, or name your application "
            f"with --application MODULE:CLASS (or ${APPLICATION_ENV})"
        )
        raise UsageError(msg)
    return url


def application_spec(args: argparse.Namespace) -> str | None:
    """The ``MODULE:CLASS`` of the application the command reads, from
    ``--application`` or ``$COVONAUT_ES_APPLICATION``; None when it reads a store by
    URL."""
    return _source(args).application


def cipher_key(args: argparse.Namespace) -> str | None:
    """The cipher key from the variable ``--cipher-key-env`` names, if it names one.

    Raises:
        ConfigurationError: It is no key the cipher takes (neither the key nor the
            variable's name is shown: a key given in the name's place would be).
    """
    key = secret_from_variable("--cipher-key-env", args.cipher_key_env)
    if key is not None:
        aes_key(key, named="the variable --cipher-key-env names")
    return key


def chain_key(args: argparse.Namespace) -> str | None:
    """The chain key from the variable ``--chain-key-env`` names, if it names one."""
    return secret_from_variable("--chain-key-env", args.chain_key_env)


def webhook_secret(args: argparse.Namespace) -> str | None:
    """The webhook's signing secret from the variable ``--webhook-secret-env`` names."""
    return secret_from_variable("--webhook-secret-env", args.webhook_secret_env)


def secret_from_variable(option: str, name: str | None) -> str | None:
    """The secret in the environment variable ``name`` that ``option`` gave, if any: a
    secret is never given on the command line itself, where every local user reads it
    (``ps``, ``/proc/PID/cmdline``)."""
    if not name:
        return None
    if not _VARIABLE_NAME.fullmatch(name):
        # Shown back, it would print a key passed by mistake in the variable's place.
        msg = (
            f"{option} takes the name of an environment variable (letters, digits "
            "and _), not the secret itself; what was given is not shown"
        )
        raise UsageError(msg)
    key = os.environ.get(name)
    if not key:
        # Not named either: a key given by mistake may look like a variable's name.
        msg = f"the environment variable {option} names is {'empty' if key == '' else 'not set'}"
        raise UsageError(msg)
    return key


_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@contextlib.contextmanager
def open_from(
    args: argparse.Namespace, *, writes: bool = False, create: bool = False, records: bool = False
) -> Iterator[Store]:
    """Open the store the options name for the block. Only with ``create`` (``import``)
    are a missing SQLite file and missing tables created: any other command refuses a
    mistyped path, or a database that is not a store, instead of giving it a store's
    tables. A command that ``writes`` (``fork``, ``approve``, ``reviews --follow``) then
    opens it as a writer, so that a cipher key or compression other than the store's is
    refused before anything is written. A command that ``records`` one change of its
    own, then prints it (``approve``, ``fork``, ``import``), is a writer too, and
    ``args.recorded`` tells whether the store took a change in the block: one that
    follows the store (``reviews --follow``, ``serve``, ``worker``) sees others' changes
    come in. With ``--application``, the store is the
    application's threads, the application opened as it configures itself."""
    application = application_spec(args)
    if application is not None:
        with (
            _application_store(application, create=create) as store,
            _changes_noted(store, args, records=records),
        ):
            yield store
        return
    url = store_url(args)
    options = {
        "cipher_key": cipher_key(args),
        "chain_key": chain_key(args),
        "compress": args.compressed,
    }
    if create:
        store = open_store(url, **options)
    else:
        store = open_store(url, **options, create_tables=False)
        try:
            # Reads the log, decoding nothing: not a store fails here, and a store with
            # a damaged record still opens, for verify and replay to say where it is.
            store.last_log_position()
        except BaseException:
            store.close()
            raise
        if writes or records:
            store.close()
            store = open_store(url, **options)
    with store, _changes_noted(store, args, records=records):
        yield store


@contextlib.contextmanager
def _changes_noted(store: Store, args: argparse.Namespace, *, records: bool) -> Iterator[None]:
    """Note in ``args.recorded`` whether ``store``'s log grew in the block, for a
    command that ``records`` a change: a failure after that (its output finding no
    room) must not advise running the command again."""
    if not records:
        yield
        return
    before = store.last_log_position()
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # a store that fails now: nothing known
            args.recorded = args.recorded or store.last_log_position() != before


@contextlib.contextmanager
def _application_store(spec: str, *, create: bool) -> Iterator[Store]:
    """The threads of the application ``spec`` (``MODULE:CLASS``) names, which creates
    its tables only with ``create``."""
    application_class = _application_class(spec)
    if not create:
        # The settings as the application will read them (eventsourcing's construct_env).
        settings = Environment(application_class.name, {**application_class.env, **os.environ})
        if settings.get("PERSISTENCE_MODULE") == "eventsourcing.sqlite":
            where = f"--application {spec}"
            require_sqlite_file(settings.get("SQLITE_DBNAME"), where)
    keys = Environment(application_class.name).create_keys("CREATE_TABLE")
    try:
        application = application_class(env={} if create else dict.fromkeys(keys, "n"))
    except (CovonautError, UsageError):
        raise
    except Exception as exc:  # its settings, read from the environment, are the user's
        msg = (
            f"--application {spec} could not be made ({type(exc).__name__}: {exc}); check "
            "its persistence settings in the environment (PERSISTENCE_MODULE, and the "
            "module's own: SQLITE_DBNAME, POSTGRES_DBNAME, ...)"
        )
        raise UsageError(msg) from exc
    try:
        if isinstance(application.factory, POPOFactory):
            # eventsourcing's default, where the environment names no persistence: what
            # the command would read is empty, and what it would write, lost at its end.
            msg = (
                f"--application {spec} keeps its events in this process's memory: its "
                "environment sets no PERSISTENCE_MODULE; set it (eventsourcing.sqlite or "
                "eventsourcing.postgres) with the module's own settings (SQLITE_DBNAME, "
                "POSTGRES_DBNAME, ...)"
            )
            raise UsageError(msg)
        with Store.from_application(application) as store:
            yield store
    finally:
        application.close()


_STORE_ONLY = {
    "--cipher-key-env": "cipher_key_env",
    "--chain-key-env": "chain_key_env",
    "--compressed": "compressed",
}
"""The options of a store that an application's own settings give instead."""


def _application_class(spec: str) -> type[AgentApplication]:
    """The class ``--application MODULE:CLASS`` names, imported
    (:func:`~covonaut_es.cli._imports.imported`)."""
    found = imported("--application", spec, form="MODULE:CLASS, e.g. myshop.app:ShopApplication")
    if not (isinstance(found, type) and issubclass(found, AgentApplication)):
        msg = (
            f"--application {spec!r} is not a subclass of covonaut_es.AgentApplication, "
            "so it cannot read agent threads"
        )
        raise UsageError(msg)
    return found


def review_queue(
    args: argparse.Namespace, store: Store, *, view_url: str | None, writes: bool = True
) -> ReviewQueue:
    """The reviewer queue of the store the options name (``store``, open), its tables
    at ``view_url`` (default: the store's database); one that does not ``writes`` reads
    the store's log only, creating none of its tables (a read-only file is read)."""
    if application_spec(args) is not None:
        application = store.log.application
        assert isinstance(application, AgentApplication)  # the one _application_store made
        return ReviewQueue.from_application(application, view_url=view_url)
    return ReviewQueue(
        store_url(args),  # the full URL: the store's own hides a password
        view_url=view_url,
        cipher_key=cipher_key(args),
        compress=args.compressed,
        create_tables=writes,
    )


def read_thread(args: argparse.Namespace, read: Callable[[Store, str], T]) -> T:
    """Open the store the options name, ``read`` the thread the command names from it
    (``args.thread``), and close the store again."""
    with open_from(args) as store:
        return read(store, args.thread)
