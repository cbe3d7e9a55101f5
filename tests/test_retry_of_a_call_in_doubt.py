"""A call in doubt that a person asks to run again gets a result only from a retry that
ran. Every way a real MCP server answers the first call and the retry is tried: a retry
that is never sent (its server refuses it, or cannot be reached) says nothing of the
first attempt, which may have done its work, so the call stays in doubt for the person;
it is never recorded as failed, which the model would read as "call it again" under a
new idempotency key."""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
from pathlib import Path

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    ToolCallsInDoubtError,
    ToolServerError,
    open_store,
)
from covonaut_es.domain import AgentThread, ToolOutcome
from covonaut_es.mcp import MCPServer, ToolPolicy
from support import answer, call

SERVER = str(Path(__file__).with_name("mcp_server.py"))
POLICY = {"book": ToolPolicy(requires_approval=False)}  # not idempotent: no hint says so

LEAVE_IN_DOUBT = ("internal", "exit")
"""Answers after the call began: the call may or may not have done its work."""
RAN = {"ok": ToolOutcome.SUCCEEDED, "fail": ToolOutcome.FAILED}
"""Answers of a call that ran, and the outcome each records."""
NOT_SENT = ("refuse", "unknown", "down")
"""Answers of a call that never ran: refused before it began, or a server not reached."""


def _agent(store: Store, server: MCPServer, script: list[object]) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),  # type: ignore[arg-type]
            mcp_servers=[server],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )


def _server(log: Path, answers: str, policy: dict[str, ToolPolicy] = POLICY) -> MCPServer:
    Path(f"{log}.script").write_text("\n".join(answers.split()))
    env = {"MCP_TEST_VARIANT": "scripted"}
    return MCPServer.stdio(sys.executable, [SERVER, str(log)], env, name="shop", overrides=policy)


def _results(store: Store) -> list[tuple[str, ToolOutcome]]:
    recorded = (AgentThread.ToolResultRecorded, AgentThread.ToolResultCheckpointed)
    return [(e.tool_call_id, e.outcome) for e in store.history("t") if isinstance(e, recorded)]


@pytest.mark.parametrize(
    ("first", "retry"), list(itertools.product(LEAVE_IN_DOUBT, [*RAN, *LEAVE_IN_DOUBT, *NOT_SENT]))
)
def test_a_retry_records_a_result_only_when_it_ran(tmp_path: Path, first: str, retry: str) -> None:
    log = tmp_path / "log"
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        with _server(log, first) as server:
            agent = _agent(store, server, [call(("c1", "book", '{"item": "seat 1"}'))])
            assert agent.run("book seat 1") == ""
            assert [p.call.id for p in agent.in_doubt] == ["c1"]
            (doubted,) = agent.in_doubt
            key = doubted.idempotency_key
        # Not entered, which lists its tools: a server that is down fails the run.
        with contextlib.closing(_server(log, retry)) as server:
            agent = _agent(store, server, [answer("done")])
            try:
                agent.settle("c1", retry=True)  # runs it again at once
                agent.resume()
            except ToolCallsInDoubtError:
                assert retry not in RAN
            except ToolServerError:
                assert retry == "down"  # its tools could not be listed: nothing was sent
            ran = retry in RAN
            assert _results(store) == ([("c1", RAN[retry])] if ran else [])
            assert [p.call.id for p in agent.in_doubt] == ([] if ran else ["c1"])
            told = [m.content for m in store.state_at("t").messages if m.role == "assistant"]
            assert ("done" in told) is ran  # the model hears of c1 only once it ran
        begun = [json.loads(line) for line in log.read_text().splitlines()]
        assert {entry["key"] for entry in begun} == {key}


@pytest.mark.parametrize("asked", [False, True])
def test_a_retry_never_sends_the_call_to_another_tool_its_server_lists_under_its_name(
    tmp_path: Path, asked: bool
) -> None:
    """The server lists another ``book`` (another description and schema) once the call
    is in doubt: neither the automatic retry of a call the application deems idempotent
    nor one a person asked for sends it the recorded arguments (helper-235)."""
    log = tmp_path / "log"
    trusted = {"book": ToolPolicy(requires_approval=False, idempotent=True)}
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        with _server(log, "internal", trusted) as server:
            agent = _agent(store, server, [call(("c1", "book", '{"item": "seat 1"}'))])
            assert agent.run("book seat 1") == ""
        with contextlib.closing(_server(log, "swapped ok", trusted)) as server:
            agent = _agent(store, server, [answer("done")])
            with contextlib.suppress(ToolCallsInDoubtError):
                if asked:
                    agent.settle("c1", retry=True)
                agent.resume()
            assert [p.call.id for p in agent.in_doubt] == ["c1"]
        assert _results(store) == []
    begun = [json.loads(line)["args"]["answer"] for line in log.read_text().splitlines()]
    assert begun == ["internal"]
