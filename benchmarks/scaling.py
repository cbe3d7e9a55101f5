"""Figure 15: a worker's choice of threads, SQLite's run leases and the listing of
threads, at two sizes ten times apart.

A worker's fold: a log of N threads, of which R are ready (input submitted, not yet
taken), P are paused on a review and the rest finished, is folded into the worker's
`ReadyThreads` (the events made in memory: what is measured is the fold, not reading
the log). Kept is how many threads it holds after the fold, and the memory they take
(tracemalloc). Draining is choosing the next ready thread and parking it, as a step
that finds nothing does, until none is left: per thread, that cost stays flat as R
grows tenfold. The reference is the choice made by rebuilding the candidate list from
every ready thread at each step, as workers did before. Fold and draining are timed in
the process's CPU time (the least of 3), which a shared machine's other processes do
not inflate.

Leases: on a SQLite store, the run lease of each of N threads is taken and released,
as every run does, and the lock files left beside the database are counted.

Listing: a SQLite store of N threads of one turn each is listed with
`Store.list_threads`: the first listing (which summarizes every thread), then every
thread in one page against a select of the head anchors (`SELECT originator_id,
version, chain` of the head table, sqlite3), the two taken in turn 21 times, medians.
A page of 100 (5 with `--quick`) is read from the stores of both sizes in turn, 41
times each, medians: taken side by side, both meet the machine's same moments (this
kind of machine has slow spells that a median of five in one process may fall in). On
the command line, `covonaut-es threads --json --limit 3000` against the same command
listing one thread (its start-up), the two taken in turn 5 times, medians. Listings
are timed in CPU time (the command's, as its process's), since the machine may be
shared.
"""

from __future__ import annotations

import contextlib
import resource
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from harness import BUDGET_S, Context, cli, isolated, log
from report import MET, MISSED, Section, Table, Target, intro, seconds, size, times

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    open_store,
)
from covonaut_es.domain import AgentThread, PauseKind, RunMode, thread_aggregate_id
from covonaut_es.domain._reviews import ReviewRequest
from covonaut_es.domain._submissions import InputSubmitted
from covonaut_es.domain._values import Interrupt
from covonaut_es.store._backends._sqlite_leases import lease_directory
from covonaut_es.workers._candidates import Candidates
from covonaut_es.workers._ready import ReadyThreads
from covonaut_es.workers._step import Action

if TYPE_CHECKING:
    from harness import Progress

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TOPIC = "covonaut_es.domain._thread:AgentThread"
# (threads, ready, paused): tenfold the threads with the same ready ones, then tenfold
# the ready ones.
FULL_FOLDS = ((2_000, 200, 200), (20_000, 200, 200), (20_000, 2_000, 200))
QUICK_FOLDS = ((200, 20, 20), (2_000, 20, 20), (2_000, 200, 20))
FULL_LISTINGS = (300, 3_000)
QUICK_LISTINGS = (10, 100)
PAGE = 100
QUICK_PAGE = 5
PAIRED = 21
"""How many times a listing and the select it is judged against are each taken, in turn."""
PAGES = 41
"""How many times a page is read from each store, in turn."""
FULL_LEASES = (200, 2_000)
QUICK_LEASES = (20, 200)
REPEATS = 3
FLAT = 2.0
"""A cost per item counts as flat when tenfold the items costs it at most this much more
(the two sizes differ in cache and allocator behaviour, not in the work per item)."""


