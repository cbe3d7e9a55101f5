"""The hash chain's write path: the store seals each event once, at save, with its key
when it has one, records when it adopted that key, and refuses to seal on a broken
predecessor."""

from __future__ import annotations

import functools
import itertools
import json
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, create_cipher_key, open_store
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.errors import (
    BrokenChainError,
    ChainKeyMismatchError,
    ChainKeyRequiredError,
    ProviderError,
    SerializationError,
    TransferError,
)
from covonaut_es.messages import Message
from covonaut_es.service import ThreadService
from covonaut_es.store._chain import KEYED, PUBLIC, chain_hash, scheme_of
from covonaut_es.store._chain_key import CHAIN_TABLE, chain_key_fingerprint
from covonaut_es.store._settings import settings_table
from support import agent_on, answer, call, earlier_thread_id_rule, sqlite_key, start_bare_run

GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "v4-chain"
MANIFEST: dict[str, Any] = json.loads((GOLDEN / "manifest.json").read_text())
GOLDEN_KEY: str = MANIFEST["chain_key"]
NOW = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize("name", sorted(MANIFEST["stores"]))
def test_chains_sealed_by_the_code_before_the_store_sealed_once_verify_and_go_on(
    name: str, tmp_path: Path
) -> None:
    """The stores 198c838 wrote, keyed and unkeyed, load and verify intact with the
    heads they were written with, and stay intact after more saves and a fork."""
    golden = MANIFEST["stores"][name]
    shutil.copyfile(GOLDEN / name, tmp_path / name)
    key = GOLDEN_KEY if golden["keyed"] else None
    with open_store(f"sqlite:///{tmp_path / name}", chain_key=key) as store:
        for thread_id, expected in golden["threads"].items():
            report = store.verify(thread_id)
            assert report.ok, (thread_id, report.findings)
            assert report.chained == report.events == expected["events"]
            assert store.load(thread_id).chain_head == expected["head"]
        for thread_id in golden["threads"]:
            thread = store.load(thread_id)
            thread.append_message(Message(role="user", content="after the change"), now=NOW)
            store.save(thread)
            # Old links stay as they were; the new one covers its schema version.
            assert scheme_of(thread.chain_head) == (KEYED if key else PUBLIC)
        store.fork("long-fork", new_thread_id="fork-after")
    with open_store(f"sqlite:///{tmp_path / name}", chain_key=key) as store:
        for thread_id in [*golden["threads"], "fork-after"]:
            report = store.verify(thread_id)
            assert report.ok, (thread_id, report.findings)
            assert report.chained == report.events


KEY = "a secret of thirty-two characters"


def rewrite_sql(url: str, stream: UUID, version: int, state: bytes) -> None:
    """Replace one stored event's payload in place, as a writer of the database can."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                "UPDATE stored_events SET state = ? WHERE originator_id = ? "
                "AND originator_version = ?",
                (state, sqlite_key(stream), version),
            )
    else:
        with psycopg.connect(url) as conn:
            conn.execute(
                "UPDATE covonaut_events SET state = %s WHERE originator_id = %s "
                "AND originator_version = %s",
                (state, stream, version),
            )


def move_anchor_sql(url: str, stream: UUID, chain: str) -> None:
    """Point a thread's head anchor at another chain hash."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                "UPDATE stored_events_heads SET chain = ? WHERE originator_id = ?",
                (chain, sqlite_key(stream)),
            )
    else:
        with psycopg.connect(url) as conn:
            conn.execute(
                "UPDATE covonaut_events_heads SET chain = %s WHERE originator_id = %s",
                (chain, stream),
            )


