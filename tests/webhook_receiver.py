"""A webhook receiver for the notice tests: a real HTTP server on loopback, in a thread.

It checks each POST's signature as a receiver should, answers with the statuses it is
told to (then 200), records every delivery, and keeps the notices it accepted by
idempotency key, dropping repeats, as the receiving application would. It can be
stopped and started again on the same port.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET = b"notice-tests-webhook-secret-0123456789"


class Receiver:
    """Records deliveries; ``failures`` are the statuses of the next answers."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.failures: list[int] = []
        self.deliveries: list[tuple[str, dict[str, Any]]] = []  # every POST, in order
        self.accepted: dict[str, dict[str, Any]] = {}  # by idempotency key, first kept
        self.bad_signatures = 0
        self.redirect_to: str | None = None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/reviews"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.receive(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def receive(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        timestamp = handler.headers["X-Covonaut-Timestamp"]
        expected = hmac.new(SECRET, timestamp.encode() + b"." + body, hashlib.sha256)
        given = handler.headers["X-Covonaut-Signature"] or ""
        with self._lock:
            if not hmac.compare_digest(given, "sha256=" + expected.hexdigest()):
                self.bad_signatures += 1
                status = 401
            else:
                key = handler.headers["Idempotency-Key"]
                notice = json.loads(body)
                assert notice["idempotency_key"] == key
                self.deliveries.append((key, notice))
                status = self.failures.pop(0) if self.failures else 200
                if status == 200:
                    self.accepted.setdefault(key, notice)
        handler.send_response(status)
        if self.redirect_to is not None:
            handler.send_header("Location", self.redirect_to)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def keys(self) -> Iterator[str]:
        return (key for key, _ in self.deliveries)
