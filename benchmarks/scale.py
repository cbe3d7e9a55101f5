"""Many threads: each figure at two sizes ten times apart, against its strict reference.

Not part of `make bench`: run it with `make bench-scale` (100 and 1,000 threads by
default: a quarter of an hour on this 2-core machine shared with other work) or
`python benchmarks/scale.py --scale N` (N and 10 x N threads).
It writes `benchmarks/SCALE.md`, which BENCHMARKS.md includes, and `benchmarks/SCALE.json`.
`--quick` is the test suite's run, seconds long: 8 and 80 threads, each measurement
taken once (restores three times, the empty store's start-up at the first size only),
and one set of writer processes for every race instead of fresh ones per race; it
checks that every figure runs, and its numbers are not figures to quote.

Each store holds N threads of three turns each: a user prompt, then the model calls the
`lookup` tool twice (about 200 bytes of text and a 40-byte query each time; the tool
returns about 400 bytes) and answers. One thread in five instead calls `pay`, which
needs a person's approval, on its second turn, and stays paused on that review. Every
thread's text is its own deterministic English-like prose (`workload.prose`, seeded by
the thread and the turn), so no two threads repeat each other and zstd of the whole
corpus is not flattered. SQLite is a WAL file with the store's default `synchronous`
(`FULL`); PostgreSQL is a throwaway 15 server with `fsync`, `full_page_writes` and
`synchronous_commit` on (or `$COVONAUT_ES_TEST_POSTGRES_URL`, as it is configured).

Creating threads: W processes each run `Agent.run` on every W-th thread (after one
warm-up thread on an in-memory store), from a common start to the last finish. The
reference writes the same rows, read back from our store, into empty tables with the
same keys, from W processes at once, in the same transactions as our run committed them
(each thread's events grouped as our `Store.save` calls grouped them), each transaction
also updating the thread's head anchor row, with bare `INSERT` + `COMMIT` and the same
durability. Our run also commits each thread's run lease once (a row), which the
reference does not write. Each writer makes its threads' model answers and tool results
before the start (the same texts), as the reference has its rows: neither times the
making of text. On PostgreSQL a reader follows the log during our run every
5 ms, as a projection does, and counts the notification ids it passed over that were
committed later. The notes also give the same threads run from one writer on an
in-memory store: the agent's own work and the encoding, without a database, which the
reference does not do; its rate bounds what share of the raw rate any store could reach.

Bytes per thread: the store's size (SQLite: the file after a WAL checkpoint;
PostgreSQL: `pg_total_relation_size` of every table) divided by N, against the
conversation's own bytes: the UTF-8 text of every message, and the names and arguments
of its tool calls. Beside it, zstd (level 3) of the whole conversation of all threads
(the limit) and the messages as compact JSON (field names, nulls and ids included: the
softer figure BENCHMARKS.md used to divide by).

Restore: `store.load(thread_id)` of a random thread on a store opened for it, the median
of 501 (N at most), alternating with the reference: a bare indexed `SELECT` of a random
thread's event rows in version order and one `msgspec` decode of each row's payload.
LangGraph's `get_state` of a random thread is taken in turn with our `store.load` of the
same thread, as many times, in the peer's process: the notes give ours as measured there
too, since the table's two columns are timed at different moments. On PostgreSQL each
database is vacuumed and analyzed (`VACUUM (ANALYZE)`) before its restores are timed, as
autovacuum does after the writes that filled it, so that autovacuum does not take the
CPU from both sides during the timings.

`covonaut-es threads`: the command listing every thread in one page (`--json --limit N`,
output discarded), median of 3, against a
`SELECT` of every head anchor row in-process; beside it, the same command on an empty
store (its own start-up). Reviewer queue rebuilt from the log: `ReviewQueue` with an
in-memory view, from `follow()` until `wait_until_current` returns (after one rebuild
that pays the imports, the median of 3, each followed by the reference; stopping the
follower afterwards is shown beside it, not counted), in log rows per second, against
reading every row of the log with bare SQL, 1,000 rows a query in log order.
`GET /api/reviews`: the inbox (`create_app`) served by uvicorn on loopback, the median
of 5 requests of its first page (the default size, 100 reviews at most) once its queue
lists every pending review, read page by page; the time from the app's creation to that
moment is shown too. Worker start: `Worker.run(once=True)` on a store
where no thread is ready (it reads the table of outstanding threads and the log after
it, finds nothing to run and returns), started after a first worker ran, which made
that table from the whole log (its time is shown too), and the memory the run kept
(tracemalloc, a third run). `approve`: the command deciding a
pending review, with and without `--thread`, median of 3 each, alternating.

The growth exponent k of a figure is the slope of its cost (a time, or bytes) against N
between the two sizes: cost ~ N^k. "Own work" says how the work the figure asks for
grows with N: `N` for work over every thread (creating, listing, rebuilding them), `1`
for one item (one thread, one review); a figure whose k exceeds its own work's has a
path that grows with the threads it does not touch.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import queue as queue_module
import random
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import peer
import report
import workload
from harness import ROOT, Postgres, command_line, isolated, log
from workload import prose, store_bytes, store_url

from covonaut_es import (
    Agent,
    AgentConfig,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    Worker,
    open_store,
)
from covonaut_es.projections import MAX_PAGE_SIZE
from covonaut_es.store._dictionary import ZstdDictionaryCompressor

DEFAULT_SCALE = 100
"""The smaller size by default; the larger is ten times it."""
GROWTH = 10
WRITERS = {"sqlite": (1, 4), "postgresql": (1, 4, 8)}
PAUSED_EVERY = 5
"""One thread in this many pauses on a review."""
SMALLEST_SCALE = max(PAUSED_EVERY + 1, *(max(counts) for counts in WRITERS.values()))
"""The smallest N, and ``--quick``'s: every writer has a thread, and two threads pause
on a review (one approval of each kind)."""


@dataclass(frozen=True)
class Repeats:
    """How many times each repeated measurement is taken at one size."""

    restores: int
    """Restores of ours and of the reference (fewer when N is smaller)."""
    commands: int
    """Runs of each `covonaut-es` command (the median is shown)."""
    requests: int
    """Requests of `GET /api/reviews` (the median is shown)."""


FULL = Repeats(restores=501, commands=3, requests=5)
QUICK = Repeats(restores=3, commands=1, requests=1)
BUDGET_S = 1800.0
"""How long one race of writers may take."""
OUTPUT = ROOT / "benchmarks" / "SCALE.md"
SECRET = "scale benchmark reviewer secret, 32+ bytes"
PROMPT = "Research the history of the printing press and report what you find."

# The stored layout the references read with bare SQL: table of events, column of the
# log's order, table of head anchors. The one place to change when the stored format does.
LAYOUT = {
    "sqlite": ("stored_events", "rowid", "stored_events_heads"),
    "postgresql": ("covonaut_events", "notification_id", "covonaut_events_heads"),
}

_DECODE = msgspec.json.Decoder()
_DECOMPRESS = ZstdDictionaryCompressor().decompress


def decode_payload(state: bytes) -> Any:
    """One decode of a stored event's payload, as the restore reference does it (the
    store writes each event's payload as JSON in a zstd frame with the shipped
    dictionary, ADR 0061: the reference reads the same bytes). Hook: a stored format
    that changes the payload's encoding changes this function, and only it."""
    return _DECODE.decode(_DECOMPRESS(state))


