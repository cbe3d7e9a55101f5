"""A PostgreSQL store whose server ends the store's sessions (a failover, an
administrator). As a run's last commit lands: the snapshot due at the run's end (ADR
0085) is a cache, so the run returns its answer with every event stored, whether the
snapshot is stored or not. Before any other statement: it runs again on a new session,
or the command raises a CovonautError (ADR 0103)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import open_store
from covonaut_es.domain import AgentThread
from covonaut_es.errors import StoreUnavailableError
from support import WriteFaults, agent_on, answer, echo_script, postgres_database_of


def test_a_run_whose_sessions_end_as_it_ends_returns_its_answer_stored(
    postgres_url: str, postgres_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends every session of the store's database (the pool's and the run
    lease's) once the run's last commit is stored: the run still returns its answer,
    the thread loads as the run left it, and the fold agrees."""
    name = postgres_database.rsplit("/", 1)[1]
    ended: list[int] = []

    def end_sessions(event: AgentThread.Event) -> None:
        if isinstance(event, AgentThread.RunFinished):  # committed: the run is stored
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                (count,) = admin.execute(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM "
                    "pg_stat_activity WHERE datname = %s) AS ended",
                    (name,),
                ).fetchone() or (0,)
                ended.append(count)

    with open_store(postgres_database) as store:
        agent = agent_on(store, "t", echo_script(48), on_event=end_sessions)
        with caplog.at_level(logging.WARNING):
            assert agent.run("go") == "done"
        assert ended and ended[0] >= 2  # the pool's sessions, and the lease's
        stored = store.load("t")
        assert stored.version == agent.state.version
        assert stored.state == agent.state == store.replay_state("t")
        assert store.verify("t").ok


class EndingSessions:
    """While armed, ends the session of the ``k``-th statement the store's connections
    run just before it runs (``pg_terminate_backend``: a failover, an administrator),
    and of each one after it until ``times`` sessions were ended; ``only`` narrows the
    statements counted."""

    def __init__(
        self,
        url: str,
        monkeypatch: pytest.MonkeyPatch,
        *,
        only: Callable[[str], bool] = bool,
        times: int = 1,
    ) -> None:
        self.admin = psycopg.connect(url, autocommit=True)
        self.k, self.seen, self.ended = 0, 0, 0
        execute = psycopg.Cursor.execute

        def ending(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if self.k and cursor.connection is not self.admin and only(str(query)):
                self.seen += 1
                if self.seen >= self.k and self.ended < times:
                    self.ended += 1
                    pid = cursor.connection.info.backend_pid
                    execute(self.admin.cursor(), "SELECT pg_terminate_backend(%s)", (pid,))
            return execute(cursor, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", ending)

    def arm(self, k: int) -> None:
        self.k, self.seen, self.ended = k, 0, 0

    def disarm(self) -> None:
        self.k = 0

    def close(self) -> None:
        self.admin.close()


@pytest.mark.postgres
@pytest.mark.parametrize("times", [1, 100])
def test_a_decision_whose_review_index_sessions_end_is_decided_or_typed(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch, times: int
) -> None:
    """The server ends the session a review index's statement is about to run on: the
    statement runs again on another, as the store's own statements do, and the
    decision is made; when every session ends, the decision raises
    StoreUnavailableError naming the table, and is made once the database answers.
    eventsourcing's OperationalError escaped before (found by helper-117)."""
    faults = WriteFaults(postgres_database)
    ending = EndingSessions(
        postgres_database, monkeypatch, only=lambda query: "_reviews" in query, times=times
    )
    ending.arm(1)
    try:
        if times == 1:
            faults.command("decide")()
        else:
            with pytest.raises(StoreUnavailableError, match="_reviews"):
                faults.command("decide")()
            ending.disarm()
            faults.command("decide")()
        assert ending.ended == min(times, 10)  # the retries of the store's statements
        assert not faults.store.load("t").reviews.pending
    finally:
        ending.close()
        faults.store.close()


@pytest.mark.postgres
def test_a_lease_session_that_ends_as_it_is_set_up_raises_store_unavailable(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run lease's new session ends between its connect and its keepalive
    settings: the run raises StoreUnavailableError, not psycopg's AdminShutdown, the
    half-made connection is closed, and a run started again completes (found by
    helper-117)."""
    with open_store(postgres_database) as store:
        ending = EndingSessions(
            postgres_database, monkeypatch, only=lambda query: query.startswith("SET tcp")
        )
        opened: list[psycopg.Connection[Any]] = []
        connect = psycopg.connect
        monkeypatch.setattr(
            psycopg, "connect", lambda *a, **kw: opened.append(connect(*a, **kw)) or opened[-1]
        )
        ending.arm(1)
        with pytest.raises(StoreUnavailableError, match="run leases"):
            agent_on(store, "t", [answer("hi")]).run("go")
        ending.disarm()
        assert ending.ended == 1 and opened[-1].closed
        assert agent_on(store, "t", [answer("hi")]).run("go") == "hi"
        ending.close()


@pytest.mark.postgres
def test_a_lease_query_that_fails_on_the_new_session_too_raises_store_unavailable(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease's session ends before a query, and the new session that runs it
    again ends too: the run raises StoreUnavailableError, not psycopg's error."""
    with open_store(postgres_database) as store:
        assert agent_on(store, "t", [answer("hi")]).run("go") == "hi"  # connected
        ending = EndingSessions(
            postgres_database,
            monkeypatch,
            only=lambda query: "advisory" in query or "covonaut_workers" in query,
            times=2,
        )
        ending.arm(1)
        with pytest.raises(StoreUnavailableError, match="run leases"):
            agent_on(store, "t", [answer("hi")]).run("go")
        ending.disarm()
        assert agent_on(store, "t", [answer("hi")]).run("go") == "hi"
        ending.close()


@pytest.mark.postgres
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.sampled_from(["save", "decide", "fork", "run", "queue"]), k=st.integers(1, 40))
@example(name="queue", k=32)  # the queue's subscription ended: its runner raised untyped
def test_a_session_ended_before_any_statement_leaves_a_typed_outcome(
    postgres_url: str, name: str, k: int
) -> None:
    """Whichever statement of a command the server ends the session of (the ``k``-th:
    the log's, a side table's, the run lease's, the queue view's), the command succeeds
    or raises a CovonautError; what was stored stays stored, and the command run again
    completes."""
    with postgres_database_of(postgres_url) as url, pytest.MonkeyPatch.context() as monkeypatch:
        faults = WriteFaults(url)
        ending = EndingSessions(url, monkeypatch)
        try:
            faults.survive_a_fault(name, lambda: ending.arm(k), ending.disarm)
        finally:
            ending.close()
            faults.store.close()
