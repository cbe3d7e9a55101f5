"""Running and watching workers: ``worker`` runs ready threads until stopped, ``workers``
lists the live workers of a store and the threads they hold.

``worker`` also expires reviews past their deadline; with ``--webhook`` it posts the
review notices (a review asked for, a deadline near ``--notice-lead`` seconds away) to
a URL, signed with the secret in the variable ``--webhook-secret-env`` names.

``worker`` stops gracefully on SIGTERM or Ctrl-C: it finishes the steps it is running,
releases their leases and exits 0, as a container platform expects. ``worker --once``
exits 1 when a step failed, naming the threads on stderr, so that cron or a test sees it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from covonaut_es import _logs
from covonaut_es._text import printable
from covonaut_es.cli._command import (
    EXIT_FAILURES,
    EXIT_OK,
    StopAsked,
    Subcommands,
    UsageError,
    add_command,
    stopping_gracefully,
)
from covonaut_es.cli._imports import imported
from covonaut_es.cli._json import emit_records, utc
from covonaut_es.cli._options import (
    add_store_command,
    add_store_options,
    open_from,
    webhook_secret,
)
from covonaut_es.errors import ConfigurationError
from covonaut_es.runtime import AgentConfig
from covonaut_es.store import CallRunning, WorkerRecord
from covonaut_es.workers import ReviewNotifier, WebhookNotifier, Worker


def add_worker_commands(subcommands: Subcommands) -> None:
    """Declare ``worker`` and ``workers``."""
    parser = add_command(
        subcommands,
        "worker",
        worker,
        help_="run every ready thread of a store until stopped (SIGTERM: finish, exit 0)",
    )
    add_store_options(parser)
    parser.add_argument(
        "--app",
        required=True,
        metavar="MODULE:FACTORY",
        help="the function giving a thread id's AgentConfig, e.g. myapp.agents:make_config",
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="threads run at once (default 1)"
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="run what is ready, then exit (1 if a step failed)",
    )
    parser.add_argument(
        "--webhook",
        metavar="URL",
        help="post review notices (asked for, deadline near) to this URL, signed",
    )
    parser.add_argument(
        "--webhook-secret-env",
        metavar="VAR",
        help="the environment variable holding the webhook's signing secret",
    )
    parser.add_argument(
        "--notice-lead",
        type=float,
        metavar="SECONDS",
        help="note a review this long before its deadline (default: no such notice)",
    )
    add_store_command(
        subcommands,
        "workers",
        workers,
        help_="list live workers, the threads they hold and the tool calls running in them",
    )


def worker(args: argparse.Namespace) -> int:
    """``worker --app MODULE:FACTORY``: follow the store, run ready threads, log each step.
    SIGTERM and Ctrl-C stop it gracefully, exit 0, whenever they come: one that comes
    while it starts (its application imported) stops it as soon as it runs."""
    with stopping_gracefully() as asked:
        return _work(args, asked)


def _work(args: argparse.Namespace, asked: StopAsked) -> int:
    # Before the application is imported: a module-level logging.warning() in it (an
    # SDK's) would set up a root handler of logging's own, which nothing escapes.
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        _logs.escape_handlers(*logging.getLogger().handlers)
    make_config = _factory(args.app)
    if args.concurrency < 1:
        msg = f"--concurrency must be at least 1, got {args.concurrency}"
        raise UsageError(msg)
    notifier = _notifier(args)
    lead = None
    if args.notice_lead is not None:
        if not 0 < args.notice_lead < 10**9:
            msg = f"--notice-lead must be a positive number of seconds, got {args.notice_lead}"
            raise UsageError(msg)
        lead = timedelta(seconds=args.notice_lead)
    with open_from(args, writes=True) as store:
        running = Worker(
            store,
            make_config,
            concurrency=args.concurrency,
            notifier=notifier,
            notice_lead=lead,
        )
        asked.goes_to(running.stop, force=_stopped_at_once)
        summary = running.run(once=args.once)
    if args.once and summary.failed:
        failed = list(dict.fromkeys(summary.failed))
        names = ", ".join(printable(repr(thread_id)) for thread_id in failed)
        which = (
            f"a step failed on thread {names}"
            if len(failed) == 1
            else (f"steps failed on threads {names}")
        )
        print(f"covonaut-es worker: {which}; the log above says why", file=sys.stderr)
        return EXIT_FAILURES
    return EXIT_OK


def _stopped_at_once(signum: int) -> None:
    """A second stop signal while steps run: end the process now (128 + the signal), as
    SIGKILL would, since a step that hangs (a tool that never returns) is never left.
    Its calls are in doubt, and its leases are let go by the database or lapse: another
    worker takes its threads over, as it does a killed worker's."""
    print(
        "covonaut-es worker: stopped at once; the steps still running are left, and "
        "their calls in doubt",
        file=sys.stderr,
        flush=True,
    )
    logging.shutdown()
    os._exit(128 + signum)


