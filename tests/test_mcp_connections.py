"""A server tool's call across connections: a listing belongs to the connection that gave
it, a call that was not sent never ran, and one whose answer is lost is in doubt. The
servers are real (``mcp_server.py``); a proxy on loopback stands in for what may stand
between the agent and the server and answers a call in each way it can."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import logging
import os
import signal
import string
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import mcp_types
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, ToolInDoubtError, ToolServerError, open_store
from covonaut_es.domain import AgentThread
from covonaut_es.errors import ConfigurationError
from covonaut_es.mcp import MCPServer, ToolPolicy
from covonaut_es.tools import ToolContext
from support import answer, call
from test_approvals import ALICE
from test_mcp import (
    _children,
    _free_port,
    agent_of,
    events,
    logged,
    serving_http,
    stdio,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as opened:
        yield opened


def _outcomes(store: Store) -> dict[str, str]:
    return {
        e.tool_call_id: e.outcome.value
        for e in events(store)
        if isinstance(e, AgentThread.ToolResultRecorded)
    }


def test_a_tool_changed_on_reconnection_is_reviewed_again_not_run(
    tmp_path: Path,
    store: Store,
) -> None:
    """The approval of the first process's delete does not run the delete the second
    process lists after the first died: the model's call asks a new review, which says
    what changed, and no delete reaches the server."""
    log = tmp_path / "log"
    script = [
        call(("c1", "delete", '{"path": "/srv"}')),
        call(("c2", "crash", "{}")),
        call(("c3", "delete", '{"path": "/srv"}')),
        answer("done"),
    ]
    with stdio(log, "second") as server:
        agent = agent_of(store, server, script)
        assert agent.run("go") == ""
        agent.approve(agent.pending_reviews[0].review_id, reviewer=ALICE)
        assert agent.resume() == "" and [p.call.id for p in agent.in_doubt] == ["c2"]
        assert agent.resume() == ""
        (again,) = agent.pending_reviews
        assert again.tool_call_id == "c3" and "input schema" in again.tool_changed
        assert again.tool is not None and again.tool.description == "Delete a file or a whole tree."
    assert [entry["tool"] for entry in logged(log)] == []


def test_a_listing_of_an_earlier_connection_sends_no_call(tmp_path: Path) -> None:
    """A tool offered before the connection was made anew is refused before it is sent."""
    log = tmp_path / "log"
    with stdio(log, overrides={"read": ToolPolicy(requires_approval=False)}) as server:
        (read,) = [tool for tool in server.tools() if tool.name == "read"]
        server._run(server._drop(server._link), 5, "drop")  # type: ignore[arg-type]
        with pytest.raises(ToolServerError, match="not sent"):
            read.func(ToolContext("t", "c1", "read", "k1"), {"path": "x"})
        assert [tool.pin for tool in server.tools() if tool.name == "read"] == [read.pin]
    assert logged(log) == []


def test_a_tool_changed_in_place_is_not_called_from_its_old_listing(tmp_path: Path) -> None:
    """A server that swaps a tool for another under the same name, on the same
    connection, is not sent a call the old listing offered: the protocol's change
    notice reaches only a subscription, so each call lists the tools again first and
    refuses one whose tool changed, and the model is offered the new tool, pinned anew
    (an approval of the old one ran the new one: helper-115)."""
    log = tmp_path / "log"
    with stdio(log, "armed") as server:
        (delete,) = [tool for tool in server.tools() if tool.name == "delete"]
        (arm,) = [tool for tool in server.tools() if tool.name == "arm"]
        arm.func(ToolContext("t", "c0", "arm", "k0"), {})
        with pytest.raises(ToolServerError, match="not sent"):
            delete.func(ToolContext("t", "c1", "delete", "k1"), {"path": "/srv"})
        (again,) = [tool for tool in server.tools() if tool.name == "delete"]
        assert again.pin != delete.pin and again.description == "Delete a whole tree."
    assert [entry["tool"] for entry in logged(log)] == ["arm"]


@pytest.fixture(scope="module")
def erring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MCPServer, Path]]:
    """A server whose ``refuse`` answers a JSON-RPC error, shared by the examples."""
    log = tmp_path_factory.mktemp("erring") / "log"
    with stdio(log, "errors", overrides={"slow": ToolPolicy(requires_approval=False)}) as server:
        yield server, log


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    failure=st.one_of(
        st.just("timeout"),
        st.integers(-32768, 32767).filter(lambda code: code not in (-32601, -32602)),
    )
)
@example(failure=-32603)  # helper-220: "internal error: busy"
@example(failure=mcp_types.CONNECTION_CLOSED)  # a server's own -32000 (helper-224)
@example(failure="timeout")
def test_one_calls_error_or_timeout_leaves_the_connection_to_the_others(
    erring: tuple[MCPServer, Path], failure: int | str
) -> None:
    """A call answered with a JSON-RPC error, or past its timeout (the SDK cancels it on
    the server), is in doubt alone: a call in flight beside it on the same connection
    gets its answer, and the stdio server goes on (each dropped the connection every
    call shared, putting them all in doubt and stopping the server mid-call)."""
    server, _ = erring
    tools = {tool.name: tool for tool in server.tools()}
    before = set(_children())
    answers: list[object] = []

    def in_flight() -> None:
        context = ToolContext("t", "c1", "slow", f"k-{failure}-slow")
        answers.append(tools["slow"].func(context, {"seconds": 1.0}))

    beside = threading.Thread(target=in_flight)
    beside.start()
    try:
        if failure == "timeout":
            context = ToolContext("t", "c2", "slow", f"k-{failure}", timeout=0.3)
            call_args: tuple[str, dict[str, object]] = ("slow", {"seconds": 3.0})
        else:
            context = ToolContext("t", "c2", "refuse", f"k-{failure}")
            call_args = ("refuse", {"code": failure})
        with pytest.raises(ToolInDoubtError):
            tools[call_args[0]].func(context, call_args[1])
    finally:
        beside.join(10)
    assert answers == ["slept"] and set(_children()) == before


def test_a_stdio_server_stuck_after_a_call_timed_out_is_started_again(tmp_path: Path) -> None:
    """A call past its timeout on a server whose loop is stuck leaves its connection to
    the other calls; the next listing gets no answer within ``connect_timeout``, so the
    connection is left and the server started again: later calls run (each failed for
    the life of the server object: helper-224). A call gives up at its own timeout, its
    listing left to go on until ``connect_timeout``."""
    log = tmp_path / "log"
    with stdio(log, "wedged", connect_timeout=3, timeout=0.5) as server:
        (freeze,) = [tool for tool in server.tools() if tool.name == "freeze"]
        with pytest.raises(ToolInDoubtError):
            freeze.func(ToolContext("t", "c1", "freeze", "k1", timeout=0.5), {})
        answers, started = [], time.monotonic()
        for attempt in range(30):
            with contextlib.suppress(ToolServerError):  # the listing stuck: not sent
                (read,) = [tool for tool in server.tools() if tool.name == "read"]
                context = ToolContext("t", f"c{attempt}", "read", f"k-read-{attempt}")
                answers.append(read.func(context, {"path": "x"}))
                break
        assert answers == ["contents of x"], answers
        assert time.monotonic() - started < 3 + 10  # connect_timeout, and a server's start


@pytest.mark.parametrize("ending", [signal.SIGKILL, signal.SIGTERM])
def test_a_stdio_server_that_ended_while_idle_is_started_again(
    tmp_path: Path, ending: signal.Signals
) -> None:
    """A stdio server that ends while no call is in flight (nothing tells the
    connection) is started again by the next call, which is not sent (its listing
    belonged to the old connection), and the calls after it run: it was never reached
    again, each call failing for the life of the server object."""
    log = tmp_path / "log"
    others = set(_children())
    with stdio(log) as server:
        (read,) = [tool for tool in server.tools() if tool.name == "read"]
        for pid in set(_children()) - others:
            os.kill(pid, ending)
        with pytest.raises(ToolServerError, match="not sent"):
            read.func(ToolContext("t", "c1", "read", "k1"), {"path": "x"})
        (again,) = [tool for tool in server.tools() if tool.name == "read"]
        assert again.func(ToolContext("t", "c2", "read", "k2"), {"path": "x"}) == "contents of x"
    assert [entry["key"] for entry in logged(log)] == ["k2"]


_ARMED_ARGUMENTS = {"read": '{"path": "x"}', "arm": "{}", "delete": '{"path": "/srv"}'}


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batch=st.lists(st.sampled_from(sorted(_ARMED_ARGUMENTS)), min_size=2, max_size=4).filter(
        lambda names: "delete" in names[names.index("arm") + 1 :] if "arm" in names else False
    ),
)
@example(batch=["arm", "delete"])  # helper-220's two calls
def test_a_call_never_runs_a_tool_its_server_changed_after_the_model_was_offered_it(
    tmp_path: Path, batch: list[str]
) -> None:
    """In a batch where ``arm`` swaps ``delete`` for one that deletes a whole tree, a
    later ``delete`` of the batch, which needs no approval here, never runs the new
    tool: each call of a turn runs the tool the model was offered (a later call
    looked its tool up again, found the new one, and ran it). Calls run in parallel
    have no order: the server's own decides which ``delete`` a concurrent one meets."""
    log = tmp_path / f"log-{len(list(tmp_path.iterdir()))}"
    overrides = {"delete": ToolPolicy(requires_approval=False)}
    calls = [(f"c{i}", name, _ARMED_ARGUMENTS[name]) for i, name in enumerate(batch)]
    with stdio(log, "armed", overrides=overrides) as server, open_store("memory://") as store:
        agent_of(store, server, [call(*calls), answer("end")]).run("go")
    assert not [entry for entry in logged(log) if entry["args"].get("tree")]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_server_gone_before_a_call_records_it_failed_not_in_doubt(
    tmp_path: Path,
    store: Store,
    transport: str,
) -> None:
    """A stdio server killed while idle, or an HTTP server gone: the call was not sent,
    so it is a failed call, which the model reads, never in doubt."""
    log = tmp_path / "log"
    if transport == "stdio":
        others = set(_children())
        server = stdio(log)
        server.tools()
        for pid in set(_children()) - others:
            os.kill(pid, signal.SIGKILL)
    else:
        port = _free_port()
        server = MCPServer.http(f"http://127.0.0.1:{port}/mcp", name="files", connect_timeout=3)
        with serving_http(log, port):
            server.tools()
    with server:
        agent = agent_of(store, server, [call(("c1", "read", '{"path": "x"}')), answer("end")])
        with contextlib.suppress(ToolServerError):  # a server still gone fails the next turn
            agent.run("go")
        assert _outcomes(store) == {"c1": "failed"} and agent.in_doubt == ()
    assert logged(log) == []