def launder(
    store: Store,
    url: str,
    thread_id: str,
    rewritten: set[int],
    *,
    rechain: bool,
    key: bytes | None = None,
) -> None:
    """Alter the events at ``rewritten`` versions in place and seal them with the public
    hash (or with ``key``, which is not the store's), as a writer without the chain key
    can; with ``rechain``, every event from the first one altered to the head is sealed
    again, so that the chain is whole again under that function."""
    records = list(store._records.stored_records(thread_id))
    previous = ""
    first = min(rewritten)
    for record in records:
        version = record.originator_version
        payload = msgspec.json.decode(store._records.mapper.plain_payload(record))
        if version in rewritten:
            payload["timestamp"] = "2001-01-01T00:00:00Z"
        if version in rewritten or (rechain and version >= first):
            payload["chain"] = chain_hash(previous, record.topic, version, payload, key)
            state = store._records.mapper.stored_payload(msgspec.json.encode(payload))
            rewrite_sql(url, UUID(str(record.originator_id)), version, state)
        previous = payload["chain"]


def written_thread(store: Store, thread_id: str, messages: int) -> None:
    """A keyed thread of ``messages`` messages, saved in batches of three."""
    thread = AgentThread.start(thread_id, now=NOW)
    start_bare_run(thread, now=NOW)
    for i in range(messages):
        thread.append_message(Message(role="user", content=f"message {i}"), now=NOW)
        if i % 3 == 2:
            store.save(thread)
    store.save(thread)


_laundered = itertools.count()


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    messages=st.integers(min_value=1, max_value=8),
    picks=st.lists(st.integers(min_value=0, max_value=1_000), min_size=1, max_size=3),
    rechain=st.booleans(),
    sealer=st.sampled_from([None, b"a writer's own key of 32 characters"]),
    move_anchor=st.booleans(),
    saves=st.integers(min_value=1, max_value=3),
)
def test_a_chain_rewritten_without_the_key_is_never_sealed_over_nor_hidden(
    shared_url: str,
    messages: int,
    picks: list[int],
    rechain: bool,
    sealer: bytes | None,
    move_anchor: bool,
    saves: int,
) -> None:
    """Events of a keyed thread altered and sealed with the public hash or another key
    (all later ones too, or not; its head anchor moved to the new head, or not): verify
    reports the first one altered; a keyed save refuses to seal after any link since the
    point of the thread it loaded that it knows to be its own (a snapshot sealed under
    the key) that does not verify, a fork on a head that does not, and each stores
    nothing; after any number of saves verify still reports it."""
    thread_id = f"laundered-{next(_laundered)}"
    with open_store(shared_url, chain_key=KEY) as store:
        written_thread(store, thread_id, messages)
        head = store.head_version(thread_id)
        assert head is not None
        rewritten = {pick % head + 1 for pick in picks}
        launder(store, shared_url, thread_id, rewritten, rechain=rechain, key=sealer)
        if move_anchor:
            newest = store._records.stored_records(thread_id)[-1]
            chain = store._records.mapper.payload_fields(newest)["chain"]
            move_anchor_sql(shared_url, thread_aggregate_id(thread_id), chain)
        first = min(rewritten)
        before = store.verify(thread_id)
        assert [f.version for f in before.findings][:1] == [first], before.findings
        # The head's own link covers the hash before it: it breaks when either changed.
        head_broken = rechain or bool({head, head - 1} & rewritten)
        for _ in range(saves):
            thread = store.load(thread_id)
            point = store._app.sealed_points.get(thread)  # a snapshot the key sealed
            tail_broken = head_broken or max(rewritten) > (point[0] if point else 0)
            thread.append_message(Message(role="user", content="one more"), now=NOW)
            if tail_broken:
                with pytest.raises(BrokenChainError, match="does not verify"):
                    store.save(thread)
                assert store.head_version(thread_id) == head
            else:
                store.save(thread)
        if head_broken:  # nor is a fork sealed on it
            with pytest.raises(BrokenChainError):
                store.fork(thread_id, new_thread_id=f"{thread_id}-fork")
        after = store.verify(thread_id)
        assert after.findings[0] == before.findings[0]


