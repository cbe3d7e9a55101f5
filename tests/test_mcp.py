"""Tools from real MCP servers (written with the ``mcp`` SDK, started here) under the
run loop's write-ahead, idempotency keys, approvals and in-doubt records."""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import mcp_types
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    ThreadStatus,
    ToolCallsInDoubtError,
    ToolServerError,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.cli._json import SCHEMAS
from covonaut_es.domain import AgentThread
from covonaut_es.domain._calls import event_key
from covonaut_es.errors import ConfigurationError
from covonaut_es.mcp import IDEMPOTENCY_KEY_META, MCPServer, ToolPolicy
from covonaut_es.mcp._policy import (
    Hints,
    Listing,
    check_overrides,
    checked_listing,
    effective_policy,
    to_tool,
)
from inbox_support import current, inbox_client, sign_in
from support import answer, call
from test_approvals import ALICE, VERIFIER

SERVER = str(Path(__file__).with_name("mcp_server.py"))


def logged(log: Path) -> list[dict[str, object]]:
    """The calls that reached the server."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def stdio(log: Path, variant: str = "", *extra: str, **options: object) -> MCPServer:
    env = {"MCP_TEST_VARIANT": variant}
    args = [SERVER, str(log), *extra]
    return MCPServer.stdio(sys.executable, args, env, name="files", **options)  # type: ignore[arg-type]


def agent_of(store: Store, server: MCPServer, script: list[object], **config: object) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),  # type: ignore[arg-type]
            mcp_servers=[server],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            reviewer_verifier=VERIFIER,
            **config,  # type: ignore[arg-type]
        )
    )


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MCPServer, Path]]:
    """One stdio server for the tests that need no server of their own (``slow`` needs
    no approval on it); each reads only the log lines written after it started."""
    log = tmp_path_factory.mktemp("shared") / "log"
    with stdio(log, overrides={"slow": ToolPolicy(requires_approval=False)}) as server:
        yield server, log


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as opened:
        yield opened


def events(store: Store) -> list[AgentThread.Event]:
    return list(store.history("t"))


def test_stdio_tools_get_their_policy_from_the_hints_and_overrides(
    shared: tuple[MCPServer, Path],
) -> None:
    """Read-only needs no approval, destructive does, idempotent may retry; overrides win."""
    server, _ = shared
    tools = {tool.name: tool for tool in server.tools()}
    assert tools["read"].requires_approval is False and tools["read"].idempotent
    assert tools["delete"].requires_approval is True and not tools["delete"].idempotent
    assert tools["put"].idempotent and tools["put"].requires_approval is True
    assert tools["slow"].requires_approval is False  # the override; no hint says so
    assert tools["delete"].pin is not None and tools["delete"].pin.origin.startswith("stdio:")


def test_a_call_records_intent_passes_its_key_and_records_the_result(
    shared: tuple[MCPServer, Path], store: Store
) -> None:
    """The key the server sees in _meta is the recorded call's key; the tool is pinned."""
    server, log = shared
    before = len(logged(log))
    script = [call(("c1", "read", '{"path": "a.txt"}')), answer("done")]
    assert agent_of(store, server, script).run("read a") == "done"
    kinds = [type(e).__name__ for e in events(store)]
    result_at = kinds.index("ToolResultCheckpointed")  # the turn's last result
    assert kinds.index("ToolCalled") < kinds.index("ToolPinned") < result_at
    pinned = next(e for e in events(store) if isinstance(e, AgentThread.ToolPinned))
    assert pinned.tool.tool == "read" and pinned.tool.server == "files"
    result = next(e for e in events(store) if isinstance(e, AgentThread.ToolResultRecorded))
    assert result.content == "contents of a.txt"
    called = next(e for e in events(store) if isinstance(e, AgentThread.ToolCalled))
    (seen,) = logged(log)[before:]
    assert seen["key"] == event_key("t", called.originator_version, "c1")
    assert IDEMPOTENCY_KEY_META == "covonaut/idempotency_key"


