"""Time ``Store.verify`` on a long thread: one message per event, a checkpoint every
ten messages, saved in batches of 500 with snapshots as a run would take them.

Usage: ``python benchmarks/verify_long.py sqlite:///long.db 20000`` (builds the thread
on the first run, then only verifies). Prints the counts, seconds and peak RSS.
"""

import resource
import sys
import time
from datetime import UTC, datetime

from covonaut_es import AgentThread, open_store
from covonaut_es.domain import CheckpointReason, RunMode
from covonaut_es.messages import Message, Role

url, n = sys.argv[1], int(sys.argv[2])
now = datetime.now(UTC)
with open_store(url) as store:
    if not store.exists("long"):
        thread = AgentThread.start("long", now=now)
        first = Message(role=Role.USER, content="message 0 " + "x" * 200)
        thread.start_run(RunMode.RUN, now=now, given=first)  # a run starts with its input
        for batch in range(0, n, 500):  # one save per 500 messages, as long runs do
            for i in range(max(batch, 1), min(n, batch + 500)):
                text = f"message {i} " + "x" * 200
                thread.append_message(Message(role="user", content=text), now=now)
                if i % 10 == 9:
                    thread.save_checkpoint(CheckpointReason.MANUAL, retain=0, now=now)
            store.save(thread)
            store.snapshot_if_due(thread)
    start = time.perf_counter()
    report = store.verify("long")
    seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(
    f"events={report.events} checkpoints={report.checkpoints_checked} "
    f"snapshots={report.snapshots_checked} ok={report.ok} "
    f"verify={seconds:.2f}s peak_rss={peak:.0f}MiB"
)