# The workload --------------------------------------------------------------------------


def thread_id(index: int) -> str:
    """The id of thread ``index``."""
    return f"thread-{index:06d}"


def paused(index: int) -> bool:
    """Whether thread ``index`` stops on a review."""
    return index % PAUSED_EVERY == 0


def reply(index: int, turn: int) -> ProviderResponse:
    """The model's answer on ``turn`` (0-based) of thread ``index``."""
    seed = 7 * index * 1000
    text = prose(workload.TEXT_BYTES, seed + turn)
    if turn == 2:
        return ProviderResponse(content=text)
    if turn == 1 and paused(index):
        call = ToolCall(f"c{turn}", "pay", f'{{"amount": {index}, "to": "acct-{index}"}}')
    else:
        query = msgspec.json.encode({"query": prose(40, seed + 10 + turn), "n": seed + turn})
        call = ToolCall(f"c{turn}", workload.TOOL_NAME, query.decode())
    return ProviderResponse(content=text, tool_calls=(call,))


_REPLIES: dict[int, tuple[ProviderResponse, ...]] = {}
_RESULTS: dict[int, str] = {}
"""The answers and tool results :func:`prepare` made ahead, by thread and by ``n``."""


def prepare(indexes: list[int]) -> None:
    """Make the model's answers and the ``lookup`` tool's results of threads ``indexes``
    ahead (the same texts), so that a race times none of their making: the reference
    generates no text either."""
    for index in indexes:
        replies = _REPLIES[index] = tuple(reply(index, turn) for turn in range(3))
        for call in (call for answer in replies for call in answer.tool_calls):
            if call.name == workload.TOOL_NAME:
                n = int(msgspec.json.decode(call.arguments)["n"])
                _RESULTS[n] = _lookup_text(n)


def _respond(index: int) -> Callable[[ProviderRequest], ProviderResponse]:
    def respond(request: ProviderRequest) -> ProviderResponse:
        turn = sum(m.role is Role.ASSISTANT for m in request.messages)
        prepared = _REPLIES.get(index)
        return prepared[turn] if prepared is not None else reply(index, turn)

    return respond


def _lookup_text(n: int) -> str:
    return prose(workload.RESULT_BYTES, n + 500)


def lookup(args: dict[str, Any]) -> str:
    """What the ``lookup`` tool returns."""
    n = int(args["n"])
    prepared = _RESULTS.get(n)
    return prepared if prepared is not None else _lookup_text(n)


def _pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return {"paid": args["amount"]}


LOOKUP = workload.lookup_tool(lookup)
PAY = Tool("pay", "Pay", {"type": "object"}, _pay, requires_approval=True)
VERIFIER = HmacReviewerVerifier(SECRET.encode())


def config(store: Store | None, index: int) -> AgentConfig:
    """Thread ``index``'s agent; bound to ``store`` unless None (a worker binds it)."""
    return workload.scripted_agent(
        store, _respond(index), thread_id(index), tools=(LOOKUP, PAY), reviewer_verifier=VERIFIER
    )


def worker_config(name: str) -> AgentConfig:
    """A worker's configuration of a thread, by its id."""
    return config(None, int(name.rsplit("-", 1)[1]))


# Creating threads ----------------------------------------------------------------------


def _ours(url: str, indexes: list[int], barrier: Any, results: Any) -> None:
    """One writer process: run its threads; report the start, end, and the number of
    events of each commit of each thread (grouped as our saves grouped them)."""
    with closing(open_store("memory://")) as warm:
        Agent(config(warm, 1)).run(PROMPT)
    with closing(open_store(url)) as store:
        store.exists(thread_id(indexes[0]))  # the connection is open before the start
        commits: list[int] = []
        save = store.save

        def counted(thread: Any) -> None:
            events = len(thread.pending_events)
            save(thread)
            if events:
                commits.append(events)

        store.save = counted  # type: ignore[method-assign]  # wraps the public method
        patterns: Counter[tuple[int, ...]] = Counter()
        agents = [Agent(config(store, index)) for index in indexes]
        prepare(indexes)
        barrier.wait()
        start = time.time()
        for agent in agents:
            commits.clear()
            agent.run(PROMPT)
            patterns[tuple(commits)] += 1
        results.put((start, time.time(), dict(patterns)))


Layout = tuple[str, str, str]


def _source_rows(source: str, layout: Layout) -> dict[Any, list[tuple[Any, ...]]]:
    """Every thread's event rows at ``source``, in version order, by stream."""
    events = layout[0]
    query = (
        f"SELECT originator_id, originator_version, topic, state FROM {events} "
        "ORDER BY originator_id, originator_version"
    )
    threads: dict[Any, list[tuple[Any, ...]]] = {}
    with _connect(source) as conn:
        for row in conn.execute(query):
            threads.setdefault(row[0], []).append((row[0], row[1], row[2], bytes(row[3])))
    return threads