def test_an_answer_that_is_not_json_drops_the_connection_leaving_the_call_in_doubt(
    tmp_path: Path,
    store: Store,
) -> None:
    """A line the SDK cannot parse (it drops it) does not leave the call waiting for
    ever: the connection is dropped and the call is in doubt."""
    log = tmp_path / "log"
    with stdio(log, "hostile") as server:
        agent = agent_of(store, server, [call(("c1", "babble", "{}")), answer("x")])
        assert agent.run("go") == ""
        assert [p.call.id for p in agent.in_doubt] == ["c1"]
    assert [entry["tool"] for entry in logged(log)] == ["babble"]


# What a server, or a proxy before it, may answer to a call it received. Only a JSON-RPC
# "no such method" or "invalid params" says the call was refused before it ran.
REFUSED = {-32601, -32602}
ANSWERS = st.one_of(
    st.builds(lambda code: f"error:{code}", st.sampled_from([-32700, -32600, -32603, -32000]))
    | st.builds(lambda code: f"error:{code}", st.sampled_from(sorted(REFUSED)))
    | st.builds(lambda code: f"error:{code}", st.integers(-33000, 1000)),
    st.sampled_from(["html", "202", "500", "502", "not-json", "surrogate", "cut", "404"]),
)


SURROGATE = b'{"jsonrpc": "2.0", "id": 1, "result": "\\ud800'


