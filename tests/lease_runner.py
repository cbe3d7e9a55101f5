"""A process that takes and releases run leases of a SQLite store on command, for the
generated lease test in ``test_leases_generated.py``.

``serve(DATABASE, CONNECTION)`` is the process's whole work: the test starts it from a
fork server that imported the library once (a process a kill, not a Python start-up,
for each runner). It reads one command a message: ``("take", THREAD)`` answers
``held TOKEN`` (and keeps the lease) or ``busy``; ``("give", THREAD)`` leaves the
innermost block holding it and answers ``released`` (a lease is re-entrant: one taken
again is let go with its outermost block). It answers ``ready`` once the store is open;
a kill -9 drops every lease it holds.
"""

from __future__ import annotations

import contextlib
from multiprocessing.connection import Connection

from covonaut_es import ThreadBusyError, open_store


def serve(database: str, connection: Connection) -> None:
    with open_store(f"sqlite:///{database}") as store, contextlib.ExitStack() as stack:
        held: dict[str, list[contextlib.ExitStack]] = {}
        connection.send("ready")
        while True:
            try:
                command, thread_id = connection.recv()
            except EOFError:  # the test let go of its end
                return
            if command == "take":
                lease_stack = contextlib.ExitStack()
                try:
                    lease = lease_stack.enter_context(store.lease(thread_id))
                except ThreadBusyError:
                    connection.send("busy")
                    continue
                held.setdefault(thread_id, []).append(stack.enter_context(lease_stack))
                connection.send(f"held {lease.token}")
            else:
                held[thread_id].pop().close()
                connection.send("released")
