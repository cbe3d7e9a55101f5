"""Figure 13: the cost of a tool call through an MCP server.

One agent runs N turns, each calling one read-only tool, then answers; no store, so the
time is the run loop's and the call's. The same tool answers once as a direct `Tool`
(a Python function) and once through `covonaut_es.mcp.MCPServer.stdio`: the example's
helpdesk server (`examples/mcp_tools_server.py`, the `mcp` SDK) in a subprocess, its
`list_tickets` tool reached over stdio from the server's own event loop thread. The
server is connected and its tools listed before the clock starts. Per call: the run's
time divided by N, the median of three runs.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from harness import Context, cli, log
from report import Section, Table, intro, seconds, times

from covonaut_es import (
    Agent,
    AgentConfig,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
)
from covonaut_es.mcp import MCPServer

SERVER = Path(__file__).resolve().parent.parent / "examples" / "mcp_tools_server.py"
FULL_CALLS = 100
QUICK_CALLS = 10
RUNS = 3


def _model(calls: int) -> Any:
    def respond(request: ProviderRequest) -> ProviderResponse:
        done = sum(1 for m in request.messages if m.role is Role.TOOL)
        if done >= calls:
            return ProviderResponse(content="done")
        return ProviderResponse(tool_calls=(ToolCall(f"c{done}", "list_tickets", "{}"),))

    return respond


def _direct() -> Tool:
    tickets = {"7": "printer on fire", "8": "coffee machine empty"}
    return Tool(
        "list_tickets",
        "List the open tickets by number.",
        {"type": "object"},
        lambda ctx, args: dict(tickets),
    )


def _per_call(config: AgentConfig, calls: int) -> float:
    samples = []
    for _ in range(RUNS):
        agent = Agent(config)
        started = time.perf_counter()
        agent.run("list the tickets")
        samples.append((time.perf_counter() - started) / calls)
    return statistics.median(samples)


def run(ctx: Context) -> list[Section]:
    """Figure 13."""
    calls = QUICK_CALLS if ctx.quick else FULL_CALLS
    log(f"MCP calls, {calls} calls a run")
    section = Section("13. A tool call through MCP", intro(__doc__))
    provider = ScriptedProvider(respond=_model(calls))
    direct = _per_call(
        AgentConfig(provider=provider, tools=[_direct()], max_turns=calls + 1), calls
    )
    with MCPServer.stdio(sys.executable, [str(SERVER)], name="helpdesk") as server:
        over_mcp = _per_call(
            AgentConfig(provider=provider, mcp_servers=[server], max_turns=calls + 1), calls
        )
        (tool,) = (t for t in server.tools() if t.name == "list_tickets")
        context = ToolContext("bench", "c", tool.name, "k" * 32)
        started = time.perf_counter()
        for _ in range(calls):
            tool.func(context, {})
        function_alone = (time.perf_counter() - started) / calls
    table = Table(
        "time per call, run loop included",
        [
            "calls a run",
            "direct Tool",
            "MCP over stdio",
            "MCP / direct",
            "MCP added per call",
            "the MCP tool's function alone",
        ],
    )
    table.rows.append(
        [
            str(calls),
            seconds(direct),
            seconds(over_mcp),
            times(over_mcp / direct),
            seconds(over_mcp - direct),
            seconds(function_alone),
        ]
    )
    table.notes.append(
        "The last column calls the MCP tool's function N times without the run loop: the "
        "round trip to the server (the hop to the server's loop thread, the SDK, the pipe "
        "and the server's own handling)."
    )
    section.tables.append(table)
    return [section]


if __name__ == "__main__":
    raise SystemExit(cli([run]))
