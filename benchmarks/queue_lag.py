"""Figure 7: reviewer queue lag on PostgreSQL.

A reviewer process follows the store (``ReviewQueue(url).run_forever()``: eventsourcing's
projection runner, woken by LISTEN/NOTIFY). This process then runs one thread after
another that pauses on an interrupt, and polls the queue's view (``ReviewQueue.view()``,
opened once, then its ``pending()``) until the thread's item is there. The lag runs from
the start of the ``Store.save`` call that commits the ``Interrupted`` event to the first
poll that sees the item, so it includes that commit and up to one poll. The limit is
PostgreSQL's own path between two processes on the same server: from the start of
``NOTIFY`` + ``COMMIT`` on one connection until a ``LISTEN``ing connection receives it.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
from contextlib import closing
from typing import TYPE_CHECKING, Any

from harness import BUDGET_S, Context, cli, isolated, log
from report import Section, Table, Target, intro, ratio, seconds, status, times

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    InterruptError,
    ProviderResponse,
    ReviewQueue,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)

if TYPE_CHECKING:
    from harness import Progress

LAG_LIMIT_S = 0.050
"""The reviewer queue lag's median must stay under this."""

FULL_SAMPLES = 30
QUICK_SAMPLES = 3
POLL_TIMEOUT_S = 30.0


def _ask(ctx: ToolContext, args: dict[str, Any]) -> Any:
    raise InterruptError("needs a person", {"question": args.get("question")})


def _interrupt(store: Store, thread_id: str) -> float:
    """Run a thread until it pauses on an interrupt; when the ``Store.save`` call that
    commits the ``Interrupted`` event started."""
    started = [0.0]
    save = store.save

    def timed(thread: Any) -> None:
        start = time.perf_counter()
        if any(type(e).__name__ == "Interrupted" for e in thread.pending_events):
            started[0] = start
        save(thread)

    store.save = timed  # type: ignore[method-assign]
    call = ToolCall("q1", "ask", '{"question": "Refund?"}')
    config = AgentConfig(
        provider=ScriptedProvider([ProviderResponse(tool_calls=(call,))]),
        tools=[Tool("ask", "Ask a person", {"type": "object"}, _ask)],
        checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
    )
    Agent(config).run("I want my money back.")
    store.save = save  # type: ignore[method-assign]
    return started[0]


def _seen(view: Any, thread_id: str) -> float:
    deadline = time.perf_counter() + POLL_TIMEOUT_S
    while time.perf_counter() < deadline:
        if any(item.thread_id == thread_id for item in view.pending()):
            return time.perf_counter()
    msg = f"the reviewer queue did not show {thread_id!r} within {POLL_TIMEOUT_S} s"
    raise TimeoutError(msg)


def _reviewer(url: str) -> None:
    ReviewQueue(url).run_forever()


def _notify_round_trip(url: str, samples: int) -> list[float]:
    """PostgreSQL's own LISTEN/NOTIFY latency on this server."""
    import psycopg

    lags = []
    with psycopg.connect(url, autocommit=True) as listener, psycopg.connect(url) as sender:
        listener.execute("LISTEN bench_probe")
        for _ in range(samples + 1):
            received: list[float] = []

            def listen(into: list[float] = received) -> None:
                for _ in listener.notifies(timeout=POLL_TIMEOUT_S, stop_after=1):
                    into.append(time.perf_counter())

            thread = threading.Thread(target=listen)
            thread.start()
            time.sleep(0.005)  # the listener is waiting before the notification is sent
            sent = time.perf_counter()
            sender.execute("NOTIFY bench_probe")
            sender.commit()
            thread.join()
            lags.append(received[0] - sent)
    return lags[1:]


def run_lag(progress: Progress, url: str, samples: int) -> None:
    """Start a reviewer process, then measure the lag of ``samples`` interrupts."""
    with closing(open_store(url)) as store:
        store.exists("create the tables before the reviewer starts")
        queue = ReviewQueue(url)
        view = queue.view()  # creates the view's tables, and is polled below
        reviewer = multiprocessing.get_context("spawn").Process(target=_reviewer, args=(url,))
        reviewer.start()
        try:
            _interrupt(store, "warm-up")
            _seen(view, "warm-up")  # the reviewer follows before the first measurement
            lags = []
            for index in range(samples):
                thread_id = f"review-{index}"
                committed = _interrupt(store, thread_id)
                lags.append(_seen(view, thread_id) - committed)
            poll, facade = [], []
            for _ in range(samples):
                start = time.perf_counter()
                view.pending()
                poll.append(time.perf_counter() - start)
                start = time.perf_counter()
                queue.pending()
                facade.append(time.perf_counter() - start)
        finally:
            reviewer.kill()
            reviewer.join()
    progress.update(
        lags=lags,
        poll_s=statistics.median(poll),
        facade_s=statistics.median(facade),
        notify=_notify_round_trip(url, samples),
    )


def run(ctx: Context) -> list[Section]:
    """Figure 7."""
    section = Section("7. Reviewer queue lag on PostgreSQL", intro(__doc__))
    if ctx.postgres is None:
        section.notes.append(f"Not measured: {ctx.postgres_missing}.")
        return [section]
    samples = QUICK_SAMPLES if ctx.quick else FULL_SAMPLES
    log(f"reviewer queue lag, {samples} interrupts")
    found = isolated(run_lag, BUDGET_S, url=ctx.postgres.database("queue_lag"), samples=samples)
    ctx.postgres.drop("queue_lag")
    table = Table(
        "from the commit of the interrupt to the item in the reviewer queue",
        ["measure", "ours", "limit: NOTIFY round trip", "ours / limit"],
    )
    if "lags" not in found:
        reason = found.get("error", "over the budget").splitlines()[-1]
        table.notes.append(f"failed: `{reason}`")
    else:
        lags, notify = sorted(found["lags"]), sorted(found["notify"])
        for label, pick in (
            ("median", statistics.median),
            ("90th percentile", lambda xs: xs[int(0.9 * (len(xs) - 1))]),
            ("max", max),
        ):
            ours, limit = pick(lags), pick(notify)
            table.rows.append([label, seconds(ours), seconds(limit), times(ratio(ours, limit))])
        table.notes += [
            f"{len(lags)} interrupts; one poll (`pending()` on the view from "
            f"`ReviewQueue.view()`, opened once) takes {seconds(found['poll_s'])} (median), "
            "which bounds the resolution of our figure.",
            f"`ReviewQueue.pending()` itself takes {seconds(found['facade_s'])} (median): "
            "it opens the view again (`ReviewQueue.view()`, a new infrastructure factory and "
            "connection) on every call, which a reviewer UI polling it would pay each time.",
        ]
    section.tables.append(table)
    median = statistics.median(found["lags"]) if "lags" in found else None
    section.targets.append(
        Target(
            f"reviewer queue lag: median under {LAG_LIMIT_S * 1e3:.0f} ms",
            "-" if median is None else f"{seconds(median)} median",
            status(None if median is None else median < LAG_LIMIT_S),
        )
    )
    return [section]


if __name__ == "__main__":
    raise SystemExit(cli([run]))
