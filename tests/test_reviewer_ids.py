"""Reviewer ids follow one rule where a token is issued and where any verifier's reviewer
is accepted: visible text, no control, format or line-separating character, no space at
either end, so no decision is recorded under a name that shows nothing or forges a line."""

from __future__ import annotations

import contextlib
import io
import os
import time
import unicodedata
from typing import Any
from unittest.mock import patch

import attrs
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import HmacReviewerVerifier, open_store
from covonaut_es.cli import main
from covonaut_es.errors import ReviewerNotVerifiedError
from covonaut_es.service import ThreadService
from covonaut_es.service._reviewers import _b64, reviewer_id_problem

VERIFIER = HmacReviewerVerifier(b"r" * 40)

HIDDEN_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")
HIDDEN = st.characters(categories=HIDDEN_CATEGORIES) | st.sampled_from(
    ["\u200b", "\u202e", "\n", "\x00", "\u2028", "\ufeff", "\udcff"]
)
VISIBLE = st.text(
    st.characters(categories=["L", "N", "P"], exclude_characters="\u115f\u1160\u3164\uffa0"),
    min_size=1,
    max_size=20,
)  # less the letters drawn as empty space


SURROUNDING = st.lists(st.sampled_from([" ", "\u00a0", "\u3164"]) | VISIBLE, max_size=3).map(
    "".join
)  # visible text, or spaces and fillers that show nothing


@st.composite
def unshowable_ids(draw: st.DrawFn) -> str:
    """An id that shows nothing, or hides a character, or has a space at an end."""
    visible = draw(VISIBLE)
    kind = draw(st.sampled_from(["hidden", "blank", "padded"]))
    if kind == "hidden":
        at = draw(st.integers(0, len(visible)))
        return visible[:at] + draw(HIDDEN) + visible[at:]
    if kind == "blank":
        return draw(st.text(st.sampled_from(" \u00a0\u3000\u3164\t"), min_size=1, max_size=4))
    return draw(st.sampled_from([" ", "\u00a0"])) + visible


@attrs.frozen
class SaysWho:
    """A verifier (an identity provider's, say) that establishes ``reviewer_id``."""

    reviewer_id: str

    def verify(self, credential: Any) -> str:
        return self.reviewer_id


@given(unshowable_ids())
def test_an_id_that_shows_nothing_or_hides_a_character_is_neither_issued_nor_accepted(
    reviewer_id: str,
) -> None:
    """``issue_token`` refuses it, and any verifier that returns it is refused by the
    service, so nothing is recorded under it."""
    with pytest.raises(ValueError, match="reviewer id"):
        VERIFIER.issue_token(reviewer_id, ttl_seconds=60)
    with pytest.raises(ReviewerNotVerifiedError, match="instead of a reviewer id"):
        ThreadService(open_store("memory://ids"), verifier=SaysWho(reviewer_id)).reviewer("x")


@given(VISIBLE)
def test_a_visible_id_is_issued_and_verified_as_itself(reviewer_id: str) -> None:
    """Letters, digits and punctuation are a reviewer id."""
    assert reviewer_id_problem(reviewer_id) is None
    token = VERIFIER.issue_token(reviewer_id, ttl_seconds=60)
    service = ThreadService(open_store("memory://ids"), verifier=VERIFIER)
    assert service.reviewer(token).id == reviewer_id


@settings(max_examples=50, deadline=None)
@given(unshowable_ids() | st.sampled_from([1, None, b"pay", ("pay",)]))
def test_a_scope_is_issued_by_the_rule_of_reviewer_ids(scope: Any) -> None:
    """Property: a scope that shows nothing, hides a character (a lone surrogate, ESC, a
    newline) or has a space at an end, or is no text, is a ValueError naming the scope,
    as such a reviewer id is: a blank or control scope was signed, and a surrogate
    raised a UnicodeEncodeError (helper-158)."""
    with pytest.raises(ValueError, match="scope"):
        VERIFIER.issue_token("rita", ttl_seconds=60, scopes=["payments", scope])


@settings(max_examples=50, deadline=None)
@given(
    SURROUNDING,
    HIDDEN,
    SURROUNDING,
)
def test_a_hidden_character_is_named_whatever_surrounds_it(
    before: str, hidden: str, after: str
) -> None:
    """Property: a scope or reviewer id holding a control, format, surrogate or separator
    character, even one that shows nothing else (a lone surrogate alone, as
    ``--scope $'\\xff'`` gives), is refused naming the first such character: the lone
    surrogate was reported as showing nothing or beginning with a space (helper-167)."""
    name = before + hidden + after
    first = next(c for c in name if unicodedata.category(c) in HIDDEN_CATEGORIES)
    problem = reviewer_id_problem(name)
    assert problem is not None
    assert f"character {first!r} at position {name.index(first)}" in problem
    with pytest.raises(ValueError, match="surrogate or separator character"):
        VERIFIER.issue_token("rita", ttl_seconds=60, scopes=[name])


@settings(max_examples=50, deadline=None)
@given(st.lists(VISIBLE, max_size=3))
def test_visible_scopes_are_issued_and_identified_as_themselves(scopes: list[str]) -> None:
    """Letters, digits and punctuation are scopes, each held once."""
    token = VERIFIER.issue_token("rita", ttl_seconds=60, scopes=scopes)
    assert VERIFIER.identify(token).scopes == tuple(dict.fromkeys(scopes))


def signed_before_the_rule(reviewer_id: str) -> str:
    """A token of ``reviewer_id`` signed with :data:`VERIFIER`'s secret, as a version
    without the rule issued it."""
    payload = _b64(msgspec.json.encode({"sub": reviewer_id, "exp": time.time() + 60}))
    return f"{payload}.{_b64(VERIFIER._sign(payload))}"


@pytest.mark.parametrize("reviewer_id", [" ", "\u200b", "rita\nadmin", "\u202erita", "rita "])
def test_a_decision_is_never_recorded_under_such_an_id(reviewer_id: str) -> None:
    """A token signed for such an id before the rule is refused where a decision is
    made, and ``token issue`` refuses to sign one, in one line with exit status 2."""
    service = ThreadService(open_store("memory://recorded"), verifier=VERIFIER)
    with pytest.raises(ReviewerNotVerifiedError, match="instead of a reviewer id"):
        service.reviewer(signed_before_the_rule(reviewer_id))
    err = io.StringIO()
    env = {"COVONAUT_ES_REVIEWER_SECRET": "r" * 40}
    with patch.dict(os.environ, env), contextlib.redirect_stderr(err):
        status = main(["token", "issue", "--reviewer", reviewer_id, "--ttl", "60"])
    assert status == 2 and err.getvalue().count("\n") == 1 and "reviewer id" in err.getvalue()
