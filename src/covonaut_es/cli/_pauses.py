"""A person's commands on a paused or failed thread: ``answer`` a tool's pause,
``settle`` a call in doubt (it ran, it did not run, or run it again), ``abandon`` a
thread, and ``retry`` a thread whose run failed.

Each needs a reviewer token, as ``approve`` does, and goes through the service layer
(:class:`~covonaut_es.service.ThreadService`), whose checks refuse a blank answer, a
pause that is not there, a call that is not in doubt and a thread a runner holds; the
command prints what it recorded and whom the thread waits for now. A worker then takes
the thread on (``worker``).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from covonaut_es.cli._command import EXIT_OK, Subcommands, UsageError
from covonaut_es.cli._identity import (
    acting_reviewer,
    add_reviewer_arguments,
    reviewer_verifier_from,
)
from covonaut_es.cli._json import emit_record
from covonaut_es.cli._options import add_store_command, open_from
from covonaut_es.cli._threads import shown_status, shown_waiting_for
from covonaut_es.service import Reviewer, Settlement, ThreadService
from covonaut_es.store import Store

_CALL_HELP = "the paused call's id (`reviews --json` gives it as tool_call_id)"
_PAUSE_HELP = (
    "the pause's token (`reviews --json` gives it as pause): refused if that pause was "
    "dealt with since, or the thread has moved on to another"
)


def add_pause_commands(subcommands: Subcommands) -> None:
    """Declare ``answer``, ``settle``, ``abandon`` and ``retry``."""
    parser = add_store_command(
        subcommands, "answer", answer, help_="answer a tool's pause; a worker then resumes it"
    )
    _add_thread_arguments(parser, call=True)
    parser.add_argument(
        "--answer", required=True, metavar="TEXT", help="what the model reads when it resumes"
    )
    parser = add_store_command(
        subcommands,
        "settle",
        settle,
        help_="settle a call in doubt: it ran, it did not run, or run it again",
    )
    _add_thread_arguments(parser, call=True)
    outcome = parser.add_mutually_exclusive_group(required=True)
    outcome.add_argument(
        "--result", metavar="TEXT", help="it ran, and this is its result (the model reads it)"
    )
    outcome.add_argument("--not-run", action="store_true", help="it did not run")
    outcome.add_argument(
        "--retry",
        action="store_true",
        help="run it again, with its idempotency key, when a worker next takes the thread",
    )
    parser.add_argument(
        "--note", metavar="TEXT", help="with --not-run: why it did not run, for the model"
    )
    parser = add_store_command(
        subcommands, "abandon", abandon, help_="give a thread up: nothing runs on it again"
    )
    _add_thread_arguments(parser)
    parser.add_argument(
        "--reason", default="", metavar="TEXT", help="why, for the record (required)"
    )
    parser = add_store_command(
        subcommands, "retry", retry, help_="have a worker try a thread's failed run again"
    )
    _add_thread_arguments(parser, pause=False)


def _add_thread_arguments(
    parser: argparse.ArgumentParser, *, call: bool = False, pause: bool = True
) -> None:
    parser.add_argument("thread")
    if call:
        parser.add_argument("call", help=_CALL_HELP)
    if pause:
        parser.add_argument("--pause", metavar="TOKEN", help=_PAUSE_HELP)
    add_reviewer_arguments(parser)


def answer(args: argparse.Namespace) -> int:
    """``answer THREAD CALL --answer TEXT --reviewer-token TOKEN``."""
    with _acting(args) as (store, service, reviewer):
        service.answer(args.thread, args.call, args.answer, reviewer=reviewer, pause=args.pause)
        record = _outcome(store, args, reviewer, tool_call_id=args.call, answer=args.answer)
    emit_record(args, record)
    return EXIT_OK


def settle(args: argparse.Namespace) -> int:
    """``settle THREAD CALL (--result TEXT | --not-run [--note TEXT] | --retry)
    --reviewer-token TOKEN``."""
    if args.note is not None and not args.not_run:
        msg = "--note goes with --not-run: it tells the model why the call did not run"
        raise UsageError(msg)
    if not args.call:
        msg = "CALL must name the call in doubt (`reviews --json` gives its tool_call_id)"
        raise UsageError(msg)
    settlement: Settlement | None = None  # --retry
    if args.not_run:
        settlement = Settlement.not_run(args.note or "")
    elif args.result is not None:
        settlement = Settlement.ran_with(args.result)
    with _acting(args) as (store, service, reviewer):
        if settlement is None:
            service.request_retry(args.thread, args.call, reviewer=reviewer, pause=args.pause)
        else:
            service.settle(args.thread, args.call, settlement, reviewer=reviewer, pause=args.pause)
        record = _outcome(
            store,
            args,
            reviewer,
            tool_call_id=args.call,
            settlement=_settled_as(settlement),
            result=None if settlement is None else settlement.content,
        )
    emit_record(args, record)
    return EXIT_OK


def _settled_as(settlement: Settlement | None) -> str:
    if settlement is None:
        return "retry"
    return "ran" if settlement.ran else "not_run"


def abandon(args: argparse.Namespace) -> int:
    """``abandon THREAD [--reason TEXT] --reviewer-token TOKEN``."""
    with _acting(args) as (store, service, reviewer):
        service.abandon(args.thread, args.reason, reviewer=reviewer, pause=args.pause)
        record = _outcome(store, args, reviewer, reason=args.reason)
    emit_record(args, record)
    return EXIT_OK


def retry(args: argparse.Namespace) -> int:
    """``retry THREAD --reviewer-token TOKEN``: the next worker continues the failed run."""
    with _acting(args) as (store, service, reviewer):
        service.request_retry(args.thread, reviewer=reviewer)
        record = _outcome(store, args, reviewer)
    emit_record(args, record)
    return EXIT_OK


@contextlib.contextmanager
def _acting(args: argparse.Namespace) -> Iterator[tuple[Store, ThreadService, Reviewer]]:
    """The store, opened as a writer, its service and the reviewer ``--reviewer-token``
    verifies as (once), for the block."""
    verifier = reviewer_verifier_from(args)
    with open_from(args, records=True) as store:
        service, reviewer = acting_reviewer(args, store, verifier)
        yield store, service, reviewer


def _outcome(
    store: Store,
    args: argparse.Namespace,
    reviewer: Reviewer,
    *,
    tool_call_id: str | None = None,
    **recorded: Any,
) -> dict[str, Any]:
    """What a command recorded, and where the thread stands now."""
    state = store.state_at(args.thread)
    call = {} if tool_call_id is None else {"tool_call_id": tool_call_id}
    return {
        "thread_id": args.thread,
        **call,
        "reviewer": reviewer.id,
        **recorded,
        "status": shown_status(state),
        "waiting_for": shown_waiting_for(state),
        "version": state.version,
    }
