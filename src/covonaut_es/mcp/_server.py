"""An MCP server as a source of tools, driven from blocking code.

The MCP SDK is async, and an agent's run loop may be blocking (``Agent.run``) or async
(``Agent.arun``). Each :class:`MCPServer` owns one event loop in a daemon thread of its
own: the connection lives there, in one task from connect to close (the SDK's transports
are anyio task groups, which must be entered and left by the same task), and every
request is handed to that loop and waited for. So a call is the same blocking function
for both drivers, and one server's connection is shared by every agent that lists it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shlex
import sys
import threading
import time
import urllib.parse
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError
from typing import Any, Self, TypeVar

import attrs
import httpx2
import mcp_types
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from covonaut_es import _logs
from covonaut_es._arguments import (
    check_callable,
    check_instance,
    check_mapping,
    check_text,
    check_whole,
    positive_seconds,
)
from covonaut_es._secrets import Secrets, credentials
from covonaut_es.errors import (
    ConfigurationError,
    MCPToolError,
    ToolInDoubtError,
    ToolServerError,
)
from covonaut_es.mcp._policy import (
    MAX_RESULT_BYTES,
    MAX_TOOLS,
    Listing,
    ToolPolicy,
    check_overrides,
    checked_listing,
    result_value,
    to_tool,
)
from covonaut_es.tools import Tool, ToolContext, check_seconds

IDEMPOTENCY_KEY_META = "covonaut/idempotency_key"
"""The ``_meta`` key of every ``tools/call`` request that carries the call's
idempotency key: stable for one recorded call across restores and retries."""

logger = _logs.logger("covonaut_es.mcp")

_T = TypeVar("_T")

# The only JSON-RPC errors that say the server refused a call before any tool ran: no
# such method, arguments it does not take. Any other answer to a call that was sent (an
# error the SDK makes up for a 202, a page that is not MCP, a 5xx) leaves it in doubt.
_REFUSED_CODES = frozenset({mcp_types.METHOD_NOT_FOUND, mcp_types.INVALID_PARAMS})

# An HTTP request that fails with these was never sent: no connection was made.
_UNCONNECTED = (httpx2.ConnectError, httpx2.ConnectTimeout)


def _left(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (of ``time.monotonic``); None: no limit."""
    return None if deadline is None else deadline - time.monotonic()


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Take the outcome of a listing no call waits for any longer, which asyncio would
    otherwise log as never retrieved: its failure was told (or is not the call's)."""
    if not task.cancelled():
        task.exception()


def _connection_closed(error: MCPError) -> bool:
    """Whether ``error`` is the SDK's word that the connection closed, not a server's
    own error answer of the same code (-32000, "server error", which gateways send)."""
    # mcp 2.3.0: the dispatcher raises MCPError(CONNECTION_CLOSED, "Connection closed").
    return error.code == mcp_types.CONNECTION_CLOSED and error.error.message == "Connection closed"


class _Link:
    """One connection to the server: its client (once connected), the event that ends
    it, and the task that holds it open."""

    def __init__(self) -> None:
        self.client: Any = None
        self.closing = asyncio.Event()
        self.holder: asyncio.Future[None] | None = None


class _Outbox:
    """A connection's write stream that notes the idempotency key of each call it hands
    to the transport: a call whose key it never saw was not sent."""

    def __init__(self, stream: Any, handed: set[str]) -> None:
        self._stream = stream
        self._handed = handed

    async def send(self, item: Any) -> None:
        await self._stream.send(item)
        message = getattr(item, "message", None)
        if getattr(message, "method", None) == "tools/call":
            key = _key_of(getattr(message, "params", None))
            if key is not None:
                self._handed.add(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def __aenter__(self) -> Self:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._stream.__aexit__(*exc)


def _key_of(params: object) -> str | None:
    """The idempotency key in a ``tools/call`` request's params, if any."""
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    key = meta.get(IDEMPOTENCY_KEY_META) if isinstance(meta, Mapping) else None
    return key if isinstance(key, str) else None


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, however nested (or ``exc`` itself)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _unconnected_keys(exc: BaseException) -> set[str]:
    """The keys of the calls whose HTTP request failed to connect, so was never sent."""
    keys: set[str] = set()
    for leaf in _leaves(exc):
        if isinstance(leaf, _UNCONNECTED):
            with contextlib.suppress(RuntimeError, ValueError):
                body = json.loads(leaf.request.content)
                key = _key_of(body.get("params") if isinstance(body, dict) else None)
                if key is not None:
                    keys.add(key)
    return keys


def _secrets_of(
    parts: urllib.parse.SplitResult, headers: Mapping[str, str], *, secret_path: bool
) -> list[str]:
    """Every secret a connection to the URL of ``parts`` sends: its user information
    (its password, and the pair the basic-auth header encodes), its query and each value in
    it, its path if ``secret_path``, and each header's credential
    (:class:`~covonaut_es._secrets.Secrets` adds the forms they are sent in: the pair's
    base64 among them, and each piece of a long one, so a token that is a segment of
    the path is hidden when it shows alone)."""
    secrets = [parts.netloc.rpartition("@")[0], parts.query, *([parts.path] * secret_path)]
    secrets += [value for _, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
    basic = _basic_auth(parts)
    if basic is not None:
        user, password = basic
        secrets += [password, f"{user}:{password}"]
    return [*secrets, *(secret for value in headers.values() for secret in credentials(value))]


def _basic_auth(parts: urllib.parse.SplitResult) -> tuple[str, str] | None:
    """The user and password of the URL's user information, decoded; None without."""
    if parts.username is None and parts.password is None:
        return None
    user, password = (urllib.parse.unquote(p or "") for p in (parts.username, parts.password))
    return user, password


class MCPServer:
    """An MCP server whose tools an agent may call (``AgentConfig(mcp_servers=[...])``).

    Make one with :meth:`stdio` or :meth:`http`, and use it as a context manager (``with``
    or ``async with``): leaving it closes the connection, stops the subprocess of a
    stdio server, and ends the server's event loop thread. The server is reached when
    its tools are first needed, and again after the connection drops.

    Each listed tool becomes a :class:`~covonaut_es.Tool` pinned to this server (see
    :class:`~covonaut_es.domain.ToolPin`): its ``inputSchema`` validates the model's
    arguments, and its annotations set its policy unless ``overrides`` does.

    Args:
        name: The name shown in reviews and errors.
        origin: How the server is reached, its identity: recorded in every tool's pin
            and covered by its digest, so an approval never runs another server's tool
            of the same name. It holds a stdio server's command and arguments, and an
            HTTP server's URL without user information and query, its path included
            unless ``secret_path``: never put a key there.
        connect: Opens the transport (an async context manager of the SDK's streams).
        overrides: By tool name (the server's, without ``tool_prefix``), the
            application's policy; it always wins over the server's hints. A key that
            names no listed tool is refused when the tools are listed.
        tool_prefix: Put before each tool's name, for the model (two servers with a
            tool of the same name need one).
        timeout: Seconds a call may run (default: ``AgentConfig.tool_timeout``); the
            request is also cancelled on the server's loop then.
        connect_timeout: Seconds to reach the server and list its tools.
        max_result_bytes: The largest result text kept; a larger one is recorded as an
            error that says so.

    Raises:
        ConfigurationError: An argument of the wrong type or out of range, naming it;
            nothing is started or contacted.
    """

    def __init__(
        self,
        *,
        name: str,
        origin: str,
        connect: Any,
        overrides: Mapping[str, ToolPolicy] | None = None,
        tool_prefix: str = "",
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        max_result_bytes: int = MAX_RESULT_BYTES,
    ) -> None:
        check_text("MCPServer name", name)
        check_text("MCPServer origin", origin)
        check_callable("MCPServer connect", connect)
        if overrides is not None:
            check_mapping("MCPServer overrides", overrides, ToolPolicy, "a ToolPolicy")
        check_text("MCPServer tool_prefix", tool_prefix)
        check_seconds("MCPServer timeout", timeout)
        positive_seconds("MCPServer connect_timeout", connect_timeout)
        check_whole("MCPServer max_result_bytes", max_result_bytes, least=1)
        self._name = name
        self.origin = origin
        self._connect = connect
        self._overrides = dict(overrides or {})
        self._prefix = tool_prefix
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._max_result_bytes = max_result_bytes
        self._secrets = Secrets()  # the connection's: no message shows one
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connecting: asyncio.Lock | None = None
        self._link: _Link | None = None
        # Bumped whenever what the server lists may have changed (a connection made or
        # ended, the server's word): a listing of an earlier epoch is not the current
        # one, and a call pinned by it is not sent.
        self._epoch = 0
        self._listing: tuple[int, tuple[Tool, ...]] | None = None
        self._handed: set[str] = set()  # keys of the calls handed to the transport
        self._unsent: set[str] = set()  # keys of the HTTP calls that could not connect

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server run as a subprocess, spoken to over its stdin and stdout.

        ``env`` is added to a minimal environment (the SDK's); it is not part of the
        server's identity, so it may hold secrets: no value of it shows in what the
        server says to the thread. ``command`` and ``args`` are the server's identity,
        recorded in every tool's pin and shown in errors: pass a key in ``env``, never
        in ``args``. ``options`` are the constructor's.

        Raises:
            ConfigurationError: An argument of the wrong type, naming it.
        """
        check_text("MCPServer.stdio command", command)
        check_instance("MCPServer.stdio args", args, (list, tuple), "a list of str")
        for arg in args:
            check_text("each of MCPServer.stdio args", arg)
        if env is not None:
            check_mapping("MCPServer.stdio env", env, str, "a str")
        params = StdioServerParameters(command=command, args=list(args), env=dict(env or {}))
        errlog = sys.__stderr__ or open(os.devnull, "w")  # noqa: SIM115 - lives with the process

        def connect() -> Any:
            return stdio_client(params, errlog=errlog)

        origin = "stdio:" + shlex.join([command, *args])
        name = os.path.basename(command) if name is None else name
        server = cls(name=name, origin=origin, connect=connect, **options)
        server._secrets = Secrets.of((env or {}).values())
        return server

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        secret_path: bool = False,
        **options: Any,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url``.

        ``headers`` (an ``Authorization`` token, say) go with every request; they and
        the URL's credentials and query are not part of the server's identity, and
        none of them (nor its bearer token, basic-auth form, percent or base64
        encoding) shows in what the server says to the thread, its errors or our logs. The
        URL's user information is sent as basic auth; a token in its query is not
        hidden from the SDK's own DEBUG log, which shows the URL: pass it in
        ``headers``.

        The URL's path is the server's identity, recorded in every tool's pin and shown
        in errors, unless ``secret_path`` is True (a hosted service's URL with a token
        in its path, ``https://mcp.example/api/mcp/s/<token>/mcp``): then the origin
        shows the path as ``/***`` and the path is one of the connection's secrets,
        hidden as the query is (and, like it, not from the SDK's own logs).

        Raises:
            ConfigurationError: An argument of the wrong type, or a URL that is not
                http(s) with a host.
        """
        check_text("MCPServer.http url", url)
        check_instance("MCPServer.http secret_path", secret_path, bool, "True or False")
        if headers is not None:
            check_mapping("MCPServer.http headers", headers, str, "a str")
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018  (read to refuse a port that is no port)
        except ValueError:
            msg = (
                "MCPServer.http url must be an http:// or https:// URL with a host and a "
                "port from 0 to 65535; the one given is not (not shown: it may hold a secret)"
            )
            raise ConfigurationError(msg) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = f"MCPServer.http needs an http:// or https:// URL, got {parts.scheme!r} URL"
            raise ConfigurationError(msg)
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        origin = f"http:{parts.scheme}://{host}{'/***' if secret_path else parts.path}"
        # The URL's user information goes as basic auth (as httpx would send it), not
        # in the URL: the SDK logs the URL it connects to at DEBUG.
        basic = _basic_auth(parts)
        auth = None if basic is None else httpx2.BasicAuth(*basic)
        address = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()

        @contextlib.asynccontextmanager
        async def connect() -> Any:
            timeout = httpx2.Timeout(30.0, read=300.0)
            async with (
                httpx2.AsyncClient(headers=dict(headers or {}), timeout=timeout, auth=auth) as http,
                streamable_http_client(address, http_client=http) as streams,
            ):
                yield streams

        server = cls(name=host if name is None else name, origin=origin, connect=connect, **options)
        server._secrets = Secrets.of(_secrets_of(parts, headers or {}, secret_path=secret_path))
        return server

    @property
    def name(self) -> str:
        """The name shown in reviews and errors."""
        return self._name

    def __repr__(self) -> str:
        return f"MCPServer(name={self._name!r}, origin={self.origin!r})"

    # Lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            self.tools()
        except BaseException:
            self.close()  # no __exit__ follows: the connection and the thread end here
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        try:
            await asyncio.to_thread(self.tools)
        except BaseException:
            await asyncio.to_thread(self.close)
            raise
        return self

    async def __aexit__(self, *_: object) -> None:
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Close the connection (stopping a stdio server) and end the loop thread; calls
        still running are cancelled. The server may be used again: it reconnects."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            self._listing = None
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._disconnect(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()

    # Tools --------------------------------------------------------------------------

    def tools(self) -> tuple[Tool, ...]:
        """The server's tools as the model is offered them, listed once per connection
        (the first time they are needed) and again when the server says they changed.

        Raises:
            ToolServerError: The server cannot be reached within ``connect_timeout``, or
                its listing breaks a limit or holds a tool our checks refuse.
            ConfigurationError: An override names no tool the server lists.
        """
        listing = self._listing
        if listing is None or listing[0] != self._epoch:
            with self._hiding():
                # A connection and a listing, each bounded by connect_timeout.
                bound = 2 * self._connect_timeout
                epoch, listed = self._run(self._listed(), bound, "list its tools")
                check_overrides(self._name, self._overrides, listed, self._prefix)
                listing = (epoch, tuple(self._tool(epoch, item) for item in listed))
            self._listing = listing
        return listing[1]

    def _tool(self, epoch: int, listing: Listing) -> Tool:
        tool = to_tool(
            attrs.evolve(listing, description=self._hide(listing.description)),
            server=self._name,
            origin=self.origin,
            prefix=self._prefix,
            override=self._overrides.get(listing.name),
            func=functools.partial(self._call, epoch, listing),
        )
        if tool.timeout is None and self._timeout is not None:
            return attrs.evolve(tool, timeout=self._timeout)  # the override's wins
        return tool

    def _call(self, epoch: int, offered: Listing, ctx: ToolContext, args: dict[str, Any]) -> str:
        """Run one tool on the server, blocking, with the call's idempotency key in the
        request's ``_meta``; ``epoch`` is that of the listing that ``offered`` it. The
        call's timeout bounds it all, from here: the listing that goes before the
        request, and the request, which is never sent once its time is up (the run has
        recorded the call in doubt by then) and is cancelled on the server's loop past
        it (the SDK tells the server)."""
        timeout = ctx.timeout if ctx.timeout is not None else self._timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        called = self._called(epoch, offered, args, ctx.idempotency_key, deadline)
        with self._hiding():
            result = self._run(called, None, "call " + offered.name)
            text = result_value(result, tool=offered.name, max_bytes=self._max_result_bytes)
        return self._hide(text)

    # On the server's loop -------------------------------------------------------------

    async def _listed(self) -> tuple[int, list[Listing]]:
        """The connection's epoch and the tools it lists."""
        _, epoch, listed = await self._linked_listing()
        return epoch, listed

    async def _linked_listing(self) -> tuple[_Link, int, list[Listing]]:
        """The connection, its epoch and the tools it lists. A connection found closed
        (a stdio server that ended while idle: nothing tells the link) is left, and the
        tools are listed on a new one; one whose listing does not come within
        ``connect_timeout`` (a server stuck, after a call that timed out) is left too,
        so that the next call starts the server again.

        Raises:
            TimeoutError: The listing did not come in time.
        """
        for _ in range(2):
            link = await asyncio.wait_for(self._connected(), self._connect_timeout)
            epoch = self._epoch
            try:
                listed = await asyncio.wait_for(self._tools_of(link), self._connect_timeout)
            except TimeoutError:
                await self._drop(link)
                raise
            except MCPError as exc:
                if not _connection_closed(exc):
                    raise
                await self._drop(link)  # then listed on a new connection, once
                continue
            return link, epoch, listed
        msg = f"MCP server {self._name!r} closed two connections as its tools were listed"
        raise ToolServerError(msg)

    async def _tools_of(self, link: _Link) -> list[Listing]:
        tools: list[Any] = []
        cursor = None
        while True:
            page = await link.client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None or len(tools) > MAX_TOOLS:
                return checked_listing(self._name, tools)

    async def _called(
        self, epoch: int, offered: Listing, args: dict[str, Any], key: str, deadline: float | None
    ) -> Any:
        """Call the ``offered`` tool; a call that was not sent (its tools not listed by
        ``deadline``, of ``time.monotonic``) raises ``ToolServerError`` (it never ran),
        one whose answer is lost, is not MCP, is an error or does not come by
        ``deadline`` ``ToolInDoubtError``."""
        tool = offered.name
        self._handed.discard(key)
        self._unsent.discard(key)
        try:
            try:
                # Listed again first: a server at a protocol version whose change notices
                # need a subscription tells this client nothing when its tools change.
                # The call stops waiting at its deadline; the listing goes on, bounded by
                # connect_timeout, so that only a server stuck leaves the connection
                # the calls in flight beside this one share.
                listing = asyncio.ensure_future(self._linked_listing())
                listing.add_done_callback(_retrieved)
                link, _, listed = await asyncio.wait_for(asyncio.shield(listing), _left(deadline))
            except ToolServerError:
                raise
            except Exception as exc:  # nothing was sent
                msg = (
                    f"MCP server {self._name!r} could not be reached to call {tool!r}: "
                    f"{self._described(exc)}"
                )
                raise ToolServerError(msg) from exc
            if offered not in listed:
                self._epoch += 1  # the tools are listed again before they are offered again
            if epoch != self._epoch:
                msg = (
                    f"MCP server {self._name!r} reconnected or changed its tools since {tool!r} "
                    "was offered, so the call was not sent; its tools are listed again"
                )
                raise ToolServerError(msg)
            left = _left(deadline)
            if left is not None and left <= 0:
                msg = (
                    f"MCP server {self._name!r} listed its tools past the call's timeout, "
                    f"so {tool!r} was not called"
                )
                raise ToolServerError(msg)
            try:
                return await link.client.call_tool(
                    tool, args, read_timeout_seconds=left, meta={IDEMPOTENCY_KEY_META: key}
                )
            except MCPError as exc:
                if exc.code in _REFUSED_CODES:
                    msg = f"MCP server {self._name!r} refused the call: {exc}"
                    raise ToolServerError(msg) from exc
                failure: Exception = exc
            except Exception as exc:  # a dropped connection, an answer that is not MCP
                failure = exc
            if not isinstance(failure, MCPError) or _connection_closed(failure):
                # An answer that is an error, or a call past its timeout (which the SDK
                # cancels on the server), leaves the connection to the other calls.
                await self._drop(link)
            if key not in self._handed or key in self._unsent:
                msg = (
                    f"MCP server {self._name!r} could not be reached, so {tool!r} was not "
                    f"called: {self._described(failure)}"
                )
                raise ToolServerError(msg) from failure
            if isinstance(failure, MCPError):
                msg = f"MCP server {self._name!r} failed during the call: {failure.error.message}"
            else:
                msg = f"MCP server {self._name!r} gave no usable answer: {type(failure).__name__}"
            raise ToolInDoubtError(msg) from failure
        finally:  # the call's outcome is decided: its key is kept no longer
            self._handed.discard(key)
            self._unsent.discard(key)

    async def _connected(self) -> _Link:
        """The open connection, or a new one: one connects at a time, so calls that
        find the connection gone open one between them."""
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            link = self._link
            if link is None:
                link = _Link()
                ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                link.holder = asyncio.ensure_future(self._hold(link, ready))
                link.client = await ready
                self._link = link
                self._epoch += 1
            return link

    async def _hold(self, link: _Link, ready: asyncio.Future[Any]) -> None:
        """Open the connection and keep it until closing is set or it drops: one task
        enters and leaves the SDK's context managers."""
        heard = functools.partial(self._heard, link)
        try:
            async with Client(self._wired(), cache=None, message_handler=heard) as client:
                ready.set_result(client)
                await link.closing.wait()
        except BaseException as exc:  # a connection that fails or drops
            self._unsent |= _unconnected_keys(exc)
            if not ready.done():
                ready.set_exception(exc)
            else:
                logger.warning("MCP server %r disconnected: %s", self._name, self._described(exc))
        finally:
            self._end(link)

    @contextlib.asynccontextmanager
    async def _wired(self) -> Any:
        """The transport, its write stream noting the calls it is handed."""
        async with self._connect() as (read, write):
            yield read, _Outbox(write, self._handed)

    async def _heard(self, link: _Link, message: Any) -> None:
        """What the session hears besides answers: the server's word that its tools
        changed (listed again before the next call), or an answer the transport could
        not read, which drops the connection, so a call waiting for it is in doubt."""
        if isinstance(message, Exception):
            logger.warning(
                "MCP server %r sent what is not MCP: %s", self._name, self._described(message)
            )
            link.closing.set()
            self._end(link)
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            self._epoch += 1

    def _end(self, link: _Link) -> None:
        """Forget the connection, if it is the current one: the next call reconnects,
        and lists the tools again."""
        if self._link is link:
            self._link = None
            self._epoch += 1

    async def _drop(self, link: _Link) -> None:
        """End a connection that failed a call, and wait for it to be left (and for
        why it ended to be known)."""
        link.closing.set()
        self._end(link)
        if link.holder is not None:
            await asyncio.wait([link.holder], timeout=5)

    async def _disconnect(self) -> None:
        """Cancel the calls still running (each is then in doubt), and let the holder
        leave the SDK's context managers."""
        link = self._link
        holder = None if link is None else link.holder
        others = [t for t in asyncio.all_tasks() if t not in (asyncio.current_task(), holder)]
        for task in others:
            task.cancel()
        if link is not None:
            await self._drop(link)
        if others:
            await asyncio.wait(others, timeout=5)

    def _described(self, exc: BaseException) -> str:
        """What went wrong, each exception of a group named, the connection's secrets
        hidden."""
        return self._hide(
            "; ".join(
                dict.fromkeys(
                    f"{type(leaf).__name__}: {leaf}".rstrip(": ") for leaf in _leaves(exc)
                )
            )
        )

    def _hide(self, text: str) -> str:
        """``text`` with each of the connection's secrets, in each form, as ``***``:
        everything the server says passes here before a message, a record, a log or
        the model has it."""
        return self._secrets.hide(text)

    @contextlib.contextmanager
    def _hiding(self) -> Iterator[None]:
        """Each error raised inside, again with its text hidden and without its cause:
        a traceback prints a cause's text (the server's, a URL) as it is (ADR 0133)."""
        try:
            yield
        except (ToolServerError, ToolInDoubtError, MCPToolError, ConfigurationError) as exc:
            raise type(exc)(self._hide(str(exc))) from None

    def _run(self, work: Coroutine[Any, Any, _T], timeout: float | None, what: str) -> _T:
        """Run ``work`` on the server's loop and wait for it; past ``timeout``, cancel it
        and raise ``ToolServerError``."""
        future = asyncio.run_coroutine_threadsafe(work, self._running_loop())
        try:
            return future.result(timeout)
        except TimeoutError as exc:
            future.cancel()
            msg = (
                f"MCP server {self._name!r} ({self.origin}) did not {what} within "
                f"{timeout:g} s; check that it runs, or raise connect_timeout"
            )
            raise ToolServerError(msg) from exc
        except (ToolServerError, ToolInDoubtError):
            raise
        except CancelledError as exc:
            msg = f"MCP server {self._name!r} was closed while it was asked to {what}"
            if what.startswith("call"):
                raise ToolInDoubtError(msg) from exc
            raise ToolServerError(msg) from exc
        except Exception as exc:
            if what.startswith("call"):
                raise
            msg = f"MCP server {self._name!r} ({self.origin}) could not {what}: "
            raise ToolServerError(msg + self._described(exc)) from exc

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"mcp {self._name}", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
                self._connecting = None  # a lock of the loop that ended is no use
            return self._loop
