"""The reviewer's commands: list the pending ``reviews`` (``--follow`` keeps the queue
projection running), and ``approve`` (as asked or with ``--arguments``), ``reject`` or
``respond`` to one with a signed reviewer token.

Deciding needs ``$COVONAUT_ES_REVIEWER_SECRET``, the secret the tokens are signed with
(see :mod:`covonaut_es.cli._tokens`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from covonaut_es.cli._command import EXIT_OK, Subcommands, UsageError
from covonaut_es.cli._identity import add_reviewer_options, reviewer_verifier_from
from covonaut_es.cli._json import (
    canonical,
    emit_record,
    pending_review,
    review_arguments,
    review_kind,
    utc,
)
from covonaut_es.cli._options import add_store_command, cipher_key, open_from
from covonaut_es.cli._output import emit, print_json
from covonaut_es.cli._tokens import explain_secret
from covonaut_es.domain import Decision
from covonaut_es.projections import PendingReview, ReviewQueue
from covonaut_es.providers import ScriptedProvider
from covonaut_es.runtime import Agent, AgentConfig, CheckpointSettings
from covonaut_es.store import Store

_TOKEN_HELP = "a reviewer token, e.g. from `covonaut-es token issue`"

_THREAD_HELP = (
    "the thread to decide the review on (default: the one thread where it is pending); "
    "a fork that inherited the review pending decides it on its own"
)

_TABLE_WIDTH = 100
"""The width the ``reviews`` table aims at: its DETAILS are shortened to fit it."""
_DETAILS_MIN_WIDTH = 16


def add_review_commands(subcommands: Subcommands) -> None:
    """Declare ``reviews``, ``approve``, ``reject`` and ``respond``."""
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
    _add_decision_arguments(parser)
    parser.add_argument("--comment", default="")
    parser.add_argument(
        "--arguments",
        metavar="JSON",
        type=_json_object,
        help="approve these arguments (a JSON object) instead of the requested ones",
    )
    parser = add_store_command(subcommands, "reject", reject, help_="reject a review's operation")
    _add_decision_arguments(parser)
    parser.add_argument("--reason", required=True)
    parser = add_store_command(
        subcommands, "respond", respond, help_="answer in the tool's place; it never runs"
    )
    _add_decision_arguments(parser)
    parser.add_argument("--answer", required=True, help="the call's result the model reads")


def _add_decision_arguments(parser: argparse.ArgumentParser) -> None:
    explain_secret(parser)
    add_reviewer_options(parser)
    parser.add_argument("review")
    parser.add_argument("--reviewer-token", required=True, metavar="TOKEN", help=_TOKEN_HELP)
    parser.add_argument("--thread", metavar="THREAD", help=_THREAD_HELP)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        msg = f"expected a JSON object, got text that does not parse: {exc}"
        raise argparse.ArgumentTypeError(msg) from exc
    if not isinstance(value, dict):
        msg = f"expected a JSON object of arguments, got a JSON {type(value).__name__}"
        raise argparse.ArgumentTypeError(msg)
    return value


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
                    _print_reviews(args, pending)
                    sys.stdout.flush()
                    shown = pending
                if not args.follow:
                    return EXIT_OK
                time.sleep(0.2)


def _review_row(item: PendingReview) -> dict[str, str]:
    arguments = review_arguments(item)
    return {
        "thread": item.thread_id,
        "kind": review_kind(item),
        "review": item.review_id or "",
        "tool": item.tool_name,
        "parent": item.branch_parent or "",
        "details": item.reason if arguments is None else canonical(arguments),
    }


def _print_reviews(args: argparse.Namespace, pending: Sequence[PendingReview]) -> None:
    """JSON, or a table whose last column, DETAILS (a review's arguments, an interrupt's
    reason), is shortened so that rows fit :data:`_TABLE_WIDTH`."""
    if args.json:
        print_json([pending_review(item) for item in pending])
        return
    rows = [_review_row(item) for item in pending]
    columns = ["thread", "kind", "review", "tool"]  # --json adds requested_at
    if any(row["parent"] for row in rows):
        columns.append("parent")
    used = sum(max([len(column), *(len(row[column]) for row in rows)]) + 2 for column in columns)
    room = max(_DETAILS_MIN_WIDTH, _TABLE_WIDTH - used)
    for row in rows:
        row["details"] = _shorten(row["details"], room)
    emit(args, rows, [*columns, "details"])


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def approve(args: argparse.Namespace) -> int:
    """``approve REVIEW --reviewer-token TOKEN [--arguments JSON]``."""
    return _decide(args, Decision.APPROVED, note=args.comment)


def reject(args: argparse.Namespace) -> int:
    """``reject REVIEW --reviewer-token TOKEN --reason R``."""
    return _decide(args, Decision.REJECTED, note=args.reason)


def respond(args: argparse.Namespace) -> int:
    """``respond REVIEW --reviewer-token TOKEN --answer A``."""
    return _decide(args, Decision.RESPONDED, note=args.answer)


def _decide(args: argparse.Namespace, decided: Decision, *, note: str) -> int:
    verifier = reviewer_verifier_from(args)
    with open_from(args, writes=True) as store:
        thread_id = args.thread or _thread_of_review(store, args.review)
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(),  # deciding never calls a model
                reviewer_verifier=verifier,
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            )
        )
        token = args.reviewer_token
        if decided is Decision.APPROVED:
            decision = agent.approve(
                args.review, reviewer=token, comment=note, arguments=args.arguments
            )
        elif decided is Decision.REJECTED:
            decision = agent.reject(args.review, reviewer=token, reason=note)
        else:
            decision = agent.respond(args.review, reviewer=token, answer=note)
    emit_record(
        args,
        {
            "review_id": decision.review_id,
            "thread_id": thread_id,
            "decision": decision.decision.value,
            "reviewer": decision.reviewer,
            "digest": decision.digest,
            "comment": decision.comment,
            "decided_at": utc(decision.decided_at),
            **({} if decision.arguments is None else {"arguments": decision.arguments}),
        },
    )
    return EXIT_OK


def _thread_of_review(store: Store, review_id: str) -> str:
    """The one thread where the review is pending (else the one that has it decided);
    a usage error when there is none, or when forks inherited it and several have it
    pending."""
    having: dict[str, bool] = {}
    for thread_id in store.thread_ids():
        for review in store.state_at(thread_id).reviews:
            if review.request.review_id == review_id:
                having[thread_id] = review.pending
    pending = [thread_id for thread_id, is_pending in having.items() if is_pending]
    if len(pending) == 1 or (not pending and having):
        return (pending or list(having))[0]
    if pending:
        msg = (
            f"review {review_id!r} is pending in several threads (a fork inherits its "
            f"parent's pending reviews): {', '.join(pending)}; pass --thread THREAD"
        )
        raise UsageError(msg)
    msg = f"no thread in {store.url} has a review {review_id!r}"
    raise UsageError(msg)
