"""Figure 4: fork a thread at its middle, and load the fork.

For each T, a thread of T turns is written, the store is opened afresh, and
``store.fork(thread_id, at_version=head // 2)`` is called 5 times (5 forks, medians
reported); then each fork is loaded with ``store.load``. Bytes are those of the rows the
fork wrote: the growth of the stored values in all tables (SQLite: ``length()`` of every
column; PostgreSQL: ``pg_column_size`` of every row), so page granularity does not hide
them. LangGraph forks by ``graph.update_state`` on the middle checkpoint (once, at the
end of its figure-1 run) and loads the branch with ``get_state``; its bytes are measured
the same way. The targets are absolute, so two columns compare with them.
"""

from __future__ import annotations

import time
from contextlib import closing
from typing import TYPE_CHECKING, Any

import single_thread
import workload
from harness import BUDGET_S, Context, cli, isolated, log
from report import (
    MISSED,
    PENDING,
    Section,
    Table,
    Target,
    intro,
    ratio,
    seconds,
    size,
    status,
    times,
)

from covonaut_es import Agent, Store, open_store

if TYPE_CHECKING:
    from harness import Progress

FORKS = 5
MAX_BYTES = 2048
MAX_SECONDS = 0.005


def run_fork(progress: Progress, target: str, turns: int) -> None:
    """Write a thread of ``turns`` turns, then fork it at its middle and load the forks."""
    url = workload.store_url(target)
    workload.prepare(turns)
    with closing(open_store(url)) as store:
        Agent(workload.agent_config(store, workload.Model(turns))).run(workload.PROMPT)
    before = workload.row_bytes(target)
    with closing(open_store(url)) as store:
        head = store.load(workload.THREAD_ID).version
        forks, fork_s = [], []
        for _ in range(FORKS):
            start = time.perf_counter()
            forks.append(store.fork(workload.THREAD_ID, at_version=head // 2))  # type: ignore[attr-defined]
            fork_s.append(time.perf_counter() - start)
        load_s = []
        for fork in forks:
            start = time.perf_counter()
            loaded = store.load(fork)
            load_s.append(time.perf_counter() - start)
    written = workload.row_bytes(target) - before
    progress.update(
        head=head,
        at=head // 2,
        fork_version=loaded.version,
        fork_s=workload.median(fork_s),
        load_s=workload.median(load_s),
        bytes=written / FORKS,
    )


def run(ctx: Context) -> list[Section]:
    """Figure 4."""
    section = Section("4. Fork", intro(__doc__))
    goal = "fork: under 2 KB and under 5 ms regardless of T"
    if not hasattr(Store, "fork"):
        row = "pending: needs `Store.fork`"
        section.tables.append(Table("fork", ["measure", "ours"], [["fork", row]]))
        section.targets.append(Target(goal, row, PENDING))
        return [section]
    table = Table(
        "fork at the middle of a thread of T turns",
        [
            "store",
            "T",
            "at version",
            "bytes written",
            "/ 2 KB",
            "time to fork",
            "/ 5 ms",
            "time to load the fork",
        ],
    )
    worst_bytes, worst_s = 0.0, 0.0
    ours: dict[tuple[str, int], dict[str, Any]] = {}
    slowest: tuple[str, int, dict[str, Any]] | None = None
    for backend in ctx.backends:
        for turns in ctx.turns:
            name = f"fork_{backend}_{turns}"
            log(f"fork {backend} T={turns}")
            found: dict[str, Any] = isolated(
                run_fork, BUDGET_S, target=ctx.target(backend, name), turns=turns
            )
            ctx.discard(backend, name)
            if "error" in found or "timed_out" in found:
                reason = found.get("error", "over the budget").splitlines()[-1]
                table.notes.append(f"{backend}, T={turns}: failed: `{reason}`")
                worst_bytes = worst_s = float("nan")
                continue
            ours[backend, turns] = found
            worst_bytes = max(worst_bytes, found["bytes"])
            if found["fork_s"] > worst_s:
                worst_s, slowest = found["fork_s"], (backend, turns, found)
            table.rows.append(
                [
                    backend,
                    str(turns),
                    f"{found['at']} of {found['head']}",
                    size(found["bytes"]),
                    times(ratio(found["bytes"], MAX_BYTES)),
                    seconds(found["fork_s"]),
                    times(ratio(found["fork_s"], MAX_SECONDS)),
                    seconds(found["load_s"]),
                ]
            )
    table.notes.append(
        "Time to fork includes everything `Store.fork` does: it loads the parent at its "
        "head and at the branch version, checks the new id is free, and saves one event."
    )
    section.tables.append(table)
    if ctx.langgraph_missing is None:
        section.tables.append(_peers(ctx, ours))
    ok = None
    if not ctx.quick and worst_bytes == worst_bytes and worst_s == worst_s:
        ok = worst_bytes < MAX_BYTES and worst_s < MAX_SECONDS
    ctx.targets["fork"] = target = Target(
        goal, f"at most {size(worst_bytes)} and {seconds(worst_s)} (any T, any store)", status(ok)
    )
    if target.status == MISSED and slowest is not None:
        target.explanation = _cause(ctx, *slowest)
    section.targets.append(target)
    return [section]


def _peers(ctx: Context, ours: dict[tuple[str, int], dict[str, Any]]) -> Table:
    """LangGraph's forks, measured at the end of its figure-1 runs."""
    results = ctx.memo("thread-results", lambda: single_thread.collect(ctx))
    table = Table(
        "LangGraph's fork: `update_state` on the middle checkpoint (peer / ours above 1: "
        "we write less or are faster)",
        ["peer", "T", "bytes written", "peer / ours", "time to fork", "peer / ours", "load"],
    )
    for (peer, turns), runs in results.peers.items():
        found, mine = (runs[0] if runs else {}), ours.get((peer.backend, turns), {})
        if "fork_error" in found:
            table.notes.append(f"{peer.label}, T={turns}: `{found['fork_error']}`")
        table.rows.append(
            [
                peer.label,
                str(turns),
                single_thread.shown(runs, found.get("fork_bytes"), size),
                times(ratio(found.get("fork_bytes"), mine.get("bytes"))),
                single_thread.shown(runs, found.get("fork_s"), seconds),
                times(ratio(found.get("fork_s"), mine.get("fork_s"))),
                single_thread.shown(runs, found.get("fork_load_s"), seconds),
            ]
        )
    return table


def _cause(ctx: Context, backend: str, turns: int, found: dict[str, Any]) -> str:
    restore = workload.median(
        [r["restore_s"] for r in ctx.ours(backend, turns) if "restore_s" in r]
    )
    return (
        f"Cause: the slowest fork ({backend}, T={turns}) took {seconds(found['fork_s'])}: "
        "`Store.fork` (`store/_forks.py`) loads the parent at its head "
        "(`self.load(thread_id)`) and "
        "again at the branch version, and checks `self.exists(new_thread_id)`, before it "
        f"saves one `Forked` event; one restore of that head alone takes {seconds(restore)} "
        f"(figure 3). The bytes ({size(found['bytes'])}) are within the target: what a fork "
        "writes does not grow with T, the time it reads does."
    )


if __name__ == "__main__":
    raise SystemExit(cli([run]))
