"""Figure 14: the reviewer queue's costs per unit of work, at two sizes ten times apart.

Each operation is timed at a size N and at 10N (full run: N = 1,000 pending reviews in
as many threads; quick: 30), on SQLite files, with the same code path the inbox, the
command line and the workers take; the time of one operation at 10N over its time at N
is its growth, 1 when it costs only its own work (``< 2`` is the target, which leaves
room for the logarithm of an index's depth). Both sizes are written first, then each
operation is timed side by side: in rounds (21 in a full run, 3 with ``--quick``; the
scans of the whole log in 3), each timing every operation at N and at 10N in turn, the
order of the sizes alternating, and each figure is the median of its rounds (until
2026-12-07 each size was timed in a block of its own, minutes apart, the median of 5 to
21, and the machine's load at those moments moved a growth by up to 2x). The rates are
one measurement at each size, taken as that size is prepared.

Measured: a page of 50 in the middle of the queue (``ReviewQueue.page(after=cursor,
limit=50)``) on the SQLite and the in-memory view; one thread's items (``only=``); a
review's threads by id: ``ReviewQueue.threads_with_review``, the index ``approve`` without
``--thread`` and the inbox use, and ``Store.threads_with_review``, the store's own index
of review requests (ADR 0078), beside the log scan they replace (the store's reading of
every review request, as ``Store.threads_with_review`` does without its index); one
thread cleared from the in-memory view (``MemoryReviewQueueView.apply`` of one
``ThreadCleared``, as a resume does, on a view of its own); one thread's fork tree
(``Store.tree(root)``, through the index of forks by parent after its first read),
beside ``Store.session_tree()``, which reads every fork; a chain of N/10 forks, each of
the one before (ADR 0147): the deepest one's load and the chain's tree, each per fork of
the chain (a read of a fork reads its ancestors: its own work); and, in events per
second, the queue rebuilt from the log (every event of N or 10N threads) beside the raw
read of the log, and the SQLite view applying the same events in batches of 500 per
transaction beside one commit per event, as before. Until 2026-12-07 the log scan's row
timed ``Store.threads_with_review``, which had come to read the store's index.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
from eventsourcing.persistence import Tracking
from harness import Context, cli, log
from report import Section, Table, Target, intro, rate, seconds, status, times

from covonaut_es import Message, ReviewQueue, Role, Store, ToolCall, open_store
from covonaut_es.domain import AgentThread
from covonaut_es.projections._items import QUEUE_EVENT_TYPES, ThreadCleared
from covonaut_es.projections._names import ThreadNames
from covonaut_es.projections._paging import QueueFilter
from covonaut_es.projections._queue import ReviewQueueProjection
from covonaut_es.store._application import STORE_APPLICATION_NAME

FULL_N = 1_000
QUICK_N = 30
PAGE = 50
BATCH = 500
REPEATS = 21
QUICK_REPEATS = 3
SCAN_REPEATS = 3
SCANS = frozenset({"lookup_log", "tree_log"})
"""The operations that scan the whole log (the paths the indexes replaced): timed fewer
times, since each takes far longer than the others."""
MAX_GROWTH = 2.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@attrs.frozen
class Operation:
    """What one timing runs, and the units of work it does (its time is divided by
    them)."""

    run: Callable[[], Any]
    units: int = 1


def _fill(store: Store, count: int) -> None:
    """``count`` threads, each paused on one review; every hundredth forked once."""
    for index in range(count):
        now = T0 + timedelta(seconds=index)
        thread = AgentThread.start(f"thread-{index:06d}", now=now)
        call = ToolCall("c1", "refund", f'{{"amount": {index}}}')
        thread.append_message(Message(Role.ASSISTANT, tool_calls=(call,)), now=now)
        thread.call_tools([call], now=now)
        thread.request_review(call, {"amount": index}, now=now)
        store.save(thread)
        if index % 100 == 0:
            store.fork(thread.thread_id, at_version=1, new_thread_id=f"thread-{index:06d}~a")


def _middle_cursor(queue: ReviewQueue, count: int) -> str | None:
    """The cursor of the page that starts halfway down the queue."""
    after = None
    for _ in range(count // 2 // PAGE):
        after = queue.page(after=after, limit=PAGE).next_cursor
    return after


def prepared(
    workdir: Path, count: int, stack: ExitStack
) -> tuple[dict[str, Operation], dict[str, float]]:
    """A store of ``count`` threads and its queues, kept open on ``stack``: the
    operations to time at this size, by figure key, and the rates measured once."""
    rates: dict[str, float] = {}
    operations: dict[str, Operation] = {}
    url = f"sqlite:///{workdir / f'queue-{count}.db'}"
    store = stack.enter_context(open_store(url))
    started = time.perf_counter()
    _fill(store, count)
    log(f"queue scale: {count} threads written in {time.perf_counter() - started:.1f} s")
    events = store._records.log_position()
    views = {
        "sqlite": f"sqlite:///{workdir / f'view-{count}.db'}",
        "memory": f"memory://queue-scale-{count}",
    }
    for name, view in views.items():
        queue = ReviewQueue(url, view_url=view)
        stack.callback(queue.close)
        started = time.perf_counter()
        with queue.follow() as runner:
            queue.wait_until_current(store, timeout=3600, runner=runner)
        rates[f"rebuild_{name}"] = events / (time.perf_counter() - started)
        cursor = _middle_cursor(queue, count)
        operations[f"page_{name}"] = Operation(
            lambda q=queue, c=cursor: q.page(after=c, limit=PAGE)
        )
        one = f"thread-{count // 2:06d}"
        only = QueueFilter(thread_id=one)
        operations[f"thread_page_{name}"] = Operation(lambda q=queue, o=only: q.page(only=o))
        review_id = queue.page(only=only).items[0].review_id or ""
        operations[f"lookup_{name}"] = Operation(
            lambda q=queue, r=review_id: q.threads_with_review(r, store)
        )
    operations["clear_memory"] = _clearing(
        store, url, f"memory://queue-scale-{count}-clears", stack
    )
    operations["lookup_store"] = Operation(lambda: store.threads_with_review(review_id))
    operations["lookup_log"] = Operation(lambda: store._reader.threads_with_review(review_id))
    rates["apply_batches"] = _apply_rate(workdir, url, store, BATCH)
    rates["apply_per_event"] = _apply_rate(workdir, url, store, 1)
    rates["raw_read"] = _raw_read_rate(store)
    store.tree("thread-000000")  # the index's first read: every fork, once
    operations["tree_index"] = Operation(lambda: store.tree("thread-000000"))
    operations["tree_log"] = Operation(store.session_tree)
    operations.update(_chain(workdir, max(count // 10, 3), stack))
    return operations, rates


def _chain(workdir: Path, depth: int, stack: ExitStack) -> dict[str, Operation]:
    """A chain of ``depth`` forks of a root, each forked at the head of the one before:
    loading the deepest, and the root's tree, each timed per fork of the chain."""
    store = stack.enter_context(open_store(f"sqlite:///{workdir / f'chain-{depth}.db'}"))
    store.save(AgentThread.start("chain", now=T0))
    deepest = "chain"
    for index in range(depth):
        deepest = store.fork(deepest, new_thread_id=f"chain-{index:06d}")
    return {
        "chain_load": Operation(lambda: store.load(deepest), units=depth),
        "chain_tree": Operation(lambda: store.tree("chain"), units=depth),
    }


