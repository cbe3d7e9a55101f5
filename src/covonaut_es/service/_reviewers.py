"""Reviewer identity: who may decide a review, established from a credential.

A decision is recorded only under the reviewer id a :class:`ReviewerVerifier` returns,
never under a name the caller asserts: :func:`verified_reviewer` turns a credential into
a :class:`Reviewer`, the identity every command of the service layer takes, with the
scopes the credential grants (a verifier that also has ``identify``, as both of the
library's do, gives them; one with ``verify`` only gives none).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import re
import time
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

import attrs
import msgspec

from covonaut_es._text import is_blank
from covonaut_es.errors import ConfigurationError, ReviewerNotVerifiedError

# Reviewers --------------------------------------------------------------------------------


def _as_tuple(scopes: Iterable[str]) -> tuple[str, ...]:
    return tuple(scopes)


@attrs.frozen
class Reviewer:
    """A person whose credential a :class:`ReviewerVerifier` verified.

    The service layer's commands take one as proof of who acts; get it from
    :meth:`ThreadService.reviewer <covonaut_es.service.ThreadService.reviewer>`, which
    verifies the credential once. (The service trusts the process it runs in: code that
    makes a ``Reviewer`` itself is code that could hold the verifier's secret too.)

    Attributes:
        id: The reviewer id the verifier returned; decisions are recorded under it.
        scopes: The scopes (or roles) the credential grants: a tool's review policy
            names those that may decide its reviews.
    """

    id: str
    scopes: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)


class ReviewerVerifier(Protocol):
    """Establishes who a reviewer is from a credential the application passes on.

    ``Agent.approve`` and ``Agent.reject`` record a decision only under the reviewer id
    returned here, never under a name the caller asserts.
    """

    def verify(self, credential: Any) -> str:
        """The verified reviewer id.

        Raises:
            ReviewerNotVerifiedError: The credential is invalid, expired or not one this
                verifier understands.
        """
        ...


@runtime_checkable
class ScopedReviewerVerifier(ReviewerVerifier, Protocol):
    """A :class:`ReviewerVerifier` that also establishes the scopes a credential grants."""

    def identify(self, credential: Any) -> Reviewer:
        """The verified reviewer, with their scopes.

        Raises:
            ReviewerNotVerifiedError: As :meth:`verify`.
        """
        ...


MAX_REVIEWER_ID_LENGTH = 200
"""The longest reviewer id (or scope) a token may name, in characters."""


def reviewer_id_problem(reviewer_id: object) -> str | None:
    """What is wrong with ``reviewer_id`` as the name a decision is recorded under, or
    None: the one rule, applied where a token is issued and where any verifier's
    reviewer is accepted.

    A reviewer id is 1 to 200 characters that show something, neither begins nor ends
    with a space, and holds no control, format or line-separating character (a newline,
    a zero-width space, a bidirectional override): what a page or an audit shows of it
    is all there is. (An identity provider may spell one account in composed or
    decomposed form: such ids are accepted, and four eyes tells them apart by NFKC.)
    """
    return _shown_name_problem("reviewer id", reviewer_id)


def scope_problem(scope: object) -> str | None:
    """What is wrong with ``scope`` as a scope a reviewer token grants, or None:
    :func:`reviewer_id_problem`'s rule, applied where a token is issued."""
    return _shown_name_problem("scope", scope)


def _shown_name_problem(what: str, name: object) -> str | None:
    if not isinstance(name, str):
        return f"a {what} must be text, got {type(name).__name__}"
    if not 1 <= len(name) <= MAX_REVIEWER_ID_LENGTH:
        return f"a {what} has 1 to {MAX_REVIEWER_ID_LENGTH} characters, got {len(name)}"
    # Hidden characters first: a name of them alone (a lone surrogate) is blank too,
    # and the message should name the character.
    for position, char in enumerate(name):
        if unicodedata.category(char) in _HIDDEN:
            return (
                f"{what} {name!r} has the control, format, surrogate or separator "
                f"character {char!r} at position {position}: it may hold visible text only"
            )
    if is_blank(name) or name != name.strip():
        return f"{what} {name!r} shows nothing, or begins or ends with a space"
    return None


_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def verified_reviewer(verifier: ReviewerVerifier, credential: Any) -> Reviewer:
    """The reviewer ``verifier`` establishes from ``credential``: with the scopes its
    ``identify`` gives, if it has one, else with none.

    Raises:
        ReviewerNotVerifiedError: The credential does not verify, or the verifier
            returned no reviewer id (or scopes that are no strings).
    """
    if isinstance(verifier, ScopedReviewerVerifier):
        reviewer = verifier.identify(credential)
        reviewer_id, scopes = getattr(reviewer, "id", None), getattr(reviewer, "scopes", None)
    else:
        reviewer_id, scopes = verifier.verify(credential), ()
    problem = reviewer_id_problem(reviewer_id)
    if problem is not None or not isinstance(reviewer_id, str):
        msg = (
            f"the reviewer verifier returned {reviewer_id!r} instead of a reviewer id "
            f"({problem}); a ReviewerVerifier must return one or raise"
        )
        raise ReviewerNotVerifiedError(msg)
    if not isinstance(scopes, tuple) or not all(isinstance(s, str) for s in scopes):
        msg = f"the reviewer verifier returned scopes {scopes!r}, not a tuple of strings"
        raise ReviewerNotVerifiedError(msg)
    return Reviewer(reviewer_id, scopes)


_TOKEN_CONTEXT = b"covonaut-es reviewer token v1\x00"
MIN_SECRET_BYTES = 32
"""The shortest HMAC reviewer secret accepted, in bytes."""


class _TokenClaims(msgspec.Struct, frozen=True, omit_defaults=True):
    sub: str
    exp: float
    scopes: tuple[str, ...] = ()  # omitted when empty: such tokens read as before


MAX_TOKEN_TTL_SECONDS = 366 * 24 * 3600
"""The longest a reviewer token may last, a year and a day: longer lived tokens are a
risk, and expiry times must stay dates."""


def token_ttl_problem(ttl_seconds: object) -> str | None:
    """What makes ``ttl_seconds`` no lifetime of a reviewer token (None: nothing): it
    is a number of seconds above 0 and at most :data:`MAX_TOKEN_TTL_SECONDS`."""
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float):
        return f"a token's lifetime is a number of seconds, got a {type(ttl_seconds).__name__}"
    if not 0 < ttl_seconds <= MAX_TOKEN_TTL_SECONDS:  # NaN is neither
        return (
            f"a token's lifetime is above 0 and at most {MAX_TOKEN_TTL_SECONDS} seconds "
            f"(a year and a day), got {ttl_seconds!r}"
        )
    return None


