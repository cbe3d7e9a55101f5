"""The review decisions of :class:`~covonaut_es.Agent`: approve (as asked or with edited
arguments), reject, or respond in the tool's place.

Internal: :class:`ReviewCommands` is a base of ``Agent``. Each decision goes through the
service layer (:meth:`ThreadService.decide <covonaut_es.service.ThreadService.decide>`),
checked by the same reader as the inbox's and the command line's, and is recorded only for
a reviewer that ``AgentConfig.reviewer_verifier`` verifies (ADR 0006).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from covonaut_es._aio import in_worker_thread
from covonaut_es._arguments import check_text
from covonaut_es.domain import ReviewDecision
from covonaut_es.runtime._agent_base import AgentBase
from covonaut_es.service import Action, ReviewSubmission, review_submission


class ReviewCommands(AgentBase):
    """Approving, rejecting and answering the operation of a pending review."""

    def approve(
        self,
        review_id: str,
        *,
        reviewer: Any,
        comment: str = "",
        arguments: Mapping[str, Any] | str | None = None,
        digest: str | None = None,
    ) -> ReviewDecision:
        """Approve the exact operation of a pending review.

        For a tool with ``run_on_approval=True``, ``resume()`` runs the held-back call
        itself, once, with the approved arguments, before the model's next turn.
        Otherwise the approval authorizes a single later call of the same tool with the
        same arguments: after ``resume()`` the model calls the tool again and the call
        runs. With ``arguments``, the reviewer's edit of the requested ones, it
        authorizes (or runs) exactly those instead (the model reads them in the call's
        result); the history keeps both, and who edited. An edit equal to the request
        is a plain approval.

        Args:
            review_id: From the review request (the interrupt's data).
            reviewer: The reviewer's credential, checked by
                ``AgentConfig.reviewer_verifier``; the decision names the verified id.
            comment: Recorded with the decision; the model reads it.
            arguments: Edited arguments to approve instead of the requested ones: a
                mapping of plain JSON values, or JSON text (read strictly: a key given
                twice or a number JSON cannot carry is refused).
            digest: The operation digest the reviewer was shown; a review of another
                operation is refused.

        Returns:
            The recorded decision.

        Raises:
            ReviewerNotVerifiedError: The credential does not verify; nothing is recorded.
            InvalidDecisionError: The decision is refused (edited arguments that do not
                read, another digest); nothing is recorded.
            ReviewNotFoundError: This thread has no such review.
            StaleReviewError: The review was decided already.
            ConfigurationError: No reviewer verifier is configured.
            ThreadStateError: The agent is running.
        """
        return self._decide(
            review_id,
            reviewer,
            lambda: review_submission(
                Action.APPROVE, text=comment, arguments=arguments, digest=digest
            ),
        )

    def reject(
        self, review_id: str, *, reviewer: Any, reason: str, digest: str | None = None
    ) -> ReviewDecision:
        """Reject the operation of a pending review; the model reads the reason (which
        must not be blank) as the call's result after ``resume()``. Arguments and errors
        as :meth:`approve`."""
        return self._decide(
            review_id,
            reviewer,
            lambda: review_submission(Action.REJECT, text=reason, digest=digest),
        )

    def respond(
        self, review_id: str, *, reviewer: Any, answer: str, digest: str | None = None
    ) -> ReviewDecision:
        """Answer in the tool's place: ``answer`` (which must not be blank) becomes the
        held-back call's result, which the model reads after ``resume()``, and the
        operation never runs. Arguments and errors as :meth:`approve`."""
        return self._decide(
            review_id,
            reviewer,
            lambda: review_submission(Action.RESPOND, text=answer, digest=digest),
        )

    aapprove = in_worker_thread(approve)
    areject = in_worker_thread(reject)
    arespond = in_worker_thread(respond)

    def _decide(
        self, review_id: str, credential: Any, submission: Callable[[], ReviewSubmission]
    ) -> ReviewDecision:
        check_text("review_id", review_id)
        verified = self._service.reviewer(credential)  # before anything is read
        checked = submission()
        with self._exclusive():
            try:
                return self._service.decide(
                    review_id, checked, reviewer=verified, thread_id=self._thread_id
                )
            finally:
                self._thread = None  # the decision is in the store: reload on next use
