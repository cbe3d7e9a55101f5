"""A raw JSON-RPC MCP server over stdio, every byte of it the test's: ``python
mcp_raw_server.py LOG``. It lists the tools in ``$MCP_RAW_TOOLS`` (JSON), answers each
call ``ok``, and logs every request it reads to LOG (one JSON line: method, params and
the time it arrived). ``$MCP_RAW_SLOW_LIST`` seconds pass before each listing but the
first, ``$MCP_RAW_SLOW_CALL`` before each answer to a call: a server slow to list (as a
call lists the tools again first) or to answer."""

from __future__ import annotations

import json
import os
import sys
import time

LOG = sys.argv[1]
TOOLS = json.loads(os.environ.get("MCP_RAW_TOOLS", "[]"))
SLOW_LIST = float(os.environ.get("MCP_RAW_SLOW_LIST", "0"))
SLOW_CALL = float(os.environ.get("MCP_RAW_SLOW_CALL", "0"))


def answer(request_id: object, result: object) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


listings = 0
for line in sys.stdin:
    request = json.loads(line)
    method, request_id = request.get("method"), request.get("id")
    with open(LOG, "a") as log:
        log.write(
            json.dumps({"method": method, "params": request.get("params"), "at": time.time()})
        )
        log.write("\n")
    if request_id is None:
        continue  # a notification
    if method == "initialize":
        version = request["params"]["protocolVersion"]
        info = {"name": "raw", "version": "1"}
        answer(
            request_id,
            {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info},
        )
    elif method == "tools/list":
        listings += 1
        time.sleep(SLOW_LIST if listings > 1 else 0)
        answer(request_id, {"tools": TOOLS})
    elif method == "tools/call":
        time.sleep(SLOW_CALL)
        answer(request_id, {"content": [{"type": "text", "text": "ok"}]})
    else:
        answer(request_id, {})
