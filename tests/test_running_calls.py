"""A call in doubt whose tool still runs in this process (it outran its timeout) is not
settled, nor run again, on any surface, until its tool has returned."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    open_store,
)
from covonaut_es.errors import ConfigurationError, ToolCallRunningError
from covonaut_es.runtime import running_calls
from covonaut_es.service import Settlement, ThreadService
from covonaut_es.service._running import listed
from covonaut_es.store import AgentApplication
from covonaut_es.workers import Worker
from hanging_tool import OBJECT, RITA, VERIFIER, Hanging, hanging_agent, wait_for
from support import agent_on, answer, call
from test_lease_cancelled import lease_is_free

ROOT = Path(__file__).resolve().parent.parent
WORKER = (sys.executable, "-m", "covonaut_es", "worker")


def _service_settle(service: ThreadService, ran: bool) -> None:
    reviewer = service.reviewer(RITA)
    settlement = Settlement.ran_with("done") if ran else Settlement.not_run("it did not")
    service.settle("t", "h1", settlement, reviewer=reviewer)


COMMANDS: dict[str, Callable[[ThreadService, Agent], object]] = {
    "service settle ran": lambda service, agent: _service_settle(service, True),
    "service settle not run": lambda service, agent: _service_settle(service, False),
    "service retry": lambda service, agent: service.request_retry(
        "t", "h1", reviewer=service.reviewer(RITA)
    ),
    "agent settle result": lambda service, agent: agent.settle("h1", result="done"),
    "agent settle not run": lambda service, agent: agent.settle("h1", ran=False),
    "agent retry": lambda service, agent: agent.settle("h1", retry=True),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_call_still_running_past_its_timeout_is_neither_settled_nor_run_again(
    store: Store, command: str
) -> None:
    """While the tool of a call in doubt still runs in this process, settling it (ran,
    not run) or running it again is refused with ToolCallRunningError naming the call,
    and nothing is recorded; once the tool has returned, the command is recorded."""
    tool = Hanging()
    agent = hanging_agent(store, tool)
    assert agent.run("hi") == "hello"
    try:
        assert agent.run("go") == ""
        assert store.state_at("t").status is ThreadStatus.INTERRUPTED
        assert [c.tool_call_id for c in running_calls() if c.thread_id == "t"] == ["h1"]
        service = ThreadService(store, verifier=VERIFIER)
        before = store.history("t")
        with pytest.raises(ToolCallRunningError, match="'h1'") as refused:
            COMMANDS[command](service, hanging_agent(store, tool))
        assert (refused.value.thread_id, refused.value.tool_call_id) == ("t", "h1")
        assert store.history("t") == before and tool.keys == [tool.keys[0]]
    finally:
        tool.release.set()
        assert tool.returned.wait(30)
    wait_for(lambda: not [c for c in running_calls() if c.thread_id == "t"], "the tool to end")
    COMMANDS[command](ThreadService(store, verifier=VERIFIER), hanging_agent(store, tool))
    assert store.history("t") != before


@pytest.mark.slow
def test_a_call_still_running_in_another_workers_process_is_not_settled(
    shared_url: str, tmp_path: Path
) -> None:
    """A worker process runs a tool past its timeout; from this process, settling the
    call or asking for it to run again is refused with ToolCallRunningError naming the
    worker while its heartbeat lists the call, and recorded once the tool returned."""
    done = tmp_path / "done"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
        "HANG_SECONDS": "10",  # past the refusals below, on a loaded machine too
        "HANG_DONE": str(done),
    }
    with open_store(shared_url) as store:
        store.submit("t", "Go.")
        worker = subprocess.Popen(
            [*WORKER, "--store", shared_url, "--app", "hang_app:make_config"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(
                lambda: any(c.thread_id == "t" for w in store.live_workers() for c in w.calls),
                "the heartbeat to list the call",
            )
            wait_for(
                lambda: (
                    store.exists("t") and store.state_at("t").status is ThreadStatus.INTERRUPTED
                ),
                "the pause in doubt",
            )
            # The worker lets the thread go once its step ends, a moment after the pause
            # is stored (on a loaded machine, later than the reads above).
            wait_for(lambda: lease_is_free(store, "t"), "the worker to let the thread go")
            service = ThreadService(store, verifier=VERIFIER)
            rita = service.reviewer(RITA)
            before = store.history("t")
            for command in (
                lambda: service.settle("t", "h1", Settlement.not_run(), reviewer=rita),
                lambda: service.request_retry("t", "h1", reviewer=rita),
            ):
                with pytest.raises(ToolCallRunningError, match="worker") as refused:
                    command()
                assert refused.value.tool_call_id == "h1"
            assert not done.exists() and store.history("t") == before
            wait_for(done.exists, "the tool to return", timeout=60)
            wait_for(
                lambda: not any(c.thread_id == "t" for w in store.live_workers() for c in w.calls),
                "the heartbeat to drop the call",
            )
            service.settle("t", "h1", Settlement.ran_with("late"), reviewer=rita)
            assert [p.call.id for p in store.state_at("t").open_calls] == []
        finally:
            worker.terminate()
            worker.wait(30)


@settings(max_examples=30, deadline=None)
@given(offset=st.integers(-2 * 86_400, 2 * 86_400))
def test_generated_reader_clock_offsets_judge_a_call_hung_as_its_worker_measured_it(
    offset: int,
) -> None:
    """Whatever the offset of a reader's clock from the worker's, a call well within its
    timeout is not hung and one past it is, as the worker's listing (its heartbeat)
    measured them; a timeout past the range of a datetime lists no deadline and no
    OverflowError."""
    reader_now = datetime.now(UTC) + timedelta(seconds=offset)
    with (
        listed("memory:x", "t", "fresh", "slow", 60),
        listed("memory:x", "t", "endless", "slow", 1e300),
        listed("memory:x", "t", "late", "slow", 0.001),
    ):
        time.sleep(0.005)
        calls = {c.tool_call_id: c for c in running_calls()}
    assert not calls["fresh"].hung(reader_now)
    assert calls["late"].hung(reader_now)
    assert calls["endless"].deadline is None and not calls["endless"].hung(reader_now)


def test_a_worker_lists_a_call_still_running_before_it_lets_the_thread_go(
    shared_url: str,
) -> None:
    """A worker whose step ends with a call still running past its timeout publishes
    its record listing the call before it lets the thread's lease go: a person's settle
    or retry from another process, which takes the lease and then reads the registry,
    finds the call listed however soon it comes (the next heartbeat came too late: a
    call settled "not run" ran, or ran twice)."""
    tool = Hanging()
    with open_store(shared_url) as store:
        store.submit("t", "Go.")
        order: list[str] = []
        publish, leases = store.publish_worker, store._leasing.leases
        release = leases.release

        def published(record: Any) -> None:
            if any(call.thread_id == "t" for call in record.calls):
                order.append("listed")
            publish(record)

        def released(lease: Any) -> None:
            order.append("let go")
            release(lease)

        store.publish_worker = published  # type: ignore[method-assign]  # observed
        leases.release = released  # type: ignore[method-assign]

        def make_config(thread_id: str) -> AgentConfig:
            return AgentConfig(
                provider=ScriptedProvider([call(("h1", "hang", "{}")), answer("done")]),
                tools=[Tool("hang", "Hang", OBJECT, tool, timeout=0.3)],
            )

        try:
            Worker(store, make_config, poll_interval=0.05).run(once=True)
            assert "let go" in order
            assert "listed" in order[: order.index("let go")], order
        finally:
            tool.release.set()
            tool.returned.wait(10)


def test_a_call_still_running_refuses_every_stores_thread_and_is_reported_by_its_own(
    store: Store, other: Store, tmp_path: Path
) -> None:
    """A call of thread ``t`` of one store still runs past its timeout: settling it or
    running ``t`` is refused through a second store object of its database (on
    PostgreSQL, one whose URL spells the host otherwise too, which names the database
    alike), and through a store of another database too (a refusal in excess only
    waits; one missed ran a call twice); but neither that store's listing nor its
    worker's records show the call (a multi-tenant process published one tenant's
    running call into another's database, in clear)."""
    tool = Hanging()
    agent = hanging_agent(store, tool)
    agent.run("hi")
    assert agent.run("go") == ""
    try:
        assert [c.tool_call_id for c in running_calls(store)] == ["h1"]
        assert [c.tool_call_id for c in running_calls(other)] == ["h1"]
        spellings = [other]
        if "@127.0.0.1:" in store.url:
            spellings.append(open_store(store.url.replace("@127.0.0.1:", "@localhost:")))
        for same in spellings:
            assert same.database == store.database  # whatever the URL calls its host
            assert [c.tool_call_id for c in running_calls(same)] == ["h1"]
            with pytest.raises(ToolCallRunningError, match="'h1'"):
                COMMANDS["service retry"](ThreadService(same, verifier=VERIFIER), agent)
        with open_store(f"sqlite:///{tmp_path / 'tenant.db'}") as tenant:
            assert running_calls(tenant) == ()
            with pytest.raises(ToolCallRunningError, match="in another store") as refused:
                hanging_agent(tenant, Hanging()).run("hi")
            assert "h1" not in str(refused.value) and "hang" not in str(refused.value)
            tenant.submit("u", "Go.")
            published: list[Any] = []
            publish = tenant.publish_worker

            def observed(record: Any) -> None:
                published.append(record)
                publish(record)

            tenant.publish_worker = observed  # type: ignore[method-assign]  # observed

            def make_config(thread_id: str) -> AgentConfig:
                return AgentConfig(provider=ScriptedProvider([answer("done")]))

            Worker(tenant, make_config, poll_interval=0.05).run(once=True)
            assert published and not [c for record in published for c in record.calls]
            assert tenant.state_at("u").status is ThreadStatus.FINISHED
    finally:
        tool.release.set()
        assert tool.returned.wait(30)
        for spelled in spellings[1:]:
            spelled.close()