def test_a_tool_error_is_the_result_the_model_reads(
    shared: tuple[MCPServer, Path], store: Store
) -> None:
    """A tool that reports isError gives a failed result with its text, not a crash."""
    server, _ = shared
    agent_of(store, server, [call(("c1", "fail", "{}")), answer("ok")]).run("go")
    result = next(e for e in events(store) if isinstance(e, AgentThread.ToolResultRecorded))
    assert result.outcome == "failed" and "disk on fire" in result.content


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serving_http(log: Path, port: int) -> Iterator[str]:
    """The test server over streamable HTTP (uvicorn) on a loopback port, until the end."""
    process = subprocess.Popen(
        [sys.executable, SERVER, str(log), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def http_url(tmp_path: Path) -> Iterator[str]:
    with serving_http(tmp_path / "log", _free_port()) as url:
        yield url


def test_a_streamable_http_server_serves_calls_with_the_key(
    tmp_path: Path, store: Store, http_url: str
) -> None:
    """Over streamable HTTP on loopback, a call runs once with the recorded key."""
    with MCPServer.http(http_url, {"Authorization": "Bearer s3cret"}, name="web") as server:
        assert "s3cret" not in server.origin and server.origin.startswith("http:")
        script = [call(("c1", "read", '{"path": "b"}')), answer("ok")]
        assert agent_of(store, server, script).run("read b") == "ok"
    called = next(e for e in events(store) if isinstance(e, AgentThread.ToolCalled))
    (seen,) = logged(tmp_path / "log")
    assert seen["key"] == event_key("t", called.originator_version, "c1")


def test_an_approval_runs_the_reviewed_tool_once(tmp_path: Path, store: Store) -> None:
    """A destructive tool pauses for a review; once approved, the model's call runs once."""
    log = tmp_path / "log"
    with stdio(log) as server:
        script = [
            call(("c1", "delete", '{"path": "a"}')),
            call(("c2", "delete", '{"path": "a"}')),
            answer("deleted"),
        ]
        agent = agent_of(store, server, script)
        assert agent.run("delete a") == ""
        (review,) = agent.pending_reviews
        assert review.tool is not None and review.tool.description == "Delete a file."
        assert logged(log) == []
        agent.approve(review.review_id, reviewer=ALICE)
        assert agent.resume() == "deleted"
    assert [entry["tool"] for entry in logged(log)] == ["delete"]


def test_an_approval_runs_the_held_back_mcp_call_on_resume(tmp_path: Path, store: Store) -> None:
    """With run_on_approval, resume runs the reviewed server call once, with the
    reviewer's edit and the call's key, and asks the model only for its answer."""
    log = tmp_path / "log"
    overrides = {"delete": ToolPolicy(run_on_approval=True)}
    with stdio(log, overrides=overrides) as server:
        agent = agent_of(store, server, [call(("c1", "delete", '{"path": "a"}')), answer("gone")])
        assert agent.run("delete a") == ""
        (review,) = agent.pending_reviews
        assert review.run_on_approval and logged(log) == []
        key = agent.state.open_calls[0].idempotency_key
        agent.approve(review.review_id, reviewer=ALICE, arguments={"path": "b"})
        assert agent.resume() == "gone"
        assert agent.result is not None and agent.result.status == "finished"
    (seen,) = logged(log)
    assert seen == {"tool": "delete", "args": {"path": "b"}, "key": key}
    used = [e for e in events(store) if isinstance(e, AgentThread.ApprovalUsed)]
    assert [(e.review_id, e.tool_call_id) for e in used] == [(review.review_id, "c1")]


def test_an_mcp_review_is_shown_and_approved_through_the_inbox(
    tmp_path: Path, store: Store
) -> None:
    """The inbox shows server, tool, arguments and description; its approval runs it once."""
    log = tmp_path / "log"
    with stdio(log) as server:
        agent_of(store, server, [call(("c1", "delete", '{"path": "a<b>"}'))]).run("delete")
    with inbox_client(store) as client:
        current(client)
        headers = {"Authorization": f"Bearer {ALICE}"}
        (review,) = client.get("/api/reviews", headers=headers).json()
        assert review["tool_name"] == "delete" and review["arguments"] == {"path": "a<b>"}
        assert review["server"]["server"] == "files"
        assert review["server"]["description"] == "Delete a file."
        sign_in(client, ALICE)
        page = client.get("/review", params={"id": review["review_id"], "thread": "t"}).text
        assert 'id="server">files' in page and "Delete a file." in page
        assert "a<b>" not in page and html.escape("a<b>") in page
        url = f"/api/reviews/{review['review_id']}/approve"
        assert client.post(url, headers=headers, json={}).status_code == 200
    with stdio(log) as server:
        script = [call(("c2", "delete", '{"path": "a<b>"}')), answer("gone")]
        assert agent_of(store, server, script).resume() == "gone"
    assert [(e["tool"], e["args"]) for e in logged(log)] == [("delete", {"path": "a<b>"})]


def test_the_command_line_lists_an_mcp_review_with_its_server(
    shared: tuple[MCPServer, Path], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """reviews shows server/tool in its table and the server's tool in --json."""
    server, _ = shared
    agent_of(store, server, [call(("c1", "delete", '{"path": "z"}'))]).run("delete z")
    capsys.readouterr()
    assert main(["reviews", "--store", store.url]) == 0
    assert "files/delete" in capsys.readouterr().out
    assert main(["reviews", "--json", "--store", store.url]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    jsonschema.validate([listed], SCHEMAS["reviews"])
    assert listed["server"]["description"] == "Delete a file." and listed["tool_changed"] == ""
    assert listed["arguments"] == {"path": "z"}


async def _arun(agent: Agent) -> str:
    return await agent.arun("read c")


def test_an_async_agent_calls_the_same_server(shared: tuple[MCPServer, Path], store: Store) -> None:
    """arun drives the same blocking call from its worker thread, with the same key rule."""
    server, log = shared
    before = len(logged(log))
    script = [call(("c1", "read", '{"path": "c"}')), answer("async ok")]
    assert asyncio.run(_arun(agent_of(store, server, script))) == "async ok"
    (seen,) = logged(log)[before:]
    called = next(e for e in events(store) if isinstance(e, AgentThread.ToolCalled))
    assert seen["key"] == event_key("t", called.originator_version, "c1")


@pytest.mark.parametrize(
    ("variant", "extra", "what"),
    [("changed", (), "input schema"), ("", ("--elsewhere",), "server")],
    ids=["schema", "server"],
)
def test_a_tool_changed_under_a_paused_thread_is_reviewed_again(
    tmp_path: Path, store: Store, variant: str, extra: tuple[str, ...], what: str
) -> None:
    """The approval of the earlier tool (another schema, or another server's tool of the
    same name) does not run this one; the new review says what changed."""
    log = tmp_path / "log"
    script = [
        call(("c1", "delete", '{"path": "a"}')),
        call(("c2", "delete", '{"path": "a"}')),
        answer("unused"),
    ]
    with stdio(log) as server:
        agent = agent_of(store, server, script)
        agent.run("delete a")
        agent.approve(agent.pending_reviews[0].review_id, reviewer=ALICE)
    with stdio(log, variant, *extra) as changed:
        agent = agent_of(store, changed, script[1:])
        assert agent.resume() == ""
        (again,) = agent.pending_reviews
    assert "the tool changed since it was last reviewed" in again.tool_changed
    assert what in again.tool_changed and logged(log) == []


def test_a_server_killed_during_a_call_leaves_it_in_doubt_not_rerun(
    tmp_path: Path, store: Store
) -> None:
    """The connection drops mid-call: the call is in doubt and the run pauses on it."""
    log = tmp_path / "log"
    others = set(_children())  # the module's shared server lives on
    with stdio(log, overrides={"slow": ToolPolicy(requires_approval=False)}) as server:
        agent = agent_of(store, server, [call(("c1", "slow", '{"seconds": 30}')), answer("x")])

        def kill_server() -> None:
            while not logged(log):
                time.sleep(0.02)
            for pid in set(_children()) - others:
                os.kill(pid, signal.SIGKILL)

        threading.Thread(target=kill_server, daemon=True).start()
        assert agent.run("sleep") == ""
        assert [p.call.id for p in agent.in_doubt] == ["c1"]
    assert len(logged(log)) == 1


def test_an_agent_killed_during_a_call_leaves_it_in_doubt_not_rerun(
    tmp_path: Path, store: Store
) -> None:
    """SIGKILL mid-call: the restored thread holds the call in doubt and never runs it again."""
    log = tmp_path / "log"
    agent_process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("mcp_agent.py")), store.url, str(log)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not logged(log) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(agent_process.pid, signal.SIGKILL)
        agent_process.wait()
    with stdio(log) as server:
        agent = agent_of(store, server, [answer("unused")])
        assert [p.call.id for p in agent.in_doubt] == ["c1"]
        with pytest.raises(ToolCallsInDoubtError):
            agent.run("again")
    assert [entry["tool"] for entry in logged(log)] == ["slow"]


def _children() -> list[int]:
    out = subprocess.run(
        ["pgrep", "-P", str(os.getpid())], capture_output=True, text=True, check=False
    )
    return [int(pid) for pid in out.stdout.split()]


def test_a_hostile_server_huge_or_hanging_is_bounded(tmp_path: Path, store: Store) -> None:
    """A huge answer is refused as the call's error; a call that never answers expires."""
    log = tmp_path / "log"
    hang = {"hang": ToolPolicy(timeout=1.0)}
    with stdio(log, "hostile", max_result_bytes=100_000, overrides=hang) as server:
        script = [call(("c1", "huge", "{}"), ("c2", "hang", "{}")), answer("x")]
        agent = agent_of(store, server, script)
        assert agent.run("go") == ""
    results = {
        e.tool_call_id: e for e in events(store) if isinstance(e, AgentThread.ToolResultRecorded)
    }
    assert results["c1"].outcome == "failed"
    assert "more than the 100000 allowed" in results["c1"].content
    assert [p.call.id for p in agent.in_doubt] == ["c2"]


def test_a_server_answering_garbage_fails_the_run_with_a_typed_error(store: Store) -> None:
    """A 'server' that writes no MCP gives ToolServerError and a recorded failed run."""
    garbage = MCPServer.stdio(
        sys.executable,
        ["-c", "import sys,time; print('{garbage'); sys.stdout.flush(); time.sleep(30)"],
        name="junk",
        connect_timeout=1.0,
    )
    with pytest.raises(ToolServerError, match="junk"):
        agent_of(store, garbage, [answer("x")]).run("go")
    garbage.close()
    assert store.load("t").status is ThreadStatus.ERROR


def test_a_server_down_at_restore_fails_the_run_then_reconnects(
    tmp_path: Path, store: Store
) -> None:
    """Unreachable: a typed error and a failed run; once it is up, the run goes on. The
    new thread's creation is recorded before the failure, apart from the run that is
    given the input (ADR 0081)."""
    port, log = _free_port(), tmp_path / "log"
    web = MCPServer.http(f"http://127.0.0.1:{port}/mcp", name="web", connect_timeout=2.0)
    script = [call(("c1", "read", '{"path": "x"}')), answer("read it")]
    with pytest.raises(ToolServerError, match="web"):
        agent_of(store, web, script).run("go")
    assert store.load("t").status is ThreadStatus.ERROR
    with serving_http(log, port), web:
        assert agent_of(store, web, script).run("go") == "read it"
    assert [entry["tool"] for entry in logged(log)] == ["read"]
    kinds = [type(e) for e in store.history("t")]
    assert kinds[:3] == [
        AgentThread.Started,
        AgentThread.RunFailed,
        AgentThread.RunStartedWithInput,
    ]


def test_parallel_calls_record_their_results_in_call_order(
    shared: tuple[MCPServer, Path], store: Store
) -> None:
    """A slow call asked first is recorded first, though a quick one ends before it."""
    server, log = shared
    before = len(logged(log))
    script = [
        call(("c1", "slow", '{"seconds": 0.5}'), ("c2", "read", '{"path": "q"}')),
        answer("ok"),
    ]
    assert agent_of(store, server, script, parallel_tools=True).run("both") == "ok"
    recorded = [
        e.tool_call_id for e in events(store) if isinstance(e, AgentThread.ToolResultRecorded)
    ]
    # The calls run in threads of their own, so which reaches the server first is the
    # scheduler's; what is promised is the order the results are recorded in.
    assert recorded == ["c1", "c2"]
    assert sorted(e["tool"] for e in logged(log)[before:]) == ["read", "slow"]


def test_an_idempotent_call_in_doubt_runs_again_with_the_same_key(
    tmp_path: Path, store: Store
) -> None:
    """Past its timeout, an idempotent call is in doubt; the next run repeats it once, same key."""
    log = tmp_path / "log"
    policy = {"slow": ToolPolicy(requires_approval=False, idempotent=True, timeout=0.3)}
    with stdio(log, overrides=policy) as server:
        script = [call(("c1", "slow", '{"seconds": 1}'))]
        assert agent_of(store, server, script).run("sleep") == ""
    assert [
        p.call.id
        for p in Agent(
            AgentConfig(
                provider=ScriptedProvider([]),
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
            )
        ).in_doubt
    ] == ["c1"]
    patient = {"slow": ToolPolicy(requires_approval=False, idempotent=True)}
    with stdio(log, overrides=patient) as server:
        assert agent_of(store, server, [answer("slept")]).resume() == "slept"
    first, again = logged(log)
    assert first["key"] == again["key"] and first["tool"] == again["tool"] == "slow"


HINTS = st.builds(Hints, st.booleans(), st.booleans(), st.booleans())
OVERRIDES = st.none() | st.builds(
    ToolPolicy,
    st.none() | st.booleans(),
    st.none() | st.booleans(),
    run_on_approval=st.none() | st.booleans(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hints=HINTS, override=OVERRIDES)
def test_hints_never_lower_a_policy_the_application_set(
    hints: Hints, override: ToolPolicy | None
) -> None:
    """Whatever a server claims, the application's setting stands; unset, hints decide."""
    policy = effective_policy(hints, override)
    if override is not None and override.requires_approval is not None:
        assert policy.requires_approval is override.requires_approval
    else:
        assert policy.requires_approval is (hints.destructive or not hints.read_only)
    if override is not None and override.idempotent is not None:
        assert policy.idempotent is override.idempotent
    # The tool made takes the policy's word on a retry of a call in doubt; a server's
    # tool is never read-only, since each call's pin is recorded apart (ADR 0150).
    listed = Listing("t", "d", {"type": "object"}, hints)
    tool = to_tool(listed, server="s", origin="o", prefix="", override=override, func=print)
    assert (tool.idempotent, tool.read_only) == (policy.idempotent, False)
    runs = override is not None and bool(override.run_on_approval)
    assert policy.run_on_approval is (runs and policy.requires_approval is not False)


def _nested(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    # What a thread cannot record, which the SDK reads from the wire (helper-244, -248).
    | st.sampled_from([math.nan, math.inf, 2**64, -(2**63) - 1, 10**30, "lone\ud800"]),
    _nested,
    max_leaves=8,
)
INPUT_SCHEMAS = st.one_of(
    JSON,
    st.fixed_dictionaries({"type": st.sampled_from(["object", "string", 5, None])}),
    st.just({"type": "object", "properties": {"x": {"type": "integer"}}}),
)
HINT_VALUES = st.none() | st.booleans() | st.text(max_size=3) | st.integers()
LISTED = st.builds(
    lambda name, description, schema, read_only, destructive: mcp_types.Tool.model_construct(
        name=name,
        description=description,
        input_schema=schema,
        annotations=mcp_types.ToolAnnotations.model_construct(
            read_only_hint=read_only, destructive_hint=destructive
        ),
    ),
    st.text(max_size=12) | st.integers(),
    st.none() | st.text(max_size=20) | st.integers(),
    INPUT_SCHEMAS,
    HINT_VALUES,
    HINT_VALUES,
)


@settings(max_examples=80, deadline=None)
@given(listed=st.lists(LISTED, max_size=4))
def test_a_hostile_tool_list_becomes_checked_tools_or_a_typed_error(listed: list[object]) -> None:
    """Any listing gives tools with valid names and schemas, pinned, asking approval unless
    marked read-only by a real boolean; or ToolServerError, never another exception."""
    try:
        tools = [
            to_tool(item, server="s", origin="stdio:x", prefix="", override=None, func=print)
            for item in checked_listing("s", listed)
        ]
    except ToolServerError:
        return
    for tool, raw in zip(tools, listed, strict=True):
        assert tool.pin is not None  # recorded as listed: an import reads it back
        msgspec.msgpack.encode(tool.pin)  # as an import checks: no integer past 64 bits
        hints = raw.annotations  # type: ignore[attr-defined]
        read_only = hints.read_only_hint is True and hints.destructive_hint is not True
        assert tool.requires_approval is (not read_only)
        assert tool.pin is not None and tool.pin.tool == tool.name
        assert tool.spec.parameters == raw.input_schema  # type: ignore[attr-defined]


def test_a_servers_catastrophic_pattern_refuses_its_listing(tmp_path: Path) -> None:
    """A tool whose schema has a pattern is refused when listed, naming the tool and
    where the pattern is, before any argument could be matched against it."""
    with pytest.raises(ToolServerError, match=r"tool 'find' .*'pattern' at \$\.properties"):
        stdio(tmp_path / "log", "redos", connect_timeout=5.0).tools()


# Where 2020-12 keeps subschemas: a keyword's value, each item of its list, each value
# of its name map; independent of the walk under test.
IN_VALUE = ("items", "not", "if", "then", "else", "contains", "additionalProperties")
IN_VALUE += ("propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
IN_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
IN_MAP = ("properties", "$defs", "dependentSchemas")
REGEX = st.sampled_from(["^(a+)+$", "(x|x)*y", "pattern", "a{1,99}"])
NAMES = st.sampled_from(["pattern", "patternProperties", "enum", "$ref", "p", "x"])
DATA = st.recursive(  # values a schema may hold: what a thread records (ints of 64 bits)
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | REGEX,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES | REGEX, inner, max_size=3),
    max_leaves=6,
)


def _schemas(inner: st.SearchStrategy[dict[str, object]]) -> st.SearchStrategy[dict[str, object]]:
    applied = st.one_of(
        st.tuples(st.sampled_from(IN_VALUE), inner),
        st.tuples(st.sampled_from(IN_LIST), st.lists(inner, min_size=1, max_size=2)),
        st.tuples(st.sampled_from(IN_MAP), st.dictionaries(NAMES, inner, max_size=2)),
    )
    return st.lists(applied, max_size=3).map(dict)


CLEAN_SCHEMAS = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["string", "object", "array"]),
            "enum": st.lists(DATA, min_size=1, max_size=2),
            "const": DATA,
            "default": DATA,
            "examples": st.lists(DATA, max_size=2),
            "description": REGEX,
        },
    ),
    _schemas,
    max_leaves=6,
)


