"""Four eyes and reviewer ids that differ only in case or Unicode form: ``Alice`` and
``alice`` (or ``alice`` in fullwidth letters, or ``é`` composed and decomposed) are one
person, so the second approval of a review under four eyes must come from a reviewer
whose id differs under NFKC case folding. Ids are recorded as the verifier gave them."""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import ReviewerNotPermittedError, ReviewPolicy, Store, open_store
from covonaut_es.domain import same_reviewer
from covonaut_es.errors import InvalidDecisionError, StaleReviewError
from covonaut_es.service import ThreadService, review_submission
from test_approvals import VERIFIER
from test_review_policy import paused_with

SAME_PERSON = [
    ("alice", "Alice"),
    ("alice", "ALICE"),
    ("alice", "\uff41\uff4c\uff49\uff43\uff45"),  # fullwidth
    ("jos\u00e9", "jose\u0301"),  # composed and decomposed
    ("stra\u00dfe", "STRASSE"),  # ß folds to ss
    ("alice", "al\u034fice"),  # a combining grapheme joiner
]
# An id holding a format character (a soft hyphen, a zero-width space) is no reviewer id
# at all: tests/test_reviewer_ids.py.


@pytest.mark.parametrize(("first", "second"), SAME_PERSON)
def test_a_second_approval_by_the_same_person_spelt_otherwise_is_refused(
    store: Store, first: str, second: str
) -> None:
    """The second approval under four eyes by an id that folds to the first's is
    refused and records nothing; the recorded first approval keeps its id as given."""
    paused_with(store, ReviewPolicy(four_eyes=True), [])
    service = ThreadService(store, verifier=VERIFIER)
    rid = store.state_at("t").reviews[0].request.review_id
    approve = review_submission("approve")
    service.decide(rid, approve, reviewer=service.reviewer(VERIFIER.issue_token(first, 60)))
    before = len(store.history("t"))
    with pytest.raises(ReviewerNotPermittedError, match="second, different reviewer"):
        service.decide(rid, approve, reviewer=service.reviewer(VERIFIER.issue_token(second, 60)))
    assert len(store.history("t")) == before
    (approval,) = store.state_at("t").reviews[0].approvals
    assert approval.reviewer == first


def test_two_different_people_still_approve(store: Store) -> None:
    """Ids that differ after folding are two reviewers: the second approval decides."""
    paused_with(store, ReviewPolicy(four_eyes=True), [])
    service = ThreadService(store, verifier=VERIFIER)
    rid = store.state_at("t").reviews[0].request.review_id
    for who in ("Alice", "alicia"):
        reviewer = service.reviewer(VERIFIER.issue_token(who, 60))
        service.decide(rid, review_submission("approve"), reviewer=reviewer)
    review = store.state_at("t").reviews[0]
    assert review.approved and review.decision is not None
    assert review.decision.reviewer == "alicia"


def _variants(name: str) -> st.SearchStrategy[str]:
    """Spellings of ``name`` one person might be given by different verifiers."""
    return st.sampled_from(
        [
            name,
            name.upper(),
            name.title(),
            unicodedata.normalize("NFD", name),
            "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in name),
            *(name[:1] + mark + name[1:] for mark in _INVISIBLE),
        ]
    )


_INVISIBLE = ("\ufe0f", "\u034f")
"""Default-ignorable marks a reviewer id may hold (a variation selector, a grapheme
joiner); the format characters among them (a soft hyphen, a zero-width space, a word
joiner, a tag letter) make no reviewer id."""


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    attempts=st.lists(
        st.sampled_from(["ann", "b\u00e9n"]).flatmap(_variants), min_size=1, max_size=4
    )
)
def test_four_eyes_never_stands_on_one_person_however_spelt(attempts: list[Any]) -> None:
    """Property: whatever spellings of two people approve in whatever order, an approval
    stands only with two reviewers who differ under folding behind it; a refused
    approval records nothing."""
    with open_store("memory://") as store:
        paused_with(store, ReviewPolicy(four_eyes=True), [])
        service = ThreadService(store, verifier=VERIFIER)
        rid = store.state_at("t").reviews[0].request.review_id
        for who in attempts:
            before = len(store.history("t"))
            reviewer = service.reviewer(VERIFIER.issue_token(who, 60))
            try:
                service.decide(rid, review_submission("approve"), reviewer=reviewer)
            except (InvalidDecisionError, ReviewerNotPermittedError, StaleReviewError):
                assert len(store.history("t")) == before
        review = store.state_at("t").reviews[0]
        if review.approved:
            assert review.decision is not None
            (first,) = review.approvals
            assert not same_reviewer(first.reviewer, review.decision.reviewer)
            assert first.reviewer in attempts and review.decision.reviewer in attempts
