"""Reading threads: ``threads``, ``show``, ``history`` and ``replay`` (the audit, with
``--verify``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import msgspec

from covonaut_es._arguments import check_position
from covonaut_es._text import printable
from covonaut_es.cli._command import EXIT_FAILURES, EXIT_OK, Subcommands
from covonaut_es.cli._json import emit_records, utc
from covonaut_es.cli._options import add_store_command, open_from, read_thread
from covonaut_es.cli._output import print_json
from covonaut_es.domain import PendingToolCall, ThreadState, ThreadStatus
from covonaut_es.errors import CovonautError, ThreadNotFoundError
from covonaut_es.store import Store, ThreadSummary
from covonaut_es.store._listing import MAX_PAGE


def add_thread_commands(subcommands: Subcommands) -> None:
    """Declare ``threads``, ``show``, ``history`` and ``replay``."""
    parser = add_store_command(
        subcommands,
        "threads",
        threads,
        help_="list threads with status, turns, activity, pending pauses and whom they wait for",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"list at most N threads, 1 to {MAX_PAGE} (default {DEFAULT_LIMIT})",
    )
    parser.add_argument(
        "--after",
        type=int,
        metavar="POSITION",
        help="list the threads after this position: the one the previous page printed",
    )
    add_store_command(
        subcommands, "show", show, help_="show a thread's current state"
    ).add_argument("thread")
    add_store_command(subcommands, "history", history, help_="list a thread's events").add_argument(
        "thread"
    )
    parser = add_store_command(
        subcommands, "replay", replay, help_="replay a thread's log for an audit"
    )
    parser.add_argument("thread")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also check the hash chain, the checkpoints and the snapshots",
    )


DEFAULT_LIMIT = 1000
"""How many threads ``threads`` lists unless told."""


def threads(args: argparse.Namespace) -> int:
    """``threads``: one row per thread, a page at a time; the position to pass as
    ``--after`` for the next page goes to standard error."""
    if args.after is not None:
        check_position("--after", args.after)  # the listing's rule, named as typed
    with open_from(args) as store:
        page = store.list_threads(after=args.after, limit=args.limit)
    rows = [
        {
            "thread_id": summary.thread_id,
            "status": shown_status(summary),
            "turns": summary.turn,
            "last_activity": utc(summary.last_activity),
            "pending_reviews": summary.unresolved_pauses,
            "waiting_for": shown_waiting_for(summary),
        }
        for summary in page.threads
    ]
    emit_records(args, rows, _thread_row, _THREAD_COLUMNS)
    if page.next_after is not None:
        print(f"more threads: --after {page.next_after}", file=sys.stderr)
    return EXIT_OK


_THREAD_COLUMNS = ["thread", "status", "turns", "last_activity", "pending_reviews", "waiting_for"]


def _thread_row(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "thread": record["thread_id"]}


def shown_status(state: ThreadState | ThreadSummary) -> str:
    """The thread's status as the commands show it. A fork taken in the middle of a run
    inherits that run's ``running``, but no process runs it: nothing has run on it since
    it branched, which is what ``idle`` means."""
    branched_only = state.parent is not None and state.version == state.parent.version + 1
    if state.status is ThreadStatus.RUNNING and branched_only:
        return ThreadStatus.IDLE.value
    return state.status.value


def show(args: argparse.Namespace) -> int:
    """``show THREAD``: the state, as fields."""
    state = read_thread(args, Store.state_at)
    if args.json:
        held = held_for_review(state)
        print_json(
            {
                **msgspec.to_builtins(state),
                "in_doubt": [p.call.id for p in state.in_doubt],
                "awaiting_review": [p.call.id for p in held],
            }
        )
        return EXIT_OK
    for line in _state_lines(state):
        print(printable(line))
    return EXIT_OK


def _state_lines(state: ThreadState) -> Iterator[str]:
    last = state.messages[-1] if state.messages else None
    held = held_for_review(state)
    fields = {
        "thread": state.thread_id,
        "status": shown_status(state),
        "version": state.version,
        "turns": state.turn,
        "messages": len(state.messages),
        "tokens": f"{state.usage.input_tokens} in, {state.usage.output_tokens} out",
        "parent": f"{state.parent.thread_id}@{state.parent.version}" if state.parent else "",
        "labels": ", ".join(label.name for label in state.labels),
        "interrupts": "; ".join(f"{i.tool_name}: {i.reason}" for i in state.interrupts),
        "in doubt": ", ".join(call.call.id for call in state.in_doubt),
        "awaiting review": ", ".join(f"{call.call.id} (never ran)" for call in held),
        "pending reviews": ", ".join(r.request.review_id for r in state.reviews if r.pending),
        "last message": f"{last.role}: {last.content[:70]}" if last else "",
    }
    width = max(map(len, fields))
    for name, value in fields.items():
        yield f"{name.ljust(width)}  {value}"


def held_for_review(state: ThreadState) -> tuple[PendingToolCall, ...]:
    """The open calls a review holds back (pending, or approved to run on resume and
    not run yet): they never ran, so they are not in doubt."""
    awaited = {r.request.tool_call_id for r in state.reviews if r.holds_back_call}
    return tuple(call for call in state.open_calls if call.call.id in awaited)


_WAITING_FOR = {"person": "person", "runner": "worker", "": ""}


def shown_waiting_for(state: ThreadState | ThreadSummary) -> str:
    """Whom the thread waits for, as the commands show it: ``person`` while a pause
    awaits one, ``worker`` when a runner can take it on (every pause resolved, or a
    failed run to be tried again), else nobody (``""``); nobody for a thread given up,
    on which nothing runs again."""
    if state.status is ThreadStatus.ABANDONED:
        return ""
    return _WAITING_FOR[state.waiting_for]


def history(args: argparse.Namespace) -> int:
    """``history THREAD``: version, time and type of every event."""
    with open_from(args) as store:
        rows = [
            {
                "thread_id": e.thread_id,
                "version": e.version,
                "recorded_at": utc(e.recorded_at),
                "kind": e.kind,
            }
            for e in store.replay(args.thread)
        ]
    emit_records(args, rows, _event_row, ["version", "time", "event", "thread"])
    return EXIT_OK


def _event_row(record: dict[str, Any]) -> dict[str, Any]:
    time = datetime.fromisoformat(record["recorded_at"]).isoformat()
    return {**record, "time": time, "event": record["kind"], "thread": record["thread_id"]}


def replay(args: argparse.Namespace) -> int:
    """``replay THREAD [--verify]``: every event summarized; exit 1 if verify finds any
    problem."""
    unlisted = ""  # why the events cannot be listed, when verify says what is wrong
    with open_from(args) as store:
        report = store.verify(args.thread) if args.verify else None
        try:
            entries = list(store.replay(args.thread))
        except CovonautError as exc:
            # No record at all: a thread never written (a mistyped id), which a store
            # that anchors heads would otherwise report as one whose anchor was deleted.
            absent = report is not None and report.events == 0
            if report is None or report.ok or (absent and isinstance(exc, ThreadNotFoundError)):
                raise
            entries, unlisted = [], str(exc)
    if args.json:
        events = [{**msgspec.to_builtins(e), "recorded_at": utc(e.recorded_at)} for e in entries]
        payload: dict[str, Any] = {"events": events}
        if unlisted:
            payload["unlisted"] = unlisted
        if report is not None:
            payload["verify"] = {**msgspec.structs.asdict(report), "ok": report.ok}
        print_json(payload)
    else:
        for entry in entries:
            print(
                f"{entry.version:>6}  {entry.recorded_at.isoformat()}  {printable(entry.summary)}"
            )
        if unlisted:
            print(f"the events cannot be listed: {printable(unlisted)}")
        if report is not None:
            print(
                f"verified {report.events} events: {report.chained} chained, "
                f"{report.checkpoints_checked} checkpoints and {report.snapshots_checked} "
                f"snapshots compared: {'intact' if report.ok else 'PROBLEMS FOUND'}"
            )
            for finding in report.findings:
                print(f"  version {finding.version}: {printable(finding.problem)}")
            for note in report.notes:  # what could not be checked, and why
                print(f"  note: {printable(note)}")
    return EXIT_OK if report is None or report.ok else EXIT_FAILURES
