"""Reviewers signed in with an organisation's identity provider: JSON Web Tokens checked
against a JWKS the tests serve on loopback, or against one configured key."""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import http.server
import importlib
import json
import socket
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given, settings
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from jwt.warnings import InsecureKeyLengthWarning

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    ReviewerNotVerifiedError,
    ScriptedProvider,
    ThreadStatus,
    Tool,
    open_store,
)
from covonaut_es.cli._command import UsageError
from covonaut_es.cli._identity import add_reviewer_options, reviewer_verifier_from
from covonaut_es.errors import ConfigurationError, IdentityProviderUnavailableError
from covonaut_es.runtime import JwtReviewerVerifier
from hostile_text import spoiled_tokens
from support import answer, call, ticking_clock

ISSUER = "https://id.example.com/"
AUDIENCE = "covonaut-inbox"
NOW = 1_800_000_000.0
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ROTATED_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
FORGER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def public_pem(key: Any) -> bytes:
    return bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
    """The public half of ``key`` as a JWKS entry."""
    codec = RSAAlgorithm if alg.startswith("RS") else ECAlgorithm
    entry: dict[str, Any] = codec.to_jwk(key.public_key(), as_dict=True)
    return {**entry, "kid": kid, "alg": alg, "use": "sig"}


def claims(**changes: Any) -> dict[str, Any]:
    """Valid claims for alice at NOW; a change of None leaves the claim out."""
    base = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "email": "alice@example.com",
        "iat": int(NOW),
        "exp": int(NOW) + 300,
    }
    merged = {**base, **changes}
    return {name: value for name, value in merged.items() if value is not None}


def mint(key: Any = RSA_KEY, kid: str = "rsa-1", alg: str = "RS256", **changes: Any) -> str:
    return jwt.encode(claims(**changes), key, algorithm=alg, headers={"kid": kid})


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], secret: bytes = b"") -> str:
    """A token PyJWT would not sign: ``alg`` none, or HS256 under a public key's PEM."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims()).encode())}"
    if header["alg"] == "none":
        return signing_input + "."
    mac = hmac.digest(secret, signing_input.encode(), hashlib.sha256)
    return f"{signing_input}.{b64(mac)}"


class Jwks:
    """A JWKS endpoint on loopback whose keys the test changes; ``stop`` takes it down."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self.keys = keys
        self.fetches = 0
        jwks = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.fetches += 1
                body = json.dumps({"keys": jwks.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def jwks() -> Iterator[Jwks]:
    """The identity provider's published keys: an RSA and an EC signing key."""
    server = Jwks([jwk(RSA_KEY, "rsa-1", "RS256"), jwk(EC_KEY, "ec-1", "ES256")])
    yield server
    if server.thread.is_alive():
        server.stop()


def verifier_for(jwks: Jwks, **options: Any) -> JwtReviewerVerifier:
    options.setdefault("algorithms", ("RS256", "ES256"))
    return JwtReviewerVerifier(ISSUER, AUDIENCE, jwks_url=jwks.url, clock=lambda: NOW, **options)


def refusal(verifier: JwtReviewerVerifier, token: str) -> ReviewerNotVerifiedError:
    """The error ``token`` gets; it never repeats the token or a part of it (of more
    than 8 characters: a shorter one may be a piece of the message's own words)."""
    with pytest.raises(ReviewerNotVerifiedError) as caught:
        verifier.verify(token)
    for text in (str(caught.value), str(caught.value.__cause__)):
        assert not any(len(part) > 8 and part in text for part in (token, *token.split(".")))
    return caught.value


# Accepted tokens ----------------------------------------------------------------------


def test_an_approval_records_the_reviewer_the_identity_provider_vouches_for(
    jwks: Jwks, tmp_path: Path
) -> None:
    """A paused review approved with a valid token from the JWKS records its subject as
    the reviewer, in the thread's history on a SQLite store."""
    runs: list[dict[str, Any]] = []

    def refund(_: Any, args: dict[str, Any]) -> Any:
        runs.append(args)
        return "refunded"

    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(
                    [
                        call(("c1", "refund", '{"order": "A-17"}')),
                        call(("c2", "refund", '{"order": "A-17"}')),
                        answer("Refunded."),
                    ]
                ),
                tools=[
                    Tool("refund", "Refund", {"type": "object"}, refund, requires_approval=True)
                ],
                checkpoint=CheckpointSettings(store=store, thread_id="support-9"),
                reviewer_verifier=verifier_for(jwks),
                clock=ticking_clock(),
            )
        )
        assert agent.run("Refund order A-17.") == ""
        assert agent.status is ThreadStatus.INTERRUPTED and agent.interrupted is not None
        agent.approve(agent.interrupted.data["review_id"], reviewer=mint(), comment="damaged")
        assert agent.resume() == "Refunded."
        decided = [
            e for e in store.history("support-9") if isinstance(e, AgentThread.ReviewDecided)
        ]
        assert [(e.reviewer, e.comment) for e in decided] == [("alice", "damaged")]
        assert runs == [{"order": "A-17"}]


