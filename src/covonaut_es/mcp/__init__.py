"""Tools from Model Context Protocol servers, under the library's approvals (an adapter).

:class:`MCPServer` connects to an MCP server (a subprocess over stdio, or streamable
HTTP) and turns each tool it lists into a :class:`~covonaut_es.Tool` pinned to that
server, so the run loop treats it as any tool: the intent is recorded before the call,
the call's idempotency key travels in the request's ``_meta`` under
:data:`IDEMPOTENCY_KEY_META`, an approval binds to the server's exact tool, and a call
whose answer is lost is recorded in doubt. It needs the ``mcp`` extra
(``pip install covonaut-es[mcp]``). This package is at the edge: it imports the tools,
the domain's values and the errors, and no layer imports it.
"""

from covonaut_es._extras import missing_extra

try:
    import mcp  # noqa: F401 - only to name the extra when it is missing
except ModuleNotFoundError as exc:
    raise missing_extra(exc, "mcp", "mcp", user="covonaut_es.mcp") from exc

from covonaut_es.mcp._policy import ToolPolicy
from covonaut_es.mcp._server import IDEMPOTENCY_KEY_META, MCPServer

__all__ = ["IDEMPOTENCY_KEY_META", "MCPServer", "ToolPolicy"]
