"""The review decisions of :class:`~covonaut_es.Agent`: approve (as asked or with edited
arguments), reject, or respond in the tool's place.

Internal: :class:`ReviewCommands` is a base of ``Agent``. A decision is recorded only
for a reviewer that ``AgentConfig.reviewer_verifier`` verifies (ADR 0006).
"""

from __future__ import annotations

from typing import Any

from covonaut_es._aio import in_worker_thread
from covonaut_es.domain import Decision, ReviewDecision
from covonaut_es.errors import ConfigurationError, ReviewerNotVerifiedError, ThreadConflictError
from covonaut_es.runtime._agent_base import AgentBase
from covonaut_es.runtime._loop import Commit
from covonaut_es.runtime._reviewers import ReviewerVerifier


class ReviewCommands(AgentBase):
    """Approving, rejecting and answering the operation of a pending review."""

    def approve(
        self,
        review_id: str,
        *,
        reviewer: Any,
        comment: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> ReviewDecision:
        """Approve the exact operation of a pending review.

        The approval authorizes a single later call of the same tool with the same
        arguments: after ``resume()`` the model calls the tool again and the call runs.
        With ``arguments``, the reviewer's edit of the requested ones, it authorizes a
        call with exactly those instead (the model reads them in the call's result);
        the history keeps both, and who edited.

        Args:
            review_id: From the review request (the interrupt's data).
            reviewer: The reviewer's credential, checked by
                ``AgentConfig.reviewer_verifier``; the decision names the verified id.
            comment: Recorded with the decision; the model reads it.
            arguments: Edited arguments to approve instead of the requested ones.

        Returns:
            The recorded decision.

        Raises:
            ReviewerNotVerifiedError: The credential does not verify; nothing is recorded.
            ReviewNotFoundError: This thread has no such review.
            StaleReviewError: The review was decided already.
            ConfigurationError: No reviewer verifier is configured.
            ThreadStateError: The agent is running.
        """
        return self._decide(review_id, Decision.APPROVED, reviewer, comment, arguments)

    def reject(self, review_id: str, *, reviewer: Any, reason: str = "") -> ReviewDecision:
        """Reject the operation of a pending review; the model reads the reason as the
        call's result after ``resume()``. Arguments and errors as :meth:`approve`."""
        return self._decide(review_id, Decision.REJECTED, reviewer, reason)

    def respond(self, review_id: str, *, reviewer: Any, answer: str) -> ReviewDecision:
        """Answer in the tool's place: ``answer`` becomes the held-back call's result,
        which the model reads after ``resume()``, and the operation never runs.
        Arguments and errors as :meth:`approve`."""
        return self._decide(review_id, Decision.RESPONDED, reviewer, answer)

    aapprove = in_worker_thread(approve)
    areject = in_worker_thread(reject)
    arespond = in_worker_thread(respond)

    def _decide(
        self,
        review_id: str,
        decision: Decision,
        credential: Any,
        comment: str,
        arguments: dict[str, Any] | None = None,
    ) -> ReviewDecision:
        reviewer = self._require_verifier().verify(credential)  # before anything is read
        if not isinstance(reviewer, str) or not reviewer:
            msg = (
                f"the reviewer verifier returned {reviewer!r} instead of a reviewer id; "
                "a ReviewerVerifier must return a non-empty string or raise"
            )
            raise ReviewerNotVerifiedError(msg)
        with self._exclusive():
            try:
                return self._record_decision(review_id, decision, reviewer, comment, arguments)
            except ThreadConflictError:
                # Decided on a stale copy: check the decision again on the stored head.
                return self._record_decision(review_id, decision, reviewer, comment, arguments)

    def _record_decision(
        self,
        review_id: str,
        decision: Decision,
        reviewer: str,
        comment: str,
        arguments: dict[str, Any] | None,
    ) -> ReviewDecision:
        thread = self._current
        decided = thread.decide_review(
            review_id,
            decision,
            reviewer=reviewer,
            comment=comment,
            now=self.config.clock(),
            arguments=arguments,
        )
        try:
            self._persist(thread, Commit(always=True))
        except Exception:
            self._thread = None  # the decision is not stored: reload on next use
            raise
        return decided

    def _require_verifier(self) -> ReviewerVerifier:
        if self.config.reviewer_verifier is None:
            msg = (
                "approve() and reject() need AgentConfig(reviewer_verifier=...) to verify "
                "who decides, e.g. HmacReviewerVerifier(secret)"
            )
            raise ConfigurationError(msg)
        return self.config.reviewer_verifier