def test_a_store_adopts_its_key_at_the_first_keyed_open_and_older_events_stay_valid(
    shared_url: str,
) -> None:
    """Threads written before the key was adopted verify with it, go on keyed, and a
    thread begun since must be keyed from its first event; the store records the key's
    fingerprint, never the key."""
    with open_store(shared_url) as store:
        written_thread(store, "before", 4)
    with open_store(shared_url, chain_key=KEY) as store:
        assert store.verify("before").ok is False  # its head is not keyed yet: reported
        thread = store.load("before")
        thread.append_message(Message(role="user", content="keyed from here"), now=NOW)
        store.save(thread)
        written_thread(store, "after", 2)
        for thread_id in ("before", "after"):
            assert store.verify(thread_id).ok, store.verify(thread_id).findings
        recorded = settings_table(store._app, CHAIN_TABLE).read()
    assert recorded["key"] == chain_key_fingerprint(KEY.encode())
    assert all(KEY not in value for value in recorded.values())
    with open_store(shared_url, chain_key=KEY) as store:  # the adoption stands
        assert store.verify("before").ok and store.verify("after").ok


@pytest.mark.parametrize("where", ["grandfathered", "begun after"])
def test_an_unkeyed_event_past_the_adoption_point_is_a_finding_moving_the_point_hides_nothing(
    shared_url: str, where: str
) -> None:
    """An event sealed publicly above its stream's adoption point is a finding, and one
    at or below it rewritten breaks the point; a writer without the key who moves the
    point up (or deletes it) only makes more events need the key."""
    with open_store(shared_url) as store:
        written_thread(store, "old", 4)
    with open_store(shared_url, chain_key=KEY) as store:
        written_thread(store, "new", 4)
        thread_id = "old" if where == "grandfathered" else "new"
        head = store.head_version(thread_id)
        assert head is not None
        launder(store, shared_url, thread_id, {head}, rechain=False)
        report = store.verify(thread_id)
        if where == "grandfathered":  # the point covers the seal of the event it names
            assert report.findings[0].version == 1
            assert "adoption point (version '6') does not verify" in report.findings[0].problem
        else:
            assert report.findings[0].version == head
        point = settings_table(store._app, CHAIN_TABLE).get(thread_aggregate_id("old").hex)
    assert point is not None
    forged = f"{head + 10}:{point.partition(':')[2]}"
    table_sql = "covonaut_chain"
    stream = thread_aggregate_id("old").hex
    if shared_url.startswith("sqlite"):
        with sqlite3.connect(shared_url.removeprefix("sqlite:///")) as conn:
            conn.execute(f"UPDATE {table_sql} SET value = ? WHERE name = ?", (forged, stream))
    else:
        with psycopg.connect(shared_url) as conn:
            conn.execute(f"UPDATE {table_sql} SET value = %s WHERE name = %s", (forged, stream))
    with open_store(shared_url, chain_key=KEY) as store:
        # A forged point does not verify: the old thread's unkeyed events all need the key.
        assert store.verify("old").findings[0].version == 1
        new = store.verify("new")
        assert [f.version for f in new.findings][:1] == ([head] if thread_id == "new" else [])


def test_a_keyed_store_refuses_writers_without_its_key_and_readers_are_told(
    shared_url: str,
) -> None:
    """Once a store adopted a key, an open that may write without it, or with another,
    is refused before anything is written; a read-only open works and its verify says
    keyed seals need the key."""
    with open_store(shared_url, chain_key=KEY) as store:
        written_thread(store, "t", 2)
    with pytest.raises(ChainKeyRequiredError, match="seals its chain with a key: pass it"):
        open_store(shared_url)
    with pytest.raises(ChainKeyMismatchError, match="another key"):
        open_store(shared_url, chain_key="another secret of 32 characters!")
    with pytest.raises(ChainKeyMismatchError):
        open_store(shared_url, chain_key="another secret of 32 characters!", create_tables=False)
    with open_store(shared_url, create_tables=False) as reader:
        report = reader.verify("t")
        assert "keyed seals cannot be checked" in report.notes[0]
        assert reader.head_version("t") == 4  # nothing was written by the refused opens


