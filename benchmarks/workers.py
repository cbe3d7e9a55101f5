"""Figure 10: workers on PostgreSQL.

N worker processes (``covonaut-es worker --app fleet_app:make_config``, concurrency 1
each) follow one PostgreSQL store. Their model answers after 200 ms, so a thread's
work is latency-bound: an ideal fleet of N workers completes N times as many threads
per second as one. Throughput: after one warm-up thread per worker, ``16 x N``
inputs are submitted at once (``Store.submit``); each run asks the model, pays, and
asks the model again for its answer; the rate runs from the first submission to the
last ``RunFinished`` event.
Decision latency: one worker, a thread paused on a payment's review; a reviewer
approves it, and the lag runs from the moment ``approve()`` returned (the decision is
committed) to the moment the worker's first model call for that thread starts. The
same again with the payment tool declared ``run_on_approval=True``: the lag to the
payment's start, and the model calls the thread makes after the decision, against the
default, in which the model calls the tool again.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import fleet_app
from harness import BUDGET_S, ROOT, Context, cli, isolated, log
from report import MET, MISSED, Section, Table, Target, intro, seconds

from covonaut_es import (
    Agent,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    Store,
    open_store,
)

if TYPE_CHECKING:
    from harness import Progress

FULL_FLEETS = (1, 2, 4, 8)
QUICK_FLEETS = (1, 2)
THREADS_PER_WORKER = 16
QUICK_THREADS_PER_WORKER = 2
FULL_DECISIONS = 20
QUICK_DECISIONS = 3
MODEL_LATENCY_S = 0.2
WAIT_S = 60.0


def _start(url: str, calls: Path, count: int) -> list[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")]),
        "FLEET_MODEL_LATENCY": str(MODEL_LATENCY_S),
        "FLEET_CALLS": str(calls),
    }
    command = [sys.executable, "-m", "covonaut_es", "worker", "--store", url]
    return [
        subprocess.Popen(
            [*command, "--app", "fleet_app:make_config"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=60)


def _wait(what: str, done: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            msg = f"still waiting for {what} after {WAIT_S} s"
            raise TimeoutError(msg)
        time.sleep(0.02)


def _finished_times(store: Store, after: int) -> list[float]:
    # By topic, so each class that records a run's end is named (ADR 0073).
    found = store._records.notifications(
        AgentThread.RunFinished, AgentThread.RunFinishedCheckpointed, after=after
    )
    return [store._app.mapper.to_domain_event(n).timestamp.timestamp() for n in found]


def run_throughput(
    progress: Progress, url: str, workdir: str, workers: int, per_worker: int
) -> None:
    """Submit ``per_worker x workers`` inputs to a fleet of ``workers`` processes; the
    rate."""
    with closing(open_store(url)) as store:
        processes = _start(url, Path(workdir) / f"calls-{workers}", workers)
        try:
            _wait("the workers", lambda: len(store.live_workers()) == workers)
            warm = store._records.log_position()
            for index in range(workers):  # each process makes its connections first
                store.submit(f"warm-up-{workers}-{index}", "Pay 5.")
            _wait("the warm-up", lambda: len(_finished_times(store, warm)) >= workers)
            after = store._records.log_position()
            count = per_worker * workers
            started = time.time()
            for index in range(count):
                store.submit(f"fleet-{workers}-{index}", "Pay 5.")
            _wait("every answer", lambda: len(_finished_times(store, after)) >= count)
            ended = max(_finished_times(store, after))
        finally:
            _stop(processes)
    progress.update(threads=count, rate=count / (ended - started))


def run_latency(
    progress: Progress, url: str, workdir: str, samples: int, run_on_approval: bool = False
) -> None:
    """Per decision on a paused payment: the time to the worker's first model call and to
    the payment's start, and the model calls the thread made after the decision."""
    calls = Path(workdir) / f"calls-latency-{run_on_approval}"
    payments = Path(workdir) / f"payments-latency-{run_on_approval}"
    os.environ["FLEET_MODEL_LATENCY"] = "0"  # this process's own runs only pause
    os.environ["FLEET_TOOL_CALLS"] = str(payments)
    os.environ["FLEET_RUN_ON_APPROVAL"] = "1" if run_on_approval else ""
    token = HmacReviewerVerifier(fleet_app.SECRET).issue_token("rita", ttl_seconds=3600)
    lags, tool_lags, model_calls = [], [], []
    with closing(open_store(url)) as store:
        processes = _start(url, calls, 1)
        try:
            _wait("the worker", lambda: len(store.live_workers()) == 1)
            for index in range(samples + 1):
                thread_id = f"decision-{index}"
                agent = _agent(store, thread_id)
                agent.run("Pay 500.")
                review = agent.pending_reviews[0].review_id
                agent.approve(review, reviewer=token)
                decided = time.time()
                _wait("the payment", lambda t=thread_id: _called(payments, t) is not None)
                # The worker runs one thread at a time: let it finish before the next.
                _wait("the answer", lambda t=thread_id: store.state_at(t).status == "finished")
                after = _calls_after(calls, thread_id, decided)
                lags.append(after[0] - decided)
                tool_lags.append(_called(payments, thread_id) - decided)  # type: ignore[operator]
                model_calls.append(len(after))
        finally:
            _stop(processes)
    # The first warms the worker up.
    progress.update(lags=lags[1:], tool_lags=tool_lags[1:], model_calls=model_calls[1:])


def _agent(store: Store, thread_id: str) -> Agent:
    config = fleet_app.make_config(thread_id)
    settings = CheckpointSettings(store=store, thread_id=thread_id)
    return Agent(attrs.evolve(config, checkpoint=settings))