def _log(threads: int, ready: int, paused: int) -> Iterator[Any]:
    """The tracked events of ``threads`` threads: the first ``ready`` hold a submitted
    input, the next ``paused`` wait on a review, the rest finished a run."""
    for index in range(threads):
        thread_id = f"thread-{index}"
        base = {"originator_id": thread_aggregate_id(thread_id), "timestamp": NOW}
        yield AgentThread.Started(
            **base, originator_version=1, originator_topic=TOPIC, thread_id=thread_id
        )
        if index < ready:
            yield InputSubmitted(
                originator_id=thread_aggregate_id(f"submissions-{index}"),
                originator_version=1,
                timestamp=NOW,
                thread_id=thread_id,
                text="hi",
            )
            continue
        yield AgentThread.RunStarted(**base, originator_version=2, mode=RunMode.RUN)
        if index < ready + paused:
            call = f"call-{index}"
            request = ReviewRequest(
                review_id=f"review-{index}",
                thread_id=thread_id,
                tool_name="pay",
                arguments={},
                digest="d",
                tool_call_id=call,
            )
            yield AgentThread.ReviewRequested(**base, originator_version=3, request=request)
            pause = Interrupt("review", tool_call_id=call, kind=PauseKind.REVIEW)
            yield AgentThread.Interrupted(**base, originator_version=4, interrupt=pause)
        else:
            yield AgentThread.RunFinished(**base, originator_version=3, output="done")


def run_fold(progress: Progress, threads: int, ready: int, paused: int) -> None:
    """Fold the log, then drain the ready threads both ways."""
    events = list(_log(threads, ready, paused))
    fold_s, drain_s, drained = [], [], 0
    for _ in range(REPEATS):  # the least of each: the machine may be shared
        fold = ReadyThreads(lambda stream: None)
        started = time.process_time()
        for event in events:
            fold.apply(event)
        fold_s.append(time.process_time() - started)
        candidates = Candidates(fold)
        started = time.process_time()
        drained = 0
        while chosen := candidates.next(1, 0.0, once=True):
            candidates.started(chosen[0])
            candidates.finished(chosen[0], Action.NOTHING, 0.0)
            drained += 1
        drain_s.append(time.process_time() - started)
    del events, fold, candidates
    # Again under tracemalloc (which slows it), the events made one at a time, so that
    # only what the fold keeps is counted.
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fold = ReadyThreads(lambda stream: None)
    for event in _log(threads, ready, paused):
        fold.apply(event)
    kept_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    kept = len(fold)

    # Before: the candidate list rebuilt from every ready thread at each step.
    waiting, taken = {f"thread-{index}" for index in range(ready)}, set[str]()
    started = time.process_time()
    while listed := [thread for thread in waiting if thread not in taken]:
        waiting.discard(listed[0])
    rebuilt_s = time.process_time() - started
    progress.update(
        fold_s=min(fold_s),
        kept=kept,
        kept_bytes=kept_bytes,
        drained=drained,
        drain_s=min(drain_s),
        rebuilt_s=rebuilt_s,
    )


def run_leases(progress: Progress, path: str, threads: int) -> None:
    """Take and release the lease of ``threads`` threads; the lock files left."""
    with closing(open_store(f"sqlite:///{path}")) as store:
        started = time.perf_counter()
        for index in range(threads):
            with store.lease(f"thread-{index}"):
                pass
        elapsed = time.perf_counter() - started
    files = [p for p in lease_directory(path).iterdir() if p.suffix == ".lock"]
    progress.update(lease_s=elapsed / threads, files=len(files))


def run_listing(progress: Progress, path: str, threads: int, repeats: int) -> None:
    """Write ``threads`` threads, then time listings against a select of the anchors."""
    url = f"sqlite:///{path}"
    with closing(open_store(url)) as store:
        for index in range(threads):
            config = AgentConfig(
                provider=ScriptedProvider([ProviderResponse(content="done")]),
                checkpoint=CheckpointSettings(store=store, thread_id=f"thread-{index}"),
            )
            Agent(config).run("go")
    with closing(open_store(url)) as store, closing(sqlite3.connect(path)) as database:
        started = time.process_time()
        store.list_threads(limit=min(threads, 10_000))
        first_s = time.process_time() - started
        select_s, all_s = _in_turn(
            lambda: database.execute(
                "SELECT originator_id, version, chain FROM stored_events_heads"
            ).fetchall(),
            lambda: store.list_threads(limit=min(threads, 10_000)),
            repeats=PAIRED,
        )
    command = [sys.executable, "-m", "covonaut_es", "threads", "--store", url, "--json"]
    cli_one_s, cli_all_s = _in_turn(
        *(
            lambda limit=limit: _quiet([*command, "--limit", str(limit)])
            for limit in (1, min(threads, 3_000))
        ),
        repeats=repeats,
        clock=_children_cpu,
    )
    progress.update(
        select_s=select_s,
        first_s=first_s,
        all_s=all_s,
        cli_one_s=cli_one_s,
        cli_all_s=cli_all_s,
    )


