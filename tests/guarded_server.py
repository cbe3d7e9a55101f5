"""A uvicorn server of the guarded protocol, run as its own process by the connection
tests so that they count its open files: ``python guarded_server.py PORT SECONDS RECORD``.

``GET /size/N`` answers N bytes in one write, as a Starlette response does; ``POST
/record`` appends its body and a newline to the file ``RECORD`` (a decision applied),
then answers ``ok``; ``GET /block/MS`` blocks the event loop for ``MS`` milliseconds, as
a busy server is slow to take new connections in, then answers ``ok``. Each takes a
moment before reading the body and another before applying it, as the inbox reads and
writes its store. At most 6 connections, 3 from a client; ``SECONDS`` for a request to
arrive and for an answer's writes to stay stalled; 1 s idle between requests. The
accepted sockets' send buffers are small and fixed (16 KiB), so that an answer of a
few hundred KiB passes what the kernel holds for a client that does not read.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path
from typing import Any

import uvicorn

from covonaut_es.cli._connections import ConnectionLimits, guarded_protocol

SEND_BUFFER = 16 * 1024


def app_recording_to(record: Path) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await asyncio.sleep(0.05)  # as the inbox reads its store before the body
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"].startswith("/block/"):
            time.sleep(int(scope["path"].rsplit("/", 1)[1]) / 1000)
            answer = b"ok"
        elif scope["path"] == "/record":
            await asyncio.sleep(0.05)
            with record.open("ab") as recorded:
                recorded.write(body + b"\n")
            answer = b"ok"
        else:
            answer = b"x" * int(scope["path"].rsplit("/", 1)[1])
        headers = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def main() -> None:
    port, seconds, record = int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
    limits = ConnectionLimits(total=6, per_client=3, request_seconds=seconds)
    listening = socket.socket()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)  # inherited
    listening.bind(("127.0.0.1", port))
    config = uvicorn.Config(
        app_recording_to(record),
        http=guarded_protocol(limits),
        ws="none",
        timeout_keep_alive=1,
        log_level="warning",
    )
    uvicorn.Server(config).run(sockets=[listening])


if __name__ == "__main__":
    main()