def _clearing(store: Store, url: str, view_url: str, stack: ExitStack) -> Operation:
    """One thread's items cleared from an in-memory view (a resume), applied directly:
    each call clears the next of every tenth pending item. The view is one of its own,
    whose tracking these clears move past the log's end, which the other queues'
    lookups would refuse."""
    queue = ReviewQueue(url, view_url=view_url)
    stack.callback(queue.close)
    with queue.follow() as runner:
        queue.wait_until_current(store, timeout=3600, runner=runner)
    view, position = queue.view(), queue.position()
    items = iter(queue.pending()[::10])
    offsets = itertools.count(1)

    def clear() -> None:
        tracking = Tracking(STORE_APPLICATION_NAME, position + next(offsets))
        view.apply([ThreadCleared(next(items).thread_id)], tracking)

    return Operation(clear)


def timed(sizes: list[dict[str, Operation]], repeats: int) -> list[dict[str, float]]:
    """The median time of each operation at each size, per unit of its work, taken in
    ``repeats`` rounds that time each operation at every size in turn (the order of the
    sizes alternating from round to round), so that the machine's load meets both sizes
    alike; the scans of the whole log, slow, only in the first :data:`SCAN_REPEATS`."""
    times_s: list[dict[str, list[float]]] = [{key: [] for key in ops} for ops in sizes]
    for round_ in range(repeats):
        order = list(zip(sizes, times_s, strict=True))
        if round_ % 2:
            order.reverse()
        for key in sizes[0]:
            if key in SCANS and round_ >= SCAN_REPEATS:
                continue
            for operations, found in order:
                operation = operations[key]
                start = time.perf_counter()
                operation.run()
                found[key].append((time.perf_counter() - start) / operation.units)
    return [{key: statistics.median(values) for key, values in size.items()} for size in times_s]