def run_pages(progress: Progress, paths: list[str], page: int) -> None:
    """Time a page of ``page`` threads from each listed store of ``paths``, in turn."""
    with contextlib.ExitStack() as stack:
        stores = [stack.enter_context(closing(open_store(f"sqlite:///{p}"))) for p in paths]
        pages = [lambda store=store: store.list_threads(limit=page) for store in stores]
        progress.update(page_s=_in_turn(*pages, repeats=PAGES))


def _in_turn(*measures: Any, repeats: int, clock: Any = time.process_time) -> list[float]:
    """The median CPU time (the process's, or ``clock``) of each of ``measures``, each
    taken ``repeats`` times, in turn with the others."""
    times_s: list[list[float]] = [[] for _ in measures]
    for _ in range(repeats):
        for measure, taken in zip(measures, times_s, strict=True):
            started = clock()
            measure()
            taken.append(clock() - started)
    return [sorted(taken)[len(taken) // 2] for taken in times_s]


def _children_cpu() -> float:
    """The CPU time of this process's ended children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _quiet(command: list[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _failed(found: dict[str, Any]) -> str | None:
    if "error" in found or "timed_out" in found:
        return str(found.get("error", "over the budget")).splitlines()[-1]
    return None


def run(ctx: Context) -> list[Section]:
    """Figure 15."""
    title = "15. Workers, leases and listings in proportion to their work"
    section = Section(title, intro(__doc__))
    folds = QUICK_FOLDS if ctx.quick else FULL_FOLDS
    table = Table(
        "a worker's fold of the log, and draining its ready threads",
        [
            "threads",
            "ready",
            "paused",
            "fold",
            "threads kept",
            "memory kept",
            "per drained thread",
            "before: list rebuilt each step",
        ],
    )
    measured: dict[tuple[int, int, int], dict[str, Any]] = {}
    for threads, ready, paused in folds:
        log(f"scaling: worker fold of {threads} threads, {ready} ready")
        found = isolated(run_fold, BUDGET_S, threads=threads, ready=ready, paused=paused)
        reason = _failed(found)
        if reason is not None:
            table.notes.append(f"{threads} threads, {ready} ready: failed: `{reason}`")
            continue
        measured[threads, ready, paused] = found
        table.rows.append(
            [
                f"{threads:,}",
                f"{ready:,}",
                f"{paused:,}",
                seconds(found["fold_s"]),
                f"{found['kept']:,}",
                size(found["kept_bytes"]),
                seconds(found["drain_s"] / found["drained"]),
                seconds(found["rebuilt_s"] / ready),
            ]
        )
    table.notes.append(
        "The fold itself still reads every tracked event of the log once, at the worker's "
        "start: it grows with the log, not with the ready threads."
    )
    section.tables.append(table)
    small, large, busy = folds
    if {small, large, busy} <= measured.keys():
        grown = measured[large]["kept_bytes"] / measured[small]["kept_bytes"]
        section.targets.append(
            Target(
                "a worker keeps memory in proportion to the threads with work outstanding, "
                "not to every thread (tenfold the threads, the same ready and paused ones)",
                f"memory kept {times(grown)}",
                MET if grown <= FLAT else MISSED,
            )
        )
        per = [measured[key]["drain_s"] / measured[key]["drained"] for key in (large, busy)]
        section.targets.append(
            Target(
                "draining R ready threads costs in proportion to R (tenfold R, per thread)",
                f"{times(per[1] / per[0])} per thread",
                MET if per[1] / per[0] <= FLAT else MISSED,
            )
        )

    leases = Table("SQLite run leases", ["threads", "per lease", "lock files left"])
    counts = QUICK_LEASES if ctx.quick else FULL_LEASES
    left = []
    for threads in counts:
        log(f"scaling: {threads} SQLite leases")
        path = ctx.target("sqlite", f"leases_{threads}")
        found = isolated(run_leases, BUDGET_S, path=path, threads=threads)
        ctx.discard("sqlite", f"leases_{threads}")
        reason = _failed(found)
        if reason is not None:
            leases.notes.append(f"{threads} threads: failed: `{reason}`")
            continue
        left.append(found["files"])
        leases.rows.append([f"{threads:,}", seconds(found["lease_s"]), str(found["files"])])
    section.tables.append(leases)
    section.tables.append(_listings(ctx, section))
    if len(left) == len(counts):
        section.targets.append(
            Target(
                "lease files do not accumulate",
                f"{max(left)} left after {counts[-1]:,} threads",
                MET if max(left) == 0 else MISSED,
            )
        )
    return [section]


def _listings(ctx: Context, section: Section) -> Table:
    """The listing's table and targets."""
    table = Table(
        "listing threads (SQLite)",
        [
            "threads",
            "select of the anchors",
            "first listing",
            "every thread, one page",
            "/ select",
            f"a page of {QUICK_PAGE if ctx.quick else PAGE}",
            "command line, 1 thread",
            "command line, up to 3,000",
        ],
    )
    found_by: dict[int, dict[str, Any]] = {}
    sizes = QUICK_LISTINGS if ctx.quick else FULL_LISTINGS
    paths = {threads: ctx.target("sqlite", f"listing_{threads}") for threads in sizes}
    for threads in sizes:
        log(f"scaling: listing {threads} threads")
        found = isolated(
            run_listing,
            BUDGET_S,
            path=paths[threads],
            threads=threads,
            repeats=1 if ctx.quick else 5,
        )
        reason = _failed(found)
        if reason is not None:
            table.notes.append(f"{threads} threads: failed: `{reason}`")
            continue
        found_by[threads] = found
    if len(found_by) == len(sizes):
        log("scaling: a page of each listing, in turn")
        page = QUICK_PAGE if ctx.quick else PAGE
        pages = isolated(run_pages, BUDGET_S, paths=list(paths.values()), page=page)
        reason = _failed(pages)
        if reason is not None:
            table.notes.append(f"pages: failed: `{reason}`")
        else:
            for threads, page_s in zip(sizes, pages["page_s"], strict=True):
                found_by[threads]["page_s"] = page_s
    for threads in sizes:
        ctx.discard("sqlite", f"listing_{threads}")
    for threads, found in found_by.items():
        table.rows.append(
            [
                f"{threads:,}",
                seconds(found["select_s"]),
                seconds(found["first_s"]),
                seconds(found["all_s"]),
                times(found["all_s"] / found["select_s"]),
                seconds(found["page_s"]) if "page_s" in found else "-",
                seconds(found["cli_one_s"]),
                seconds(found["cli_all_s"]),
            ]
        )
    table.notes.append(
        "The first listing summarizes every thread (a load each); later ones load only the "
        "threads written since, and read the summaries."
    )
    if found_by:
        largest = found_by[max(found_by)]
        share = largest["all_s"] / largest["select_s"]
        section.targets.append(
            Target(
                "listing every thread costs at most 2x a select of the head anchors",
                f"{times(share)} at {max(found_by):,} threads",
                MET if share <= 2 else MISSED,
            )
        )
        extra = largest["cli_all_s"] / largest["cli_one_s"]
        section.targets.append(
            Target(
                "on the command line, listing 3,000 threads costs no more than the "
                "command's start-up again",
                f"{times(extra)} the start-up",
                MET if extra <= 2 else MISSED,
            )
        )
    if len(found_by) == 2 and all("page_s" in found for found in found_by.values()):
        small, large = sorted(found_by)
        flat = found_by[large]["page_s"] / found_by[small]["page_s"]
        section.targets.append(
            Target(
                "a page costs the same at ten times the threads",
                f"{times(flat)}",
                MET if flat <= FLAT else MISSED,
            )
        )
    return table


if __name__ == "__main__":
    raise SystemExit(cli([run]))