def test_a_call_still_running_is_neither_settled_nor_run_again_in_a_fork(store: Store) -> None:
    """A thread forked while a call of its parent still runs holds the call in doubt
    too: settling it or asking for it to run again in the fork is refused until the
    parent's tool returns (a retry in the fork ran the call a second time, at once)."""
    tool = Hanging()
    agent = hanging_agent(store, tool)
    agent.run("hi")
    assert agent.run("go") == ""
    service = ThreadService(store, verifier=VERIFIER)
    rita = service.reviewer(RITA)
    try:
        fork = store.fork("t", new_thread_id="f")
        for command in (
            lambda: service.request_retry(fork, "h1", reviewer=rita),
            lambda: service.settle(fork, "h1", Settlement.not_run("no"), reviewer=rita),
        ):
            with pytest.raises(ToolCallRunningError, match="'h1' of tool 'hang' of thread 't'"):
                command()
        assert tool.keys == [tool.keys[0]]
    finally:
        tool.release.set()
        assert tool.returned.wait(30)
    wait_for(lambda: not running_calls(store), "the tool to end")
    service.settle(fork, "h1", Settlement.not_run("no"), reviewer=rita)


def test_a_fork_made_before_a_call_started_runs_while_the_call_still_runs(
    store: Store,
) -> None:
    """A fork of a thread made before its call started does not hold that call: it
    runs while the parent's tool still does (every fork of the thread was refused,
    whatever it held, until the tool returned)."""
    tool = Hanging()
    agent = hanging_agent(store, tool)
    agent.run("hi")
    early = store.fork("t", new_thread_id="early")
    assert agent.run("go") == ""
    try:
        assert agent_on(store, early, [answer("still here")]).run("and you?") == "still here"
    finally:
        tool.release.set()
        assert tool.returned.wait(30)