def _apply_rate(workdir: Path, url: str, store: Store, batch: int) -> float:
    """Events per second the SQLite view applies, ``batch`` events per transaction, as
    the projection does (the log read and decoded beforehand, not timed)."""
    view_file = workdir / f"view-batch{batch}-{store._records.log_position()}.db"
    queue = ReviewQueue(url, view_url=f"sqlite:///{view_file}")
    projection = ReviewQueueProjection(view=queue.view(), names=ThreadNames(store._records))
    decode = store._records.read_record
    events = [
        (decode(n), Tracking(STORE_APPLICATION_NAME, n.id))
        for n in store._records.notifications(*QUEUE_EVENT_TYPES)
    ]
    started = time.perf_counter()
    for index in range(0, len(events), batch):
        projection.process_events(events[index : index + batch])
    elapsed = time.perf_counter() - started
    queue.close()
    return len(events) / elapsed


def _raw_read_rate(store: Store) -> float:
    """Rows per second of the whole log read, nothing decoded."""
    started = time.perf_counter()
    rows = sum(1 for _ in store._records.notifications())
    return rows / (time.perf_counter() - started)


ROWS = [
    ("page of 50 in the middle, SQLite view", "page_sqlite", seconds, True),
    ("page of 50 in the middle, memory view", "page_memory", seconds, True),
    ("one thread's items (filter), SQLite view", "thread_page_sqlite", seconds, True),
    ("a review's threads by id: the index, SQLite", "lookup_sqlite", seconds, True),
    ("a review's threads by id: the index, memory", "lookup_memory", seconds, True),
    ("a review's threads by id: the store's own index, SQLite", "lookup_store", seconds, True),
    ("a review's threads by id: the log scan (before)", "lookup_log", seconds, False),
    ("one thread cleared, memory view", "clear_memory", seconds, True),
    ("one thread's fork tree, by the index", "tree_index", seconds, True),
    ("every fork read from the log (before)", "tree_log", seconds, False),
    ("the deepest fork of a chain of N/10 loaded, per fork", "chain_load", seconds, True),
    ("the tree of a chain of N/10 forks, per fork", "chain_tree", seconds, True),
    ("queue rebuilt from the log, SQLite view (events/s)", "rebuild_sqlite", rate, None),
    ("queue rebuilt from the log, memory view (events/s)", "rebuild_memory", rate, None),
    ("SQLite view applying batches of 500 (events/s)", "apply_batches", rate, None),
    ("the same, one commit per event (before)", "apply_per_event", rate, None),
    ("raw read of the whole log, nothing decoded (rows/s)", "raw_read", rate, None),
]


def run(ctx: Context) -> list[Section]:
    """Figure 14."""
    section = Section("14. Reviewer queue, reviews and forks at two sizes", intro(__doc__))
    small = QUICK_N if ctx.quick else FULL_N
    log(f"queue scale N={small} and {10 * small}")
    with ExitStack() as stack:
        (ops_n, rates_n), (ops_10n, rates_10n) = (
            prepared(ctx.workdir, size, stack) for size in (small, 10 * small)
        )
        times_n, times_10n = timed([ops_n, ops_10n], QUICK_REPEATS if ctx.quick else REPEATS)
    at_n, at_10n = {**times_n, **rates_n}, {**times_10n, **rates_10n}
    table = Table(
        f"each operation at N = {small:,} and 10N = {10 * small:,} pending reviews",
        ["operation", "at N", "at 10N", "growth (10N / N)", "kind"],
    )
    worst = 0.0
    for label, key, shown, bounded in ROWS:
        growth = at_10n[key] / at_n[key]
        if bounded is None:  # a rate: flat is 1
            growth = at_n[key] / at_10n[key]
        if bounded:
            worst = max(worst, growth)
        kind = {True: "its own work", False: "the whole log", None: "rate"}[bounded]
        table.rows.append([label, shown(at_n[key]), shown(at_10n[key]), times(growth), kind])
    speedup = at_10n["apply_batches"] / at_10n["apply_per_event"]
    share = at_10n["rebuild_sqlite"] / at_10n["raw_read"]
    table.notes.append(
        f"At 10N, the SQLite view applies batches {times(speedup)} as fast as one commit "
        f"per event, and the whole rebuild (read, decode, apply) runs at {share:.0%} of the "
        "raw read rate of the log (the issue's target: at least 50%)."
    )
    section.tables.append(table)
    ok = None if ctx.quick else worst < MAX_GROWTH
    ctx.targets["queue_scale"] = target = Target(
        "no quadratic path: a page, a review's lookup, a clear, one thread's fork tree and a "
        "chain of forks "
        f"cost their own work (growth from N to 10N under {MAX_GROWTH:g}x)",
        f"worst growth {times(worst)}",
        status(ok),
    )
    section.targets.append(target)
    return [section]


if __name__ == "__main__":
    raise SystemExit(cli([run]))
