"""Run leases taken, given back, lost and checked at random by two stores of one
database: a generated state machine, on SQLite and PostgreSQL. A lease is taken and its
token recorded together (on PostgreSQL in one statement), so: a take succeeds exactly
when no other live lease holds the thread, its token is one more than the thread's last,
a refused take records no token, and a check passes exactly while the lease's lock
stands and no newer lease of the thread exists."""

from __future__ import annotations

import sqlite3
import tempfile
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from covonaut_es import Store, open_store
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import LeaseLostError, ReadOnlyStoreError, StoreUnavailableError
from covonaut_es.store import Lease
from covonaut_es.store._heads import lease_table
from lease_faults import APPLICATION_PREFIX, backends, lock_file, terminate
from support import sqlite_key

THREADS = ("t0", "t1")
STORES = 2
SETTINGS = settings(
    max_examples=8,
    stateful_step_count=14,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def machine(url: str) -> type[RuleBasedStateMachine]:
    """The state machine of two stores of the database at ``url``."""

    class Leases(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.workdir = tempfile.TemporaryDirectory()
            self.url = url or f"sqlite:///{Path(self.workdir.name) / 'leases.db'}"
            self.postgres = self.url.startswith("postgresql:")
            self.holders = [f"gen-{i}-{uuid.uuid4().hex[:8]}" for i in range(STORES)]
            self.stores: list[Store] = []
            for holder in self.holders:
                store = open_store(self.url)
                store.name_lease_holder(holder)
                self.stores.append(store)
            self.threads = [f"{t}-{uuid.uuid4().hex[:8]}" for t in THREADS]  # fresh per run
            self.held: dict[tuple[int, str], Lease] = {}
            self.lost: set[tuple[int, str]] = set()
            self.token = dict.fromkeys(self.threads, 0)

        def _leases(self, index: int) -> Any:
            return self.stores[index]._leasing.leases

        def _stored(self, thread_id: str) -> int:
            recorder: Any = self.stores[0]._app.recorder
            token: int | None = recorder.lease_token(thread_aggregate_id(thread_id))
            return token or 0

        @rule(index=st.integers(0, STORES - 1), pick=st.integers(0, len(THREADS) - 1))
        def take(self, index: int, pick: int) -> None:
            thread_id = self.threads[pick]
            refused = (index, thread_id) in self.held or any(
                key[1] == thread_id and key not in self.lost for key in self.held
            )
            lease = self._leases(index).try_acquire(thread_id)
            if refused:
                assert lease is None
                assert self._stored(thread_id) == self.token[thread_id]
                return
            assert lease is not None
            assert lease.token == self.token[thread_id] + 1
            self.token[thread_id] = lease.token
            self.held[index, thread_id] = lease

        @precondition(lambda self: self.held)
        @rule(data=st.data())
        def release(self, data: st.DataObject) -> None:
            key = data.draw(st.sampled_from(sorted(self.held)))
            self._leases(key[0]).release(self.held.pop(key))
            self.lost.discard(key)

        @precondition(lambda self: self.held)
        @rule(data=st.data())
        def lose(self, data: st.DataObject) -> None:
            """PostgreSQL: the lease session of the store is ended (every lease on it is
            lost); SQLite: the thread's lock file is removed (every lease of the thread
            taken by it is lost)."""
            index, thread_id = data.draw(st.sampled_from(sorted(self.held)))
            if self.postgres:
                terminate(self.url, backends(self.url, APPLICATION_PREFIX + self.holders[index]))
                self.lost.update(key for key in self.held if key[0] == index)
            else:
                path = lock_file(Path(self.url.removeprefix("sqlite:///")), thread_id)
                path.unlink(missing_ok=True)
                # The thread's one lock file: whoever holds it now loses it, which is
                # another holder when the drawn lease was lost before.
                self.lost.update(key for key in self.held if key[1] == thread_id)

        @rule(pick=st.integers(0, len(THREADS) - 1))
        def lease_elsewhere(self, pick: int) -> None:
            """A newer lease of the thread is recorded through another lock (a hard link
            of the SQLite file in another directory, an old runner): the leases held here
            are stale, their locks still standing."""
            thread_id = self.threads[pick]
            stream = thread_aggregate_id(thread_id)
            table = lease_table(self.stores[0]._app.recorder)
            advance = (
                f"INSERT INTO {table} AS l (originator_id, token) VALUES ({{}}, 1) "
                "ON CONFLICT (originator_id) DO UPDATE SET token = l.token + 1"
            )
            if self.postgres:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(advance.format("%s"), (stream,))
            else:
                with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as conn:
                    conn.execute(advance.format("?"), (sqlite_key(stream),))
                    conn.commit()
            self.token[thread_id] += 1

        @precondition(lambda self: self.held)
        @rule(data=st.data())
        def check(self, data: st.DataObject) -> None:
            key = data.draw(st.sampled_from(sorted(self.held)))
            lease = self.held[key]
            stands = key not in self.lost and lease.token == self.token[key[1]]
            if stands:
                lease.check()
            else:
                with pytest.raises(LeaseLostError):
                    lease.check()

        @invariant()
        def tokens_are_the_newest_leases(self) -> None:
            for thread_id in self.threads:
                assert self._stored(thread_id) == self.token[thread_id]

        def teardown(self) -> None:
            for store in self.stores:
                store.close()
            self.workdir.cleanup()

    return Leases


def test_leases_on_sqlite() -> None:
    run_state_machine_as_test(machine(""), settings=SETTINGS)


@pytest.mark.postgres
def test_leases_on_postgres(postgres_database: str) -> None:
    run_state_machine_as_test(machine(postgres_database), settings=SETTINGS)


@pytest.mark.postgres
def test_a_role_that_may_not_write_the_lease_table_gets_no_lease_and_leaves_no_lock(
    postgres_database: str,
) -> None:
    """A role that may read and write the store but not its lease table is refused the
    lease with a typed error, and the thread's lock is not left held by its session."""
    role = f"runner_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
    parts = urlsplit(postgres_database)
    url = parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}").geturl()
    try:
        open_store(url).close()  # the role's own tables
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute(f"REVOKE INSERT, UPDATE ON covonaut_events_leases FROM {role}")
        with open_store(url) as store:
            with pytest.raises(ReadOnlyStoreError, match=r"privilege.*covonaut_events_leases"):
                store._leasing.leases.try_acquire("t")
            with psycopg.connect(postgres_database, autocommit=True) as admin:
                held = admin.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database "
                    "= (SELECT oid FROM pg_database WHERE datname = current_database())"
                ).fetchone()
            assert held == (0,)
    finally:
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


@pytest.mark.postgres
def test_a_take_whose_token_cannot_be_recorded_leaves_no_lock(postgres_database: str) -> None:
    """The token's insert fails after the session took the thread's lock (a trigger of
    the database refuses it): the error is raised, typed (it was psycopg's own), the
    lock is let go, and another store
    takes the thread once the insert may go through."""
    open_store(postgres_database).close()
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$"
        )
        admin.execute(
            "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON covonaut_events_leases "
            "FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    with open_store(postgres_database) as first, open_store(postgres_database) as second:
        with pytest.raises(StoreUnavailableError, match="refused by a trigger"):
            first._leasing.leases.try_acquire("t")
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute("DROP TRIGGER refuse ON covonaut_events_leases")
        lease = second._leasing.leases.try_acquire("t")
        assert lease is not None and lease.token == 1
        second._leasing.leases.release(lease)
