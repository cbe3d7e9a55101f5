"""The reviewer's commands: list the pending ``reviews`` (``--follow`` keeps the queue
projection running), and ``approve`` or ``reject`` one with a signed reviewer token.

Deciding needs ``$COVONAUT_ES_REVIEWER_SECRET``, the secret the tokens are signed with.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

from covonaut_es.cli._command import EXIT_OK, Subcommands, UsageError
from covonaut_es.cli._options import add_store_command, cipher_key, open_from
from covonaut_es.cli._output import emit
from covonaut_es.projections import PendingReview, ReviewQueue
from covonaut_es.providers import ScriptedProvider
from covonaut_es.runtime import Agent, AgentConfig, CheckpointSettings, HmacReviewerVerifier
from covonaut_es.store import Store

REVIEWER_SECRET_ENV = "COVONAUT_ES_REVIEWER_SECRET"
"""The environment variable holding the secret reviewer tokens are signed with."""

_REVIEW_COLUMNS = ["thread", "review", "tool", "digest", "reason", "requested_at", "parent"]


def add_review_commands(subcommands: Subcommands) -> None:
    """Declare ``reviews``, ``approve`` and ``reject``."""
    parser = add_store_command(
        subcommands, "reviews", reviews, help_="list the pending reviews of every thread"
    )
    parser.add_argument(
        "--follow", action="store_true", help="keep the queue projection running; print changes"
    )
    parser.add_argument(
        "--view",
        metavar="URL",
        help="where the queue's table lives (default: in memory, built from the log; "
        "with --follow, the store's own database)",
    )
    parser = add_store_command(
        subcommands, "approve", approve, help_="approve a review's exact operation"
    )
    parser.add_argument("review")
    parser.add_argument("--reviewer-token", required=True, metavar="TOKEN")
    parser.add_argument("--comment", default="")
    parser = add_store_command(subcommands, "reject", reject, help_="reject a review's operation")
    parser.add_argument("review")
    parser.add_argument("--reviewer-token", required=True, metavar="TOKEN")
    parser.add_argument("--reason", required=True)


def reviews(args: argparse.Namespace) -> int:
    """``reviews [--follow]``: bring the queue up to date and list it; with --follow,
    keep projecting and print the queue whenever it changes, until interrupted.

    A one-shot listing never writes to the store's file: without ``--view`` it builds the
    queue in memory from the log."""
    view = args.view
    if view is None and not args.follow:
        view = f"memory://covonaut-es-reviews-{uuid.uuid4().hex}"
    with open_from(args, writes=args.follow) as store:  # its view is written to
        queue = ReviewQueue(
            store.url, view_url=view, cipher_key=cipher_key(args), compress=args.compressed
        )
        shown: object = None
        with queue.follow():
            while True:
                queue.wait_until_current(store, timeout=60)
                pending = queue.pending()
                if pending != shown:
                    emit(args, [_review_row(item) for item in pending], _REVIEW_COLUMNS)
                    sys.stdout.flush()
                    shown = pending
                if not args.follow:
                    return EXIT_OK
                time.sleep(0.2)


def _review_row(item: PendingReview) -> dict[str, Any]:
    return {
        "thread": item.thread_id,
        "review": item.item_id,
        "tool": item.tool_name,
        "digest": (item.digest or "")[:16],
        "reason": item.reason,
        "requested_at": item.requested_at.isoformat(timespec="seconds"),
        "parent": item.branch_parent or "",
        "data": item.data,
    }


def approve(args: argparse.Namespace) -> int:
    """``approve REVIEW --reviewer-token TOKEN``."""
    return _decide(args, approved=True, note=args.comment)


def reject(args: argparse.Namespace) -> int:
    """``reject REVIEW --reviewer-token TOKEN --reason R``."""
    return _decide(args, approved=False, note=args.reason)


def _decide(args: argparse.Namespace, *, approved: bool, note: str) -> int:
    secret = os.environ.get(REVIEWER_SECRET_ENV, "")
    if not secret:
        msg = f"set ${REVIEWER_SECRET_ENV} to the secret reviewer tokens are signed with"
        raise UsageError(msg)
    with open_from(args, writes=True) as store:
        thread_id = _thread_of_review(store, args.review)
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(),  # deciding never calls a model
                reviewer_verifier=HmacReviewerVerifier(secret.encode()),
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            )
        )
        if approved:
            decision = agent.approve(args.review, reviewer=args.reviewer_token, comment=note)
        else:
            decision = agent.reject(args.review, reviewer=args.reviewer_token, reason=note)
    row = {
        "review": decision.review_id,
        "thread": thread_id,
        "decision": decision.decision.value,
        "reviewer": decision.reviewer,
        "digest": decision.digest,
    }
    emit(args, [row], list(row))
    return EXIT_OK


def _thread_of_review(store: Store, review_id: str) -> str:
    for thread_id in store.thread_ids():
        if any(r.request.review_id == review_id for r in store.state_at(thread_id).reviews):
            return thread_id
    msg = f"no thread in {store.url} has a review {review_id!r}"
    raise UsageError(msg)
