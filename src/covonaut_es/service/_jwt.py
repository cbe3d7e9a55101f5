"""Reviewer identity from an organisation's identity provider: JSON Web Tokens.

:class:`JwtReviewerVerifier` checks a token's signature with PyJWT, against the keys the
provider publishes (a JWKS URL) or one configured key, then its algorithm, issuer,
audience and times, and returns the claim that names the reviewer. Importing this
module needs the ``inbox`` extra.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import attrs

from covonaut_es._extras import missing_extra
from covonaut_es.errors import (
    ConfigurationError,
    IdentityProviderUnavailableError,
    ReviewerNotVerifiedError,
)
from covonaut_es.service._reviewers import MIN_SECRET_BYTES, Reviewer, _epoch_seconds

try:
    import jwt
except ModuleNotFoundError as exc:
    raise missing_extra(exc, "jwt", "inbox", user="JwtReviewerVerifier") from exc
try:
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
except ModuleNotFoundError as exc:
    raise missing_extra(exc, "cryptography", "inbox", user="JwtReviewerVerifier") from exc

_RSA = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_EC_BY_CURVE = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_HMAC = ("HS256", "HS384", "HS512")
_PUBLISHED = (*_RSA, *_EC_BY_CURVE.values(), "EdDSA")
"""The algorithms of keys a JWKS may publish (RS256, the usual one, first): no HMAC."""
_MAX_TOKEN_CHARS = 16_384
"""Longer credentials are refused before any parsing: identity tokens are a few KiB."""


def _non_empty(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        msg = f"JwtReviewerVerifier needs a non-empty {attribute.name}, got {value!r}"
        if attribute.name in ("issuer", "audience"):
            msg += (
                ": without it, tokens the identity provider issued for other applications "
                "would be accepted"
            )
        raise ConfigurationError(msg)


def _seconds_between(
    low: float, high: float
) -> Callable[[object, attrs.Attribute[float], float], None]:
    def check(_: object, attribute: attrs.Attribute[float], value: float) -> None:
        if not low <= value <= high:  # NaN fails too
            msg = f"{attribute.name} must be between {low:g} and {high:g}, got {value!r}"
            raise ConfigurationError(msg)

    return check


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_jwks_url(_: object, __: attrs.Attribute[str | None], url: str | None) -> None:
    if url is None:
        return
    parts = urlsplit(url)
    # Keys fetched over plain HTTP could be swapped on the way: only loopback is exempt.
    if not parts.hostname or not (
        parts.scheme == "https" or (parts.scheme == "http" and _loopback(parts.hostname))
    ):
        msg = (
            f"the JWKS URL must be https://HOST/... (http:// only on loopback), got {url!r}; "
            "take it from the identity provider's jwks_uri"
        )
        raise ConfigurationError(msg)


def _load_key(key: str | bytes) -> Any:
    """A PEM public key as a ``cryptography`` key, anything else as a shared secret."""
    data = key.encode() if isinstance(key, str) else bytes(key)
    if b"-----BEGIN" not in data:
        if len(data) < MIN_SECRET_BYTES:
            msg = (
                f"a shared JWT secret needs at least {MIN_SECRET_BYTES} bytes, got "
                f"{len(data)}; pass the identity provider's PEM public key for RS256, ES256 "
                "or EdDSA tokens"
            )
            raise ConfigurationError(msg)
        return data
    if b"PRIVATE KEY-----" in data:
        msg = (
            "the JWT key is a private key: pass the identity provider's public key "
            "(-----BEGIN PUBLIC KEY-----); the private key must stay with the provider"
        )
        raise ConfigurationError(msg)
    try:
        return load_pem_public_key(data)
    except ValueError as exc:
        msg = "the JWT key is PEM text but not a public key that cryptography can load"
        raise ConfigurationError(msg) from exc


def _algorithms_for(key: Any) -> tuple[str, ...]:
    """The algorithms ``key`` may verify, the default first."""
    if isinstance(key, bytes):
        return _HMAC
    if isinstance(key, rsa.RSAPublicKey):
        return _RSA
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in _EC_BY_CURVE:
        return (_EC_BY_CURVE[key.curve.name],)
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return ("EdDSA",)
    msg = f"a {type(key).__name__} cannot verify JWTs: use an RSA, P-256/384/521 or Ed25519 key"
    raise ConfigurationError(msg)


def _named_alg(alg: object) -> str:
    # The header is unverified: name the algorithm only if it is a short plain word.
    if isinstance(alg, str) and alg.isalnum() and len(alg) <= 10:
        return repr(alg)
    return "an unrecognised algorithm"


def _algorithm_names(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _seconds(claims: dict[str, Any], name: str) -> float:
    value = claims[name]
    try:
        seconds = float(value) if isinstance(value, int | float) else math.nan
    except OverflowError:  # an int too large for a float
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds):
        msg = f"the token's {name!r} claim is not a number of seconds since the epoch"
        raise ReviewerNotVerifiedError(msg)
    return seconds


@attrs.frozen
class JwtReviewerVerifier:
    """Verifies JSON Web Tokens from an organisation's identity provider (OIDC or any
    issuer of signed JWTs), with PyJWT.

    A token verifies when it is signed with one of ``algorithms`` by the provider's key,
    was issued by ``issuer`` for ``audience``, has ``exp``, ``iat``, ``iss``, ``aud`` and
    ``sub``, is within its validity times on ``clock`` (give or take ``leeway_seconds``),
    and has a non-empty string in ``reviewer_claim``: that string is the reviewer id
    recorded with a decision. Needs the ``inbox`` extra.

    Attributes:
        issuer: The ``iss`` every token must carry: the provider's issuer URL.
        audience: The ``aud`` every token must carry: this application's client id.
        jwks_url: Where the provider publishes its public keys (its ``jwks_uri``):
            https, or http on loopback. Give this or ``key``, not both.
        key: One PEM public key (RSA, P-256/384/521 or Ed25519) or a shared secret of
            at least 32 bytes for HS256.
        algorithms: The signature algorithms accepted; never ``none``, and never an
            HMAC algorithm with a public key or a JWKS (a token signed with the public
            key as an HMAC secret would verify). Empty: RS256 for a JWKS or an RSA key,
            the curve's for an EC key, EdDSA for an Ed25519 key, HS256 for a secret.
        leeway_seconds: Clock skew allowed on ``exp``, ``nbf`` and ``iat``, 0 to 300.
        reviewer_claim: The claim naming the reviewer, e.g. ``"email"``.
        scopes_claim: The claim holding the reviewer's scopes or roles (what a tool's
            review policy names): a space-separated string, as OAuth's ``scope``, or
            a list of strings, as ``scp``, ``roles`` or ``groups``. A token without
            it grants none.
        jwks_timeout_seconds: How long a fetch of the JWKS may take.
        jwks_cache_seconds: How long fetched keys are used before fetching again.
        jwks_refresh_cooldown_seconds: After a fetch, how long a token with an unknown
            key id is refused without fetching again (keys rotated in are picked up
            after it; it keeps forged key ids from hammering the provider).
        clock: Seconds since the epoch, for the validity times.
    """

    issuer: str = attrs.field(validator=_non_empty)
    audience: str = attrs.field(validator=_non_empty)
    jwks_url: str | None = attrs.field(default=None, kw_only=True, validator=_check_jwks_url)
    key: str | bytes | None = attrs.field(default=None, kw_only=True, repr=False)
    algorithms: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_algorithm_names)
    leeway_seconds: float = attrs.field(
        default=30.0, kw_only=True, validator=_seconds_between(0, 300)
    )
    reviewer_claim: str = attrs.field(default="sub", kw_only=True, validator=_non_empty)
    scopes_claim: str = attrs.field(default="scope", kw_only=True, validator=_non_empty)
    jwks_timeout_seconds: float = attrs.field(
        default=5.0, kw_only=True, validator=_seconds_between(0.001, 120)
    )
    jwks_cache_seconds: float = attrs.field(
        default=300.0, kw_only=True, validator=_seconds_between(0.001, 86_400)
    )
    jwks_refresh_cooldown_seconds: float = attrs.field(
        default=30.0, kw_only=True, validator=_seconds_between(0, 86_400)
    )
    clock: Callable[[], float] = attrs.field(default=_epoch_seconds, kw_only=True)
    _verifying_key: Any = attrs.field(init=False, repr=False, eq=False)
    _jwks: jwt.PyJWKClient | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if (self.jwks_url is None) == (self.key is None):
            msg = "JwtReviewerVerifier needs either jwks_url or key (exactly one of them)"
            raise ConfigurationError(msg)
        if self.key is not None:
            verifying_key = _load_key(self.key)
            usable = _algorithms_for(verifying_key)
            jwks = None
        else:
            verifying_key, usable = None, _PUBLISHED
            jwks = jwt.PyJWKClient(
                self.jwks_url or "",
                cache_keys=False,  # the key set's cache expires; the per-key one never does
                lifespan=self.jwks_cache_seconds,
                timeout=self.jwks_timeout_seconds,
                cooldown_duration=self.jwks_refresh_cooldown_seconds,
            )
        algorithms = self.algorithms or usable[:1]
        refused = [alg for alg in algorithms if alg not in usable]
        if refused:
            kind = "a shared secret" if isinstance(verifying_key, bytes) else "this key"
            msg = (
                f"the algorithms {refused} cannot be verified with {kind}; choose from "
                f"{list(usable)} (never 'none', and HMAC only with a shared secret)"
            )
            raise ConfigurationError(msg)
        object.__setattr__(self, "algorithms", algorithms)
        object.__setattr__(self, "_verifying_key", verifying_key)
        object.__setattr__(self, "_jwks", jwks)

    def verify(self, credential: Any) -> str:
        """The reviewer id in a valid token from the configured identity provider.

        Raises:
            ReviewerNotVerifiedError: As :meth:`identify`.
            IdentityProviderUnavailableError: As :meth:`identify`.
        """
        return self.identify(credential).id

    def identify(self, credential: Any) -> Reviewer:
        """The reviewer in a valid token from the configured identity provider, with
        the scopes its ``scopes_claim`` grants.

        Raises:
            ReviewerNotVerifiedError: The token is malformed, signed with another
                algorithm or key, names an unknown key id, was issued by another issuer
                or for another audience, is expired or not yet valid, lacks a required
                claim, or holds scopes that are neither a string nor a list of strings.
                A credential that is no ASCII text of at most 16,384 characters is
                refused before it is parsed. The message names the cause, never the
                token.
            IdentityProviderUnavailableError: The provider's keys could not be fetched.
        """
        # A JWT is ASCII: other text (a lone surrogate, from a byte of a command line
        # that is no UTF-8) is refused before PyJWT encodes it, which raised.
        if (
            not isinstance(credential, str)
            or not 0 < len(credential) <= _MAX_TOKEN_CHARS
            or not credential.isascii()
        ):
            msg = (
                f"expected a JSON Web Token of at most {_MAX_TOKEN_CHARS} ASCII characters "
                f"from the identity provider, got a {type(credential).__name__} that is not one"
            )
            raise ReviewerNotVerifiedError(msg)
        header = self._header(credential)
        key = self._verifying_key if self._jwks is None else self._jwks_key(header.get("kid"))
        try:
            claims = jwt.decode(
                credential,
                key,
                algorithms=list(self.algorithms),
                issuer=self.issuer,
                audience=self.audience,
                # The times are checked on self.clock below: PyJWT reads the wall clock.
                options={
                    "require": ["exp", "iat", "iss", "aud", "sub", self.reviewer_claim],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "enforce_minimum_key_length": True,  # a warning otherwise
                },
            )
        except jwt.PyJWTError as exc:
            raise ReviewerNotVerifiedError(self._cause(exc)) from exc
        self._check_times(claims)
        reviewer = claims[self.reviewer_claim]
        if not isinstance(reviewer, str) or not reviewer:
            msg = f"the token's {self.reviewer_claim!r} claim is not a non-empty string"
            raise ReviewerNotVerifiedError(msg)
        return Reviewer(reviewer, self._scopes(claims))

    def _scopes(self, claims: dict[str, Any]) -> tuple[str, ...]:
        granted = claims.get(self.scopes_claim, ())
        if isinstance(granted, str):
            granted = granted.split()
        if not isinstance(granted, list | tuple) or not all(
            isinstance(scope, str) and scope for scope in granted
        ):
            msg = (
                f"the token's {self.scopes_claim!r} claim is neither a space-separated "
                "string nor a list of non-empty strings"
            )
            raise ReviewerNotVerifiedError(msg)
        return tuple(dict.fromkeys(granted))

    def _header(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            msg = "the reviewer credential is not a JSON Web Token (it does not decode)"
            raise ReviewerNotVerifiedError(msg) from exc
        if header.get("alg") not in self.algorithms:
            msg = (
                f"the token is signed with {_named_alg(header.get('alg'))}; this verifier "
                f"accepts only {list(self.algorithms)}"
            )
            raise ReviewerNotVerifiedError(msg)
        return header

    def _jwks_key(self, kid: object) -> jwt.PyJWK:
        assert self._jwks is not None
        if not isinstance(kid, str) or not kid:
            msg = "the token names no key id ('kid'), so no key of the identity provider fits"
            raise ReviewerNotVerifiedError(msg)
        unavailable = (
            f"the identity provider's keys could not be fetched from {self.jwks_url}; "
            "nothing was recorded: try again, or check the provider and --jwt-jwks-url"
        )
        try:
            self._jwks.get_signing_keys()
        except (jwt.PyJWKClientError, jwt.PyJWKSetError) as exc:
            raise IdentityProviderUnavailableError(unavailable) from exc
        try:
            return self._jwks.get_signing_key(kid)
        except jwt.PyJWKClientConnectionError as exc:
            raise IdentityProviderUnavailableError(unavailable) from exc
        except jwt.PyJWKClientError as exc:
            msg = (
                f"the token's key id is not among the identity provider's keys at "
                f"{self.jwks_url}: it was signed by another provider, or by a key not yet "
                "published"
            )
            raise ReviewerNotVerifiedError(msg) from exc

    def _cause(self, exc: jwt.PyJWTError) -> str:
        # Subclasses before their bases: an InvalidSignatureError is a DecodeError.
        if isinstance(exc, jwt.InvalidSignatureError):
            return (
                "the token's signature does not verify with the identity provider's key: "
                "it was altered or signed by another key"
            )
        if isinstance(exc, jwt.MissingRequiredClaimError):
            return f"the token has no {exc.claim!r} claim, which this verifier requires"
        if isinstance(exc, jwt.exceptions.InvalidSubjectError):
            return "the token's 'sub' claim is not a string"
        if isinstance(exc, jwt.InvalidIssuerError):
            return f"the token was issued by another issuer than {self.issuer!r}"
        if isinstance(exc, jwt.InvalidAudienceError):
            return f"the token was issued for another audience than {self.audience!r}"
        if isinstance(exc, jwt.InvalidKeyError):
            return (
                "the identity provider's key for this token is too short or unusable for "
                f"its algorithm ({exc}); ask the provider to rotate it"
            )
        if isinstance(exc, jwt.InvalidAlgorithmError):
            return f"the token's algorithm does not match its key; accepted: {self.algorithms}"
        return f"the token does not verify ({type(exc).__name__}); sign in again"

    def _check_times(self, claims: dict[str, Any]) -> None:
        now, leeway = self.clock(), self.leeway_seconds
        expires, issued = _seconds(claims, "exp"), _seconds(claims, "iat")
        if expires <= now - leeway:
            msg = f"the token expired {now - expires:.0f} s ago; sign in again"
            raise ReviewerNotVerifiedError(msg)
        if "nbf" in claims and (not_before := _seconds(claims, "nbf")) > now + leeway:
            msg = (
                f"the token is not valid before {not_before - now:.0f} s from now; check "
                "the clocks of this host and the identity provider"
            )
            raise ReviewerNotVerifiedError(msg)
        if issued > now + leeway:
            msg = (
                f"the token was issued {issued - now:.0f} s in the future; check the clocks "
                "of this host and the identity provider"
            )
            raise ReviewerNotVerifiedError(msg)
