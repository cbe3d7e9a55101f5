"""The service layer: every command on a stored thread, between the store and its callers.

This package owns :class:`ThreadService`, which runs each use case of a thread store as
one load, one call of the aggregate and one save, under the guard that use case needs: a
run under the thread's lease, with every save fenced by the lease's token and put after
the events that commute with it (:class:`RunSession`); a decision or an answer checked by
the one reader of what people submit (:func:`review_submission`, :class:`Settlement`) and
recorded under the identity a :class:`ReviewerVerifier` establishes once
(:class:`Reviewer`). :class:`~covonaut_es.Agent`, the reviewer inbox, the command line and
the workers all go through it. It may import the store, the domain and the layers below
them, never the runtime, a provider or a layer above.
"""

from typing import TYPE_CHECKING

from covonaut_es._extras import lazy_names
from covonaut_es.service._pauses import listed_pause_tokens, pause_token, pending_pause_token
from covonaut_es.service._review_lookup import FoundReview, ReviewIndex, held_review
from covonaut_es.service._reviewers import (
    HmacReviewerVerifier,
    Reviewer,
    ReviewerVerifier,
    ScopedReviewerVerifier,
    verified_reviewer,
)
from covonaut_es.service._runs import RunSession
from covonaut_es.service._service import PauseAnswer, Settlement, ThreadService
from covonaut_es.service._shown import shown_message
from covonaut_es.service._submissions import (
    MAX_TEXT_CHARS,
    TEXT_FIELD,
    Action,
    ReviewSubmission,
    json_object,
    parse_json,
    person_text,
    review_submission,
    sent_pause,
    submitted_review,
)

if TYPE_CHECKING:
    from covonaut_es.service._jwt import JwtReviewerVerifier as JwtReviewerVerifier

# JwtReviewerVerifier is left out of __all__: `from covonaut_es.service import *` must work
# without PyJWT.
__all__ = [
    "MAX_TEXT_CHARS",
    "TEXT_FIELD",
    "Action",
    "FoundReview",
    "HmacReviewerVerifier",
    "PauseAnswer",
    "ReviewIndex",
    "ReviewSubmission",
    "Reviewer",
    "ReviewerVerifier",
    "RunSession",
    "ScopedReviewerVerifier",
    "Settlement",
    "ThreadService",
    "held_review",
    "json_object",
    "listed_pause_tokens",
    "parse_json",
    "pause_token",
    "pending_pause_token",
    "person_text",
    "review_submission",
    "sent_pause",
    "shown_message",
    "submitted_review",
    "verified_reviewer",
]


# JwtReviewerVerifier is imported on first access: it needs PyJWT, of the inbox extra.
if not TYPE_CHECKING:  # a type checker sees the names above, and no other
    __getattr__ = lazy_names(
        __name__, globals(), {"JwtReviewerVerifier": "covonaut_es.service._jwt"}
    )