def _raw(
    source: str,
    target: str,
    share: tuple[int, int],
    patterns: dict[int, tuple[int, ...]],
    barrier: Any,
    results: Any,
) -> None:
    """One raw writer: every ``share[1]``-th stream of the source (from ``share[0]``),
    written again in our run's transactions for a thread of its length, each also
    setting the stream's head anchor row (its version, and a chain of the same length)."""
    postgres = target.startswith("postgresql://")
    layout = LAYOUT["postgresql" if postgres else "sqlite"]
    with _connect(source) as conn:
        chains = dict(conn.execute(f"SELECT originator_id, chain FROM {layout[2]}").fetchall())
    streams = sorted(_source_rows(source, layout).items(), key=lambda item: str(item[0]))
    mine = [rows for _, rows in streams[share[0] :: share[1]]]
    mark = "%s" if postgres else "?"
    insert = f"INSERT INTO raw_events VALUES ({mark}, {mark}, {mark}, {mark})"
    head = (
        f"INSERT INTO raw_heads VALUES ({mark}, {mark}, {mark}) ON CONFLICT (originator_id) "
        "DO UPDATE SET version = excluded.version, chain = excluded.chain"
    )
    if postgres:
        import psycopg

        conn = psycopg.connect(target)
    else:  # autocommit off: each transaction is begun below, and waits for the lock
        conn = sqlite3.connect(target, isolation_level=None, timeout=BUDGET_S)
    barrier.wait()
    start = time.time()
    for rows in mine:
        stream, position = rows[0][0], 0
        for count in patterns.get(len(rows), (len(rows),)):
            batch = rows[position : position + count]
            position += count
            cursor = conn.cursor()
            if not postgres:
                cursor.execute("BEGIN IMMEDIATE")
            cursor.executemany(insert, batch)
            cursor.execute(head, (stream, batch[-1][1], chains[stream]))
            if postgres:
                conn.commit()
            else:
                cursor.execute("COMMIT")
    results.put((start, time.time(), {}))
    conn.close()


def _raw_tables(source: str, target: str) -> None:
    """Empty tables for the raw writers, with the keys of ours."""
    if target.startswith("postgresql://"):
        ddl = [
            "CREATE TABLE raw_events (originator_id uuid, originator_version bigint, "
            "topic text, state bytea, PRIMARY KEY (originator_id, originator_version))",
            "CREATE TABLE raw_heads (originator_id uuid PRIMARY KEY, version bigint NOT NULL, "
            "chain text NOT NULL)",
        ]
    else:
        events, _, heads = LAYOUT["sqlite"]
        with closing(sqlite3.connect(source)) as con:
            found = dict(con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        ddl = [
            found[events].replace(events, "raw_events", 1),
            found[heads].replace(heads, "raw_heads", 1),
        ]
    with _connect(target) as conn:
        if not target.startswith("postgresql://"):
            conn.execute("PRAGMA journal_mode=WAL")
        for statement in ddl:
            conn.execute(statement)
        conn.commit()


def _serve(jobs: Any, barriers: dict[int, Any], results: Any) -> None:
    """One writer process: run each job it is given, set off at the barrier of its
    race's number of writers, until it is given None."""
    while (job := jobs.get()) is not None:
        function, args, writers = job
        function(*args, barriers[writers], results)


class Writers:
    """Spawned writer processes for races of the given numbers of writers, each race
    on the first W of them, set off at a common barrier. A fresh set per race measures
    fresh processes; ``--quick`` keeps one set for the whole run (fewer spawns)."""

    def __init__(self, counts: tuple[int, ...]) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.barriers = {w: spawn.Barrier(w, timeout=BUDGET_S) for w in counts}
        self.results = spawn.Queue()
        self.jobs = [spawn.Queue() for _ in range(max(counts))]
        self.processes = [
            spawn.Process(target=_serve, args=(jobs, self.barriers, self.results))
            for jobs in self.jobs
        ]
        for process in self.processes:
            process.start()

    def race(
        self, function: Callable[..., None], args: list[tuple[Any, ...]]
    ) -> tuple[float, dict[Any, Any]]:
        """``function(*a, barrier, results)`` for each argument tuple ``a``, each in a
        process of its own; the seconds from the first start to the last finish, and
        the patterns they reported."""
        processes = self.processes[: len(args)]
        for jobs, arguments in zip(self.jobs, args, strict=False):
            jobs.put((function, arguments, len(args)))
        found: list[tuple[float, float, dict[Any, Any]]] = []
        deadline = time.monotonic() + BUDGET_S
        while len(found) < len(args):
            try:
                found.append(self.results.get(timeout=0.5))
            except queue_module.Empty:
                failed = [p.exitcode for p in processes if p.exitcode is not None]
                if failed:
                    msg = f"a writer process failed with exit code {failed[0]}"
                    raise RuntimeError(msg) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the writers ran over {BUDGET_S:.0f} s") from None
        patterns: Counter[Any] = Counter()
        for _, _, reported in found:
            patterns.update(reported)
        return max(f[1] for f in found) - min(f[0] for f in found), dict(patterns)

    def close(self) -> None:
        """Stop the processes (killing any that do not end)."""
        for jobs in self.jobs:
            jobs.put(None)
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()


@dataclass(frozen=True)
class Plan:
    """What a run repeats, and whether its races share one set of writer processes."""

    repeats: Repeats
    shared: Writers | None = None
    once: dict[str, float] | None = None
    """``--quick``: what is the same at both sizes, by key, measured at the first."""

    def same_at_both_sizes(self, key: str, measure: Callable[[], float]) -> float:
        """``measure()``, or under ``--quick`` its value at the first size."""
        if self.once is None:
            return measure()
        if key not in self.once:
            self.once[key] = measure()
        return self.once[key]

    @contextmanager
    def writers(self, count: int) -> Iterator[Writers]:
        """Writer processes for a race of ``count``: the shared set, or a fresh one."""
        if self.shared is not None:
            yield self.shared
            return
        fresh = Writers((count,))
        try:
            yield fresh
        finally:
            fresh.close()


class Tail(threading.Thread):
    """Follows a PostgreSQL store's log as a projection does (every 5 ms, from its last
    position), then counts the notification ids it passed over: committed after it had
    read past them, so a projection would never see them."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.done = threading.Event()
        self.seen: set[int] = set()
        self.stored = self.skipped = 0

    def run(self) -> None:
        import psycopg

        events, order, _ = LAYOUT["postgresql"]
        query = f"SELECT {order} FROM {events} WHERE {order} > %s ORDER BY {order} LIMIT 1000"
        position = 0
        with psycopg.connect(self.url, autocommit=True) as conn:
            while True:
                finished = self.done.is_set()
                for (item,) in conn.execute(query, (position,)).fetchall():
                    self.seen.add(item)
                    position = item
                if finished:
                    break
                self.done.wait(0.005)
            stored = [row[0] for row in conn.execute(f"SELECT {order} FROM {events}")]
        self.stored = len(stored)
        self.skipped = sum(1 for item in stored if item not in self.seen)


# Connections and targets ---------------------------------------------------------------


@contextmanager
def _connect(target: str) -> Iterator[Any]:
    """A bare connection to a SQLite path or a PostgreSQL URL."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target) as conn:
            yield conn
    else:
        with closing(sqlite3.connect(target, timeout=60)) as conn:
            yield conn


class Targets:
    """Fresh SQLite files in a working directory, or databases on the server."""

    def __init__(self, workdir: Path, postgres: Postgres | None) -> None:
        self.workdir = workdir
        self.postgres = postgres

    def fresh(self, backend: str, name: str) -> str:
        """An empty target named ``name``."""
        if backend == "postgresql":
            assert self.postgres is not None
            return self.postgres.database(name)
        self.drop(backend, name)
        return str(self.workdir / f"{name}.db")

    def drop(self, backend: str, name: str) -> None:
        """Remove target ``name``."""
        if backend == "postgresql":
            assert self.postgres is not None
            self.postgres.drop(name)
            return
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.workdir / name}.db{suffix}").unlink(missing_ok=True)


