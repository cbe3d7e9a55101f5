"""Bytes on disk and persistence time per turn under each compression a store may
record (ADR 0061): one thread of T turns, and N short threads, on SQLite.

    PYTHONPATH=src:tests python benchmarks/compression.py [--turns 1000] [--threads 2000]

One thread: the workload of figure 1 (`workload.run_ours`'s model and prose), the file
after a WAL checkpoint against the conversation's own bytes (`workload.conversation_text`),
and the time its saves and snapshots took per turn (`workload.PersistenceTimer`); then
the CPU time of compressing and of decompressing every stored payload of the run, alone,
per turn (the median of 5 passes). Short threads: the threads of `scale.py`, written by
one process, the file divided by N against the conversation per thread. Each compression
runs on a fresh file, one after the other, in one process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import zlib
from contextlib import closing
from pathlib import Path

import msgspec
import scale
import workload

from covonaut_es import Agent, open_store
from covonaut_es.store import Compression
from covonaut_es.store._dictionary import ZstdDictionaryCompressor

COMPRESSIONS: tuple[Compression, ...] = ("none", "zlib", "zstd")
PASSES = 5


def one_thread(directory: Path, compress: Compression, turns: int) -> dict[str, float]:
    """One thread of ``turns`` turns; bytes, and persistence time per turn."""
    target = str(directory / f"one-{compress}.db")
    with closing(open_store("memory://", compress=compress)) as warm:
        Agent(workload.agent_config(warm, workload.Model(workload.WARMUP_TURNS))).run("warm")
    workload.prepare(turns)
    with closing(open_store(workload.store_url(target), compress=compress)) as store:
        timer = workload.PersistenceTimer(store)
        Agent(workload.agent_config(store, workload.Model(turns))).run(workload.PROMPT)
        messages = store.load(workload.THREAD_ID).state.messages
        stored = [r.state for r in store._app.recorder.select_notifications(None, 10**6)]
        plain = [
            store._app.mapper.plain_payload(r)
            for r in store._app.recorder.select_notifications(None, 10**6)  # type: ignore[attr-defined]
        ]
    found = {
        "bytes": workload.store_bytes(target),
        "conversation": len(workload.conversation_text(messages)),
        "persistence_per_turn_s": timer.seconds / turns,
        "payloads": len(stored),
    }
    if compress != "none":
        compressor = ZstdDictionaryCompressor() if compress == "zstd" else None
        encode = compressor.compress if compressor else zlib.compress
        decode = compressor.decompress if compressor else zlib.decompress
        found["compress_per_turn_s"] = _cpu(lambda: [encode(p) for p in plain]) / turns
        found["decompress_per_turn_s"] = _cpu(lambda: [decode(s) for s in stored]) / turns
    return found


def short_threads(directory: Path, compress: Compression, count: int) -> dict[str, float]:
    """``count`` threads of ``scale.py``, written one after another; bytes per thread."""
    target = str(directory / f"short-{compress}.db")
    indexes = list(range(count))
    with closing(open_store(workload.store_url(target), compress=compress)) as store:
        agents = [Agent(scale.config(store, index)) for index in indexes]
        scale.prepare(indexes)
        for agent in agents:
            agent.run(scale.PROMPT)
        conversation = sum(
            len(workload.conversation_text(store.load(scale.thread_id(i)).state.messages))
            for i in indexes
        )
    return {"bytes": workload.store_bytes(target) / count, "conversation": conversation / count}


def _cpu(action: object) -> float:
    times = []
    for _ in range(PASSES):
        start = time.process_time()
        action()  # type: ignore[operator]
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="covonaut-compression-") as name:
        directory = Path(name)
        for compress in COMPRESSIONS:
            one = one_thread(directory, compress, args.turns)
            short = short_threads(directory, compress, args.threads)
            print(
                msgspec.json.encode(
                    {
                        "compress": compress,
                        "turns": args.turns,
                        "one_thread": one,
                        "threads": args.threads,
                        "short_threads": short,
                        "one_ratio": one["bytes"] / one["conversation"],
                        "short_ratio": short["bytes"] / short["conversation"],
                    }
                ).decode(),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
