"""Figure 5: replay speed, the events per second an audit decodes from the store.

Ours is ``store.history(thread_id)``: every event of the longest thread of figure 1,
read and decoded into its typed event class. The limit reads the same rows with a bare
``SELECT`` and decodes each payload with ``msgspec.json.Decoder()`` (figure 8 shows the
decode alone).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import closing
from typing import TYPE_CHECKING, Any

import msgspec
import workload
from harness import BUDGET_S, Context, cli, isolated, log
from report import Section, Table, intro, rate, ratio, times

from covonaut_es import open_store

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
    with closing(workload.Reader(target)) as reader:
        select_s = _best(lambda: [decoder.decode(row[3]) for row in reader.rows()])
        payloads = [row[3] for row in reader.rows()]
    decode_s = _best(lambda: [decoder.decode(state) for state in payloads])
    progress.update(
        events=events,
        payload_bytes=sum(map(len, payloads)),
        history_s=history_s,
        select_decode_s=select_s,
        decode_s=decode_s,
    )


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
    return [section]


if __name__ == "__main__":
    raise SystemExit(cli([run]))
