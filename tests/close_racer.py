"""Threads race the close of a SQLite store: run as a script, it exits 0 unless closing
crashed the process (Python's sqlite3 crashes when a connection is closed under a
statement another thread steps), a thread saw the store closed under it other than as
closed, or a connection to the file was left open once closing returned.

    python close_racer.py PATH ROUNDS store|queue [READERS [DELAY_MS]]

``store``: threads load a thread and read the whole log, and one saves, while the store
is closed. ``queue``: a review queue kept in a SQLite file is closed while its runner
writes it (the queue is left as the inbox's lifespan left it: closed first, then its
``follow``). PATH is seeded (:func:`seed`) unless it exists.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from eventsourcing.persistence import ConnectionPoolClosedError

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ReviewQueue,
    ScriptedProvider,
    open_store,
)
from covonaut_es.domain import AgentThread
from covonaut_es.messages import Message, Role
from support import answer, call, review_tool

NOW = datetime(2026, 12, 1, tzinfo=UTC)
THREADS, MESSAGES = 20, 60


def seed(url: str) -> None:
    """A store whose log takes a while to read, with a review pending in each thread."""
    with open_store(url) as store:
        for t in range(THREADS):
            thread = AgentThread.start(f"long{t}", now=NOW)
            for m in range(MESSAGES):
                thread.append_message(Message(Role.USER, f"message {m} " * 20), now=NOW)
            store.save(thread)
            config = AgentConfig(
                provider=ScriptedProvider([call((f"c{t}", "review", "{}")), answer("done")]),
                tools=[review_tool()],
                checkpoint=CheckpointSettings(store=store, thread_id=f"paused{t}"),
            )
            Agent(config).run("go")


def open_connections(path: Path) -> int:
    """How many of this process's file descriptors are open on the database's files."""
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}") in names
        except FileNotFoundError:  # the listing's own descriptor, closed meanwhile
            continue
    return found


def until_closed(work: Callable[[], object], failures: list[BaseException]) -> None:
    """Do ``work`` again and again until the store says it is closed."""
    try:
        while True:
            work()
    except ConnectionPoolClosedError:
        return
    except BaseException as exc:  # the store closed under it, other than as closed
        failures.append(exc)


def race_store(path: Path, readers: int, delay: float) -> list[str]:
    failures: list[BaseException] = []
    store = open_store(f"sqlite:///{path}")
    saved = store.load("long1")

    def read() -> None:
        store._app.recorder.select_notifications(start=1, limit=10_000)
        store.load("long0")

    def save() -> None:
        saved.append_message(Message(Role.USER, "one more"), now=NOW)
        store.save(saved)

    works = [read] * readers + [save]
    threads = [threading.Thread(target=until_closed, args=(w, failures)) for w in works]
    for thread in threads:
        thread.start()
    time.sleep(delay)
    store.close()
    left_open = open_connections(path)
    for thread in threads:
        thread.join()
    problems = [f"a thread saw the store closed under it: {f!r}" for f in failures]
    if left_open:
        problems.append(f"{left_open} descriptors on the file still open once closed")
    return problems


def race_queue(path: Path, delay: float) -> list[str]:
    view = Path(f"{path}.view")
    view.unlink(missing_ok=True)  # rebuilt from the first event: its runner writes it
    queue = ReviewQueue(f"sqlite:///{path}", view_url=f"sqlite:///{view}")
    try:
        with ExitStack() as stack:
            stack.enter_context(queue.follow())
            stack.callback(queue.close)
            time.sleep(delay)
    except ConnectionPoolClosedError:  # the runner stopped on the closed view: as closed
        pass
    return []


def main(path: Path, rounds: int, what: str, readers: int, delay: float) -> None:
    if not path.exists():
        seed(f"sqlite:///{path}")
    for _ in range(rounds):
        problems = race_store(path, readers, delay) if what == "store" else race_queue(path, delay)
        if problems:
            sys.exit("\n".join(problems))


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        Path(args[0]),
        int(args[1]),
        args[2],
        readers=int(args[3]) if len(args) > 3 else 4,
        delay=(int(args[4]) if len(args) > 4 else 20) / 1000,
    )
