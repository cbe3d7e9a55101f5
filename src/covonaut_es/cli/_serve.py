"""``serve``: the reviewer inbox in the browser, with uvicorn.

Reviewers sign in with JSON Web Tokens of the identity provider the ``--jwt-*``
options name, else with tokens signed under ``$COVONAUT_ES_REVIEWER_SECRET`` (see
:mod:`covonaut_es.cli._identity`); the inbox follows the store's reviewer queue in memory
and decrypts with the key ``--cipher-key-env`` names, and no other. Needs the ``inbox``
extra.

uvicorn runs with the bounds of :mod:`covonaut_es.cli._connections`: connections in all
and per client address, the time a request may take to arrive and the size of its line
and headers; the total is kept within the process's open-file limit.
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import resource
import socket
import sys
import uuid

from covonaut_es import _logs
from covonaut_es.cli._command import (
    EXIT_OK,
    StopAsked,
    Subcommands,
    UsageError,
    add_command,
    stopping_gracefully,
)
from covonaut_es.cli._connections import ConnectionLimits
from covonaut_es.cli._identity import add_reviewer_options, reviewer_verifier_from
from covonaut_es.cli._options import add_store_options, open_from, review_queue
from covonaut_es.cli._tokens import explain_secret

DEFAULT_PORT = 8700
"""The port ``serve`` listens on unless told otherwise."""
MAX_PORT = 65535
DEFAULT_LIMITS = ConnectionLimits(total=512, per_client=32, request_seconds=10.0)
"""``serve``'s connection limits unless told otherwise."""
BACKLOG = 64
"""Connections the kernel queues for ``accept``, and asyncio accepts in one go: it opens
a burst's files before any connection past a limit is closed, so up to a few bursts are
open beyond the connections held."""
RESERVED_FILES = 64 + 4 * BACKLOG
"""Open files kept for the store, the queue, logs, the listening socket and the
connections accepted and not yet refused: the total of connections is at most the
open-file limit less these."""
KEEP_ALIVE_SECONDS = 5
"""How long an idle connection is kept open between two requests."""


def add_serve_command(subcommands: Subcommands) -> None:
    """Declare ``serve``."""
    parser = add_command(
        subcommands, "serve", serve, help_="serve the reviewer inbox in the browser"
    )
    add_store_options(parser)
    explain_secret(parser)
    add_reviewer_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port to listen on")
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="another origin that may post to the inbox, e.g. a proxy's public "
        "https://inbox.example.com (repeatable)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_LIMITS.total,
        metavar="N",
        help=f"open connections at most, from all clients (default {DEFAULT_LIMITS.total}, "
        f"and at most the open-file limit less {RESERVED_FILES})",
    )
    parser.add_argument(
        "--max-connections-per-client",
        type=int,
        default=DEFAULT_LIMITS.per_client,
        metavar="N",
        help="open connections at most from one client address (default "
        f"{DEFAULT_LIMITS.per_client}; behind a proxy, every connection is the proxy's)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_LIMITS.request_seconds,
        metavar="SECONDS",
        help="how long a request's headers and body may take to arrive, and an answer "
        f"may wait for its client to read on (default {DEFAULT_LIMITS.request_seconds:g})",
    )


def serve(args: argparse.Namespace) -> int:
    """``serve --store URL [--host H] [--port P]``: until interrupted. Ctrl-C and
    SIGTERM end it gracefully, exit 0, whenever they come: uvicorn takes them while it
    serves, then raises them again once it has shut down, here let pass."""
    with stopping_gracefully() as asked:
        return _serve(args, asked)


def _serve(args: argparse.Namespace, asked: StopAsked) -> int:
    if not 0 <= args.port <= MAX_PORT:
        msg = f"--port must be a TCP port, 0 to {MAX_PORT} (0: any free one), got {args.port}"
        raise UsageError(msg)
    limits = connection_limits(args)
    verifier = reviewer_verifier_from(args)
    try:
        import uvicorn

        from covonaut_es.cli._connections import guarded_protocol
        from covonaut_es.inbox import create_app
    except ImportError as exc:
        msg = f"serve needs the inbox extra ({exc}): pip install 'covonaut-es[inbox]'"
        raise UsageError(msg) from exc
    with listening_on(args.host, args.port) as listening, open_from(args, writes=True) as store:
        queue = review_queue(args, store, view_url=f"memory://covonaut-es-serve-{uuid.uuid4().hex}")
        app = create_app(store, verifier, queue=queue, allowed_origins=args.allowed_origin)
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            http=guarded_protocol(limits),
            ws="none",  # the inbox has none; an upgraded connection would leave the count
            backlog=BACKLOG,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            timeout_graceful_shutdown=2,
            # A client is its connection's address: X-Forwarded-For from any local
            # client would otherwise name it, in the access log among other places.
            proxy_headers=False,
        )
        escape_server_logs()
        bound_host, bound_port = listening.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        address = f"http://{shown}:{bound_port}/"
        server = uvicorn.Server(config)
        # uvicorn takes a second Ctrl-C itself while it serves, and raises the signals
        # it took again once it has shut down: those are not another stop asked.
        asked.goes_to(
            functools.partial(setattr, server, "should_exit", True), force=lambda signum: None
        )
        # uvicorn names the address only of the sockets it binds itself.
        print(f"covonaut-es serve: the inbox is at {address}", file=sys.stderr)
        server.run(sockets=[listening])
    return EXIT_OK


def escape_server_logs() -> None:
    """uvicorn's log lines made safe, once ``uvicorn.Config`` has set its logging up:
    its server log's records as the package's, its access log's arguments each escaped
    (its formatter reads them one by one)."""
    _logs.escape_handlers(*logging.getLogger("uvicorn").handlers)
    _logs.escape_arguments(*logging.getLogger("uvicorn.access").handlers)


def listening_on(host: str, port: int) -> socket.socket:
    """A socket bound to ``host`` and ``port`` (0: any free one), for uvicorn to serve
    on: bound here, so that an address taken or no address of this machine is the
    command's one-line refusal, not the server's log lines and its own exit status.

    Raises:
        UsageError: The address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn binds
    listening = socket.socket(family, socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host, port))
    except (OSError, TypeError, UnicodeError) as exc:  # TypeError: a name IDNA cannot encode
        listening.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        msg = f"cannot listen on {host} port {port}: {reason}; choose another --host or --port"
        raise UsageError(msg) from None
    return listening


def connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    """The limits the options ask for, the total lowered to fit the open-file limit."""
    for option, value in (
        ("--max-connections", args.max_connections),
        ("--max-connections-per-client", args.max_connections_per_client),
    ):
        if value < 1:
            msg = f"{option} needs a number of connections of at least 1, got {value}"
            raise UsageError(msg)
    if not (math.isfinite(args.request_timeout) and args.request_timeout > 0):
        msg = f"--request-timeout needs a number of seconds above 0, got {args.request_timeout:g}"
        raise UsageError(msg)
    open_files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    total = args.max_connections
    if open_files != resource.RLIM_INFINITY and total > open_files - RESERVED_FILES:
        total = max(1, open_files - RESERVED_FILES)
        print(
            f"covonaut-es serve: --max-connections {args.max_connections} lowered to {total}: "
            f"the open-file limit is {open_files} (ulimit -n) and {RESERVED_FILES} are kept "
            "for the store and the connections being refused",
            file=sys.stderr,
        )
    return ConnectionLimits(total, args.max_connections_per_client, args.request_timeout)
