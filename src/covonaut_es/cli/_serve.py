"""``serve``: the reviewer inbox in the browser, with uvicorn.

Reviewers sign in with JSON Web Tokens of the identity provider the ``--jwt-*``
options name, else with tokens signed under ``$COVONAUT_ES_REVIEWER_SECRET`` (see
:mod:`covonaut_es.cli._identity`); the inbox follows the store's reviewer queue in memory
and decrypts with the key ``--cipher-key-env`` names, and no other. Needs the ``inbox``
extra.
"""

from __future__ import annotations

import argparse
import uuid

from covonaut_es.cli._command import EXIT_OK, Subcommands, UsageError, add_command
from covonaut_es.cli._identity import add_reviewer_options, reviewer_verifier_from
from covonaut_es.cli._options import add_store_options, cipher_key, open_from, store_url
from covonaut_es.cli._tokens import explain_secret
from covonaut_es.projections import ReviewQueue

DEFAULT_PORT = 8700
"""The port ``serve`` listens on unless told otherwise."""
MAX_PORT = 65535


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


def serve(args: argparse.Namespace) -> int:
    """``serve --store URL [--host H] [--port P]``: until interrupted."""
    if not 0 <= args.port <= MAX_PORT:
        msg = f"--port must be a TCP port, 0 to {MAX_PORT} (0: any free one), got {args.port}"
        raise UsageError(msg)
    verifier = reviewer_verifier_from(args)
    try:
        import uvicorn

        from covonaut_es.inbox import create_app
    except ImportError as exc:
        msg = f"serve needs the inbox extra ({exc}): pip install 'covonaut-es[inbox]'"
        raise UsageError(msg) from exc
    with open_from(args, writes=True) as store:
        queue = ReviewQueue(
            store_url(args),  # the full URL: the store's own hides a password
            view_url=f"memory://covonaut-es-serve-{uuid.uuid4().hex}",
            cipher_key=cipher_key(args),
            compress=args.compressed,
        )
        app = create_app(store, verifier, queue=queue, allowed_origins=args.allowed_origin)
        uvicorn.run(app, host=args.host, port=args.port, timeout_graceful_shutdown=2)
    return EXIT_OK