def _positions(schema: dict[str, object]) -> list[dict[str, object]]:
    """Every subschema of a generated schema (the oracle of where a pattern applies)."""
    found = [schema]
    for key, value in schema.items():
        if key in IN_VALUE:
            children = [value]
        elif key in IN_LIST or key in IN_MAP:
            children = list(value.values() if isinstance(value, dict) else value)  # type: ignore[attr-defined]
        else:
            continue
        for child in children:
            found += _positions(child)  # type: ignore[arg-type]
    return found


def _listed_tool(schema: dict[str, object], *, output: bool = False) -> object:
    """A listed tool ``t`` whose input (or output) schema is ``schema``; an input schema
    describes an object whatever type ``schema`` says, as a tool's parameters must."""
    typed = {"type": "object", **schema}
    return mcp_types.Tool.model_construct(
        name="t",
        description="d",
        input_schema={"type": "object"} if output else {**typed, "type": "object"},
        output_schema=typed if output else None,
        annotations=None,
    )


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=CLEAN_SCHEMAS, data=st.data(), output=st.booleans())
def test_a_pattern_at_any_schema_position_is_refused_and_none_in_values(
    schema: dict[str, object], data: st.DataObject, output: bool
) -> None:
    """Regex-like text in values and names is listed; a pattern or patternProperties
    put at any subschema of the input or the output schema (which the SDK checks each
    result against), or a $ref into a value or onto a name map, refuses the listing,
    naming the tool. (A $ref to #/properties made a schema of the property names, and
    the output schema was not looked at: helper-115.)"""
    (listed,) = checked_listing("s", [_listed_tool(schema, output=output)])
    to_tool(listed, server="s", origin="stdio:x", prefix="", override=None, func=print)
    at = data.draw(st.sampled_from(_positions(schema)))
    hostile = data.draw(
        st.sampled_from(
            [
                {"pattern": "^(a+)+$"},
                {"patternProperties": {"^(a+)+$": {}}},
                {"$ref": "#/default", "default": {"pattern": "^(a+)+$"}},
                {"$ref": "#/$defs/d/enum/0", "$defs": {"d": {"enum": [{"pattern": "x"}]}}},
                {"$ref": "#/properties", "properties": {"patternProperties": {"^(a+)+$": {}}}},
                {"$ref": "#/%24defs", "$defs": {"pattern": {"type": "string"}}},
            ]
        )
    )
    at.update(hostile)
    with pytest.raises(ToolServerError, match=r"tool 't' .*(pattern|into a value)"):
        checked_listing("s", [_listed_tool(schema, output=output)])


