"""A small MCP server for examples/mcp_tools.py, written with the ``mcp`` SDK: a ticket
desk with one read-only tool and one destructive tool. It speaks MCP over stdio, so
the example starts it as a subprocess."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

TICKETS = {7: "printer on fire", 8: "coffee machine empty"}
CLOSED: dict[str, int] = {}  # idempotency key -> ticket: a repeated call closes nothing

desk = MCPServer("helpdesk", log_level="CRITICAL")


@desk.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_tickets() -> dict[str, str]:
    """List the open tickets by number."""
    return {str(number): title for number, title in TICKETS.items()}


@desk.tool(annotations=ToolAnnotations(destructive_hint=True))
def close_ticket(number: int, ctx: Context) -> str:
    """Close a ticket for good."""
    key = str((ctx.request_context.meta or {}).get("covonaut/idempotency_key"))
    if key in CLOSED:
        return f"ticket {CLOSED[key]} was already closed by this very call"
    TICKETS.pop(number)
    CLOSED[key] = number
    return f"closed ticket {number} (idempotency key {key[:8]}...)"


if __name__ == "__main__":
    desk.run()
