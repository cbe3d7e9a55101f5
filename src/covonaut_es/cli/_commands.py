"""The thread, review and transfer subcommands of ``covonaut-es``.

Each subcommand is a pair, as in :mod:`covonaut_es.cli`: ``_add_<name>`` declares its
arguments and ``<name>(args)`` runs it and returns the exit status. Every one takes the
store's URL from ``--store`` or ``$COVONAUT_ES_STORE``, prints a table (or ``--json``
for scripts), and reports bad input on stderr with a non-zero status.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import msgspec

from covonaut_es.audit import export_thread, import_threads
from covonaut_es.cli._main import (
    EXIT_FAILURES,
    EXIT_OK,
    EXIT_USAGE,
    STORE_ENV,
    ProgressBar,
    Subcommands,
)
from covonaut_es.domain import ThreadTree
from covonaut_es.errors import CovonautError
from covonaut_es.projections import ReviewQueue
from covonaut_es.providers import ScriptedProvider
from covonaut_es.runtime import Agent, AgentConfig, CheckpointSettings, HmacReviewerVerifier
from covonaut_es.store import Store, open_store

REVIEWER_SECRET_ENV = "COVONAUT_ES_REVIEWER_SECRET"
T = TypeVar("T")

Command = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """Bad input: reported on stderr, exit status 2."""


def add_thread_commands(subcommands: Subcommands) -> None:
    """Declare every subcommand of this module."""
    for add in (
        _add_threads,
        _add_show,
        _add_history,
        _add_replay,
        _add_reviews,
        _add_approve,
        _add_reject,
        _add_fork,
        _add_tree,
        _add_export,
        _add_import,
    ):
        add(subcommands)


def _parser(subcommands: Subcommands, name: str, help_: str, command: Command) -> Any:
    parser = subcommands.add_parser(name, help=help_, description=help_)
    parser.add_argument(
        "--store",
        default=os.environ.get(STORE_ENV),
        metavar="URL",
        help=f"memory://NAME, sqlite:///path or postgresql://... (default: ${STORE_ENV})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument(
        "--cipher-key-env", metavar="VAR", help="the environment variable holding the key"
    )
    parser.add_argument("--compressed", action="store_true", help="the store is compressed")
    parser.set_defaults(command=_guarded(command), command_name=name)
    return parser


def _guarded(command: Command) -> Command:
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (UsageError, CovonautError) as exc:
            print(f"covonaut-es {args.command_name}: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run


def _cipher_key(args: argparse.Namespace) -> str | None:
    if not args.cipher_key_env:
        return None
    key = os.environ.get(args.cipher_key_env)
    if not key:
        msg = f"the environment variable {args.cipher_key_env} is not set"
        raise UsageError(msg)
    return key


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[Store]:
    if not args.store:
        msg = f"no store: pass --store URL or set ${STORE_ENV}"
        raise UsageError(msg)
    with open_store(args.store, cipher_key=_cipher_key(args), compress=args.compressed) as store:
        yield store


def _emit(args: argparse.Namespace, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Print rows as JSON (``--json``) or as an aligned table."""
    if args.json:
        print(msgspec.json.encode(rows).decode())
        return
    texts = [[str(row.get(column, "")) for column in columns] for row in rows]
    widths = [max([len(c), *(len(t[i]) for t in texts)]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for text in texts:
        print("  ".join(t.ljust(w) for t, w in zip(text, widths, strict=True)).rstrip())


# threads, show, history, replay ---------------------------------------------------------


def _add_threads(subcommands: Subcommands) -> None:
    _parser(subcommands, "threads", "list threads with status, turns, activity, reviews", threads)


def threads(args: argparse.Namespace) -> int:
    """``threads``: one row per thread."""
    with _store(args) as store:
        rows = []
        for thread_id in store.thread_ids():
            state = store.state_at(thread_id)
            last = store.history(thread_id)[-1].timestamp
            pending = sum(review.pending for review in state.reviews)
            rows.append(
                {
                    "thread": thread_id,
                    "status": state.status.value,
                    "turns": state.turn,
                    "last_activity": last.isoformat(timespec="seconds"),
                    "pending_reviews": pending,
                }
            )
    _emit(args, rows, ["thread", "status", "turns", "last_activity", "pending_reviews"])
    return EXIT_OK


def _add_show(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "show", "show a thread's current state", show)
    parser.add_argument("thread")


def show(args: argparse.Namespace) -> int:
    """``show THREAD``: the state, as fields."""
    with _store(args) as store:
        state = store.state_at(args.thread)
    if args.json:
        print(msgspec.json.encode(state).decode())
        return EXIT_OK
    last = state.messages[-1] if state.messages else None
    fields = {
        "thread": state.thread_id,
        "status": state.status.value,
        "version": state.version,
        "turns": state.turn,
        "messages": len(state.messages),
        "tokens": f"{state.usage.input_tokens} in, {state.usage.output_tokens} out",
        "parent": f"{state.parent.thread_id}@{state.parent.version}" if state.parent else "",
        "labels": ", ".join(label.name for label in state.labels),
        "interrupts": "; ".join(f"{i.tool_name}: {i.reason}" for i in state.interrupts),
        "in doubt": ", ".join(call.call.id for call in state.open_calls),
        "pending reviews": ", ".join(r.request.review_id for r in state.reviews if r.pending),
        "last message": f"{last.role}: {last.content[:70]}" if last else "",
    }
    width = max(map(len, fields))
    for name, value in fields.items():
        print(f"{name.ljust(width)}  {value}")
    return EXIT_OK


def _add_history(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "history", "list a thread's events", history)
    parser.add_argument("thread")


def history(args: argparse.Namespace) -> int:
    """``history THREAD``: version, time and type of every event."""
    with _store(args) as store:
        rows = [
            {
                "version": e.version,
                "time": e.recorded_at.isoformat(),
                "event": e.kind,
                "thread": e.thread_id,
            }
            for e in store.replay(args.thread)
        ]
    _emit(args, rows, ["version", "time", "event", "thread"])
    return EXIT_OK


def _add_replay(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "replay", "replay a thread's log for an audit", replay)
    parser.add_argument("thread")
    parser.add_argument(
        "--verify", action="store_true", help="also check the hash chain and the checkpoints"
    )


def replay(args: argparse.Namespace) -> int:
    """``replay THREAD [--verify]``: every event summarized; exit 1 if verify finds any
    problem."""
    with _store(args) as store:
        entries = list(store.replay(args.thread))
        report = store.verify(args.thread) if args.verify else None
    if args.json:
        payload: dict[str, Any] = {"events": entries}
        if report is not None:
            payload["verify"] = {**msgspec.structs.asdict(report), "ok": report.ok}
        print(msgspec.json.encode(payload).decode())
    else:
        for entry in entries:
            print(f"{entry.version:>6}  {entry.recorded_at.isoformat()}  {entry.summary}")
        if report is not None:
            print(
                f"verified {report.events} events: {report.chained} chained, "
                f"{report.checkpoints_checked} checkpoints and {report.snapshots_checked} "
                f"snapshots compared: {'intact' if report.ok else 'PROBLEMS FOUND'}"
            )
            for finding in report.findings:
                print(f"  version {finding.version}: {finding.problem}")
    return EXIT_OK if report is None or report.ok else EXIT_FAILURES


# reviews, approve, reject ---------------------------------------------------------------


def _add_reviews(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "reviews", "list the pending reviews of every thread", reviews)
    parser.add_argument(
        "--follow", action="store_true", help="keep the queue projection running; print changes"
    )
    parser.add_argument("--view", metavar="URL", help="where the queue's table lives")


def reviews(args: argparse.Namespace) -> int:
    """``reviews [--follow]``: bring the queue up to date and list it; with --follow,
    keep projecting and print the queue whenever it changes, until interrupted."""
    with _store(args) as store:
        queue = ReviewQueue(
            store.url, view_url=args.view, cipher_key=_cipher_key(args), compress=args.compressed
        )
        shown: object = None
        with queue.follow():
            while True:
                queue.wait_until_current(store, timeout=60)
                pending = queue.pending()
                if pending != shown:
                    _emit(args, [_review_row(item) for item in pending], _REVIEW_COLUMNS)
                    sys.stdout.flush()
                    shown = pending
                if not args.follow:
                    return EXIT_OK
                time.sleep(0.2)


_REVIEW_COLUMNS = ["thread", "review", "tool", "digest", "reason", "requested_at", "parent"]


def _review_row(item: Any) -> dict[str, Any]:
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


def _add_approve(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "approve", "approve a review's exact operation", approve)
    parser.add_argument("review")
    parser.add_argument("--reviewer-token", required=True, metavar="TOKEN")
    parser.add_argument("--comment", default="")


def approve(args: argparse.Namespace) -> int:
    """``approve REVIEW --reviewer-token TOKEN``."""
    return _decide(args, approved=True, note=args.comment)


def _add_reject(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "reject", "reject a review's operation", reject)
    parser.add_argument("review")
    parser.add_argument("--reviewer-token", required=True, metavar="TOKEN")
    parser.add_argument("--reason", required=True)


def reject(args: argparse.Namespace) -> int:
    """``reject REVIEW --reviewer-token TOKEN --reason R``."""
    return _decide(args, approved=False, note=args.reason)


def _decide(args: argparse.Namespace, *, approved: bool, note: str) -> int:
    secret = os.environ.get(REVIEWER_SECRET_ENV, "")
    if not secret:
        msg = f"set ${REVIEWER_SECRET_ENV} to the secret reviewer tokens are signed with"
        raise UsageError(msg)
    with _store(args) as store:
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
    _emit(args, [row], list(row))
    return EXIT_OK


def _thread_of_review(store: Store, review_id: str) -> str:
    for thread_id in store.thread_ids():
        if any(r.request.review_id == review_id for r in store.state_at(thread_id).reviews):
            return thread_id
    msg = f"no thread in {store.url} has a review {review_id!r}"
    raise UsageError(msg)


# fork, tree ------------------------------------------------------------------------------


def _add_fork(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "fork", "fork a thread at a version", fork)
    parser.add_argument("thread")
    parser.add_argument("--at", type=int, metavar="VERSION", help="default: the head")
    parser.add_argument("--as", dest="new_thread_id", metavar="THREAD", help="the fork's id")


def fork(args: argparse.Namespace) -> int:
    """``fork THREAD --at VERSION``: prints the new thread's id."""
    with _store(args) as store:
        new_id = store.fork(args.thread, at_version=args.at, new_thread_id=args.new_thread_id)
        parent = store.parent(new_id)
    assert parent is not None
    _emit(
        args,
        [{"thread": new_id, "parent": parent.thread_id, "at": parent.version}],
        ["thread", "parent", "at"],
    )
    return EXIT_OK


def _add_tree(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "tree", "show the session tree under a thread", tree)
    parser.add_argument("thread")


def tree(args: argparse.Namespace) -> int:
    """``tree THREAD``: the forks under a thread, indented, with labels."""
    with _store(args) as store:
        root = store.tree(args.thread)
    if args.json:
        print(msgspec.json.encode(root).decode())
    else:
        for line in _tree_lines(root, ""):
            print(line)
    return EXIT_OK


def _tree_lines(node: ThreadTree, indent: str) -> Iterator[str]:
    at = "" if node.parent_version is None else f" @{node.parent_version}"
    labels = "".join(f" [{label.name}]" for label in node.labels)
    yield f"{indent}{node.thread_id}{at}{labels}"
    for child in node.children:
        yield from _tree_lines(child, indent + "  ")


# export, import --------------------------------------------------------------------------


def _with_progress(items: Iterable[T], total: int) -> Iterator[T]:
    """Yield the items, drawing a progress bar on a terminal (long exports, imports)."""
    progress = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    try:
        for done, item in enumerate(items, start=1):
            if progress is not None:
                progress(done, total)
            yield item
    finally:
        if progress is not None:
            progress.close()


def _add_export(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "export", "write a thread's events as JSON Lines", export)
    parser.add_argument("thread")
    parser.add_argument("--output", "-o", metavar="FILE", help="default: standard output")


def export(args: argparse.Namespace) -> int:
    """``export THREAD``: one event per line."""
    with _store(args) as store:
        total = store.state_at(args.thread).version
        lines = list(_with_progress(export_thread(store, args.thread), total))
    text = "".join(line + "\n" for line in lines)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text)
        print(f"exported {len(lines)} events of {args.thread!r} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _add_import(subcommands: Subcommands) -> None:
    parser = _parser(subcommands, "import", "read threads exported as JSON Lines", import_)
    parser.add_argument("input", nargs="?", metavar="FILE", help="default: standard input")


def import_(args: argparse.Namespace) -> int:
    """``import [FILE]``: all threads of the file, each in one transaction."""
    if args.input:
        with open(args.input, encoding="utf-8") as file:
            lines = file.readlines()
    else:
        lines = sys.stdin.readlines()
    with _store(args) as store:
        imported = import_threads(store, _with_progress(lines, len(lines)))
    _emit(args, [{"imported": thread_id} for thread_id in imported], ["imported"])
    return EXIT_OK