NAN = float("nan")
# Per constructor, an argument and values of it that are wrong: of another type, or out
# of range; every one must be refused when given, naming it, before anything starts.
BAD_OPTIONS = {
    "name": [1, b"n"],
    "tool_prefix": [None, 1, b"x_"],
    "timeout": [-1, 0, "1", NAN, True],
    "connect_timeout": [None, -1, "10", float("inf")],
    "max_result_bytes": ["x", 0, -5, 1.5, True, None],
    "overrides": [["read"], {"read": {}}, {1: ToolPolicy()}, "read"],
}
BAD_STDIO = {"command": [None, 1], "args": ["server.py", [1], None], "env": [{"A": 1}, ["A"]]}
BAD_HTTP = {
    "url": [None, b"http://h/mcp", "http://h:99999/mcp", "http://h:abc/mcp", "http://[::1/mcp"],
    "headers": [{"A": 1}, {2: "b"}, "A: b"],
}
BAD_POLICY = {
    "requires_approval": ["yes", 1, 0],
    "idempotent": ["no", 1],
    "timeout": [-1, 0, "1", NAN, False],
    "run_on_approval": ["yes", 0],
}


def _bad(table: dict[str, list[object]]) -> st.SearchStrategy[tuple[str, object]]:
    return st.sampled_from([(name, value) for name, values in table.items() for value in values])