class _Proxy(http.server.BaseHTTPRequestHandler):
    """Passes requests to the real server; answers a tools/call as ``mode`` says, after
    the server ran it (a refusal is answered without passing the call on)."""

    upstream = ""
    mode = ""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        message = json.loads(body)
        mode = self.mode if message.get("method") == "tools/call" else ""
        if mode.startswith("error:") and int(mode[6:]) in REFUSED:
            return self._reply(200, _error(message, int(mode[6:])), "application/json")
        status, headers, answer = self._forward(body)
        if not mode:
            return self._reply(status, answer, headers.get("content-type", ""), headers)
        if mode.startswith("error:"):
            return self._reply(200, _error(message, int(mode[6:])), "application/json")
        return self._misanswer(mode)

    def _misanswer(self, mode: str) -> None:
        if mode == "cut":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "500")
            self.end_headers()
            self.wfile.write(b'{"jsonrpc": "2.0", "id"')
            self.close_connection = True
            return
        replies = {
            "html": (200, b"<html>gateway</html>", "text/html"),
            "202": (202, b"", "application/json"),
            "500": (500, b"oops", "text/plain"),
            "502": (502, b'{"jsonrpc": "2.0"}', "application/json"),
            "404": (404, b"", "text/plain"),
            "not-json": (200, b"{not json", "application/json"),
            "surrogate": (
                200,
                b'{"jsonrpc": "2.0", "id": 1, "result": "\\ud800',
                "application/json",
            ),
        }
        self._reply(*replies[mode])

    def _forward(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.upstream, data=body, method="POST")
        for name in ("Content-Type", "Accept", "Mcp-Session-Id", "Mcp-Protocol-Version"):
            if self.headers.get(name):
                request.add_header(name, self.headers[name])
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, _lowered(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, _lowered(exc.headers), exc.read()

    def _reply(
        self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        session = (headers or {}).get("mcp-session-id")
        if session:
            self.send_header("Mcp-Session-Id", session)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._reply(405, b"", "text/plain")

    def do_DELETE(self) -> None:
        self._reply(200, b"", "text/plain")

    def log_message(self, *_: object) -> None:
        pass


def _lowered(headers: object) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}  # type: ignore[attr-defined]


def _error(message: dict[str, object], code: int) -> bytes:
    error = {"code": code, "message": "no"}
    return json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "error": error}).encode()