def create(
    targets: Targets, plan: Plan, backend: str, size: int, writers: int
) -> tuple[str, dict[str, Any]]:
    """N threads from ``writers`` processes, then the raw writers: the target of ours
    (named ``scale_BACKEND_N_WRITERS``, kept for the other figures) and the figures."""
    name = f"scale_{backend}_{size}_{writers}"
    target = targets.fresh(backend, name)
    url = store_url(target)
    with closing(open_store(url)) as store:
        store.exists("create the tables before the race")
    log(f"{backend}, {size} threads, {writers} writer(s): ours")
    tail = Tail(target) if backend == "postgresql" else None
    if tail is not None:
        tail.start()
    shares = [(url, list(range(w, size, writers))) for w in range(writers)]
    with plan.writers(writers) as processes:
        ours_s, counted = processes.race(_ours, shares)
    if tail is not None:
        tail.done.set()
        tail.join()
    by_length: dict[int, Counter[tuple[int, ...]]] = {}
    for pattern, count in counted.items():
        by_length.setdefault(sum(pattern), Counter())[pattern] += count
    patterns = {length: found.most_common(1)[0][0] for length, found in by_length.items()}
    raw = targets.fresh(backend, f"{name}_raw")
    _raw_tables(target, raw)
    log(f"{backend}, {size} threads, {writers} writer(s): raw INSERT + COMMIT")
    with plan.writers(writers) as processes:
        raw_s, _ = processes.race(
            _raw, [(target, raw, (w, writers), patterns) for w in range(writers)]
        )
    targets.drop(backend, f"{name}_raw")
    commits = sum(len(p) * n for p, n in counted.items()) / max(1, sum(counted.values()))
    result: dict[str, Any] = {"ours_s": ours_s, "raw_s": raw_s, "commits_per_thread": commits}
    if writers == 1:
        # The same threads with no database under the store: what the agent's own work
        # and the encoding take before any row is written, which the raw writer does not do.
        log(f"{backend}, {size} threads, 1 writer: ours on an in-memory store")
        with plan.writers(1) as processes:
            result["memory_s"], _ = processes.race(_ours, [("memory://", list(range(size)))])
    if tail is not None:
        result |= {"tailed": tail.stored, "skipped": tail.skipped}
    return target, result


# Reading figures -----------------------------------------------------------------------


def _conversation(store: Store, size: int) -> dict[str, float]:
    """The conversation's own bytes, their zstd, and the messages' JSON, per thread."""
    import zstandard

    own, as_json, corpus = 0, 0, bytearray()
    for index in range(size):
        messages = store.load(thread_id(index)).state.messages
        as_json += len(msgspec.json.encode(messages))
        for message in messages:
            parts = [message.content]
            for call in message.tool_calls:
                parts += [call.name, call.arguments]
            for part in parts:
                encoded = part.encode()
                own += len(encoded)
                corpus += encoded
    packed = len(zstandard.ZstdCompressor(level=3).compress(bytes(corpus)))
    return {"own": own / size, "zstd": packed / size, "json": as_json / size}


