"""A process that holds a thread's run lease on a SQLite file, for the tests of SQLite
file identity in ``test_leases_fenced.py``.

Usage: ``python lease_holder.py DATABASE THREAD``

Opens the store at DATABASE (any name of the file: a symbolic link) and takes
the thread's lease. Prints ``held TOKEN`` and holds the lease until a line arrives on
standard input, then releases it and prints ``released``; or prints ``busy HOLDER`` and
exits when another runner holds it.
"""

from __future__ import annotations

import sys

from covonaut_es import ThreadBusyError, open_store


def main() -> None:
    database, thread_id = sys.argv[1:]
    with open_store(f"sqlite:///{database}") as store:
        try:
            with store.lease(thread_id) as lease:
                print("held", lease.token, flush=True)
                sys.stdin.readline()
        except ThreadBusyError as exc:
            print("busy", exc.holder, flush=True)
            return
    print("released", flush=True)


if __name__ == "__main__":
    main()