@settings(max_examples=50, deadline=None)
@given(
    made=st.sampled_from(["stdio", "http"]).flatmap(
        lambda kind: st.tuples(
            st.just(kind), _bad(BAD_OPTIONS) | _bad(BAD_STDIO if kind == "stdio" else BAD_HTTP)
        )
    )
)
def test_a_bad_server_option_is_refused_when_given_naming_it(
    made: tuple[str, tuple[str, object]],
) -> None:
    """MCPServer.stdio/.http refuse a wrong option with ConfigurationError naming it,
    before any server is started or listed (it surfaced inside a run, blaming the server)."""
    kind, (option, value) = made
    given = {"command": sys.executable, "args": [SERVER], "env": None} if kind == "stdio" else {}
    given = {"url": "http://127.0.0.1:9/mcp", "headers": None} if kind == "http" else given
    given[option] = value
    make = MCPServer.stdio if kind == "stdio" else MCPServer.http
    with pytest.raises(ConfigurationError, match=rf"\b{option}\b"):
        make(**given)  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None)
@given(bad=_bad(BAD_POLICY))
def test_a_bad_tool_policy_is_refused_when_made_naming_its_field(bad: tuple[str, object]) -> None:
    """ToolPolicy refuses a field of the wrong type or range with ConfigurationError."""
    field, value = bad
    with pytest.raises(ConfigurationError, match=rf"ToolPolicy\.{field}\b"):
        ToolPolicy(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["files_read", "Read"], ids=["prefixed", "typo"])
