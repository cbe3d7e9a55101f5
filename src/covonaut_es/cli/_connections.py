"""The connection limits ``serve`` runs uvicorn with: slow or greedy clients must not
exhaust the process's open files nor keep reviewers out.

uvicorn bounds the idle time between requests (``timeout_keep_alive``), but little
else: its keep-alive timer runs only after a response, every byte received resets it,
``limit_concurrency`` answers 503 only once a request's headers are complete, to
reviewers and attackers alike, and h11's incomplete-event size bounds only a header
block still arriving (one that arrives whole in a read is parsed whatever its size).
So :func:`guarded_protocol` extends uvicorn's h11 protocol with the bounds it lacks
(ADR 0035, ADR 0101, ADR 0120): a connection past the total or past its client address's
share is answered 503 and closed once the client has had time to read it, a request
not wholly received within a deadline has its connection closed, and so does a client
that stops reading its answer for as long (its writes stalled: a slow read holds the
connection at no cost to the client, and a close waits for the unsent answer); a
request whose line and headers pass :data:`MAX_HEADER_BYTES` is answered 400 and
closed, however it arrived; a client that half-closes after a whole request is
answered, then closed.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:  # the inbox extra's: imported where the protocol is made
    from uvicorn.protocols.http.h11_impl import H11Protocol

REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
    b"Connection: close\r\nRetry-After: 1\r\n\r\n"
)
"""What a connection past a limit is sent before it is closed."""
MAX_HEADER_BYTES = 16 * 1024
"""The largest request line and headers accepted, counted in bytes as received."""
LINGER_SECONDS = 1.0
"""How long a refused connection is kept open for its client to read the refusal."""
MAX_LINGERING = 64
"""Refused connections kept open at most at once; past it, one is closed at once."""


@attrs.frozen
class ConnectionLimits:
    """How many connections ``serve`` holds, and how long a request may take to arrive.

    Attributes:
        total: Open connections at most, from every client together.
        per_client: Open connections at most from one client address (behind a reverse
            proxy, every connection comes from the proxy's).
        request_seconds: How long a request (its headers and its body) may take to
            arrive, from the connection's opening or the previous response's end; and
            how long an answer's writes may stay stalled by a client not reading it.
    """

    total: int
    per_client: int
    request_seconds: float


class Admission:
    """Counts the open connections, in all and per client address, and admits a new one
    only within :class:`ConnectionLimits`. Used from the event loop's thread only."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: Counter[str] = Counter()
        self.lingering = 0

    def admit(self, client: str) -> bool:
        """Count a connection from ``client`` in, if the limits allow one more."""
        if self.open.total() >= self.limits.total:
            return False
        if self.open[client] >= self.limits.per_client:
            return False
        self.open[client] += 1
        return True

    def release(self, client: str) -> None:
        """Count an admitted connection from ``client`` out."""
        self.open[client] -= 1
        if self.open[client] <= 0:
            del self.open[client]

    def linger(self) -> bool:
        """Count a refused connection in among those kept open to read their refusal,
        if fewer than :data:`MAX_LINGERING` are."""
        if self.lingering >= MAX_LINGERING:
            return False
        self.lingering += 1
        return True

    def lingered(self) -> None:
        """Count a refused connection kept open out."""
        self.lingering -= 1


def client_host(transport: asyncio.BaseTransport) -> str:
    """The client a connection comes from, by :func:`client_of` its address (empty when
    the socket has none, a Unix socket's peer)."""
    peer: Any = transport.get_extra_info("peername")
    return client_of(str(peer[0])) if isinstance(peer, tuple) and peer else ""


def client_of(address: str) -> str:
    """The client an address stands for, whose connections share one client's share.

    An IPv4 address is its own client, reached as an IPv4-mapped IPv6 address too. An
    IPv6 address stands for its /64 network: a host or site is given one whole, so
    counted by address a single client would pick a new one per connection.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol, bounded by ``limits``: pass it as ``uvicorn.Config``'s
    ``http``. Each call counts its own connections (one server, one call)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    receiving = (h11.IDLE, h11.SEND_BODY)  # the client's request has not wholly arrived
    arrived = (h11.DONE, h11.MUST_CLOSE)  # it has (MUST_CLOSE: it asked to close after)
    answering = (h11.SEND_RESPONSE, h11.SEND_BODY)
    admission = Admission(limits)

    class HeaderBoundedConnection(h11.Connection):
        """h11's server side, refusing a request whose line and headers pass
        :data:`MAX_HEADER_BYTES` (h11 itself bounds only a header block still arriving),
        and a body sent in chunks: every endpoint needs a Content-Length (411 from the
        application), and a chunked body's trailers and chunk extensions are more header
        fields, which h11 parses at any size when they arrive whole."""

        def __init__(self) -> None:
            super().__init__(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)

        def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
            if self.their_state is not h11.IDLE:  # no request line and headers to come
                return super().next_event()
            unread = len(self.trailing_data[0])
            event = super().next_event()
            if isinstance(event, h11.Request):
                size = unread - len(self.trailing_data[0])  # what h11 read of the buffer
                if size > MAX_HEADER_BYTES:
                    msg = f"a request line and headers of {size} bytes, past {MAX_HEADER_BYTES}"
                    # uvicorn answers h11's refusal 400 and closes the connection
                    raise h11.RemoteProtocolError(msg, error_status_hint=431)
                if any(name == b"transfer-encoding" for name, _ in event.headers):
                    msg = "a request body in chunks; send its Content-Length"
                    raise h11.RemoteProtocolError(msg, error_status_hint=411)
            return event

    class GuardedH11Protocol(H11Protocol):
        admitted_as: str | None = None
        lingering = False  # refused, and kept open for its client to read the refusal
        deadline: asyncio.TimerHandle | None = None
        stalled: asyncio.TimerHandle | None = None  # the client stopped reading its answer

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.conn = HeaderBoundedConnection()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            client = client_host(transport)
            if not admission.admit(client):
                self._refuse(transport)
                return
            self.admitted_as = client
            super().connection_made(transport)
            # Writes pause at the first byte the socket does not take, so every unsent
            # answer is timed as a stalled write, a complete one too: closing waits for
            # it to drain, for ever if the client never reads (ADR 0120).
            transport.set_write_buffer_limits(high=0)
            self._watch()

        def _refuse(self, transport: asyncio.Transport) -> None:
            """Answer 503, and close once the client has had time to read it: closed
            with the client's request unread, the connection is reset, and a client
            meets the reset, not the answer, while it sends its body or reads on
            (ADR 0120)."""
            transport.write(REFUSAL)
            if not admission.linger():  # refusals must not run the process out of files
                transport.close()
                return
            self.lingering = True
            transport.write_eof()
            self.deadline = self.loop.call_later(LINGER_SECONDS, transport.abort)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.lingering:
                admission.lingered()
                self.lingering = False
                self._disarm()
                return
            if self.admitted_as is None:  # refused: uvicorn never saw it
                return
            admission.release(self.admitted_as)
            self.admitted_as = None
            self._disarm()
            self._moving()
            super().connection_lost(exc)

        def eof_received(self) -> bool | None:  # type: ignore[override]
            """Keep a half-closed connection open for the answer to its whole request
            (RFC 9112 section 9.6), then close it; close any other at once."""
            if self.conn.their_state in arrived and self.conn.our_state in answering:
                self.cycle.keep_alive = False
                return True
            return None

        def pause_writing(self) -> None:
            super().pause_writing()
            if self.stalled is None:  # a client that stops reading holds the connection
                self.stalled = self.loop.call_later(limits.request_seconds, self._abort)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._moving()

        def data_received(self, data: bytes) -> None:
            if self.lingering:  # a refused request: read only for the refusal to arrive
                return
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()  # the next request's deadline, pipelined ones included

        def _watch(self) -> None:
            """Arm the deadline while a request is arriving; disarm it once it has."""
            if self.transport.is_closing() or self.conn.their_state not in receiving:
                self._disarm()
            elif self.deadline is None:
                self.deadline = self.loop.call_later(limits.request_seconds, self._expire)

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def _moving(self) -> None:
            if self.stalled is not None:
                self.stalled.cancel()
                self.stalled = None

        def _abort(self) -> None:
            self.stalled = None
            self.transport.abort()  # closing would wait for the answer to drain

        def _expire(self) -> None:
            self.deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol
