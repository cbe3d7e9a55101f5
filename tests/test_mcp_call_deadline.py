"""A call's timeout bounds all of it: a ``tools/call`` never reaches the server after
the run recorded the call in doubt (helper-248: the listing a call makes first was not
bounded by the call's timeout, so a server slow to list got the call a second after
``Agent.run`` returned with it in doubt; a person settling it "did not run" would be
wrong moments later). A real stdio server, slow at each step in turn."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, open_store
from covonaut_es.mcp import MCPServer, ToolPolicy
from support import answer, call

RAW = str(Path(__file__).with_name("mcp_raw_server.py"))
TOOLS = json.dumps([{"name": "book", "inputSchema": {"type": "object"}}])


@pytest.mark.parametrize("slow", ["MCP_RAW_SLOW_LIST", "MCP_RAW_SLOW_CALL"])
def test_a_call_never_reaches_the_server_after_the_run_recorded_it_in_doubt(
    tmp_path: Path, slow: str
) -> None:
    log = tmp_path / "log"
    server = MCPServer.stdio(
        sys.executable,
        [RAW, str(log)],
        {"MCP_RAW_TOOLS": TOOLS, slow: "2"},
        name="raw",
        timeout=1,
        overrides={"book": ToolPolicy(requires_approval=False)},
    )
    with open_store(f"sqlite:///{tmp_path}/s.db") as store, server:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("c1", "book", "{}")), answer("done")]),
                mcp_servers=[server],
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
            )
        )
        assert agent.run("go") == ""
        returned = time.time()
        assert [p.call.id for p in agent.in_doubt] == ["c1"]
        time.sleep(3)  # the server stays open, as in a worker
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    sent = [entry["at"] for entry in logged if entry["method"] == "tools/call"]
    assert all(at <= returned for at in sent), [round(at - returned, 2) for at in sent]