def vacuumed(target: str) -> None:
    """Vacuum and analyze a PostgreSQL database before its restores are timed, as
    autovacuum does after the writes that filled it (run by the server during the
    timings, it took the CPU of this two-core machine from both sides); a SQLite path
    is left as it is."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")


def _restores(target: str, backend: str, size: int, samples: int) -> tuple[float, float]:
    """Median seconds of ``store.load`` of a random thread and of the raw reference."""
    events, _, heads = LAYOUT[backend]
    mark = "%s" if backend == "postgresql" else "?"
    select = (
        f"SELECT originator_version, state FROM {events} "
        f"WHERE originator_id = {mark} ORDER BY originator_version"
    )
    rng = random.Random(size)
    ours, raw = [], []
    with closing(open_store(store_url(target))) as store, _connect(target) as conn:
        streams = [row[0] for row in conn.execute(f"SELECT originator_id FROM {heads}")]
        store.load(thread_id(0))  # the connection is open before the first timing
        for _ in range(samples):
            chosen = thread_id(rng.randrange(size))
            start = time.perf_counter()
            loaded = store.load(chosen)
            ours.append(time.perf_counter() - start)
            del loaded
            stream = rng.choice(streams)
            start = time.perf_counter()
            decoded = [decode_payload(bytes(state)) for _, state in conn.execute(select, (stream,))]
            raw.append(time.perf_counter() - start)
            del decoded
    return statistics.median(ours), statistics.median(raw)


def _command(*args: str, env: dict[str, str] | None = None) -> float:
    """Seconds of one ``covonaut-es`` command, which must succeed."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "covonaut_es", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"covonaut-es {args[0]} failed: {done.stderr[-2000:]}")
    return elapsed


def _listing(target: str, backend: str, size: int, empty: str, plan: Plan) -> dict[str, float]:
    """`covonaut-es threads` listing every thread in one page, on the store and on an
    empty one; a select of the heads."""
    url, heads, repeats = store_url(target), LAYOUT[backend][2], plan.repeats.commands
    every = ("--limit", str(size))
    listed = [_command("threads", "--json", *every, "--store", url) for _ in range(repeats)]

    def startup() -> float:
        return statistics.median(
            [_command("threads", "--json", "--store", empty) for _ in range(repeats)]
        )

    selects = []
    with _connect(target) as conn:
        for _ in range(5):
            start = time.perf_counter()
            conn.execute(f"SELECT originator_id, version, chain FROM {heads}").fetchall()
            selects.append(time.perf_counter() - start)
    return {
        "ours_s": statistics.median(listed),
        "startup_s": plan.same_at_both_sizes(empty, startup),
        "raw_s": statistics.median(selects),
    }


def _queue(target: str, backend: str, repeats: int) -> dict[str, float]:
    """The reviewer queue rebuilt from the log in memory, and a raw read of the log,
    ``repeats`` times each, alternating (after one rebuild that pays the imports): the
    medians."""
    from covonaut_es import ReviewQueue

    events, order, _ = LAYOUT[backend]
    url = store_url(target)
    mark = "%s" if backend == "postgresql" else "?"
    query = (
        f"SELECT {order}, originator_id, originator_version, topic, state FROM {events} "
        f"WHERE {order} > {mark} ORDER BY {order} LIMIT 1000"
    )
    rebuilds: list[float] = []
    stops: list[float] = []
    reads: list[float] = []
    with closing(open_store(url)) as store:
        for attempt in range(repeats + 1):
            queue = ReviewQueue(url, view_url=f"memory://scale-{uuid.uuid4().hex}")
            start = time.perf_counter()
            with queue.follow() as runner:
                queue.wait_until_current(store, timeout=BUDGET_S, runner=runner)
                rebuilt = time.perf_counter() - start  # current: the rebuild is done
            stopped = time.perf_counter() - start - rebuilt
            pending = len(queue.pending())
            queue.close()
            if not attempt:
                continue  # the first pays the imports
            rebuilds.append(rebuilt)
            stops.append(stopped)
            rows, position = 0, 0
            with _connect(target) as conn:
                start = time.perf_counter()
                while page := conn.execute(query, (position,)).fetchall():
                    rows += len(page)
                    position = page[-1][0]
                reads.append(time.perf_counter() - start)
    return {
        "rows": rows,
        "ours_s": statistics.median(rebuilds),
        "raw_s": statistics.median(reads),
        "pending": pending,
        "stop_s": statistics.median(stops),
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _listed_reviews(client: Any, headers: dict[str, str]) -> int | None:
    """How many reviews `GET /api/reviews` lists, page after page (None while the inbox
    is not answering yet)."""
    listed, params = 0, {"limit": str(MAX_PAGE_SIZE)}
    while True:
        answer = client.get("/api/reviews", headers=headers, params=params)
        if answer.status_code != 200:
            return None
        listed += len(answer.json())
        cursor = answer.headers.get("X-Next-Cursor")
        if cursor is None:
            return listed
        params = {"limit": str(MAX_PAGE_SIZE), "after": cursor}


def _api_reviews(target: str, pending: int, requests: int) -> dict[str, float]:
    """`GET /api/reviews`, its first page at the default size, once the inbox's queue
    lists every pending review (read page by page)."""
    import httpx
    import uvicorn

    from covonaut_es.inbox import create_app

    token = VERIFIER.issue_token("bench", ttl_seconds=3600)
    headers = {"Authorization": f"Bearer {token}"}
    with closing(open_store(store_url(target))) as store:
        created = time.perf_counter()
        app = create_app(store, VERIFIER)
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
        serving = threading.Thread(target=server.run, daemon=True)
        serving.start()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=BUDGET_S) as client:
                while not (server.started and (_listed_reviews(client, headers) or 0) >= pending):
                    time.sleep(0.05)
                ready = time.perf_counter() - created
                times, size = [], 0
                for _ in range(requests):
                    start = time.perf_counter()
                    answer = client.get("/api/reviews", headers=headers)
                    times.append(time.perf_counter() - start)
                    size = len(answer.content)
        finally:
            server.should_exit = True
            serving.join(30)
    return {"ours_s": statistics.median(times), "bytes": size, "ready_s": ready}


def _worker_start(target: str) -> dict[str, float]:
    """`Worker.run(once=True)` where nothing is ready: its time, then (a second run,
    under tracemalloc) the memory it kept."""
    url, elapsed = store_url(target), []
    for _ in range(2):  # the first makes the table of outstanding threads (ADR 0054)
        with closing(open_store(url)) as store:
            store.exists(thread_id(0))
            start = time.perf_counter()
            Worker(store, worker_config, poll_interval=0.01).run(once=True)
            elapsed.append(time.perf_counter() - start)
    with closing(open_store(url)) as store:
        store.exists(thread_id(0))
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        worker = Worker(store, worker_config, poll_interval=0.01)
        worker.run(once=True)
        kept = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        del worker
    return {"ours_s": elapsed[1], "first_s": elapsed[0], "kept_bytes": kept}