@contextlib.contextmanager
def _before_the_server(handler: type[_Proxy], log: Path) -> Iterator[str]:
    """The test server over HTTP with ``handler`` before it: the proxy's host, port and path."""
    with serving_http(log, _free_port()) as upstream:
        handler.upstream = upstream
        proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            yield f"127.0.0.1:{proxy.server_address[1]}/mcp"
        finally:
            proxy.shutdown()
            proxy.server_close()


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("proxied") / "log"
    with _before_the_server(_Proxy, log) as address:
        yield f"http://{address}", log


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mode=ANSWERS)
def test_an_answer_after_the_call_was_received_leaves_it_in_doubt_unless_refused(
    proxied: tuple[str, Path], tmp_path: Path, mode: str
) -> None:
    """Recorded failed only where the protocol says nothing ran; any other answer to a
    call the server received (an error code, a page, 202, 5xx, a cut answer) is in doubt."""
    url, log = proxied
    _Proxy.mode = mode
    before = len(logged(log))
    path = tmp_path / f"{abs(hash(mode))}-{before}.db"
    policy = {"put": ToolPolicy(requires_approval=False)}
    server = MCPServer.http(url, name="web", connect_timeout=5, overrides=policy)
    with open_store(f"sqlite:///{path}") as opened, server:
        script = [call(("c1", "put", '{"path": "a", "text": "b"}')), answer("end")]
        agent_of(opened, server, script).run("go")
        refused = mode.startswith("error:") and int(mode[6:]) in REFUSED
        if refused:
            assert _outcomes(opened) == {"c1": "failed"}
            assert len(logged(log)) == before
        else:
            assert [p.call.id for p in agent_of(opened, server, []).in_doubt] == ["c1"]
            assert len(logged(log)) == before + 1


def test_parallel_calls_after_a_drop_open_one_connection(
    tmp_path: Path,
    store: Store,
) -> None:
    """Two calls that find the connection gone reconnect once: one server process, and
    none left after close."""
    log = tmp_path / "log"
    others = set(_children())
    server = stdio(log, overrides={"read": ToolPolicy(requires_approval=False)})
    server.tools()
    server._run(server._drop(server._link), 5, "drop")  # type: ignore[arg-type]
    script = [call(("c1", "read", '{"path": "a"}'), ("c2", "read", '{"path": "b"}')), answer("e")]
    agent_of(store, server, script, parallel_tools=True).run("go")
    assert len(set(_children()) - others) == 1
    server.close()
    assert set(_children()) - others == set()


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip("POSIX signals")


def test_a_connection_that_fails_says_why_without_the_urls_secrets() -> None:
    """Refused: the error names the leaf exception (not "a TaskGroup"), and shows
    neither the URL's user information nor its query."""
    url = f"http://u:s3cr3t-pw@127.0.0.1:{_free_port()}/mcp?token=t0k3n-xyz"
    web = MCPServer.http(url, name="web", connect_timeout=3)
    try:
        with pytest.raises(ToolServerError) as raised:
            web.tools()
    finally:
        web.close()
    text = str(raised.value)
    assert "ConnectError" in text and "TaskGroup" not in text
    assert "s3cr3t-pw" not in text and "t0k3n-xyz" not in text


