"""How a command that a person runs learns who the person is: ``--reviewer-token-env``
(or ``--reviewer-token``) and the ``--jwt-*`` options, declared once
(:func:`add_reviewer_arguments`), select JSON Web Tokens from an organisation's identity
provider; without them, reviewer tokens are HMAC tokens signed with
``$COVONAUT_ES_REVIEWER_SECRET``. :func:`acting_reviewer` verifies the token once and
gives the service the command runs through.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from covonaut_es.cli._command import UsageError
from covonaut_es.cli._options import secret_from_variable
from covonaut_es.cli._tokens import REVIEWER_SECRET_ENV, explain_secret, reviewer_verifier
from covonaut_es.service import Reviewer, ReviewerVerifier, ThreadService
from covonaut_es.store import Store

_JWT_OPTIONS = (
    "jwt_issuer",
    "jwt_audience",
    "jwt_jwks_url",
    "jwt_key_file",
    "jwt_algorithms",
    "jwt_reviewer_claim",
    "jwt_scopes_claim",
    "jwt_leeway",
)


def add_reviewer_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--reviewer-token`` and the options of :func:`add_reviewer_options` on a
    command a person runs, and end its ``--help`` with how the reviewer secret is made."""
    explain_secret(parser)
    add_reviewer_options(parser)
    token = parser.add_mutually_exclusive_group(required=True)
    token.add_argument(
        "--reviewer-token-env",
        metavar="VAR",
        help="the environment variable holding your reviewer token, e.g. from "
        "`covonaut-es token issue`",
    )
    token.add_argument(
        "--reviewer-token",
        metavar="TOKEN",
        help="the token itself, which other local users can read while the command runs "
        "(ps): prefer --reviewer-token-env",
    )


def acting_reviewer(
    args: argparse.Namespace, store: Store, verifier: ReviewerVerifier
) -> tuple[ThreadService, Reviewer]:
    """The service of ``store`` and the reviewer the token verifies as (once), for a
    command a person runs: the token in the variable ``--reviewer-token-env`` names, or
    ``--reviewer-token`` itself.

    Raises:
        UsageError: ``--reviewer-token-env`` names no variable, or one that is not set.
        ReviewerNotVerifiedError: The token does not verify; nothing is recorded.
    """
    token = args.reviewer_token
    if token is None:
        found = secret_from_variable("--reviewer-token-env", args.reviewer_token_env)
        if found is None:
            msg = (
                "--reviewer-token-env needs the name of the environment variable holding the token"
            )
            raise UsageError(msg)
        token = found.strip()  # as an Authorization header's: a file read ends in a newline
    service = ThreadService(store, verifier=verifier)
    return service, service.reviewer(token)


def add_reviewer_options(parser: argparse.ArgumentParser) -> None:
    """Declare ``--jwt-issuer``, ``--jwt-audience``, ``--jwt-jwks-url`` or
    ``--jwt-key-file``, ``--jwt-algorithm``, ``--jwt-reviewer-claim``,
    ``--jwt-scopes-claim`` and ``--jwt-leeway``
    on a subcommand; :func:`reviewer_verifier_from` reads them."""
    group = parser.add_argument_group(
        "reviewer identity",
        "JSON Web Tokens from the organisation's identity provider (OIDC); without any "
        f"--jwt-* option, HMAC reviewer tokens signed with ${REVIEWER_SECRET_ENV}",
    )
    group.add_argument("--jwt-issuer", metavar="ISS", help="the tokens' issuer (iss)")
    group.add_argument("--jwt-audience", metavar="AUD", help="this application's client id (aud)")
    keys = group.add_mutually_exclusive_group()
    keys.add_argument("--jwt-jwks-url", metavar="URL", help="the provider's jwks_uri (https)")
    keys.add_argument(
        "--jwt-key-file",
        metavar="PATH",
        help="a PEM public key, or a shared secret of 32 bytes or more for HS256",
    )
    group.add_argument(
        "--jwt-algorithm",
        dest="jwt_algorithms",
        action="append",
        metavar="ALG",
        help="an accepted signature algorithm, repeatable (default: the key's, RS256 for a JWKS)",
    )
    group.add_argument(
        "--jwt-reviewer-claim",
        metavar="CLAIM",
        help="the claim naming the reviewer (default: sub), e.g. email",
    )
    group.add_argument(
        "--jwt-scopes-claim",
        metavar="CLAIM",
        help="the claim holding the reviewer's scopes or roles (default: scope), e.g. roles",
    )
    group.add_argument(
        "--jwt-leeway", type=float, metavar="SECONDS", help="clock skew allowed (default: 30)"
    )


def reviewer_verifier_from(args: argparse.Namespace) -> ReviewerVerifier:
    """The verifier the options of :func:`add_reviewer_options` select: a
    ``JwtReviewerVerifier`` when any ``--jwt-*`` option is given, else the HMAC verifier of
    ``$COVONAUT_ES_REVIEWER_SECRET``; a usage error for an incomplete choice."""
    if all(getattr(args, name) is None for name in _JWT_OPTIONS):
        return reviewer_verifier()
    if not args.jwt_issuer or not args.jwt_audience:
        msg = (
            "JSON Web Tokens need --jwt-issuer and --jwt-audience: without them, tokens "
            "issued for other applications would be accepted"
        )
        raise UsageError(msg)
    if args.jwt_jwks_url is None and args.jwt_key_file is None:
        msg = "JSON Web Tokens need the provider's keys: --jwt-jwks-url URL or --jwt-key-file PATH"
        raise UsageError(msg)
    try:
        from covonaut_es.service import JwtReviewerVerifier
    except ImportError as exc:
        raise UsageError(str(exc)) from exc
    given: dict[str, Any] = {
        "algorithms": args.jwt_algorithms,
        "reviewer_claim": args.jwt_reviewer_claim,
        "scopes_claim": args.jwt_scopes_claim,
        "leeway_seconds": args.jwt_leeway,
    }
    return JwtReviewerVerifier(
        args.jwt_issuer,
        args.jwt_audience,
        jwks_url=args.jwt_jwks_url,
        key=None if args.jwt_key_file is None else _read_key(args.jwt_key_file),
        **{name: value for name, value in given.items() if value is not None},
    )


def _read_key(path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        msg = f"cannot read --jwt-key-file {path!r}: {exc.strerror}"
        raise UsageError(msg) from exc
    return data.rstrip(b"\r\n")  # a secret file's final newline is not part of the secret