def test_an_override_of_no_listed_tool_is_refused_when_listed(tmp_path: Path, key: str) -> None:
    """An override keyed by the name the model sees, or by a typo, is a ConfigurationError
    naming it (it was ignored, and the read-only hint ran the tool unreviewed); entering
    the server that refuses leaves no subprocess behind."""
    others = set(_children())
    server = stdio(
        tmp_path / "log", tool_prefix="files_", overrides={key: ToolPolicy(requires_approval=True)}
    )
    with pytest.raises(ConfigurationError, match=rf"\['{key}'\].*tool_prefix 'files_'"), server:
        pass
    assert set(_children()) - others == set()


@settings(max_examples=50, deadline=None)
@given(
    names=st.sets(st.sampled_from(["read", "put", "Read", "x_read"]), max_size=3),
    keys=st.sets(st.sampled_from(["read", "put", "Read", "x_read", ""]), max_size=3),
)
def test_overrides_are_refused_exactly_when_a_key_names_no_listed_tool(
    names: set[str], keys: set[str]
) -> None:
    """Any key that is not a listed tool's name is named in the error; else none."""
    listed = [Listing(name, "d", {"type": "object"}, Hints()) for name in names]
    overrides = dict.fromkeys(keys, ToolPolicy())
    if keys <= names:
        check_overrides("s", overrides, listed, "x_")
        return
    with pytest.raises(ConfigurationError) as refused:
        check_overrides("s", overrides, listed, "x_")
    assert str(sorted(keys - names)) in str(refused.value)


