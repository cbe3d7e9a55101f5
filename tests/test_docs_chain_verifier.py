"""The chain verifier printed in docs/audits.md, run as it stands with the standard
library alone, agrees with ``verify`` and ``replay --verify`` on stores the library
wrote: generated threads with floats, text in every script, edited approvals and forks,
keyed and not; intact, re-spelled, and with one row changed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderResponse,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    open_store,
)
from covonaut_es.audit import AuditFinding
from covonaut_es.cli import main
from covonaut_es.store._topic_codes import TOPIC_CODES, full_topic

DOCS = Path(__file__).resolve().parent.parent / "docs" / "audits.md"
KEY = "docs-verifier-chain-key-0123456789"
SECRET = b"docs-verifier-reviewer-secret-32bytes"
THREADS = ("main", "fork")
FENCE = re.compile(r'```python title="verify_chain.py"\n(.*?)```', flags=re.S)


def verifier_code() -> str:
    """The verifier exactly as docs/audits.md prints it."""
    (code,) = FENCE.findall(DOCS.read_text())
    return str(code)


def verifier(directory: Path) -> Path:
    """The verifier exactly as docs/audits.md prints it, as a file."""
    path = directory / "verify_chain.py"
    path.write_text(verifier_code())
    return path


def test_the_documented_verifier_is_under_70_lines_of_the_standard_library() -> None:
    """The page keeps its promise: a short file that imports only the standard library
    (60 lines, and the table of topic codes since ADR 0064)."""
    (code,) = FENCE.findall(DOCS.read_text())
    assert len(code.splitlines()) < 70
    imported = {
        name
        for line in code.splitlines()
        if line.startswith("import ")
        for name in line.removeprefix("import ").split(", ")
    }
    assert imported <= set(sys.stdlib_module_names), imported
    assert "from " not in "".join(line[:5] for line in code.splitlines())


def test_the_documented_verifier_holds_the_librarys_topic_codes() -> None:
    """The verifier hashes each row's full topic from the same table of codes as the
    library: a code appended to one and not the other fails here."""
    namespace: dict[str, Any] = {}
    exec(compile(verifier_code(), "verify_chain.py", "exec"), namespace)
    assert namespace["TOPICS"] == dict(TOPIC_CODES)


def run_verifier(script: Path, db: Path, keyed: bool) -> dict[str, str]:
    """What the verifier prints, by thread: run with ``-I -S``, so without site-packages."""
    env = {"PATH": os.environ.get("PATH", "")}
    if keyed:
        env["COVONAUT_CHAIN_KEY"] = KEY
    result = subprocess.run(
        [sys.executable, "-I", "-S", str(script), str(db)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return dict(line.split(": ", 1) for line in result.stdout.splitlines())


def library(db: Path, keyed: bool) -> dict[str, tuple[AuditFinding, ...]]:
    """``verify``'s findings by thread; and ``replay --verify`` of each thread exits 0
    exactly when there are none."""
    found = {}
    url = f"sqlite:///{db}"
    with open_store(url, chain_key=KEY if keyed else None, create_tables=False) as store:
        for thread in THREADS:
            found[thread] = store.verify(thread).findings
    key_option = ["--chain-key-env", "DOCS_VERIFIER_KEY"] if keyed else []
    for thread, findings in found.items():
        with (
            patch.dict(os.environ, {"DOCS_VERIFIER_KEY": KEY}),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            status = main(["replay", thread, "--verify", "--json", "--store", url, *key_option])
        assert status == (1 if findings else 0), (thread, findings, status)
    return found


def agree(found: dict[str, tuple[AuditFinding, ...]], printed: dict[str, str]) -> bool:
    """Whether the verifier finds the threads ``verify`` finds broken (or stops checking
    them), each at a version ``verify`` reports (or one whose record it cannot even
    read)."""
    for thread, findings in found.items():
        if not findings:
            if printed[thread] != "intact":
                return False
            continue
        at = re.fullmatch(r"(?:broken at|not checked from) version (\d+).*", printed[thread])
        if at is None:
            return False
        if int(at[1]) not in {f.version for f in findings} and not any(
            "cannot be read" in f.problem for f in findings
        ):
            return False
    return True


INTACT = {"main": (), "fork": ()}


NAMES = st.text(st.sampled_from('aé\u2028\ue000\ufb01😀\U0010ffff\x1f"'), max_size=3)
LEAVES = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e16, 0.00001, 1e21, 1e-7, 3.0, -0.0, 2.0**60, 5e-324])
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=8)
    | st.booleans()
)
ARGUMENTS = st.dictionaries(NAMES, LEAVES | st.lists(LEAVES, max_size=3), max_size=4)


def pay_tool(paid: list[Any]) -> Tool:
    return Tool(
        "pay",
        "Pay",
        {"type": "object"},
        lambda ctx, args: paid.append(args) or {"paid": args},
        requires_approval=True,
        run_on_approval=True,
    )


def write_store(
    db: Path,
    keyed: bool,
    text: str,
    arguments: dict[str, Any],
    edit: dict[str, Any] | None,
    answer: str,
) -> None:
    """A thread that pays after an approval (edited or not), and a fork of it that
    goes on, written through the user's side of the API, in a store without compression
    (the verifier reads payloads as JSON, with the standard library alone)."""
    verifier_ = HmacReviewerVerifier(SECRET)
    url = f"sqlite:///{db}"
    with open_store(url, chain_key=KEY if keyed else None, compress="none") as store:
        agent = agent_on(
            store,
            "main",
            [
                ProviderResponse(tool_calls=(ToolCall("c1", "pay", json.dumps(arguments)),)),
                ProviderResponse(content=answer),
            ],
            verifier_,
        )
        agent.run(text)
        (request,) = agent.pending_reviews
        token = verifier_.issue_token("rita", 3600)
        agent.approve(request.review_id, reviewer=token, arguments=edit, comment=text)
        agent.resume()
        store.fork("main", new_thread_id="fork")
        agent_on(store, "fork", [ProviderResponse(content=answer + " ∑")], verifier_).run(text)


def agent_on(
    store: Store, thread: str, script: list[ProviderResponse], verifier_: HmacReviewerVerifier
) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[pay_tool([])],
            checkpoint=CheckpointSettings(store=store, thread_id=thread),
            reviewer_verifier=verifier_,
        )
    )


def thread_rows(db: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY 1, 2"
        ).fetchall()
    for stream, version, topic, state in rows:
        if full_topic(topic).startswith("covonaut.thread."):
            yield stream, version, json.loads(state)


def write_row(db: Path, stream: str, version: int, payload: dict[str, Any]) -> None:
    """Replace one stored payload, as a writer of the database behind the library
    could; written by the standard library's encoder (every non-ASCII escaped, floats
    as ``repr`` spells them, members in another order)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
            (json.dumps(payload).encode(), stream, version),
        )
        conn.commit()


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for name, item in value.items():
            yield from leaves(item, (*path, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
    else:
        yield path


def changed(value: Any) -> Any:
    """Another value of the same kind (or ``0`` for null)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1 if abs(value) < 1e15 else value * 2
    if isinstance(value, str):
        return value + "x"
    return 0


def with_change(payload: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    copy = json.loads(json.dumps(payload))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = changed(parent[path[-1]])
    return copy


# Not shrunk: each example writes a store and runs three checks of it.
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    keyed=st.booleans(),
    text=st.text(max_size=12),
    arguments=ARGUMENTS,
    edit=st.none() | ARGUMENTS,
    answer=st.text(max_size=12),
    row=st.integers(0, 10_000),
    leaf=st.integers(0, 10_000),
)
def test_the_documented_verifier_agrees_with_verify(
    tmp_path_factory: Any,
    keyed: bool,
    text: str,
    arguments: dict[str, Any],
    edit: dict[str, Any] | None,
    answer: str,
    row: int,
    leaf: int,
) -> None:
    """Intact, and with every row re-spelled by another JSON encoder, both find every
    thread intact; with one value of one row changed, both find the same threads broken,
    at the same version."""
    directory = tmp_path_factory.mktemp("verifier")
    script, db = verifier(directory), directory / "store.db"
    write_store(db, keyed, text, arguments, edit, answer)
    assert library(db, keyed) == INTACT
    assert run_verifier(script, db, keyed) == {"main": "intact", "fork": "intact"}

    rows = list(thread_rows(db))
    for stream, version, payload in rows:
        write_row(db, stream, version, payload)
    assert library(db, keyed) == INTACT
    assert run_verifier(script, db, keyed) == {"main": "intact", "fork": "intact"}

    stream, version, payload = rows[row % len(rows)]
    # The ids it finds threads by: `verify` checks a stream holds the thread it names.
    paths = [p for p in leaves(payload) if p not in {("thread_id",), ("parent_thread_id",)}]
    write_row(db, stream, version, with_change(payload, paths[leaf % len(paths)]))
    found = library(db, keyed)
    assert any(found.values()), found
    printed = run_verifier(script, db, keyed)
    assert agree(found, printed), (found, printed)


def test_a_keyed_thread_rewritten_without_the_key_is_never_vouched_for(tmp_path: Path) -> None:
    """A writer without the key strips every link of a keyed thread (or recomputes them
    as the public unkeyed hash), edits a message and empties the head anchor's link:
    given the key, the verifier does not say intact, as ``verify`` does not."""
    script, db = verifier(tmp_path), tmp_path / "store.db"
    write_store(db, True, "pay", {"amount": 5}, None, "done")
    for relink in (False, True):
        previous = ""
        for stream, version, payload in thread_rows(db):
            if payload.get("thread_id", "main") != "main" and version == 1:
                continue
            payload.pop("chain", None)
            if payload.get("message", {}).get("role") == "user":
                payload["message"]["content"] = "EVIL"
            if relink:  # the unkeyed scheme anyone can compute, from the docs
                payload["chain"] = documented_link(script, previous, stream, version, payload)
                previous = payload["chain"]
            write_row(db, stream, version, payload)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("UPDATE stored_events_heads SET chain = ''")
            conn.commit()
        assert library(db, True)["main"]
        assert run_verifier(script, db, True)["main"] != "intact"


def test_a_copy_of_a_thread_under_another_stream_cannot_hide_an_edit(tmp_path: Path) -> None:
    """The rows of a thread copied unchanged under a new stream id, then the original
    edited: the verifier reports the thread, instead of checking the copy."""
    script, db = verifier(tmp_path), tmp_path / "store.db"
    write_store(db, False, "pay", {"amount": 5}, None, "done")
    rows = [r for r in thread_rows(db) if r[2].get("thread_id", "") != "fork"]
    main_stream = next(stream for stream, version, p in rows if p.get("thread_id") == "main")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "INSERT INTO stored_events SELECT X'ffffffffffffffffffffffffffffffff', "
            "originator_version, topic, state FROM stored_events WHERE originator_id = ?",
            (main_stream,),
        )
        conn.commit()
    stream, version, payload = next(r for r in rows if r[0] == main_stream and r[1] == 3)
    write_row(db, stream, version, with_change(payload, next(iter(leaves(payload)))))
    assert run_verifier(script, db, False)["main"] != "intact"


def documented_link(
    script: Path, previous: str, stream: str, version: int, payload: dict[str, Any]
) -> str:
    """The unkeyed link the documented verifier computes for a row, as a forger would."""
    with contextlib.closing(sqlite3.connect(script.parent / "store.db")) as conn:
        (topic,) = conn.execute(
            "SELECT topic FROM stored_events WHERE originator_id = ? AND originator_version = ?",
            (stream, version),
        ).fetchone()
    namespace: dict[str, Any] = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    full = namespace["TOPICS"].get(topic, topic)
    return str(namespace["link"](previous, full, version, payload, None))
