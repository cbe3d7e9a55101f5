"""Figure 5: replay speed, the events per second an audit decodes from the store.

Ours is ``store.history(thread_id)``: every event of the longest thread of figure 1,
read and decoded into its typed event class. The limit reads the same rows with a bare
``SELECT``, decompresses each payload (a zstd frame with the shipped dictionary, as a new
store writes them, ADR 0061) and decodes it with ``msgspec.json.Decoder()`` (figure 8
shows the decode alone, of the payloads decompressed beforehand).

Verify: ``store.verify(thread_id)`` (the audit's full pass over a thread's hash chain and
head anchor) on the thread of every T of figure 1, best of 3; it must grow linearly
with the thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import closing
from typing import TYPE_CHECKING, Any

import msgspec
import workload
from harness import BUDGET_S, Context, cli, isolated, log
from report import Section, Table, Target, intro, rate, ratio, seconds, status, times

from covonaut_es import open_store
from covonaut_es.store._dictionary import ZstdDictionaryCompressor

if TYPE_CHECKING:
    from harness import Progress

REPEATS = 3


def _best(action: Callable[[], Any]) -> float:
    """The fastest of a few runs of ``action`` (a decode has no reason to be slower
    than its fastest run but noise)."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def run_replay(progress: Progress, target: str) -> None:
    """Time ``store.history``, a bare select plus decode, and the decode alone."""
    with closing(open_store(workload.store_url(target))) as store:
        events = len(store.history(workload.THREAD_ID))
        history_s = _best(lambda: store.history(workload.THREAD_ID))
    decoder = msgspec.json.Decoder()
    decompress = ZstdDictionaryCompressor().decompress
    with closing(workload.Reader(target)) as reader:
        select_s = _best(lambda: [decoder.decode(decompress(row[3])) for row in reader.rows()])
        payloads = [decompress(row[3]) for row in reader.rows()]
    decode_s = _best(lambda: [decoder.decode(state) for state in payloads])
    progress.update(
        events=events,
        payload_bytes=sum(map(len, payloads)),
        history_s=history_s,
        select_decode_s=select_s,
        decode_s=decode_s,
    )


def run_verify(progress: Progress, target: str) -> None:
    """Time ``store.verify`` of the workload's thread."""
    with closing(open_store(workload.store_url(target))) as store:
        report = store.verify(workload.THREAD_ID)
        progress.update(events=report.events, ok=report.ok)
        progress.update(verify_s=_best(lambda: store.verify(workload.THREAD_ID)))


def verify_times(ctx: Context, backend: str) -> dict[int, dict[str, Any]]:
    """``run_verify`` on each T's thread of figure 1."""
    found = {}
    for turns in ctx.turns:
        log(f"verify {backend} T={turns}")
        source = ctx.ours(backend, turns)[0]
        found[turns] = isolated(run_verify, BUDGET_S, target=source["target"])
    return found


def measure(ctx: Context, backend: str) -> dict[str, Any]:
    """Replay timings of our longest thread on ``backend`` (memoized)."""

    def compute() -> dict[str, Any]:
        turns = max(ctx.turns)
        source = ctx.ours(backend, turns)[0]
        log(f"replay {backend} T={turns}")
        return isolated(run_replay, BUDGET_S, target=source["target"]) | {"turns": turns}

    result: dict[str, Any] = ctx.memo(("replay", backend), compute)
    return result


def run(ctx: Context) -> list[Section]:
    """Figure 5."""
    section = Section("5. Replay speed", intro(__doc__))
    table = Table(
        "events decoded per second",
        ["store", "T", "events", "ours: store.history", "limit: SELECT + msgspec", "limit / ours"],
    )
    for backend in ctx.backends:
        result = measure(ctx, backend)
        events = result.get("events", 0)
        ours = ratio(events, result.get("history_s"))
        limit = ratio(events, result.get("select_decode_s"))
        table.rows.append(
            [
                backend,
                str(result["turns"]),
                str(events),
                rate(ours),
                rate(limit),
                times(ratio(limit, ours)),
            ]
        )
        if "error" in result:
            table.notes.append(f"{backend}: failed: `{result['error'].splitlines()[-1]}`")
    table.notes.append("Each figure is the best of 3 runs in one process; no target is set for it.")
    section.tables.append(table)
    section.tables.append(verify_table(ctx, section))
    return [section]


def verify_table(ctx: Context, section: Section) -> Table:
    """The verify times by T, and the target that they grow linearly."""
    table = Table("verify a thread", ["store", "T", "events", "verify", "per event", "intact"])
    sqlite: dict[int, float] = {}
    for backend in ctx.backends:
        for turns, found in verify_times(ctx, backend).items():
            if "verify_s" not in found:
                reason = found.get("error", "over the budget").splitlines()[-1]
                table.notes.append(f"{backend}, T={turns}: failed: `{reason}`")
                continue
            if backend == "sqlite":
                sqlite[turns] = found["verify_s"]
            table.rows.append(
                [
                    backend,
                    str(turns),
                    str(found["events"]),
                    seconds(found["verify_s"]),
                    seconds(found["verify_s"] / found["events"]),
                    "yes" if found["ok"] else "NO",
                ]
            )
    low, high = min(ctx.turns), max(ctx.turns)
    k = (
        math.log(sqlite[high] / sqlite[low]) / math.log(high / low)
        if high > low and low in sqlite and high in sqlite
        else float("nan")
    )
    section.targets.append(
        Target(
            f"verify linear in T (SQLite; time ~ T^k with k <= 1.1 between T={low} and T={high})",
            "-" if math.isnan(k) else f"k = {k:.2f}",
            status(None if math.isnan(k) else k <= 1.1),
        )
    )
    return table


if __name__ == "__main__":
    raise SystemExit(cli([run]))