def _approvals(target: str, size: int, repeats: int) -> dict[str, float]:
    """`covonaut-es approve` of pending reviews without and with ``--thread``."""
    url = store_url(target)
    reviews = []
    with closing(open_store(url)) as store:
        for index in range(0, size, PAUSED_EVERY)[: 2 * repeats]:
            state = store.load(thread_id(index)).state
            (pending,) = [review for review in state.reviews if review.pending]
            reviews.append((pending.request.review_id, thread_id(index)))
    token = VERIFIER.issue_token("bench", ttl_seconds=3600)
    env = {"COVONAUT_ES_REVIEWER_SECRET": SECRET}
    common = ["--store", url, "--reviewer-token", token]
    without, with_thread = [], []
    for n, (review, thread) in enumerate(reviews):
        if n % 2:
            with_thread.append(_command("approve", review, *common, "--thread", thread, env=env))
        else:
            without.append(_command("approve", review, *common, env=env))
    return {"ours_s": statistics.median(without), "raw_s": statistics.median(with_thread)}


def measure(targets: Targets, plan: Plan, backend: str, size: int, empty: str) -> dict[str, Any]:
    """Every figure of one back end at one size."""
    found: dict[str, Any] = {"size": size}
    repeats, restores = plan.repeats, min(plan.repeats.restores, size)
    target, name = "", ""
    for writers in WRITERS[backend]:
        if name:
            targets.drop(backend, name)
        target, found[f"create_{writers}"] = create(targets, plan, backend, size, writers)
        name = f"scale_{backend}_{size}_{writers}"
    log(f"{backend}, {size} threads: bytes, restore, listing, queue, inbox, worker, approve")
    with closing(open_store(store_url(target))) as store:
        found["conversation"] = _conversation(store, size)
    found["bytes"] = store_bytes(target)
    vacuumed(target)
    restored = _restores(target, backend, size, restores)
    found["restore"] = dict(zip(("ours_s", "raw_s"), restored, strict=True))
    found["threads"] = _listing(target, backend, size, empty, plan)
    found["queue"] = _queue(target, backend, repeats.commands)
    found["api_reviews"] = _api_reviews(target, found["queue"]["pending"], repeats.requests)
    found["worker"] = _worker_start(target)
    found["approve"] = _approvals(target, size, repeats.commands)
    found["peer"] = _langgraph(targets, backend, size, restores, store_url(target))
    targets.drop(backend, name)
    return found


def _langgraph(
    targets: Targets, backend: str, size: int, restores: int, ours: str
) -> dict[str, Any]:
    """LangGraph's figures for the same threads, in a process of their own; its
    restores are taken in turn with ours from the store at URL ``ours``."""
    import scale_peer

    missing = peer.langgraph_missing()
    if missing:
        return {"missing": missing}
    log(f"{backend}, {size} threads: LangGraph")
    name = f"scale_peer_{backend}_{size}"
    target = targets.fresh(backend, name)
    found = isolated(
        scale_peer.run_peer, BUDGET_S, target=target, size=size, restores=restores, ours=ours
    )
    targets.drop(backend, name)
    return found


# The report ----------------------------------------------------------------------------


def _k(small: float, large: float) -> float:
    """The growth exponent between sizes ``GROWTH`` apart: cost ~ N^k."""
    if report.missing(small) or report.missing(large) or small <= 0 or large <= 0:
        return float("nan")
    return math.log(large / small) / math.log(GROWTH)


NAN = float("nan")


@dataclass(frozen=True)
class Figure:
    """One row of the table."""

    name: str
    reference: str
    work: str
    """How the work the figure asks for grows: ``N`` (every thread) or ``1`` (one item)."""
    costs: Callable[[dict[str, Any]], tuple[float, float, float]]
    """Ours, the reference's and LangGraph's cost (seconds or bytes) in one size's results."""
    show: Callable[[float, int], str] = lambda cost, size: report.seconds(cost)


def _creating(cost: float, size: int) -> str:
    return f"{report.seconds(cost)} ({size / cost:,.0f}/s)" if cost > 0 else "-"


def _peer(found: dict[str, Any], key: str) -> float:
    return float(found["peer"].get(key, NAN))


def _creating_costs(writers: int) -> Callable[[dict[str, Any]], tuple[float, float, float]]:
    def costs(found: dict[str, Any]) -> tuple[float, float, float]:
        made = found[f"create_{writers}"]
        return made["ours_s"], made["raw_s"], _peer(found, "create_s") if writers == 1 else NAN

    return costs


def figures(backend: str) -> list[Figure]:
    """The figures of one back end."""
    creating = [
        Figure(
            f"creating N threads, {w} writer{'s' if w > 1 else ''}",
            "raw INSERT + COMMIT of the same rows, same commits and durability",
            "N",
            _creating_costs(w),
            _creating,
        )
        for w in WRITERS[backend]
    ]
    return [
        *creating,
        Figure(
            "bytes per thread",
            "the conversation's own bytes (UTF-8 text, tool names, arguments)",
            "1",
            lambda f: (
                f["bytes"] / f["size"],
                f["conversation"]["own"],
                _peer(f, "bytes") / f["size"],
            ),
            lambda cost, size: report.size(cost),
        ),
        Figure(
            "restore one thread, p50",
            "indexed SELECT of its rows + one decode of each payload",
            "1",
            lambda f: (f["restore"]["ours_s"], f["restore"]["raw_s"], _peer(f, "restore_s")),
        ),
        Figure(
            "`covonaut-es threads`",
            "SELECT of every head anchor",
            "N",
            lambda f: (f["threads"]["ours_s"], f["threads"]["raw_s"], NAN),
        ),
        Figure(
            "reviewer queue rebuilt from the log",
            "bare read of every log row",
            "N",
            lambda f: (f["queue"]["ours_s"], f["queue"]["raw_s"], NAN),
        ),
        Figure(
            "`GET /api/reviews`, its first page (100 reviews at most)",
            "-",
            "1",
            lambda f: (f["api_reviews"]["ours_s"], NAN, NAN),
        ),
        Figure(
            "worker start, no thread ready",
            "-",
            "1",
            lambda f: (f["worker"]["ours_s"], NAN, NAN),
        ),
        Figure(
            "`approve` without `--thread`",
            "`approve` with `--thread`",
            "1",
            lambda f: (f["approve"]["ours_s"], f["approve"]["raw_s"], NAN),
        ),
    ]


