"""The reviewer's commands: list the pending ``reviews`` (``--follow`` keeps the queue
projection running), and ``approve`` (as asked or with ``--arguments``), ``reject`` or
``respond`` to one with a signed reviewer token.

A decision is read by the service layer's one reader of what people submit
(:func:`~covonaut_es.service.submitted_review`) and recorded by
:meth:`ThreadService.decide <covonaut_es.service.ThreadService.decide>`, which also finds
the review's thread when ``--thread`` is not given, by the store's index of review ids
(ADR 0078). Deciding needs
``$COVONAUT_ES_REVIEWER_SECRET``, the secret the tokens are signed with (see
:mod:`covonaut_es.cli._tokens`), or the ``--jwt-*`` options.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import attrs
from eventsourcing.projection import BaseProjectionRunner

from covonaut_es.cli._command import EXIT_FAILURES, EXIT_OK, Subcommands, UsageError
from covonaut_es.cli._identity import (
    acting_reviewer,
    add_reviewer_arguments,
    reviewer_verifier_from,
)
from covonaut_es.cli._json import (
    call_arguments_text,
    canonical,
    emit_record,
    pending_review,
    review_arguments,
    review_kind,
    utc,
)
from covonaut_es.cli._options import add_store_command, open_from, review_queue
from covonaut_es.cli._output import check_reader_present, emit, print_json
from covonaut_es.errors import AmbiguousReviewError, ReadOnlyStoreError, StoreUnavailableError
from covonaut_es.projections import PendingReview, ReviewQueue
from covonaut_es.projections._follower import QueueFollower
from covonaut_es.service import (
    Action,
    ReviewSubmission,
    listed_pause_tokens,
    submitted_review,
)
from covonaut_es.store import Store
from covonaut_es.store._write_errors import passes_when_answered

_THREAD_HELP = (
    "the thread to decide the review on (default: the one thread where it is pending); "
    "a fork that inherited the review pending decides it on its own"
)

_DIGEST_HELP = (
    "the operation digest the reviewer was shown (`reviews --json`): the decision is "
    "refused if the review asks about another operation"
)

_TABLE_WIDTH = 100
"""The width the ``reviews`` table aims at: its DETAILS are shortened to fit it."""
_DETAILS_MIN_WIDTH = 16


def add_review_commands(subcommands: Subcommands) -> None:
    """Declare ``reviews``, ``approve``, ``reject`` and ``respond``."""
    parser = add_store_command(
        subcommands,
        "reviews",
        reviews,
        help_="list what waits for a person: reviews, tools' pauses, calls in doubt",
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
        help="approve these arguments (a JSON object, read strictly) instead of the requested ones",
    )
    parser = add_store_command(subcommands, "reject", reject, help_="reject a review's operation")
    _add_decision_arguments(parser)
    parser.add_argument("--reason", help="why (required); the model reads it")
    parser = add_store_command(
        subcommands, "respond", respond, help_="answer in the tool's place; it never runs"
    )
    _add_decision_arguments(parser)
    parser.add_argument("--answer", help="the call's result the model reads (required)")


def _add_decision_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("review")
    add_reviewer_arguments(parser)
    parser.add_argument("--thread", metavar="THREAD", help=_THREAD_HELP)
    parser.add_argument("--digest", metavar="DIGEST", help=_DIGEST_HELP)


def reviews(args: argparse.Namespace) -> int:
    """``reviews [--follow]``: bring the queue up to date and list it; with --follow,
    keep projecting and print the queue whenever it changes, until interrupted.

    A one-shot listing never writes to the store's file: without ``--view`` it builds the
    queue in memory from the log."""
    view = args.view
    if view is None and not args.follow:
        view = f"memory://covonaut-es-reviews-{uuid.uuid4().hex}"
    with open_from(args, writes=args.follow) as store:  # its view is written to
        queue = review_queue(args, store, view_url=view, writes=args.follow)
        try:
            queue.check_can_follow()
        except ReadOnlyStoreError as exc:
            kept = "the store's database" if view is None else "the --view database"
            msg = (
                f"the review queue of {queue.store_url} would be kept in {kept}, opened "
                "read-only (?mode=ro), and cannot follow the store there: name a writable "
                "database with --view URL (or --view memory://NAME, kept in this process)"
            )
            raise UsageError(msg) from exc
        printed = _Printed(args, store, queue)
        follower = QueueFollower(queue, restarts=passes_when_answered)
        follower.start()
        try:
            while True:
                # Following, a runner stopped by a database's failure that passes (a
                # restart) is started again once due, the failure shown as a warning
                # meanwhile; any other failure, and any in a listing, ends the command.
                if not args.follow or follower.stopped() is None:
                    try:
                        printed.update(follower.runner)
                    except StoreUnavailableError as exc:
                        if not (args.follow and passes_when_answered(exc)):
                            raise
                        follower.stopped_on(exc)
                if not args.follow:
                    return _incomplete(args, queue.records_passed_over())
                check_reader_present()
                time.sleep(0.2)
        finally:
            follower.stop()


@attrs.define
class _Printed:
    """The queue as ``reviews`` last printed it, printed again when it changed."""

    args: argparse.Namespace
    store: Store
    queue: ReviewQueue
    position: int = -1  # the queue's, when it was last read
    pending: object = None

    def update(self, runner: BaseProjectionRunner[Any] | None) -> None:
        """Wait for the queue to catch up with the store (ending the wait when
        ``runner`` stopped), and print it if it changed."""
        self.queue.wait_until_current(self.store, timeout=60, runner=runner)
        position = self.queue.position()
        if position == self.position:  # the queue is read again once it changed
            return
        self.position, pending = position, self.queue.pending()
        if pending != self.pending:
            _print_reviews(self.args, pending, self.store)
            sys.stdout.flush()
            self.pending = pending


def _incomplete(args: argparse.Namespace, passed_over: int) -> int:
    """The exit status of a listing that passed over ``passed_over`` records of the log
    (each warned of as it was read): 1, saying so in one line on stderr, when the list
    may lack what they hold (a record a newer version wrote, or a damaged one)."""
    if not passed_over:
        return EXIT_OK
    print(
        f"{args.error_prefix}: {passed_over} record(s) of the log were passed over (see "
        "the warnings above): what waits in their threads may be missing from this list",
        file=sys.stderr,
    )
    return EXIT_FAILURES


def _review_row(item: PendingReview) -> dict[str, str]:
    pin = item.tool
    return {
        "thread": item.thread_id,
        "kind": review_kind(item),
        "review": item.review_id or "",
        "tool": item.tool_name if pin is None else f"{pin.server}/{item.tool_name}",
        "parent": item.branch_parent or "",
        "details": _details(item),
    }


def _details(item: PendingReview) -> str:
    """A review's or a call in doubt's arguments (canonical JSON when they are a JSON
    object, else as the model wrote them) and a review's description from its tool, or
    a tool's pause's reason (the table neutralizes them as it prints)."""
    arguments = review_arguments(item)
    if arguments is not None:
        description = item.rules.description
        return canonical(arguments) + (f" — {description}" if description else "")
    return call_arguments_text(item) or item.reason


def _print_reviews(
    args: argparse.Namespace, pending: Sequence[PendingReview], store: Store
) -> None:
    """JSON (each pause with its token, from its thread as the store holds it now), or a
    table whose last column, DETAILS (a review's or a call in doubt's arguments, a tool's
    pause's reason), is shortened so that rows fit :data:`_TABLE_WIDTH`."""
    if args.json:
        tokens = listed_pause_tokens(store, pending)
        print_json([pending_review(i, t) for i, t in zip(pending, tokens, strict=True)])
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
    """``approve REVIEW --reviewer-token TOKEN [--arguments JSON] [--digest DIGEST]``."""
    return _decide(args, Action.APPROVE, comment=args.comment, arguments=args.arguments)


def reject(args: argparse.Namespace) -> int:
    """``reject REVIEW --reviewer-token TOKEN --reason R``."""
    return _decide(args, Action.REJECT, reason=args.reason)


def respond(args: argparse.Namespace) -> int:
    """``respond REVIEW --reviewer-token TOKEN --answer A``."""
    return _decide(args, Action.RESPOND, answer=args.answer)


def _submitted(args: argparse.Namespace, action: Action, **options: str | None) -> ReviewSubmission:
    """The decision the command's options give (each that was given, ``--digest`` too),
    read as the inbox reads the fields of its JSON body."""
    options["digest"] = args.digest
    given = {name: value for name, value in options.items() if value is not None}
    return submitted_review(action, given)


def _decide(args: argparse.Namespace, action: Action, **options: str | None) -> int:
    """Record the decision through the service: on the thread ``--thread`` names, else
    on the one the store's review index names (ADR 0078: it reads only the review
    requests and forks written since its last lookup). The reviewer is verified before
    the submission is read, as every other surface does: whoever cannot act is told
    nothing about what they submitted."""
    verifier = reviewer_verifier_from(args)
    with open_from(args, records=True) as store:
        service, reviewer = acting_reviewer(args, store, verifier)  # refused: nothing written
        submission = _submitted(args, action, **options)
        try:
            decision = service.decide(
                args.review, submission, reviewer=reviewer, thread_id=args.thread
            )
        except AmbiguousReviewError as exc:
            msg = f"{exc}: pass --thread THREAD"
            raise UsageError(msg) from exc
    emit_record(
        args,
        {
            "review_id": decision.review_id,
            "thread_id": decision.thread_id,
            "decision": decision.decision.value,
            "reviewer": decision.reviewer,
            "digest": decision.digest,
            "comment": decision.comment,
            "decided_at": utc(decision.decided_at),
            **({} if decision.arguments is None else {"arguments": decision.arguments}),
            # Under four eyes: the first approval, which waits for a second reviewer.
            **({"partial": True} if decision.partial else {}),
        },
    )
    return EXIT_OK
