"""A run's end on a PostgreSQL store whose server ends the store's sessions as the run's
last commit lands: the snapshot due at the run's end (ADR 0085) is a cache, so the run
returns its answer with every event stored, whether the snapshot is stored or not."""

from __future__ import annotations

import logging

import psycopg
import pytest

from covonaut_es import open_store
from covonaut_es.domain import AgentThread
from support import agent_on, echo_script


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