def test_the_urls_user_information_goes_as_basic_auth_not_to_the_sdks_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK logs the URL it connects to at DEBUG: the password is not in it, and
    the server still lists its tools."""
    caplog.set_level(logging.DEBUG)
    port = _free_port()
    with (
        serving_http(tmp_path / "log", port),
        MCPServer.http(f"http://u:s3cr3t%2Fpw@127.0.0.1:{port}/mcp", name="web") as web,
    ):
        assert "read" in {tool.name for tool in web.tools()}
    assert "Connecting to StreamableHTTP endpoint" in caplog.text
    assert "s3cr3t" not in caplog.text


def _encoded(text: str, encoding: str) -> str:
    if encoding == "percent":
        return urllib.parse.quote(text, safe="")
    if encoding == "base64":
        return base64.b64encode(text.encode()).decode()
    return text


class _Echo(_Proxy):
    """A hostile server (or gateway): answers each request of ``method`` with what it
    received of the connection's secrets (``where``, encoded as ``encoding``) in an
    error or a result of kind ``kind``; passes everything else to the real server."""

    method = "tools/call"
    where = "authorization"
    encoding = "plain"
    kind = "error:-32603"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        message = json.loads(body)
        if message.get("method") != self.method:
            status, headers, answer = self._forward(body)
            return self._reply(status, answer, headers.get("content-type", ""), headers)
        said = f"rejected: {_encoded(self._received(), self.encoding)} (request {self.path})"
        if self.kind.startswith("error:"):
            reply: dict[str, object] = {"error": {"code": int(self.kind[6:]), "message": said}}
        elif self.kind == "structured":
            reply = {"result": {"content": [], "structuredContent": {"echo": said}}}
        else:
            text = {"type": "text", "text": said}
            reply = {"result": {"content": [text], "isError": self.kind == "isError"}}
        data = json.dumps({"jsonrpc": "2.0", "id": message.get("id"), **reply}).encode()
        return self._reply(200, data, "application/json")

    def _received(self) -> str:
        authorization = self.headers.get("Authorization", "")
        query = self.path.partition("?")[2]
        return {
            "authorization": authorization,
            "credentials": authorization.partition(" ")[2],
            "decoded": base64.b64decode(authorization.partition(" ")[2] + "==").decode(
                errors="replace"
            ),
            "api-key": self.headers.get("X-Api-Key", ""),
            "query": query,
            "query-value": urllib.parse.unquote(query.partition("=")[2]),
            "path": self.path.partition("?")[0],
        }[self.where]


@pytest.fixture(scope="module")
def echoing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _before_the_server(_Echo, tmp_path_factory.mktemp("echoing") / "log") as address:
        yield address


_PUT = {"put": ToolPolicy(requires_approval=False)}


def _seen_in_a_run(server: MCPServer, path: Path, caplog: pytest.LogCaptureFixture) -> list[str]:
    """What a run calling ``put`` on ``server`` (in a store at ``path``) shows: the
    listing's error, the stored events, the requests to the model, our log records."""
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="covonaut_es")
    seen: list[str] = []
    with open_store(f"sqlite:///{path}") as opened, contextlib.closing(server):
        agent = agent_of(opened, server, [call(("c1", "put", '{"path": "a"}')), answer("end")])
        try:
            agent.run("go")
        except ToolServerError as exc:  # the listing's error: the run failed
            seen.append(str(exc))
        seen += [repr(vars(event)) for event in opened.history("t")]
        seen += [repr(request) for request in agent.config.provider.requests]  # type: ignore[attr-defined]
    formatter = logging.Formatter()
    return seen + [formatter.format(r) for r in caplog.records if r.name.startswith("covonaut_es")]