@pytest.mark.parametrize(
    ("source_key", "refused"),
    [
        (None, r"line 5 .*head not sealed with the chain key: expected a keyed hash, found a"),
        ("another secret of 32 characters!", "line 1 .*hash chain broken"),
    ],
)
def test_a_keyed_store_imports_only_threads_sealed_with_its_key(
    shared_url: str, source_key: str | None, refused: str
) -> None:
    """An export sealed with the public hash alone, or with another key, is refused by a
    store that adopted a key, and nothing is written."""
    with open_store("memory://", chain_key=source_key) as source:
        written_thread(source, "exported", 3)
        lines = list(export_thread(source, "exported"))
    with open_store(shared_url, chain_key=KEY) as target:
        with pytest.raises(TransferError, match=refused):
            import_threads(target, lines)
        assert not target.exists("exported")


@functools.cache
def adopted_exports(
    before: int, after: int, *, fork: bool
) -> tuple[tuple[tuple[str, ...], ...], int]:
    """Exports (without their trailers) of a thread written with ``before`` messages in a
    plain store, which then adopted KEY, and ``after`` more: the thread's, or, with
    ``fork``, its parent's then that of a fork of it made before the key (one message),
    which goes on after it too. The last export is the subject; then its adoption point
    in that store."""
    url = f"memory://adopted-{before}-{after}-{fork}"
    threads = ("t", "f") if fork else ("t",)
    with open_store(url) as plain:  # kept open: a memory store lives while it is open
        written_thread(plain, "t", before)
        if fork:
            plain.fork("t", new_thread_id="f", now=NOW)
            ThreadService(plain, clock=lambda: NOW).label("f", "before the key")
        with open_store(url, chain_key=KEY) as store:
            for thread_id in threads:
                thread = store.load(thread_id)
                for i in range(after):
                    thread.append_message(Message(role="user", content=f"keyed {i}"), now=NOW)
                    store.save(thread)
            exports = tuple(tuple(export_thread(store, t))[:-1] for t in threads)
            point = store._records.chain_adoption().unkeyed_until(thread_aggregate_id(threads[-1]))
    return exports, point


def resealed(lines: tuple[str, ...], start: int) -> tuple[str, ...]:
    """The lines with each from ``start`` on sealed again with the public hash, chained
    after the one before: what a writer without the key can make of them."""
    out = list(lines)
    previous = json.loads(out[start - 1])["payload"]["chain"]
    for index in range(start, len(out)):
        line = json.loads(out[index])
        line["payload"]["chain"] = previous = chain_hash(
            previous, line["topic"], line["version"], line["payload"]
        )
        out[index] = json.dumps(line, separators=(",", ":"))
    return tuple(out)