def _secret_bytes(secret: str | bytes) -> bytes:
    if isinstance(secret, str):
        with contextlib.suppress(UnicodeEncodeError):
            return secret.encode()
        # Raised outside the encoder's error, whose object is the secret.
        msg = "an HMAC reviewer secret given as text must be UTF-8 text; give bytes"
        raise ConfigurationError(msg)
    if not isinstance(secret, bytes | bytearray | memoryview):
        # bytes(64) would be 64 zero bytes: a secret anyone knows.
        msg = f"an HMAC reviewer secret is bytes or text, got a {type(secret).__name__}"
        raise ConfigurationError(msg)
    return bytes(secret)


def _check_secret(_: object, __: attrs.Attribute[bytes], secret: bytes) -> None:
    # A short secret can be guessed offline from one token, and then every reviewer
    # can be impersonated: refuse it rather than warn.
    if len(secret) < MIN_SECRET_BYTES:
        msg = (
            f"an HMAC reviewer secret needs at least {MIN_SECRET_BYTES} bytes, got "
            f"{len(secret)}; generate one with secrets.token_bytes({MIN_SECRET_BYTES})"
        )
        raise ConfigurationError(msg)


def _epoch_seconds() -> float:
    return time.time()  # looked up per call, so tests may patch time.time


_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
"""What :meth:`HmacReviewerVerifier.issue_token` writes: the claims and the signature,
base64url without padding."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@attrs.frozen
class HmacReviewerVerifier:
    """Verifies reviewer tokens signed with HMAC-SHA256 under a shared secret.

    A token names a reviewer id and an expiry time; its signature is checked in
    constant time. Issue tokens where reviewers sign in, verify them where decisions
    are recorded: both sides need the same secret, and nothing else.

    Attributes:
        secret: Random bytes, 32 or more (a ``str`` is taken as UTF-8); a shorter one
            raises ``ConfigurationError``. Keep it secret: whoever has it can issue tokens for
            any reviewer.
        clock: Seconds since the epoch, for expiry.
    """

    secret: bytes = attrs.field(converter=_secret_bytes, validator=_check_secret, repr=False)
    clock: Callable[[], float] = attrs.field(default=_epoch_seconds, kw_only=True)

    def issue_token(
        self, reviewer_id: str, ttl_seconds: float, *, scopes: Iterable[str] = ()
    ) -> str:
        """A token that verifies as ``reviewer_id`` for ``ttl_seconds`` from now,
        granting ``scopes``.

        Raises:
            ValueError: ``reviewer_id`` breaks :func:`reviewer_id_problem`'s rule,
                ``ttl_seconds`` :func:`token_ttl_problem`'s, ``scopes`` is no
                collection, or a scope breaks :func:`scope_problem`'s rule.
        """
        if (problem := reviewer_id_problem(reviewer_id)) is not None:
            raise ValueError(problem)
        if (problem := token_ttl_problem(ttl_seconds)) is not None:
            raise ValueError(problem)
        if isinstance(scopes, str | bytes) or not isinstance(scopes, Iterable):
            msg = f"scopes must be a collection of non-empty strings, got {scopes!r}"
            raise ValueError(msg)
        listed = tuple(scopes)
        for scope in listed:
            if (problem := scope_problem(scope)) is not None:
                raise ValueError(problem)
        granted = tuple(dict.fromkeys(listed))
        claims = _TokenClaims(sub=reviewer_id, exp=self.clock() + ttl_seconds, scopes=granted)
        payload = _b64(msgspec.json.encode(claims))
        return f"{payload}.{_b64(self._sign(payload))}"

    def verify(self, credential: Any) -> str:
        """The reviewer id of a valid, unexpired token this verifier's secret signed.

        Raises:
            ReviewerNotVerifiedError: As :meth:`identify`.
        """
        return self.identify(credential).id

    def identify(self, credential: Any) -> Reviewer:
        """The reviewer, with the scopes it was issued, of a valid, unexpired token this
        verifier's secret signed.

        Raises:
            ReviewerNotVerifiedError: The token is malformed (anything but two segments
                of ASCII base64url joined by a dot), tampered with, signed under
                another secret or expired.
        """
        # Checked before anything is encoded: a lone surrogate (a byte of a command
        # line that is no UTF-8) made the encoder raise.
        if not isinstance(credential, str) or not _TOKEN_SHAPE.fullmatch(credential):
            msg = (
                "expected a reviewer token as issued by HmacReviewerVerifier.issue_token, "
                f"got a {type(credential).__name__} that is not one; sign in again"
            )
            raise ReviewerNotVerifiedError(msg)
        payload, signature = credential.split(".")
        if not hmac.compare_digest(_b64(self._sign(payload)).encode(), signature.encode()):
            msg = (
                "the reviewer token's signature does not match: it was altered or signed "
                "with another secret; issue a new token"
            )
            raise ReviewerNotVerifiedError(msg)
        try:
            claims = msgspec.json.decode(_unb64(payload), type=_TokenClaims)
        except (binascii.Error, ValueError) as exc:  # msgspec errors are ValueErrors
            msg = f"the reviewer token is signed but its claims do not decode: {exc}"
            raise ReviewerNotVerifiedError(msg) from exc
        now = self.clock()
        if claims.exp > now + MAX_TOKEN_TTL_SECONDS:
            msg = (
                f"the reviewer token of {claims.sub!r} lasts longer than a token may "
                f"({MAX_TOKEN_TTL_SECONDS} s); issue a new token"
            )
            raise ReviewerNotVerifiedError(msg)
        if now >= claims.exp:
            msg = (
                f"the reviewer token of {claims.sub!r} expired {now - claims.exp:.0f} s ago; "
                "issue a new token"
            )
            raise ReviewerNotVerifiedError(msg)
        return Reviewer(claims.sub, claims.scopes)

    def _sign(self, payload: str) -> bytes:
        return hmac.digest(self.secret, _TOKEN_CONTEXT + payload.encode(), "sha256")