def _exponent(k: float) -> str:
    return "-" if report.missing(k) else f"{k:.2f}"


def table(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The Markdown table of every back end's figures at both sizes."""
    lines = []
    for backend, (small, large) in results.items():
        for figure in figures(backend):
            cells = [backend, figure.name, figure.reference, figure.work]
            for found in (small, large):
                ours, ref, langgraph = figure.costs(found)
                size = found["size"]
                cells += [
                    figure.show(ours, size),
                    figure.show(ref, size) if not report.missing(ref) else "-",
                    report.times(report.ratio(ours, ref)),
                    figure.show(langgraph, size) if not report.missing(langgraph) else "-",
                ]
            costs = figure.costs(small), figure.costs(large)
            cells += [_exponent(_k(costs[0][side], costs[1][side])) for side in (0, 1)]
            lines.append(cells)
    first = next(iter(results.values()))
    columns = ["back end", "figure", "reference", "own work"]
    for found in first:
        columns += [f"N={found['size']:,}: ours", "reference", "ours / ref", "LangGraph"]
    return report.markdown_table([*columns, "k ours", "k ref"], lines)


@dataclass(frozen=True)
class Limit:
    """A strict limit the performance issue sets on a figure, judged at each size."""

    figure: str
    limit: str
    judge: Callable[[dict[str, Any]], tuple[str, bool | None]]
    """What one size's results measure (as shown) and whether that keeps the limit
    (None: not measured)."""


def _writers_limit(backend: str, writers: int) -> Limit:
    floor = 0.8 if writers == 8 else 0.7

    def judge(found: dict[str, Any]) -> tuple[str, bool | None]:
        made = found[f"create_{writers}"]
        share = report.ratio(made["raw_s"], made["ours_s"])
        skipped = made.get("skipped", 0)
        said = f"{share:.0%}" + (f", {skipped} skipped" if "tailed" in made else "")
        return said, share >= floor and not skipped

    tailed = ", no notification id skipped" if backend == "postgresql" else ""
    return Limit(
        f"creating threads, {writers} writer{'s' if writers > 1 else ''}",
        f"at least {floor:.0%} of the raw rate{tailed}",
        judge,
    )


def _ratio_limit(
    figure: str, limit: str, most: float, of: Callable[[dict[str, Any]], tuple[float, float]]
) -> Limit:
    """A limit on ours / reference, at most ``most``."""

    def judge(found: dict[str, Any]) -> tuple[str, bool | None]:
        ours, ref = of(found)
        if report.missing(ours) or report.missing(ref):
            return "-", None
        return report.times(ours / ref), ours / ref <= most

    return Limit(figure, limit, judge)


def limits(backend: str) -> list[Limit]:
    """The issue's strict limits on one back end's figures."""
    return [
        *(_writers_limit(backend, w) for w in WRITERS[backend]),
        _ratio_limit(
            "bytes per thread",
            "at most 2x the conversation's own bytes",
            2.0,
            lambda f: (f["bytes"] / f["size"], f["conversation"]["own"]),
        ),
        _ratio_limit(
            "restore one thread, p50",
            "at most 1.5x an indexed SELECT of its rows + one decode of each payload",
            1.5,
            lambda f: (f["restore"]["ours_s"], f["restore"]["raw_s"]),
        ),
        _ratio_limit(
            "restore one thread, p50, taken in turn with LangGraph's `get_state`",
            "faster than LangGraph's `get_state` (ours / LangGraph's under 1x)",
            1.0 - 1e-9,
            lambda f: (_peer(f, "ours_restore_s"), _peer(f, "restore_s")),
        ),
        _ratio_limit(
            "reviewer queue rebuilt from the log",
            "at least half the raw rate of reading the log (ours / raw at most 2x)",
            2.0,
            lambda f: (f["queue"]["ours_s"], f["queue"]["raw_s"]),
        ),
    ]


def judged(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The Markdown table of the strict limits at both sizes, judged at the larger: the
    issue sets them at 10,000 to 50,000 threads, where costs that do not grow with the
    threads (a process's start, a store's open) weigh least."""
    lines = []
    for backend, sizes in results.items():
        for limit in limits(backend):
            verdicts = [limit.judge(found) for found in sizes]
            met = verdicts[-1][1]
            status = "not measured" if met is None else "met" if met else "MISSED"
            lines.append([backend, limit.figure, limit.limit, *(s for s, _ in verdicts), status])
    first = next(iter(results.values()))
    sizes = [f"N={found['size']:,}" for found in first]
    return report.markdown_table(["back end", "figure", "strict limit", *sizes, "status"], lines)


def notes(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What the table's cells leave out: shares of raw, softer figures, counts."""
    out = []
    for backend, sizes in results.items():
        for found in sizes:
            n = found["size"]
            said = [f"{backend}, N={n:,}: creating threads,"]
            for w in WRITERS[backend]:
                made = found[f"create_{w}"]
                skipped = (
                    f", {made['skipped']} of {made['tailed']:,} notification ids skipped"
                    if "tailed" in made
                    else ""
                )
                share = report.ratio(made["raw_s"], made["ours_s"])
                said.append(f"{w} writer(s) {share:.0%} of the raw rate{skipped};")
            alone = found["create_1"]
            # A store whose writes cost no more than the raw rows would still add the
            # agent's own work: its share of the raw rate is bounded by this.
            bound = report.ratio(alone["raw_s"], alone["raw_s"] + alone["memory_s"])
            said.append(
                f"the same threads from 1 writer on an in-memory store (the agent's work and "
                f"the encoding, no database): {report.seconds(alone['memory_s'])}, "
                f"{report.ratio(alone['raw_s'], alone['memory_s']):.0%} of the raw rate before "
                f"any row is written, so a store that wrote as cheaply as the raw rows would "
                f"reach at most {bound:.0%} of the raw rate with 1 writer;"
            )
            said.append(f"{alone['commits_per_thread']:.2f} saves of events per thread;")
            talk, per_thread = found["conversation"], found["bytes"] / n
            said.append(
                f"bytes per thread {report.times(per_thread / talk['own'])} the conversation's, "
                f"{report.times(per_thread / talk['zstd'])} its zstd "
                f"({report.size(talk['zstd'])} a thread: the limit), "
                f"{report.times(per_thread / talk['json'])} the messages' JSON "
                f"({report.size(talk['json'])}: the softer figure);"
            )
            ours_s, peer_s = _peer(found, "ours_restore_s"), _peer(found, "restore_s")
            if not math.isnan(ours_s):
                said.append(
                    f"restore taken in turn with LangGraph's `get_state` of the same "
                    f"thread: ours {report.seconds(ours_s)}, LangGraph's "
                    f"{report.seconds(peer_s)} ({report.times(peer_s / ours_s)} ours);"
                )
            queue = found["queue"]
            said.append(
                f"queue {queue['rows'] / queue['ours_s']:,.0f} log rows/s against "
                f"{queue['rows'] / queue['raw_s']:,.0f} read raw "
                f"({queue['rows']:,} rows, {queue['pending']:,} pending), and "
                f"{report.seconds(queue.get('stop_s', NAN))} to stop following;"
            )
            api = found["api_reviews"]
            said.append(
                f"`GET /api/reviews` answers {report.size(api['bytes'])}, and lists every "
                f"pending review {report.seconds(api['ready_s'])} after `create_app`;"
            )
            said.append(
                "`covonaut-es threads` on an empty store (its start-up) "
                f"{report.seconds(found['threads']['startup_s'])};"
            )
            worker = found["worker"]
            said.append(
                f"the first worker's start (making the table of outstanding threads) "
                f"{report.seconds(worker['first_s'])}; the worker's run kept "
                f"{report.size(worker['kept_bytes'])}."
            )
            langgraph = found["peer"]
            if "missing" in langgraph or "error" in langgraph or "timed_out" in langgraph:
                reason = langgraph.get("missing") or langgraph.get("error") or "over the budget"
                said.append(f"LangGraph not measured: {reason.strip().splitlines()[-1]}.")
            out.append(" ".join(said))
    return out


def render(
    results: dict[str, list[dict[str, Any]]], command: str, elapsed: float, missing: str
) -> str:
    """SCALE.md: the command, the table, its notes and the machine."""
    out = [
        "## Many threads (`make bench-scale`, run separately)",
        "",
        report.intro(__doc__),
        "",
        f"Measured on {time.strftime('%Y-%m-%d %H:%M %Z')} in {elapsed:.0f} s:",
        "",
        "```sh",
        command,
        "```",
        "",
        "**each figure at two sizes, against its reference**",
        "",
        *table(results),
        "",
        "**the performance issue's strict limits, judged at the larger size** (the issue "
        "sets them at 10,000 to 50,000 threads; the smaller size shows what costs that do "
        "not grow with the threads weigh)",
        "",
        *judged(results),
        "",
        *(f"- {note}" for note in notes(results)),
    ]
    if missing:
        out.append(f"- {missing}")
    facts = {key: value for key, value in report.machine("")}
    out.append(
        "- machine: "
        + ", ".join(
            f"{key} {facts[key]}"
            for key in ("nproc", "CPU", "SQLite", "work tree commit", "covonaut_es imported from")
        )
        + f"; load average (1 min) at the end {os.getloadavg()[0]:.2f}."
    )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run every figure at ``--scale`` and ten times it; write the report and JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale",
        type=int,
        help=f"the smaller N (default {DEFAULT_SCALE}; --quick: {SMALLEST_SCALE})",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the Markdown to write")
    parser.add_argument("--json", type=Path, help="the JSON to write (default: beside it)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"for the test suite: N={SMALLEST_SCALE} by default, each measurement taken "
        "once (restores 3 times), and one set of writer processes for every race",
    )
    args = parser.parse_args(argv)
    scale = args.scale or (SMALLEST_SCALE if args.quick else DEFAULT_SCALE)
    if scale < SMALLEST_SCALE:
        parser.error(f"--scale must be at least {SMALLEST_SCALE}")
    started = time.perf_counter()
    postgres = "skipped (--no-postgres)" if args.no_postgres else Postgres.start(durable=True)
    server = postgres if isinstance(postgres, Postgres) else None
    missing = "" if server else f"PostgreSQL not measured: {postgres}."
    workdir = Path(tempfile.mkdtemp(prefix="covonaut-scale-"))
    targets = Targets(workdir, server)
    backends = ("sqlite", "postgresql") if server else ("sqlite",)
    counts = tuple(sorted({w for backend in backends for w in WRITERS[backend]}))
    plan = Plan(QUICK, Writers(counts), {}) if args.quick else Plan(FULL)
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for backend in backends:
            empty = targets.fresh(backend, f"scale_{backend}_empty")
            with closing(open_store(store_url(empty))) as store:
                store.exists("create the tables")
            results[backend] = [
                measure(targets, plan, backend, size, store_url(empty))
                for size in (scale, GROWTH * scale)
            ]
        settings = server.settings() if server else ""
    finally:
        if plan.shared is not None:
            plan.shared.close()
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - started
    command = command_line()
    text = render(results, command, elapsed, missing)
    if settings:
        text += f"- PostgreSQL: {settings}.\n"
    args.output.write_text(text)
    (args.json or args.output.with_suffix(".json")).write_text(
        json.dumps({"command": command, "postgresql": settings, "results": results}, indent=1)
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