def test_an_ec_token_and_a_configured_reviewer_claim_verify(jwks: Jwks) -> None:
    """An ES256 token from the JWKS verifies; reviewer_claim picks the claim to record."""
    assert verifier_for(jwks).verify(mint(EC_KEY, "ec-1", "ES256")) == "alice"
    by_email = verifier_for(jwks, reviewer_claim="email")
    assert by_email.verify(mint()) == "alice@example.com"
    assert "'email'" in str(refusal(by_email, mint(email=None)))


def test_a_rotated_key_is_fetched_when_a_token_names_it(jwks: Jwks) -> None:
    """When the provider publishes a new key, a token signed with it verifies after one
    more fetch; known keys come from the cache."""
    verifier = verifier_for(jwks, jwks_refresh_cooldown_seconds=0)
    assert verifier.verify(mint()) == "alice"
    assert verifier.verify(mint(sub="bob")) == "bob"
    assert jwks.fetches == 1
    jwks.keys = [*jwks.keys, jwk(ROTATED_KEY, "rsa-2", "RS256")]
    assert verifier.verify(mint(ROTATED_KEY, "rsa-2", sub="carol")) == "carol"
    assert jwks.fetches == 2


def test_a_leeway_allows_clock_skew(jwks: Jwks) -> None:
    """A token expired within the leeway still verifies; beyond it, it does not."""
    verifier = verifier_for(jwks, leeway_seconds=30)
    assert verifier.verify(mint(exp=int(NOW) - 20)) == "alice"
    assert "expired 40 s ago" in str(refusal(verifier, mint(exp=int(NOW) - 40)))


def test_a_pem_public_key_or_a_shared_secret_verifies_without_a_jwks() -> None:
    """An Ed25519 public key verifies EdDSA tokens, a shared secret HS256 tokens."""
    ed_key = ed25519.Ed25519PrivateKey.generate()
    by_key = JwtReviewerVerifier(ISSUER, AUDIENCE, key=public_pem(ed_key), clock=lambda: NOW)
    assert by_key.algorithms == ("EdDSA",)
    assert by_key.verify(mint(ed_key, alg="EdDSA")) == "alice"
    secret = b"s" * 32
    by_secret = JwtReviewerVerifier(ISSUER, AUDIENCE, key=secret, clock=lambda: NOW)
    assert by_secret.verify(mint(secret, alg="HS256")) == "alice"
    assert "signature" in str(refusal(by_secret, mint(b"t" * 32, alg="HS256")))


# Refused tokens -----------------------------------------------------------------------