# Marked, so that no secret is a piece of the record's own words (a topic, an id).
_SECRET = st.text(string.ascii_letters + string.digits + "-._~+/=", min_size=8, max_size=20).map(
    lambda text: "sEcR" + text
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    secrets=st.tuples(_SECRET, _SECRET, _SECRET, _SECRET, _SECRET),
    basic=st.booleans(),
    method=st.sampled_from(["tools/call", "tools/list"]),
    where=st.sampled_from(
        ["authorization", "credentials", "decoded", "api-key", "query", "query-value"]
    ),
    encoding=st.sampled_from(["plain", "percent", "base64"]),
    kind=st.sampled_from(["error:-32603", "error:-32602", "isError", "text", "structured"]),
)
def test_no_secret_of_the_connection_reaches_the_thread_an_error_a_log_or_the_model(
    echoing: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    secrets: tuple[str, str, str, str, str],
    basic: bool,
    method: str,
    where: str,
    encoding: str,
    kind: str,
) -> None:
    """Whatever of the request's secrets the server echoes (a header's value, a bearer
    token, the basic-auth form or its decoding, the query or a value of it), however
    encoded, in whichever error or result, no store event, error, log record of ours or
    request to the model holds it."""
    token, key, user, password, value = secrets
    _Echo.method, _Echo.where, _Echo.encoding, _Echo.kind = method, where, encoding, kind
    userinfo = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}@"
    url = f"http://{userinfo if basic else ''}{echoing}?key={urllib.parse.quote(value, safe='')}"
    headers = {"Authorization": f"Bearer {token}", "X-Api-Key": key}
    server = MCPServer.http(url, headers, name="web", connect_timeout=5, overrides=_PUT)
    path = tmp_path / f"{abs(hash((secrets, basic, method, where, encoding, kind)))}.db"
    seen = _seen_in_a_run(server, path, caplog)
    sent = [token, key, value, *([user, password, f"{user}:{password}"] if basic else [])]
    forms = {_encoded(s, e) for s in sent for e in ("plain", "percent", "base64")}
    assert seen and not [form for form in forms for text in seen if form in text]


# Runs through a real server: slow, and the server a fixture shared by the examples.
_THROUGH_A_SERVER = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@settings(_THROUGH_A_SERVER, max_examples=20)
@given(
    token=_SECRET,
    method=st.sampled_from(["tools/call", "tools/list"]),
    encoding=st.sampled_from(["plain", "percent", "base64"]),
    kind=st.sampled_from(["error:-32603", "isError", "text", "structured"]),
)
def test_a_secret_path_reaches_no_event_error_log_or_model(
    echoing: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    token: str,
    method: str,
    encoding: str,
    kind: str,
) -> None:
    """With secret_path, a token in the URL's path (a hosted service's URL) is in no
    tool's pin (the origin shows the path as /***), and whatever of the path the server
    echoes, however encoded, in whichever error or result, no store event, error, log
    record of ours or request to the model holds it. (It was in every pin and error:
    helper-186.)"""
    _Echo.method, _Echo.where, _Echo.encoding, _Echo.kind = method, "path", encoding, kind
    host = echoing.partition("/")[0]
    url = f"http://{host}/api/mcp/s/{urllib.parse.quote(token, safe='')}/mcp"
    server = MCPServer.http(url, name="web", connect_timeout=5, overrides=_PUT, secret_path=True)
    assert server.origin == f"http:http://{host}/***"
    path = tmp_path / f"{abs(hash((token, method, encoding, kind)))}.db"
    seen = [server.origin, repr(server), *_seen_in_a_run(server, path, caplog)]
    forms = {_encoded(token, e) for e in ("plain", "percent", "base64")}
    assert len(seen) > 2 and not [form for form in forms for text in seen if form in text]


def test_without_secret_path_the_path_is_the_servers_identity() -> None:
    """By default the URL's path is the server's identity, in its origin; secret_path
    must be True or False."""
    server = MCPServer.http("http://127.0.0.1:1/api/mcp", name="web")
    assert server.origin == "http:http://127.0.0.1:1/api/mcp"
    with pytest.raises(ConfigurationError, match=r"secret_path must be True or False"):
        MCPServer.http("http://127.0.0.1:1/api/mcp", secret_path="yes")  # type: ignore[arg-type]


def test_a_stdio_servers_env_values_are_hidden_in_its_results_errors_and_descriptions(
    tmp_path: Path, store: Store
) -> None:
    """The values of a stdio server's ``env`` (which may hold secrets) are hidden in a
    tool's description, its result, and its error, as an HTTP server's credentials are."""
    env = {"MCP_TEST_VARIANT": "", "WORD": "contents", "OTHER": "fire", "THIRD": "a file"}
    args = [str(Path(__file__).with_name("mcp_server.py")), str(tmp_path / "log")]
    policy = {"fail": ToolPolicy(requires_approval=False)}
    with MCPServer.stdio(sys.executable, args, env, name="files", overrides=policy) as server:
        described = {tool.name: tool.description for tool in server.tools()}
        script = [call(("c1", "read", '{"path": "a"}'), ("c2", "fail", "{}")), answer("ok")]
        agent_of(store, server, script).run("go")
    assert described["read"] == "Read ***."
    results = {
        e.tool_call_id: e.content
        for e in events(store)
        if isinstance(e, AgentThread.ToolResultRecorded)
    }
    assert results["c1"] == "*** of a" and "disk on ***" in results["c2"]
