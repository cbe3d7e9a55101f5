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
from covonaut_es.errors import LeaseLostError
from covonaut_es.store import Lease
from covonaut_es.store._heads import lease_table
from lease_faults import APPLICATION_PREFIX, backends, lock_file, terminate

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
            lost); SQLite: the lease's lock file is removed."""
            index, thread_id = data.draw(st.sampled_from(sorted(self.held)))
            if self.postgres:
                terminate(self.url, backends(self.url, APPLICATION_PREFIX + self.holders[index]))
                self.lost.update(key for key in self.held if key[0] == index)
            else:
                path = lock_file(Path(self.url.removeprefix("sqlite:///")), thread_id)
                path.unlink(missing_ok=True)
                self.lost.add((index, thread_id))

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
                    conn.execute(advance.format("?"), (stream.hex,))
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