def test_without_the_extra_the_import_names_it() -> None:
    """Importing covonaut_es.mcp without the mcp package says which extra to install."""
    code = "import sys; sys.modules['mcp'] = None; import covonaut_es.mcp"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1 and "pip install 'covonaut-es[mcp]'" in result.stderr


@pytest.mark.parametrize("output", [False, True])
@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"allOf": [{"$ref": "#"}]},
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
        {"$dynamicAnchor": "x", "$dynamicRef": "#x"},
        {"$schema": "http://json-schema.org/draft-04/schema#", "$ref": "#"},
        {"dependentSchemas": {"a": {"$ref": "#"}}},
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "dependencies": {"a": {"$ref": "#"}},
        },
    ],
)
def test_a_schema_whose_references_loop_refuses_the_listing(
    schema: dict[str, object], output: bool
) -> None:
    """A loop of references in the input schema (checked as any tool's) or the output
    schema (which the SDK checks each result against) refuses the listing, naming the
    tool, before a call could recurse without end."""
    refused = r"tool 't'.* schema of tool 't' has references that loop"
    with pytest.raises(ToolServerError, match=refused):
        for item in checked_listing("s", [_listed_tool(schema, output=output)]):
            to_tool(item, server="s", origin="o", prefix="", override=None, func=print)