@pytest.mark.postgres
def test_a_role_s_search_path_does_not_rename_its_database(postgres_database: str) -> None:
    """A store whose session puts a schema of its own before pg_catalog, with a
    ``current_database()`` that names another database, still names its own (a tenant
    could otherwise take another tenant's name, and read its running calls)."""
    import psycopg

    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA shadow")
        conn.execute(
            "CREATE FUNCTION shadow.current_database() RETURNS name "
            "LANGUAGE sql AS $$ SELECT 'postgres'::name $$"
        )
    shadowed = f"{postgres_database}?options=-csearch_path%3Dshadow%2Cpg_catalog%2Cpublic"
    with open_store(postgres_database) as plain, open_store(shadowed) as other:
        assert other.database == plain.database


def test_running_calls_refuses_what_is_no_store() -> None:
    """``running_calls(store)`` names the argument that is no Store."""
    with pytest.raises(ConfigurationError, match="store"):
        running_calls("memory://")  # type: ignore[arg-type]


@pytest.mark.postgres
def test_stores_in_two_schemas_of_one_postgresql_database_are_named_apart(
    postgres_database: str,
) -> None:
    """Two tenants' stores in one PostgreSQL database, each in a schema of its own (an
    application's ``POSTGRES_SCHEMA``), have different names, so one tenant's worker
    never reports the other's running calls; two stores of one schema share theirs."""
    import psycopg

    host_port, dbname = postgres_database.split("@", 1)[1].rsplit("/", 1)
    host, port = host_port.rsplit(":", 1)
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": host,
        "POSTGRES_PORT": port,
        "POSTGRES_USER": postgres_database.split("//", 1)[1].split("@", 1)[0],
        "POSTGRES_PASSWORD": "",
        "POSTGRES_SCHEMA": "tenant_b",
    }
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA tenant_b")
    with (
        open_store(postgres_database) as public,
        open_store(postgres_database) as public_again,
        Store.from_application(_TenantApplication(env=env)) as tenant,
    ):
        assert public.database == public_again.database
        assert tenant.database != public.database
        assert "tenant_b" in tenant.database


class _TenantApplication(AgentApplication):
    """An application of a tenant's own."""


@pytest.mark.postgres
def test_a_postgresql_database_that_keeps_its_identifier_from_a_role_is_named_by_its_url(
    postgres_database: str,
) -> None:
    """A role that may not read the cluster's identifier (``pg_control_system()``
    revoked) names the database by its URL's host, port and database, and still runs:
    leases are taken and let go."""
    import psycopg

    role = f"r_{uuid.uuid4().hex[:12]}"
    dbname = postgres_database.rsplit("/", 1)[1]
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"ALTER DATABASE {dbname} OWNER TO {role}")
        conn.execute(f"ALTER SCHEMA public OWNER TO {role}")
        conn.execute("REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC")
    url = postgres_database.replace("//postgres@", f"//{role}@")
    with open_store(url) as store:
        assert store.database.startswith("postgresql:127.0.0.1:"), store.database
        with store.lease("t") as lease:
            assert lease.database == store.database
        with store.lease("t"):
            pass
