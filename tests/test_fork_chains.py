"""Chains of forks of any depth: a fork of a fork of a fork... reads as its root does.

A fork's read grafts its first event onto its parent as of the version it branches
from, and that parent's read does the same; past a few forks followed one inside the
other, a read reads the rest of the chain from its oldest thread down, so no depth of
chain meets Python's recursion limit. Here a chain far deeper than the call stack
allows is read by every command (the store's reads, the audit, the command line's tree,
the inbox's thread page, an export and its import), and generated trees of forks and
labels, intact or with stored rows damaged as a hostile database writer would, read the
same whether every fork is followed inside its child's read or every one is read ahead
of it.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, open_store
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.cli import main
from covonaut_es.cli._forks import _tree_json
from covonaut_es.domain import AgentThread, ThreadTree, thread_aggregate_id
from covonaut_es.errors import TransferError
from covonaut_es.service import ThreadService
from covonaut_es.store import _lineage
from covonaut_es.store._lineage import refuse_fork_loop
from inbox_support import inbox_client, paused_on_tool, sign_in
from support import sqlite_key
from test_approvals import ALICE
from test_audit import long_thread

DEPTH = 600
"""Forks in the deep chain: past the call stack's limit for a read that followed each
inside the one before (about 15 frames each), and past msgspec's for the nested tree."""


@contextlib.contextmanager
def followed_at_once(forks: int) -> Iterator[None]:
    """Reads follow at most ``forks`` forks one inside the other, then read ahead."""
    with mock.patch.object(_lineage, "FOLLOWED_AT_ONCE", forks):
        yield


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Store]]:
    """A SQLite store holding a root of 12 messages and a chain of :data:`DEPTH` forks
    of it, each forked at its parent's head and labelled; the store's URL and the store."""
    url = f"sqlite:///{tmp_path_factory.mktemp('chain') / 'threads.db'}"
    with open_store(url) as store:
        long_thread(store, "root", 12)
        service, parent = ThreadService(store), "root"
        for depth in range(1, DEPTH + 1):
            parent = store.fork(parent, new_thread_id=f"f{depth}")
            if depth % 100 == 0:
                service.label(parent, f"depth {depth}")
        yield url, store


def test_the_deepest_fork_of_a_chain_reads_as_its_root(chain: tuple[str, Store]) -> None:
    """Every read of the deepest fork gives the root's messages and the chain's
    versions; the audit finds nothing; the tree nests every fork with its labels."""
    _, store = chain
    assert sys.getrecursionlimit() <= 3000  # else the chain would not be deep enough
    deepest, root = f"f{DEPTH}", store.load("root")
    thread = store.load(deepest)
    head = root.version + DEPTH + DEPTH // 100
    assert thread.version == head
    assert thread.state.messages == root.state.messages
    assert [label.name for label in thread.labels] == [f"depth {d}" for d in range(100, 601, 100)]
    assert store.find(deepest, version=root.version).state == root.state  # inherited
    assert store.replay_state(deepest) == thread.state
    assert [e.originator_version for e in store.history(deepest)] == list(range(1, head + 1))
    assert len(list(store.replay(deepest))) == head
    assert store.verify(deepest).ok
    assert store.path_to_root(deepest)[-1] == "root"
    assert store.tree_stats("root").depth == DEPTH
    node, depth = store.tree("root"), 0
    while node.children:
        (node,) = node.children
        depth += 1
        assert node.thread_id == f"f{depth}"
        if depth % 150 == 0:
            assert node.labels == tuple(store.load(node.thread_id).labels)
    assert depth == DEPTH
    assert node.labels == tuple(thread.labels)