@pytest.mark.parametrize("output", [False, True])
def test_an_id_that_is_not_text_refuses_the_listing_only_where_a_reference_reaches_it(
    output: bool,
) -> None:
    """A listed schema with an $id that is not text under an unknown keyword (which the
    meta-schema does not check, and no validator reads) is listed; reached by a $ref,
    it refuses the listing with ToolServerError naming the tool. (Both escaped the
    listing as a bare AttributeError from referencing: helper-186.)"""
    meta = {"x-meta": {"$id": 5}}
    (listed,) = checked_listing("s", [_listed_tool({"properties": {"q": meta}}, output=output)])
    to_tool(listed, server="s", origin="o", prefix="", override=None, func=print)
    reached = {"properties": {"q": {"$ref": "#/x-meta"}}, **meta}
    with pytest.raises(ToolServerError, match=r"tool 't'.* has an \$id that is not text"):
        for item in checked_listing("s", [_listed_tool(reached, output=output)]):
            to_tool(item, server="s", origin="o", prefix="", override=None, func=print)


def _nested(keyword: str, depth: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(depth):
        schema = {keyword: [schema] if keyword == "allOf" else schema}
    return schema


@pytest.mark.parametrize("output", [False, True])
@pytest.mark.parametrize("keyword", ["not", "allOf"])
def test_a_schema_nested_too_deep_to_check_refuses_the_listing(keyword: str, output: bool) -> None:
    """A finite input or output schema nested deeper than jsonschema can check (180
    levels of "not" or allOf) refuses the listing with ToolServerError naming the tool,
    not a bare RecursionError that ended the run. (helper-186)"""
    schema = {"properties": {"q": _nested(keyword, 180)}}
    refused = r"tool 't' has an invalid (parameters|output) schema: it nests too deep"
    with pytest.raises(ToolServerError, match=refused):
        for item in checked_listing("s", [_listed_tool(schema, output=output)]):
            to_tool(item, server="s", origin="o", prefix="", override=None, func=print)


@pytest.mark.parametrize("schema", [{"type": "intger"}, {"$schema": 5}, {"required": "x"}])
def test_an_output_schema_that_is_not_json_schema_refuses_the_listing(
    schema: dict[str, object],
) -> None:
    """The SDK checks each result against the output schema: one that is not valid
    JSON Schema refuses the listing with ToolServerError naming the tool, as an input
    schema does."""
    with pytest.raises(ToolServerError, match=r"tool 't' has an invalid output schema"):
        checked_listing("s", [_listed_tool(schema, output=True)])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=CLEAN_SCHEMAS, data=st.data(), output=st.booleans())
def test_unique_items_refuses_an_output_schema_and_is_checked_linearly_in_an_input_one(
    schema: dict[str, object], data: st.DataObject, output: bool
) -> None:
    """``uniqueItems`` put at any subschema of a server's output schema refuses the
    listing, naming it: the SDK checks each result against it with jsonschema, which
    compares every pair of items. In an input schema it is listed: the library checks
    a model's arguments against it in linear time."""
    at = data.draw(st.sampled_from(_positions(schema)))
    at["uniqueItems"] = True
    if not output:
        (listed,) = checked_listing("s", [_listed_tool(schema, output=False)])
        to_tool(listed, server="s", origin="stdio:x", prefix="", override=None, func=print)
        return
    with pytest.raises(ToolServerError, match=r"tool 't' .*'uniqueItems' at \$"):
        checked_listing("s", [_listed_tool(schema, output=True)])
