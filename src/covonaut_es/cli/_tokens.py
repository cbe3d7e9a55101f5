"""Reviewer tokens on the command line: ``token issue`` signs one, and ``approve`` and
``reject`` verify theirs, with the secret in ``$COVONAUT_ES_REVIEWER_SECRET``.

The variable's text, encoded as UTF-8, is the HMAC secret of
:class:`~covonaut_es.runtime.HmacReviewerVerifier`: every process that issues or
verifies tokens needs the same text, of at least 32 bytes.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime

from covonaut_es.cli._command import EXIT_OK, Subcommands, UsageError, add_command
from covonaut_es.cli._output import add_json_option, emit_value
from covonaut_es.service import HmacReviewerVerifier
from covonaut_es.service._reviewers import MIN_SECRET_BYTES

REVIEWER_SECRET_ENV = "COVONAUT_ES_REVIEWER_SECRET"
"""The environment variable holding the secret reviewer tokens are signed with."""

SECRET_HELP = f"""\
The reviewer secret is read from ${REVIEWER_SECRET_ENV}: its text, encoded as UTF-8,
is the HMAC-SHA256 key tokens are signed with, at least 32 bytes long. Every process
that issues or verifies tokens needs the same text. Make one with
  python -c "import secrets; print(secrets.token_urlsafe(32))"
and keep it secret: whoever has it can issue tokens for any reviewer."""
"""The epilog of every command that signs or verifies a reviewer token."""


def explain_secret(parser: argparse.ArgumentParser) -> None:
    """End a command's ``--help`` with how the reviewer secret is given and made."""
    parser.epilog = SECRET_HELP
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def reviewer_verifier(clock: float | None = None) -> HmacReviewerVerifier:
    """The verifier of the secret in ``$COVONAUT_ES_REVIEWER_SECRET`` (a fixed ``clock``
    in epoch seconds, if given); a usage error when the variable is unset."""
    # The variable's bytes as the environment holds them, UTF-8 or not.
    secret = os.fsencode(os.environ.get(REVIEWER_SECRET_ENV, ""))
    if not secret:
        msg = (
            f"set ${REVIEWER_SECRET_ENV} to the secret reviewer tokens are signed with "
            "(see --help for how to make one)"
        )
        raise UsageError(msg)
    if len(secret) < MIN_SECRET_BYTES:
        msg = (
            f"${REVIEWER_SECRET_ENV} holds {len(secret)} bytes; a reviewer secret "
            f'needs at least {MIN_SECRET_BYTES}: make one with python -c "import secrets; '
            'print(secrets.token_urlsafe(32))"'
        )
        raise UsageError(msg)
    if clock is None:
        return HmacReviewerVerifier(secret)
    return HmacReviewerVerifier(secret, clock=lambda: clock)


def add_token_commands(subcommands: Subcommands) -> None:
    """Declare ``token issue``."""
    token = subcommands.add_parser(
        "token", help="issue reviewer tokens", description="Issue reviewer tokens."
    )
    explain_secret(token)
    actions = token.add_subparsers(title="commands", metavar="COMMAND", required=True)
    parser = add_command(
        actions,
        "issue",
        issue,
        help_="sign a reviewer token for the commands that decide (approve, reject, ...)",
    )
    explain_secret(parser)
    parser.add_argument("--reviewer", required=True, metavar="ID", help="the reviewer's id")
    parser.add_argument(
        "--ttl", required=True, type=float, metavar="SECONDS", help="how long the token is valid"
    )
    parser.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        default=[],
        metavar="SCOPE",
        help="a scope the token grants, which a tool's review policy may require (repeatable)",
    )
    add_json_option(parser)


def issue(args: argparse.Namespace) -> int:
    """``token issue --reviewer ID --ttl SECONDS [--scope SCOPE]...``: prints the token
    and, with ``--json``, the reviewer and the scopes it holds (each once)."""
    now = time.time()
    verifier = reviewer_verifier(clock=now)
    try:
        token = verifier.issue_token(args.reviewer, ttl_seconds=args.ttl, scopes=args.scopes)
    except ValueError as exc:  # the verifier's one check of the id, the lifetime, the scopes
        msg = f"cannot sign a token with these --reviewer, --ttl and --scope values: {exc}"
        raise UsageError(msg) from exc
    holder = verifier.identify(token)
    value = {
        "token": token,
        "reviewer": holder.id,
        "scopes": list(holder.scopes),
        "expires_at": datetime.fromtimestamp(now + args.ttl, tz=UTC),
    }
    emit_value(args, value, lambda v: [token])
    return EXIT_OK