def _called(calls: Path, thread_id: str) -> float | None:
    found = _calls_after(calls, thread_id, 0.0)
    return found[0] if found else None


def _calls_after(calls: Path, thread_id: str, after: float) -> list[float]:
    """When each call of the thread logged in ``calls`` started, after ``after``."""
    if not calls.exists():
        return []
    found = []
    for line in calls.read_text().splitlines():
        called, at = line.rsplit(" ", 1)
        if called == thread_id and float(at) > after:
            found.append(float(at))
    return found


def run(ctx: Context) -> list[Section]:
    """Figure 10."""
    section = Section("10. Workers on PostgreSQL", intro(__doc__))
    if ctx.postgres is None:
        section.notes.append(f"Not measured: {ctx.postgres_missing}.")
        return [section]
    fleets = QUICK_FLEETS if ctx.quick else FULL_FLEETS
    rates: dict[int, float] = {}
    table = Table(
        "threads completed per second, 200 ms per model call, 2 calls per thread",
        ["worker processes", "threads", "threads/s", "per worker", "of linear"],
    )
    for workers in fleets:
        log(f"workers: throughput with {workers} processes")
        name = f"workers_{workers}"
        found = isolated(
            run_throughput,
            BUDGET_S,
            url=ctx.postgres.database(name),
            workdir=str(ctx.workdir),
            workers=workers,
            per_worker=QUICK_THREADS_PER_WORKER if ctx.quick else THREADS_PER_WORKER,
        )
        ctx.postgres.drop(name)
        if "rate" not in found:
            reason = found.get("error", "over the budget").splitlines()[-1]
            table.notes.append(f"{workers} processes failed: `{reason}`")
            continue
        rates[workers] = found["rate"]
        share = found["rate"] / (rates[1] * workers) if 1 in rates else float("nan")
        table.rows.append(
            [
                str(workers),
                str(found["threads"]),
                f"{found['rate']:.2f}",
                f"{found['rate'] / workers:.2f}",
                f"{share:.2f}x",
            ]
        )
    section.tables.append(table)
    top = max(rates, default=None)
    if top is not None and 1 in rates:
        share = rates[top] / (rates[1] * top)
        section.targets.append(
            Target(
                f"throughput at least 0.8x linear up to {top} worker processes",
                f"{share:.2f}x at {top}",
                MET if share >= 0.8 else MISSED,
            )
        )

    samples = QUICK_DECISIONS if ctx.quick else FULL_DECISIONS
    flows: dict[bool, dict[str, Any]] = {}
    for run_on_approval in (False, True):
        log(f"workers: decision latency, {samples} decisions, run_on_approval={run_on_approval}")
        name = f"workers_latency_{int(run_on_approval)}"
        flows[run_on_approval] = isolated(
            run_latency,
            BUDGET_S,
            url=ctx.postgres.database(name),
            workdir=str(ctx.workdir),
            samples=samples,
            run_on_approval=run_on_approval,
        )
        ctx.postgres.drop(name)
    found = flows[False]
    latency = Table(
        "from a committed decision to the worker's first model call", ["measure", "time"]
    )
    if "lags" not in found:
        reason = found.get("error", "over the budget").splitlines()[-1]
        latency.notes.append(f"failed: `{reason}`")
    else:
        lags = sorted(found["lags"])
        median = statistics.median(lags)
        latency.rows += [
            ["median", seconds(median)],
            ["90th percentile", seconds(lags[int(0.9 * (len(lags) - 1))])],
            ["max", seconds(lags[-1])],
        ]
        latency.notes.append(
            f"{len(lags)} decisions; the worker reads the log every 50 ms, so the poll "
            "alone adds 25 ms on average."
        )
        section.targets.append(
            Target(
                "median time from a decision to the first model call under 100 ms",
                seconds(median),
                MET if median < 0.1 else MISSED,
            )
        )
    section.tables.append(latency)
    section.tables.append(_approved_calls(flows, section))
    return [section]


def _approved_calls(flows: dict[bool, dict[str, Any]], section: Section) -> Table:
    """The table that sets an approval that runs its call against today's default, in
    which the model calls the tool again."""
    table = Table(
        f"an approved payment: model calls after the decision, and the time from the "
        f"decision to the payment's start ({MODEL_LATENCY_S * 1000:.0f} ms per model call)",
        ["flow", "decisions", "model calls", "to the payment, median", "90th percentile"],
    )
    names = {False: "the model calls again (default)", True: "run_on_approval=True"}
    for run_on_approval, found in flows.items():
        if "tool_lags" not in found:
            reason = found.get("error", "over the budget").splitlines()[-1]
            table.notes.append(f"{names[run_on_approval]} failed: `{reason}`")
            continue
        lags = sorted(found["tool_lags"])
        counts = found["model_calls"]
        table.rows.append(
            [
                names[run_on_approval],
                str(len(lags)),
                f"{statistics.mean(counts):g}",
                seconds(statistics.median(lags)),
                seconds(lags[int(0.9 * (len(lags) - 1))]),
            ]
        )
        if run_on_approval:
            section.targets.append(
                Target(
                    "an approved call that runs on resume costs no model call before it runs",
                    f"{statistics.mean(counts):g} model call (its answer) after the decision",
                    MET if max(counts) == 1 else MISSED,
                )
            )
    table.notes.append(
        "Model calls count every call the thread made after the decision: with "
        "run_on_approval only the final answer; by default the model first calls the "
        "tool again, then answers."
    )
    return table


if __name__ == "__main__":
    raise SystemExit(cli([run]))
