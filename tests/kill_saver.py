"""A writer for the kill-mid-save test: saves large batches to threads until killed."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from covonaut_es import open_store
from covonaut_es.domain import AgentThread, RunMode
from covonaut_es.messages import Message, Role


def main(url: str, key: str, name: str) -> None:
    """Save batches of 40 messages to two threads in turn, a snapshot when one is due,
    and fork now and then; print a line after each save."""
    now = datetime.now(UTC)
    with open_store(url, chain_key=key) as store:
        for round_ in range(10_000):
            thread_id = f"{name}-{round_ % 2}"
            if store.exists(thread_id):
                thread = store.load(thread_id)
            else:
                thread = AgentThread.start(thread_id, now=now)
                thread.start_run(RunMode.RUN, now=now, given=Message(Role.USER, "begin"))
            for i in range(40):
                thread.append_message(Message(role="user", content=f"{round_} {i}" * 20), now=now)
            store.save(thread)
            store.snapshot_if_due(thread)
            if round_ % 5 == 4:
                store.fork(thread_id, new_thread_id=f"{name}-fork-{round_}")
            print(f"saved {round_}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
