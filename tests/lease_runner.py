"""A process that takes and releases run leases of a SQLite store on command, for the
generated lease test in ``test_leases_generated.py``.

Usage: ``python lease_runner.py DATABASE``

Reads one command a line: ``take THREAD`` prints ``held TOKEN`` (and keeps the lease)
or ``busy``; ``give THREAD`` leaves the innermost block holding it and prints
``released`` (a lease is re-entrant: one taken again is let go with its outermost
block). Prints ``ready``
once the store is open; a kill -9 drops every lease it holds.
"""

from __future__ import annotations

import contextlib
import sys

from covonaut_es import ThreadBusyError, open_store


def main() -> None:
    (database,) = sys.argv[1:]
    with open_store(f"sqlite:///{database}") as store, contextlib.ExitStack() as stack:
        held: dict[str, list[contextlib.ExitStack]] = {}
        print("ready", flush=True)
        for line in sys.stdin:
            command, thread_id = line.split()
            if command == "take":
                lease_stack = contextlib.ExitStack()
                try:
                    lease = lease_stack.enter_context(store.lease(thread_id))
                except ThreadBusyError:
                    print("busy", flush=True)
                    continue
                held.setdefault(thread_id, []).append(stack.enter_context(lease_stack))
                print("held", lease.token, flush=True)
            else:
                held[thread_id].pop().close()
                print("released", flush=True)


if __name__ == "__main__":
    main()
