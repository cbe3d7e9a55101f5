"""Tools from an MCP server, under the library's approvals.

The example starts a small MCP server (``mcp_tools_server.py`` beside it, over stdio)
and offers its tools to the model. ``list_tickets`` is marked read-only, so it runs
at once; ``close_ticket`` is marked destructive, so the run pauses for a review that
names the server, the tool, its description and the exact arguments. Once a verified
reviewer approves, the model's call runs once, with its idempotency key in the
request's ``_meta``. Needs the ``mcp`` extra; no model credentials.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    ToolCall,
    canonical_json,
    open_store,
)
from covonaut_es.mcp import MCPServer

SERVER = Path(__file__).with_name("mcp_tools_server.py")


def model(request: ProviderRequest) -> ProviderResponse:
    """List the tickets, close number 7 (again once approved), then report."""
    last = request.messages[-1]
    turn = len(request.messages)
    if last.role is Role.USER:
        return ProviderResponse(tool_calls=(ToolCall(f"c{turn}", "list_tickets", "{}"),))
    if "printer" in last.content or last.content.startswith("Approved"):
        close = ToolCall(f"c{turn}", "close_ticket", '{"number": 7}')
        return ProviderResponse(tool_calls=(close,))
    return ProviderResponse(content=f"Done: {last.content}")


def main() -> None:
    verifier = HmacReviewerVerifier(secrets.token_bytes(32))
    alice = verifier.issue_token("alice@support", ttl_seconds=900)
    store = open_store("memory://")
    with MCPServer.stdio(sys.executable, [str(SERVER)], name="helpdesk") as helpdesk:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=model),
                mcp_servers=[helpdesk],
                checkpoint=CheckpointSettings(store=store, thread_id="support"),
                reviewer_verifier=verifier,
            )
        )
        for tool in helpdesk.tools():
            print(f"tool {tool.name}: approval {tool.requires_approval}")
        agent.run("Close the ticket about the printer.")
        (review,) = agent.pending_reviews
        assert review.tool is not None
        print(f"review of {review.tool.server}/{review.tool_name}: {review.tool.description}")
        print(f"  arguments {canonical_json(review.arguments).decode()}")
        agent.approve(review.review_id, reviewer=alice, comment="it is out")
        print(agent.resume())
    for event in store.history("support"):
        if isinstance(event, AgentThread.ToolPinned):
            print(f"call {event.tool_call_id} pinned to {event.tool.label}")


if __name__ == "__main__":
    main()
