"""A local HTTP server that plays recorded vendor answers, for the provider tests.

The real SDKs talk to it over loopback: it answers each request with the next scripted
reply (a JSON body, or a server-sent events stream written chunk by chunk, as the
vendors send them) and records every request body, so a test can check the mapped
request on the wire.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


@attrs.frozen
class Reply:
    """One scripted answer.

    Attributes:
        status: The HTTP status.
        headers: Extra response headers.
        body: The JSON body, for a plain answer.
        events: The server-sent events, each already in wire form, for a stream.
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    events: tuple[bytes, ...] | None = None


def json_reply(
    body: object, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> Reply:
    """A JSON answer, e.g. a completion or an error body."""
    return Reply(status, tuple((headers or {}).items()), json.dumps(body).encode())


def sse_reply(events: Iterable[tuple[str | None, object]]) -> Reply:
    """A server-sent events stream of ``(event name or None, data)`` pairs; the data is
    a JSON value, or a string sent as is (``"[DONE]"``)."""
    wire = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        head = f"event: {name}\n" if name else ""
        wire.append(f"{head}data: {text}\n\n".encode())
    return Reply(events=tuple(wire))


@attrs.frozen
class RecordedRequest:
    """A request the server received: its method, path, headers and decoded JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class WireServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1, port chosen by the OS; use it in a
    ``with`` block.

    Attributes:
        requests: Every request received, in order.
    """

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        # A short poll interval keeps shutdown() (and so each test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        """The server's base URL, e.g. ``http://127.0.0.1:54321``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def reply(self, *replies: Reply) -> None:
        """Queue answers for the next requests, in order."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def bodies(self) -> list[Any]:
        """The JSON body of every request received."""
        return [request.body for request in self.requests]

    def __enter__(self) -> WireServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._replies:
                return self._replies.popleft()
        body = {"error": {"message": "the test scripted no reply for this request"}}
        return json_reply(body, status=599)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                request = RecordedRequest(
                    self.command,
                    self.path,
                    {key.lower(): value for key, value in self.headers.items()},
                    json.loads(raw) if raw else None,
                )
                reply = server._next(request)
                self.send_response(reply.status)
                for key, value in reply.headers:
                    self.send_header(key, value)
                # One request per connection: nothing lingers when a test ends.
                self.send_header("Connection", "close")
                if reply.events is None:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in reply.events:
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: Any) -> None:
                """Keep the test output clean."""

        return Handler