@settings(max_examples=40, deadline=None)
@given(
    before=st.integers(min_value=1, max_value=5),
    after=st.integers(min_value=1, max_value=3),
    fork=st.booleans(),
    target=st.sampled_from(["same key", "other key", "no key"]),
    encrypted=st.booleans(),
    mutation=st.sampled_from(["none", "cut at the key", "public after keyed", "all public"]),
    pick=st.integers(min_value=0, max_value=100),
)
def test_a_thread_begun_before_its_store_adopted_the_key_moves_to_stores_with_that_key(
    before: int,
    after: int,
    fork: bool,
    target: str,
    encrypted: bool,
    mutation: str,
    pick: int,
) -> None:
    """A thread (or a fork) whose unkeyed lines come before its keyed ones imports into a
    store with the same key, grants the adoption point its source store granted, verifies
    and goes on there; into a store with another key or none it is refused at its first
    keyed line. Cut where the key begins, sealed publicly from there or after any keyed
    line, it is refused by every keyed store and writes nothing (a plain store takes a
    thread with no keyed line, as it takes any public chain)."""
    (*ancestors, subject), point = adopted_exports(before, after, fork=fork)
    first_keyed = next(i for i, line in enumerate(subject) if '"chain":"k' in line)
    if mutation == "cut at the key":
        subject = subject[:first_keyed]
    elif mutation == "all public":
        subject = resealed(subject, first_keyed)
    elif mutation == "public after keyed":
        assume(len(subject) - first_keyed > 1)
        subject = resealed(subject, first_keyed + 1 + pick % (len(subject) - first_keyed - 1))
    keys = {"same key": KEY, "other key": "another secret of 32 characters!", "no key": None}
    thread_id = json.loads(subject[0])["thread_id"]
    stream = thread_aggregate_id(thread_id)
    keyless = mutation in ("cut at the key", "all public")
    expected = (target, mutation) == ("same key", "none") or (
        target == "no key" and keyless and not fork
    )
    cipher_key = create_cipher_key() if encrypted else None
    with open_store("memory://", chain_key=keys[target], cipher_key=cipher_key) as store:
        try:
            for lines in (*ancestors, subject):
                import_threads(store, lines, allow_untrailed=True)
        except TransferError as exc:
            assert not expected, exc
            assert not store.exists(thread_id)
            # Keyed lines as exported are refused first: the subject's, or its parent's.
            whole = not keyless or (fork and target != "same key")
            if target == "no key" and whole:
                assert "sealed with a chain key: expected the store opened" in str(exc)
            elif target == "other key" and whole:
                assert "hash chain broken" in str(exc)
            elif keyless:
                assert "head not sealed with the chain key" in str(exc)
            elif target == "same key":
                assert "sealed without the chain key after keyed events" in str(exc)
            if target != "no key":  # a refusal grants no point
                assert store._records.chain_adoption().unkeyed_until(stream) == 0
            return
        assert expected
        assert store.verify(thread_id).ok, store.verify(thread_id).findings
        assert tuple(export_thread(store, thread_id))[:-1] == subject
        if target == "same key":
            assert store._records.chain_adoption().unkeyed_until(stream) == point > 0
            thread = store.load(thread_id)
            thread.append_message(Message(role="user", content="imported"), now=NOW)
            store.save(thread)
            assert store.verify(thread_id).ok


def test_a_fork_begun_before_the_key_exported_with_its_ancestors_names_the_way_to_move_it() -> None:
    """A fork that branched before its store adopted the key, exported with its parent's
    unkeyed lines up to the branch, is refused by a store with the key, naming the way
    that works: the parent whole first, then the fork alone."""
    url = "memory://adopted-fork-with-ancestors"
    with open_store(url) as plain:  # kept open: a memory store lives while it is open
        written_thread(plain, "t", 2)
        plain.fork("t", new_thread_id="f", now=NOW)
        with open_store(url, chain_key=KEY) as source:
            ThreadService(source, clock=lambda: NOW).label("f", "after the key")
            lines = list(export_thread(source, "f", with_ancestors=True))
    with open_store("memory://", chain_key=KEY) as target:
        with pytest.raises(TransferError, match=r"thread 't'.*export and import it whole first"):
            import_threads(target, lines)
        assert list(target.thread_ids()) == []


def test_an_import_refuses_a_thread_whose_stream_holds_another_adoption_point() -> None:
    """A keyed store that holds another adoption point for the stream of a thread begun
    before its source adopted the key (another thread of that id's, or one written
    around the library) refuses it, naming the thread, and writes no event."""
    (lines,), _ = adopted_exports(2, 1, fork=False)
    with open_store("memory://", chain_key=KEY) as store:
        table = settings_table(store._app, CHAIN_TABLE)
        table.write({thread_aggregate_id("t").hex: "1:" + "0" * 64})
        with pytest.raises(TransferError, match="'t': the store holds another adoption point"):
            import_threads(store, lines, allow_untrailed=True)
        assert not store.exists("t")


def test_a_thread_that_comes_without_its_chain_head_is_sealed_after_the_stored_one(
    tmp_path: Path,
) -> None:
    """A thread whose chain head is not known (one restored by hand, or from a snapshot
    taken before its first save) is sealed after the hash stored before its new events,
    not after nothing."""
    with open_store(f"sqlite:///{tmp_path / 't.db'}") as store:
        written_thread(store, "t", 2)
        thread = store.load("t")
        thread.chain_head = None
        thread.append_message(Message(role="user", content="unknown head"), now=NOW)
        store.save(thread)
        report = store.verify("t")
        assert report.ok and report.chained == report.events, report.findings
        assert thread.chain_head == store.load("t").chain_head