def test_the_tree_of_a_deep_chain_prints_and_serves(
    chain: tuple[str, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    """``tree`` prints every fork indented under its parent, and as the nested JSON of a
    ``ThreadTree``; the inbox's page of the deepest fork lists the whole chain."""
    url, store = chain
    assert main(["tree", "root", "--store", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == DEPTH + 1
    assert lines[-1].startswith(" " * 2 * DEPTH + f"f{DEPTH} @")
    assert main(["tree", "root", "--store", url, "--json"]) == 0
    printed = capsys.readouterr().out
    assert printed.count('"thread_id"') == DEPTH + 1
    assert printed.rstrip().endswith("]}" * (DEPTH + 1))
    with inbox_client(store) as client:
        sign_in(client, ALICE)
        page = client.get("/thread", params={"id": f"f{DEPTH}"})
    assert page.status_code == 200
    assert page.text.count("<ul>") == DEPTH
    assert all(f">f{depth}</a>" in page.text for depth in range(1, DEPTH + 1))


def test_a_deep_chain_exports_and_imports(chain: tuple[str, Store]) -> None:
    """The deepest fork exported with its ancestors imports into an empty store, each
    fork folded onto its parent from the file, and loads there as here."""
    _, store = chain
    deepest = f"f{DEPTH}"
    lines = list(export_thread(store, deepest, with_ancestors=True))
    with open_store("memory://") as copy:
        assert len(import_threads(copy, lines)) == DEPTH + 1
        assert copy.load(deepest).state == store.load(deepest).state
        assert copy.verify(deepest).ok


trees = st.lists(
    st.one_of(
        st.tuples(st.just("fork"), st.integers(0, 10**6), st.integers(0, 10**6)),
        st.tuples(
            st.just("label"),
            st.integers(0, 10**6),
            st.sampled_from(["a", "b", "c"]),
            st.none() | st.integers(0, 10**6),
        ),
    ),
    max_size=24,
)


def grown(store: Store, operations: list[tuple[Any, ...]]) -> list[str]:
    """A root of 8 messages grown by ``operations``: forks of a thread (by index) at one
    of its versions, and labels of a thread or one of its versions. Its threads."""
    long_thread(store, "root", 8)
    threads, service = ["root"], ThreadService(store)
    for kind, which, *rest in operations:
        thread_id = threads[which % len(threads)]
        head = store.head_version(thread_id)
        assert head is not None
        if kind == "fork":
            version = rest[0] % head + 1
            threads.append(
                store.fork(thread_id, at_version=version, new_thread_id=f"t{len(threads)}")
            )
        else:
            name, version = rest
            at = None if version is None else version % head + 1
            service.label(thread_id, name, version=at)
    return threads


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=trees)
def test_generated_trees_read_the_same_followed_or_read_ahead(
    operations: list[tuple[Any, ...]],
) -> None:
    """Every thread of a generated tree, at its head and at every version, loads to the
    same state whether reads follow every fork inside its child's read or read every
    ancestor ahead; its history is versions 1 to its head; its labels in the tree are
    those a load gives; exported with its ancestors, it imports into an empty store as
    the same state; the tree prints as msgspec writes it."""
    with (
        tempfile.TemporaryDirectory() as directory,
        open_store(f"sqlite:///{directory}/threads.db") as store,
    ):
        threads = grown(store, operations)
        tree = store.tree("root")
        labels = dict(walk(tree))
        for thread_id in threads:
            head = store.head_version(thread_id)
            assert head is not None
            for version in [None, *range(1, head + 1)]:
                read = functools.partial(store.load, thread_id, version=version)
                followed = outcome(read)
                with followed_at_once(0):
                    assert outcome(read) == followed
            with followed_at_once(0):
                assert store.replay_state(thread_id) == store.load(thread_id).state
            versions = [e.originator_version for e in store.history(thread_id)]
            assert versions == list(range(1, head + 1))
            assert labels[thread_id] == tuple(store.load(thread_id).labels)
            with open_store("memory://") as copy:
                import_threads(copy, export_thread(store, thread_id, with_ancestors=True))
                assert copy.load(thread_id).state == store.load(thread_id).state
        assert _tree_json(tree) == msgspec.json.encode(tree).decode()


def walk(tree: ThreadTree) -> Iterator[tuple[str, tuple[Any, ...]]]:
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node.thread_id, node.labels
        stack.extend(node.children)


class Raised(NamedTuple):
    """What a read raised: the error's type and text."""

    kind: str
    text: str


def outcome(read: Callable[[], Any]) -> Any:
    """What ``read`` gives, or what it raises."""
    try:
        return read()
    except Exception as exc:
        return Raised(type(exc).__name__, str(exc))


CHAIN = ("root", "f1", "f2", "f3", "f4", "f5")
STREAMS = tuple(sqlite_key(thread_aggregate_id(t)) for t in CHAIN)


def reparented(db: Path, fork: str, parent: str, new_parent: str) -> None:
    """Rewrite ``fork``'s first event to name ``new_parent`` where it names ``parent``,
    stored as the library stores an event (a writer of the database who can)."""
    with open_store(f"sqlite:///{db}") as store:
        (record,) = store._app.recorder.select_events(thread_aggregate_id(fork), limit=1)
        mapper = store._app.mapper
        plain = bytes(mapper.plain_payload(record))  # type: ignore[attr-defined]
        named = f'"parent_thread_id":"{parent}"'.encode()
        assert named in plain
        changed = plain.replace(named, f'"parent_thread_id":"{new_parent}"'.encode())
        stored = mapper.stored_payload(changed)  # type: ignore[attr-defined]
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
            (stored, sqlite_key(thread_aggregate_id(fork)), record.originator_version),
        )


@pytest.fixture(scope="module")
def damaged_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of a snapshotted root, a chain of four forks of it, each of the one before
    and labelled once, two of them forked below their parent's head, and a fifth whose
    first event names a fork as its parent at a version that fork inherits (as no fork
    names it now, but a store or an import may hold)."""
    db = tmp_path_factory.mktemp("template") / "threads.db"
    with open_store(f"sqlite:///{db}") as store:
        long_thread(store, "root", 80)  # long enough for a snapshot
        service = ThreadService(store)
        branches = [("root", 70), ("f1", None), ("f2", 73), ("f3", None), ("root", 70)]
        for child, (parent, at) in zip(CHAIN[1:], branches, strict=True):
            store.fork(parent, at_version=at, new_thread_id=child)
            service.label(child, child)
    reparented(db, "f5", "root", "f2")
    return db


damage = st.tuples(
    st.sampled_from(["delete", "bytes", "topic", "version", "move", "parent"]),
    st.sampled_from(STREAMS),
    st.integers(0, 200),
    st.binary(max_size=24) | st.sampled_from([b"", b"{}", b'{"_v": 99}']),
    st.sampled_from(STREAMS),
)


def damage_row(db: Path, change: tuple[Any, ...]) -> None:
    """Damage one row of ``db`` as ``change`` says: delete it, change its bytes, its
    topic or its version, move it to another stream, or point a fork's first event at
    another thread's stream; a change the schema refuses changes nothing."""
    kind, stream, index, data, other = change
    with sqlite3.connect(db) as conn:
        versions = [
            v
            for (v,) in conn.execute(
                "SELECT originator_version FROM stored_events WHERE originator_id = ? "
                "ORDER BY originator_version",
                (stream,),
            )
        ]
        if not versions:
            return
        version = versions[0] if kind == "parent" else versions[index % len(versions)]
        key = "WHERE originator_id = ? AND originator_version = ?"
        statements = {
            "delete": (f"DELETE FROM stored_events {key}", ()),
            "bytes": (f"UPDATE stored_events SET state = ? {key}", (data,)),
            "topic": (f"UPDATE stored_events SET topic = 'covonaut.thread.Forked' {key}", ()),
            "version": (f"UPDATE stored_events SET originator_version = ? {key}", (index,)),
            "move": (f"UPDATE stored_events SET originator_id = ? {key}", (other,)),
            "parent": (f"UPDATE stored_events SET state = ? {key}", (forked_state(conn, other),)),
        }
        statement, values = statements[kind]
        with contextlib.suppress(sqlite3.IntegrityError):
            conn.execute(statement, (*values, stream, version))


def forked_state(conn: sqlite3.Connection, stream: bytes) -> bytes:
    """The stored bytes of ``stream``'s first event (another fork's ``Forked``, or the
    root's start): copied over a fork's first event, they make it name another parent."""
    row = conn.execute(
        "SELECT state FROM stored_events WHERE originator_id = ? ORDER BY originator_version "
        "LIMIT 1",
        (stream,),
    ).fetchone()
    return b"" if row is None else bytes(row[0])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(damage, min_size=1, max_size=3))
@example(changes=[("parent", STREAMS[1], 0, b"", STREAMS[5])])  # f1 made a copy of f5: a loop
def test_damaged_chains_read_the_same_followed_or_read_ahead(
    damaged_template: Path, changes: list[tuple[Any, ...]]
) -> None:
    """After one to three damaged rows anywhere in the chain, every read of every fork
    (load at its head and at each version, replay, history) gives the same state, or
    raises the same error with the same message, whether forks are followed inside
    their children's reads or read ahead of them."""
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "threads.db"
        db.write_bytes(damaged_template.read_bytes())
        for change in changes:
            damage_row(db, change)
        with open_store(f"sqlite:///{db}") as store:
            reads: list[Callable[[], Any]] = []
            for thread_id in CHAIN:
                reads += [
                    lambda t=thread_id: store.load(t).state,  # type: ignore[misc]
                    lambda t=thread_id: store.replay_state(t),  # type: ignore[misc]
                    lambda t=thread_id: len(store.history(t)),  # type: ignore[misc]
                ]
                reads += [
                    lambda t=thread_id, v=v: store.load(t, version=v).state  # type: ignore[misc]
                    for v in (1, 40, 69, 70, 71, 72, 75, 85)
                ]
            followed = [outcome(read) for read in reads]
            with followed_at_once(0):
                assert [outcome(read) for read in reads] == followed
            for thread_id in CHAIN:
                walked = outcome(functools.partial(store.history, thread_id))
                recursed = outcome(functools.partial(recursive_history, store, thread_id))
                if isinstance(recursed, Raised) or whole(recursed):
                    assert walked == recursed
                else:  # cut by count past a lost event: the walk refuses it by version
                    assert isinstance(walked, Raised)
                    assert walked.kind == "MissingEventError"


def whole(history: tuple[Any, ...]) -> bool:
    """Whether a history holds versions 1 to its last, each once."""
    return [e.originator_version for e in history] == list(range(1, len(history) + 1))


def recursive_history(store: Store, thread_id: str, below: tuple[str, ...] = ()) -> tuple[Any, ...]:
    """A thread's history as the store read it by recursion before chains of forks were
    walked in loops: the parent's whole history cut at the branch point by count (past
    a lost event, a version twice), then its own; a loop of forks refused."""
    own = store._reader._own_events(thread_id)
    first = own[0]
    if not isinstance(first, AgentThread.Forked):
        return own
    first.check_place()
    parent = first.parent_thread_id
    refuse_fork_loop(thread_id, parent, below, store.url)
    return recursive_history(store, parent, (*below, thread_id))[: first.parent_version] + own


def test_a_loop_of_forks_met_while_reading_ahead_is_refused(damaged_template: Path) -> None:
    """A fork's first event rewritten to branch from a fork of its fork: every read of
    a thread below the loop (a load, its history, its path to the root, its tree, its
    export) refuses it by type, and a load with the same message whether it follows each
    fork or reads ahead; the session tree's walks end."""
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "threads.db"
        db.write_bytes(damaged_template.read_bytes())
        reparented(db, "f2", "f1", "f4")
        with open_store(f"sqlite:///{db}") as store:
            reads = [functools.partial(store.load, t) for t in ("f2", "f3", "f4")]
            followed = [outcome(read) for read in reads]
            with followed_at_once(0):
                assert [outcome(read) for read in reads] == followed
            others = [
                functools.partial(store.history, "f3"),
                functools.partial(store.path_to_root, "f3"),
                functools.partial(store.tree, "f2"),
                lambda: list(export_thread(store, "f3", with_ancestors=True)),
            ]
            followed += [outcome(read) for read in others]
            session = store.session_tree()
            assert set(session.descendants("f2")) == {"f2", "f3", "f4", "f5"}
            assert set(session.path_to_root("f2")) == {"f2", "f3", "f4"}
            assert store.tree_stats("f2").threads == 4
    for raised in followed:
        assert raised.kind == "ThreadNotFoundError"
        assert "leads back" in raised.text


def finished(read: Callable[[], Any], seconds: float = 60) -> Any:
    """``read``'s outcome, which must come within ``seconds`` (a read that loops
    without end fails the test instead of hanging the suite)."""
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(outcome(read)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert results, f"{read} did not return within {seconds} s"
    return results[0]


def test_a_loop_of_forks_behind_a_snapshot_ends_every_walk(damaged_template: Path) -> None:
    """A fork's first event rewritten to name itself, behind a snapshot of it past its
    branch point, so that it and its forks still load: its path to the root, its export
    with its ancestors and its inbox page are refused or answered, never a walk without
    end (each grew its list until memory ran out)."""
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "threads.db"
        db.write_bytes(damaged_template.read_bytes())
        with open_store(f"sqlite:///{db}") as store:
            assert store.snapshot_if_due(store.load("f1"))
        reparented(db, "f1", "root", "f1")
        with open_store(f"sqlite:///{db}") as store:
            assert store.load("f2").version == 74
            for read in (
                functools.partial(store.path_to_root, "f2"),
                lambda: list(export_thread(store, "f2", with_ancestors=True)),
            ):
                raised = finished(read)
                assert isinstance(raised, Raised)
                assert raised.kind == "ThreadNotFoundError"
                assert "leads back" in raised.text
            with inbox_client(store) as client:
                sign_in(client, ALICE)
                page = finished(lambda: client.get("/thread", params={"id": "f2"}))
            assert page.status_code == 404


def test_the_tree_of_a_fork_that_loads_reads_no_more_of_its_ancestors(
    damaged_template: Path,
) -> None:
    """The tree under a fork whose snapshot covers its branch point, with its parent's
    events all deleted: it is made as the fork loads, each thread with the labels a load
    gives, without reading the parent a load does not read."""
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "threads.db"
        db.write_bytes(damaged_template.read_bytes())
        with open_store(f"sqlite:///{db}") as store:
            assert store.snapshot_if_due(store.load("f3"))
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM stored_events WHERE originator_id = ?", (STREAMS[2],))
        with open_store(f"sqlite:///{db}") as store:
            tree = store.tree("f3")
            assert [t for t, _ in walk(tree)] == ["f3", "f4"]
            assert dict(walk(tree)) == {t: tuple(store.load(t).labels) for t in ("f3", "f4")}


def test_a_start_copied_over_a_forks_first_event_is_refused_by_its_history(
    damaged_template: Path,
) -> None:
    """The root's ``Started`` copied over a fork's first event (its topic and bytes, at
    the fork's version): the fork's history refuses it as a load does, where it was
    taken for the fork's own start."""
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "threads.db"
        db.write_bytes(damaged_template.read_bytes())
        with sqlite3.connect(db) as conn:
            first = "ORDER BY originator_version LIMIT 1"
            topic, state = conn.execute(
                f"SELECT topic, state FROM stored_events WHERE originator_id = ? {first}",
                (STREAMS[0],),
            ).fetchone()
            (version,) = conn.execute(
                f"SELECT originator_version FROM stored_events WHERE originator_id = ? {first}",
                (STREAMS[1],),
            ).fetchone()
            conn.execute(
                "UPDATE stored_events SET topic = ?, state = ? WHERE originator_id = ? "
                "AND originator_version = ?",
                (topic, state, STREAMS[1], version),
            )
        with open_store(f"sqlite:///{db}") as store:
            history = outcome(functools.partial(store.history, "f1"))
            assert isinstance(history, Raised)
            assert history.kind == "StoredRowError"
            assert isinstance(outcome(functools.partial(store.load, "f1")), Raised)


@pytest.mark.parametrize("depth", [40, 400])
def test_an_export_of_forks_of_deeply_nested_data_imports_or_is_refused_by_type(
    depth: int,
) -> None:
    """A thread paused on a tool's data nested ``depth`` deep, a fork of it and a fork
    of the fork, exported with the ancestors: the import writes all three as they were,
    or refuses by type, writing nothing; imported a thread at a time, they all import."""
    data: Any = "leaf"
    for _ in range(depth):
        data = [data]
    with open_store("memory://") as store:
        paused_on_tool(store, "t", data=data)
        store.fork("t", new_thread_id="t1")
        store.fork("t1", new_thread_id="t2")
        whole = list(export_thread(store, "t2", with_ancestors=True))
        with open_store("memory://") as copy:
            try:
                assert import_threads(copy, whole) == ["t", "t1", "t2"]
            except TransferError as exc:
                assert depth > 40, exc
                assert "nested too deeply" in str(exc)
                assert not copy.exists("t")
                for thread_id in ("t", "t1", "t2"):
                    import_threads(copy, export_thread(store, thread_id))
            assert copy.load("t2").state == store.load("t2").state
