"""An agent process whose one MCP call (``slow``) outlives it: ``python mcp_agent.py
STORE_URL LOG``. A test SIGKILLs its process group while the call runs."""

from __future__ import annotations

import sys
from pathlib import Path

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, open_store
from covonaut_es.mcp import MCPServer, ToolPolicy
from support import answer, call

SERVER = str(Path(__file__).with_name("mcp_server.py"))

if __name__ == "__main__":
    store_url, log = sys.argv[1], sys.argv[2]
    overrides = {"slow": ToolPolicy(requires_approval=False)}
    with (
        open_store(store_url) as store,
        MCPServer.stdio(sys.executable, [SERVER, log], overrides=overrides) as server,
    ):
        script = [call(("c1", "slow", '{"seconds": 60}')), answer("slept")]
        config = AgentConfig(
            provider=ScriptedProvider(script),
            mcp_servers=[server],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
        Agent(config).run("sleep")