def test_a_shared_memory_store_adopts_its_key_and_refuses_writers_without_it() -> None:
    """A ``memory://NAME`` store records its key like a database does: another open of
    the same name to write without it is refused; one with it saves on a fork's first
    event (whose seal links to its parent's) and verifies."""
    with open_store("memory://chain-adoption", chain_key=KEY) as keyed:
        written_thread(keyed, "t", 2)
        with pytest.raises(ChainKeyRequiredError):
            open_store("memory://chain-adoption")
        with open_store("memory://chain-adoption", chain_key=KEY) as again:
            again.fork("t", at_version=3, new_thread_id="f")
            ThreadService(again).label("f", "after the fork")
            for thread_id in ("t", "f"):
                report = again.verify(thread_id)
                assert report.ok and report.chained == report.events, report.findings


TRICKY_TEXT = st.text(
    st.sampled_from(["a", "\x00", "\x1f", '"', "\\", "é", "\u2028", "\ue000", "😀", "\U0010ffff"])
    | st.characters(exclude_categories=["Cs"]),  # lone surrogates: refused, below
    max_size=6,
)


@settings(max_examples=25, deadline=None)
@given(
    contents=st.lists(TRICKY_TEXT, min_size=1, max_size=4),
    thread_id=st.text(
        st.sampled_from(["a", '"', "\\", "é", "\ue000", "😀", "\U0010ffff"]), min_size=1, max_size=4
    ),
    key=st.sampled_from([None, "a chain key of at least sixteen characters"]),
)
def test_events_sealed_at_save_verify_whatever_text_they_hold(
    tmp_path_factory: pytest.TempPathFactory,
    contents: list[str],
    thread_id: str,
    key: str | None,
) -> None:
    """The seal a save computes (msgspec's text taken as RFC 8785's where it is that)
    is the one verify recomputes from the stored payload by the full rewrite: text with
    controls, quotes, escapes and characters that sort apart in UTF-16, in the thread's
    id and its messages, with and without a chain key."""
    url = f"sqlite:///{tmp_path_factory.mktemp('seal')}/store.db"
    with open_store(url, chain_key=key) as store:
        with earlier_thread_id_rule():  # a private-use id: a thread of an earlier version
            thread = AgentThread.start(thread_id, now=NOW)
        store.save(thread)
        for content in contents:
            thread.append_message(Message(role="user", content=content, name=content), now=NOW)
            store.save(thread)
        report = store.verify(thread_id)
        assert report.ok, report.findings


LONE_SURROGATES = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)


@settings(max_examples=15, deadline=None)
@given(
    where=st.sampled_from(["input", "answer", "arguments"]),
    before=TRICKY_TEXT,
    bad=LONE_SURROGATES,
)
def test_text_no_store_can_keep_is_refused_before_it_is_stored_and_nothing_stored_breaks(
    tmp_path_factory: pytest.TempPathFactory, where: str, before: str, bad: str
) -> None:
    """Text that UTF-8 cannot hold (a lone surrogate, which Python's json decodes from
    a model's ``"\\ud800"``): a model's answer or call arguments holding it are a
    ProviderError; a user's input holding it is a SerializationError naming the event
    at its save. What was stored before still loads and verifies, and holds none of
    it."""
    text = before + bad
    arguments = {"text": text}
    script, refused = {
        "input": ([answer("fine")], SerializationError),
        "answer": ([answer(text)], ProviderError),
        "arguments": (
            [call(("c1", "echo", json.dumps(arguments, ensure_ascii=False)))],
            ProviderError,
        ),
    }[where]
    url = f"sqlite:///{tmp_path_factory.mktemp('surrogates')}/store.db"
    with open_store(url) as store:
        agent = agent_on(store, "t", script)
        with pytest.raises(refused, match="surrogates not allowed"):
            agent.run(text if where == "input" else "go")
    with open_store(url) as store:
        if "t" in store.thread_ids():
            assert store.verify("t").ok
            assert bad not in repr(store.load("t").messages)