PUBLIC_PEM = public_pem(RSA_KEY)
REFUSED = {
    "expired": (mint(exp=int(NOW) - 3600), "expired 3600 s ago"),
    "not yet valid": (mint(nbf=int(NOW) + 600), "not valid before 600 s from now"),
    "issued in the future": (mint(iat=int(NOW) + 600), "issued 600 s in the future"),
    "wrong issuer": (mint(iss="https://evil.example.com/"), "another issuer"),
    "wrong audience": (mint(aud="another-app"), "another audience"),
    "bad signature": (mint(FORGER_KEY), "signature does not verify"),
    "unknown kid": (mint(FORGER_KEY, kid="rsa-9"), "key id is not among"),
    "no kid": (jwt.encode(claims(), RSA_KEY, algorithm="RS256"), "names no key id"),
    "alg none": (forged({"alg": "none", "kid": "rsa-1"}), "signed with 'none'"),
    "HS256 with the public key": (
        forged({"alg": "HS256", "kid": "rsa-1"}, PUBLIC_PEM),
        "signed with 'HS256'",
    ),
    "missing sub": (mint(sub=None), "no 'sub' claim"),
    "missing exp": (mint(exp=None), "no 'exp' claim"),
    "exp not a number": (mint(exp="tomorrow"), "'exp' claim is not a number"),
    "exp beyond a float": (mint(exp=10**400), "'exp' claim is not a number"),
    "sub not a string": (mint(sub=7), "'sub' claim is not a string"),
    "not a JWT": ("not.a.jwt", "not a JSON Web Token"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_bad_token_is_refused_naming_the_cause_not_the_token(jwks: Jwks, case: str) -> None:
    """Each defect raises ReviewerNotVerifiedError whose message names it, and never
    quotes the token."""
    token, cause = REFUSED[case]
    assert cause in str(refusal(verifier_for(jwks), token))


def test_hs256_signed_with_the_public_key_is_refused_by_a_pem_key_verifier() -> None:
    """Algorithm confusion: a verifier given the RSA public key refuses an HS256 token
    whose secret is that key's PEM text."""
    verifier = JwtReviewerVerifier(ISSUER, AUDIENCE, key=PUBLIC_PEM, clock=lambda: NOW)
    assert verifier.verify(mint()) == "alice"
    token = forged({"alg": "HS256"}, PUBLIC_PEM)
    assert "signed with 'HS256'" in str(refusal(verifier, token))


def test_a_token_signed_with_a_short_published_key_is_refused(jwks: Jwks) -> None:
    """A 1024-bit RSA key in the JWKS verifies nothing: it is too short to trust."""
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    jwks.keys = [*jwks.keys, jwk(weak, "weak-1", "RS256")]
    with warnings.catch_warnings():  # PyJWT warns when signing with it
        warnings.simplefilter("ignore", InsecureKeyLengthWarning)
        token = mint(weak, "weak-1")
    assert "too short" in str(refusal(verifier_for(jwks), token))


def test_a_jwks_that_cannot_be_reached_is_a_distinct_error(jwks: Jwks) -> None:
    """With the provider down, verify raises IdentityProviderUnavailableError, a
    ReviewerNotVerifiedError and a ConnectionError, naming the JWKS URL."""
    verifier = verifier_for(jwks, jwks_timeout_seconds=2)
    jwks.stop()
    error = refusal(verifier, mint())
    assert isinstance(error, IdentityProviderUnavailableError)
    assert isinstance(error, ConnectionError)
    assert jwks.url in str(error)


def test_a_jwks_that_does_not_answer_times_out() -> None:
    """A provider that accepts the connection and never answers is given up on after
    jwks_timeout_seconds, as unavailable."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/jwks"
        verifier = JwtReviewerVerifier(
            ISSUER, AUDIENCE, jwks_url=url, jwks_timeout_seconds=0.2, clock=lambda: NOW
        )
        with pytest.raises(IdentityProviderUnavailableError, match="could not be fetched"):
            verifier.verify(mint())


def test_credentials_that_are_not_strings_or_too_long_are_refused(jwks: Jwks) -> None:
    """A credential that is not a string of sensible length is refused before parsing."""
    verifier = verifier_for(jwks)
    for credential in (None, b"token", "", "x" * 20_000):
        with pytest.raises(ReviewerNotVerifiedError, match="expected a JSON Web Token"):
            verifier.verify(credential)
    assert jwks.fetches == 0


@settings(max_examples=50, deadline=None)
@given(credential=spoiled_tokens(mint()))
def test_a_token_with_a_character_no_jwt_holds_is_refused(credential: str) -> None:
    """Property: a token with a lone surrogate (what a command line makes of a byte that
    is no UTF-8), a control, a space or a non-ASCII letter put in is refused with
    ReviewerNotVerifiedError, never echoed: a surrogate raised a UnicodeEncodeError
    from PyJWT (helper-158)."""
    verifier = JwtReviewerVerifier(ISSUER, AUDIENCE, key=PUBLIC_PEM, clock=lambda: NOW)
    refusal(verifier, credential)


# Configuration ------------------------------------------------------------------------

CONFIG_ERRORS = {
    "no issuer": ({"issuer": ""}, "non-empty issuer"),
    "no audience": ({"audience": ""}, "non-empty audience"),
    "no keys": ({"key": None}, "either jwks_url or key"),
    "two key sources": ({"jwks_url": "https://id.example.com/jwks"}, "exactly one"),
    "alg none": ({"algorithms": ("none",)}, "cannot be verified"),
    "HS256 with a public key": ({"algorithms": ("RS256", "HS256")}, "cannot be verified"),
    "RS256 with a secret": ({"key": b"s" * 32, "algorithms": ("RS256",)}, "shared secret"),
    "short secret": ({"key": b"short"}, "at least 32 bytes"),
    "private key": (
        {
            "key": RSA_KEY.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        },
        "private key",
    ),
    "plain http": (
        {"key": None, "jwks_url": "http://id.example.com/jwks"},
        "https",
    ),
    "huge leeway": ({"leeway_seconds": 86_400}, "leeway_seconds"),
    "no timeout": ({"jwks_timeout_seconds": 0}, "jwks_timeout_seconds"),
    "NaN cache": ({"jwks_cache_seconds": float("nan")}, "jwks_cache_seconds"),
}


@pytest.mark.parametrize("case", CONFIG_ERRORS)
def test_an_unsafe_configuration_is_refused(case: str) -> None:
    """A verifier that would accept tokens it should not is never constructed."""
    changes, message = CONFIG_ERRORS[case]
    options: dict[str, Any] = {"issuer": ISSUER, "audience": AUDIENCE, "key": PUBLIC_PEM}
    options.update(changes)
    with pytest.raises(ConfigurationError, match=message):
        JwtReviewerVerifier(**options)


def test_a_jwks_verifier_takes_rs256_by_default_and_never_hmac(jwks: Jwks) -> None:
    """A JWKS verifier accepts RS256 unless told otherwise, and only asymmetric
    algorithms; a single name is taken as a list of one."""
    assert verifier_for(jwks, algorithms=()).algorithms == ("RS256",)
    assert verifier_for(jwks, algorithms="ES256").algorithms == ("ES256",)
    with pytest.raises(ConfigurationError, match="HS256"):
        verifier_for(jwks, algorithms=("HS256",))


def test_importing_without_pyjwt_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PyJWT, the import fails with the extra to install."""
    monkeypatch.setitem(sys.modules, "jwt", None)
    monkeypatch.delitem(sys.modules, "covonaut_es.service._jwt")
    with pytest.raises(ImportError, match=r"covonaut-es\[inbox\]"):
        importlib.import_module("covonaut_es.service._jwt")


# The command line's options -------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_reviewer_options(parser)
    return parser.parse_args(argv)


def test_jwt_options_select_the_jwt_verifier(jwks: Jwks, tmp_path: Path) -> None:
    """--jwt-* options build a JwtReviewerVerifier from a JWKS URL or a key file."""
    verifier = reviewer_verifier_from(
        parse(
            *("--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE, "--jwt-jwks-url", jwks.url),
            *("--jwt-algorithm", "RS256", "--jwt-algorithm", "ES256"),
            *("--jwt-reviewer-claim", "email", "--jwt-leeway", "5"),
        )
    )
    assert isinstance(verifier, JwtReviewerVerifier)
    assert (verifier.algorithms, verifier.reviewer_claim, verifier.leeway_seconds) == (
        ("RS256", "ES256"),
        "email",
        5.0,
    )
    key_file = tmp_path / "idp.pem"
    key_file.write_bytes(PUBLIC_PEM)
    by_key = reviewer_verifier_from(
        parse("--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE, "--jwt-key-file", str(key_file))
    )
    assert isinstance(by_key, JwtReviewerVerifier) and by_key.algorithms == ("RS256",)


def test_without_jwt_options_the_hmac_secret_verifies(monkeypatch: pytest.MonkeyPatch) -> None:
    """No --jwt-* option: HMAC tokens signed with $COVONAUT_ES_REVIEWER_SECRET."""
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", "x" * 32)
    verifier = reviewer_verifier_from(parse())
    assert isinstance(verifier, HmacReviewerVerifier)
    assert verifier.verify(verifier.issue_token("dave", 60)) == "dave"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--jwt-issuer", ISSUER, "--jwt-jwks-url", "https://x/"), "--jwt-audience"),
        (("--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE), "--jwt-jwks-url"),
        (
            ("--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE, "--jwt-key-file", "/no/key"),
            "cannot read --jwt-key-file",
        ),
    ],
)
def test_incomplete_jwt_options_are_a_usage_error(argv: tuple[str, ...], message: str) -> None:
    """An issuer without an audience, or no keys, or an unreadable key file is refused."""
    with pytest.raises(UsageError, match=message):
        reviewer_verifier_from(parse(*argv))