def _notifier(args: argparse.Namespace) -> ReviewNotifier | None:
    """The webhook notifier ``--webhook`` and ``--webhook-secret-env`` describe."""
    secret = webhook_secret(args)
    if args.webhook is None:
        if secret is not None:
            raise UsageError("--webhook-secret-env is for --webhook URL, which is missing")
        return None
    if secret is None:
        msg = (
            "--webhook needs --webhook-secret-env VAR, the environment variable holding "
            "the secret its notices are signed with"
        )
        raise UsageError(msg)
    try:
        return WebhookNotifier(args.webhook, secret)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc


def _factory(spec: str) -> Callable[[str], AgentConfig]:
    """The config factory ``MODULE:FACTORY`` names, imported
    (:func:`~covonaut_es.cli._imports.imported`)."""
    factory = imported("--app", spec, form="MODULE:FACTORY, e.g. myapp.agents:make_config")
    if not callable(factory):
        msg = f"--app {spec!r} is no function: {type(factory).__name__}"
        raise UsageError(msg)
    made: Callable[[str], AgentConfig] = factory
    return made


def workers(args: argparse.Namespace) -> int:
    """``workers``: the live workers, their heartbeats, the threads they hold and the
    tool calls running in them, those past their timeout marked hung."""
    with open_from(args) as store:
        now = store.clock()
        records = [_record(found, now) for found in store.live_workers()]
    emit_records(args, records, _worker_row, _WORKER_COLUMNS)
    return EXIT_OK


_WORKER_COLUMNS = ["worker", "host", "pid", "started", "heartbeat", "threads", "calls"]


def _record(found: WorkerRecord, now: datetime) -> dict[str, Any]:
    return {
        "worker_id": found.worker_id,
        "host": found.host,
        "pid": found.pid,
        "started_at": utc(found.started_at),
        "heartbeat_at": utc(found.heartbeat_at),
        "threads": list(found.threads),
        "calls": [_call(call, now) for call in found.calls],
    }


def _call(call: CallRunning, now: datetime) -> dict[str, Any]:
    return {
        "thread_id": call.thread_id,
        "tool_call_id": call.tool_call_id,
        "tool_name": call.tool_name,
        "started_at": utc(call.started_at),
        "deadline": None if call.deadline is None else utc(call.deadline),
        "hung": call.hung(now),
    }


def _worker_row(record: dict[str, Any]) -> dict[str, Any]:
    calls = [
        f"{c['tool_name']} {c['tool_call_id']}{' HUNG' if c['hung'] else ''} ({c['thread_id']})"
        for c in record["calls"]
    ]
    return {
        **record,
        "worker": record["worker_id"],
        "started": record["started_at"],
        "heartbeat": record["heartbeat_at"],
        "threads": ", ".join(record["threads"]),
        "calls": ", ".join(calls),
    }
