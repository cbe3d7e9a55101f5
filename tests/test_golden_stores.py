"""Golden stores load, verify, export and are read by the command line with this code;
the data on disk is never rewritten. Golden v4: whole stores and exports written by
covonaut-es 198c838 (plain, compressed, encrypted, chain-keyed, all three); golden
v6-zstd: the same written by 5dee68c, where a store opened without ``compress`` keeps
its event payloads in zstd frames with the shipped dictionary (ADR 0061); golden
v7-topic-codes: the same written by 12fffa8, whose rows name the library's classes by
their codes (ADR 0064); golden v8-turn-answered: the same written by 8f6b487, where a
turn's start is stored with the model's answer (ADR 0071), before the calls' intents
went with it too (ADR 0072); golden v9-calls-with-answer: the same written by 2b2fac2,
where they do, before a turn's last result or final answer saved its checkpoint
with it (ADR 0073); golden v10-turn-checkpoint: the same written by 40fe483, where they
do, before a SQLite store kept its stream ids as 16 bytes (ADR 0074); golden
v11-run-input: the same written by 0aa9ebe, where they are, before a run started by new
input stored its start with that input (ADR 0079); golden v12-started-with-input: the
same written by bee2085, where it does, before a new thread's creation was stored with
its first run's start and input (ADR 0081).

The fixtures come from ``tests/fixtures/write_golden_stores.py``; each manifest says what
each store holds. Each test works on a copy in ``tmp_path``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
from covonaut_es.audit import check_store, export_thread
from covonaut_es.cli import main
from covonaut_es.domain import Decision, ThreadStatus
from covonaut_es.store import _zstd
from covonaut_es.store._dictionary import shipped_dictionary
from support import golden_database

GOLDENS = {
    version: Path(__file__).parent / "fixtures" / "golden" / version
    for version in (
        "v4",
        "v6-zstd",
        "v7-topic-codes",
        "v8-turn-answered",
        "v9-calls-with-answer",
        "v10-turn-checkpoint",
        "v11-run-input",
        "v12-started-with-input",
    )
}
MANIFESTS: dict[str, dict[str, Any]] = {
    version: json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    for version, directory in GOLDENS.items()
}
GOLDEN = GOLDENS["v4"]
MANIFEST = MANIFESTS["v4"]
STORES = MANIFEST["stores"]
KEYS = MANIFEST["test_only_keys"]  # the same in every manifest
CIPHER_KEY_ENV = "GOLDEN_CIPHER_KEY"
CHAIN_KEY_ENV = "GOLDEN_CHAIN_KEY"


def fingerprints(*, by_content: bool = True) -> dict[str, object]:
    """The digest of every golden file (or, not ``by_content``, its size, inode and
    time of change), and every directory (no new file appears beside the stores, such
    as a journal or a leases directory)."""
    return {
        str(path.relative_to(directory.parent)): _fingerprint(path, by_content=by_content)
        for directory in GOLDENS.values()
        for path in sorted(directory.rglob("*"))
    }


def _fingerprint(path: Path, *, by_content: bool) -> object:
    if not path.is_file():
        return "directory"
    if by_content:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    stat = path.stat()
    return (stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns)


@pytest.fixture(autouse=True, scope="module")
def fixtures_untouched_byte_for_byte() -> Iterator[None]:
    """The tests leave the fixture files byte for byte as they were."""
    before = fingerprints()
    yield
    assert fingerprints() == before


@pytest.fixture(autouse=True)
def fixtures_untouched() -> Iterator[None]:
    """No test writes a fixture file (any write changes its time of change), or makes
    one beside them: hashing every file around each of the module's 884 tests took a
    sixth of its time."""
    before = fingerprints(by_content=False)
    yield
    assert fingerprints(by_content=False) == before


@pytest.fixture(
    params=[(v, name) for v, manifest in MANIFESTS.items() for name in sorted(manifest["stores"])],
    ids="-".join,
)
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """One golden store's manifest entry, with ``original``: its file, and ``url``: a
    copy of it."""
    version, name = request.param
    entry: dict[str, Any] = MANIFESTS[version]["stores"][name]
    original = GOLDENS[version] / entry["file"]
    copy = tmp_path / entry["file"]
    shutil.copyfile(original, copy)
    return {**entry, "name": name, "original": original, "url": f"sqlite:///{copy}"}


@pytest.fixture
def store(golden: dict[str, Any]) -> Iterator[Store]:
    """The copy of the golden store, opened with the options (keys) it was written with."""
    with open_store(golden["url"], **golden["options"]) as store:
        yield store


def test_every_golden_thread_loads_as_its_manifest_says(
    golden: dict[str, Any], store: Store
) -> None:
    """Each store holds exactly the manifest's threads, at its versions and statuses,
    with its pending reviews, and each replays from its events alone to the state
    loaded through snapshots."""
    assert sorted(store.thread_ids()) == sorted(golden["threads"])
    for thread_id, expected in golden["threads"].items():
        state = store.state_at(thread_id)
        assert store.load(thread_id).version == state.version == expected["version"]
        assert store.head_version(thread_id) == expected["version"]
        assert str(state.status) == expected["status"]
        pending = sorted(r.request.review_id for r in state.reviews if r.pending)
        assert pending == expected["pending_reviews"]
        assert store.replay_state(thread_id) == state, thread_id


def test_golden_tool_arguments_keep_their_floats_and_text(store: Store) -> None:
    """Floats (1e16, 0.00001, -0.0), emoji, right-to-left text and control characters
    in a tool call's arguments and result read back exactly as written."""
    values = MANIFEST["values"]
    messages = store.state_at("golden-values").messages
    (asked,) = [m for m in messages if m.tool_calls]
    assert asked.tool_calls[0].arguments == json.dumps(values, ensure_ascii=False)
    (result,) = [m for m in messages if m.tool_call_id == "v1"]
    echoed = json.loads(result.content)["echo"]
    assert echoed == values
    assert math.copysign(1.0, echoed["negative_zero"]) == -1.0
    assert "שלום 🚀" in messages[0].content


def test_golden_threads_verify_intact_with_their_keys(golden: dict[str, Any], store: Store) -> None:
    """Every thread's hash chain (sealed under the chain key where there is one),
    checkpoints and snapshot verify intact."""
    for thread_id in golden["threads"]:
        report = store.verify(thread_id)
        assert report.ok, (thread_id, report.findings)
        assert report.chained == report.events == golden["threads"][thread_id]["version"]
    assert store.verify("golden-long").snapshots_checked == golden["snapshots"] == 1


def test_golden_history_replay_and_time_travel(store: Store) -> None:
    """History and replay list every version in order; labels, forks of forks and an
    older version read as written."""
    for thread_id in store.thread_ids():
        version = store.state_at(thread_id).version
        assert [e.originator_version for e in store.history(thread_id)] == list(
            range(1, version + 1)
        )
        assert [entry.version for entry in store.replay(thread_id)] == list(range(1, version + 1))
    long = store.state_at("golden-long")
    # "halfway" was labelled at half the version its own event followed.
    assert [(label.name, label.version) for label in long.labels] == [
        ("whole-run", None),
        ("halfway", (long.version - 1) // 2),
    ]
    halfway = store.state_at("golden-long", long.version // 2)
    assert halfway.version == long.version // 2
    assert halfway.messages == long.messages[: len(halfway.messages)]
    fork = store.state_at("golden-fork")
    assert fork.parent is not None and fork.parent.thread_id == "golden-long"
    assert fork.messages[-1].content == "A different ending."
    grandchild = store.state_at("golden-fork-of-fork")
    assert grandchild.parent is not None
    assert (grandchild.parent.thread_id, grandchild.parent.version) == ("golden-fork", fork.version)
    assert grandchild.messages == fork.messages


def test_golden_decisions_read_as_recorded(store: Store) -> None:
    """The approval with edited arguments and the answer in the tool's place read back
    as decided: the edit ran once, the answered operation never ran."""
    (edited,) = store.state_at("golden-review-edited").reviews
    assert edited.decision is not None and edited.decision.decision is Decision.APPROVED
    assert edited.used_by == "p2"
    paid = [m.content for m in store.state_at("golden-review-edited").messages if m.name == "pay"]
    assert paid[-1] == '{"paid":45.5}'
    (answered,) = store.state_at("golden-review-responded").reviews
    assert answered.decision is not None and answered.decision.decision is Decision.RESPONDED
    assert answered.used_by is None
    messages = store.state_at("golden-review-responded").messages
    assert "Paid by hand, do not pay." in [m.content for m in messages]


def test_golden_named_state_loads_into_a_new_thread(store: Store) -> None:
    """The named state saved by the older code starts a thread that answers."""
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([ProviderResponse(content="Continued.")]),
            checkpoint=CheckpointSettings(store=store, thread_id="unused"),
            state_store=store,
        )
    )
    state = agent.load_state("golden-state", thread_id="golden-state-continued")
    assert state.messages == store.state_at("golden-long").messages
    assert agent.run("Go on.") == "Continued."
    assert store.verify("golden-state-continued").ok


def test_golden_exports_carry_every_event_and_the_chain_heads(
    golden: dict[str, Any], store: Store
) -> None:
    """Exporting each thread (with its ancestors) gives one line per version of its
    history, and the export carries the thread's chain head from the manifest."""
    for thread_id, expected in golden["threads"].items():
        text = "\n".join(export_thread(store, thread_id, with_ancestors=True))
        events = [line for line in map(json.loads, text.splitlines()) if "topic" in line]
        assert len(events) == expected["version"]
        assert expected["chain_head"] in text


def test_the_pending_golden_review_can_be_decided_and_the_thread_finishes(
    golden: dict[str, Any], store: Store
) -> None:
    """The review the older code left pending is approved by this code, the call runs
    once, and the thread still verifies."""
    ran: list[Any] = []
    pay = Tool(
        "pay", "Pay", {"type": "object"}, lambda ctx, args: ran.append(args), requires_approval=True
    )
    verifier = HmacReviewerVerifier(KEYS["reviewer_secret"].encode(), clock=lambda: 1.8e9)
    script = [
        ProviderResponse(tool_calls=(ToolCall("p2", "pay", '{"amount": 40}'),)),
        ProviderResponse(content="Paid 40."),
    ]
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[pay],
            checkpoint=CheckpointSettings(store=store, thread_id="golden-review-pending"),
            reviewer_verifier=verifier,
        )
    )
    (review_id,) = golden["threads"]["golden-review-pending"]["pending_reviews"]
    agent.approve(review_id, reviewer=verifier.issue_token("golden-reviewer", 3600))
    assert agent.resume() == "Paid 40."
    assert ran == [{"amount": 40}]
    assert store.state_at("golden-review-pending").status is ThreadStatus.FINISHED
    assert store.verify("golden-review-pending").ok


def test_migrate_check_passes_on_every_golden_store(store: Store) -> None:
    """Every record of each golden store upgrades to this code's schemas."""
    report = check_store(store)
    assert report.ok, report.failures
    assert report.stale_snapshots == {}


def cli(
    golden: dict[str, Any], monkeypatch: pytest.MonkeyPatch, *args: str, chain_key: bool = False
) -> int:
    """Run a command of the command line on the golden copy, with its options."""
    options = golden["options"]
    store_options = ["--store", golden["url"]]
    if "cipher_key" in options:
        monkeypatch.setenv(CIPHER_KEY_ENV, options["cipher_key"])
        store_options += ["--cipher-key-env", CIPHER_KEY_ENV]
    if options.get("compress"):
        store_options.append("--compressed")
    if chain_key and "chain_key" in options:
        monkeypatch.setenv(CHAIN_KEY_ENV, options["chain_key"])
        store_options += ["--chain-key-env", CHAIN_KEY_ENV]
    command, *rest = args
    return main([command, *store_options, *rest])


@pytest.mark.parametrize(
    "command",
    [
        ("threads",),
        ("threads", "--json"),
        ("show", "golden-values"),
        ("show", "golden-fork-of-fork", "--json"),
        ("replay", "golden-long"),
        ("export", "golden-fork-of-fork"),
        ("reviews",),
        ("reviews", "--json"),
        ("migrate", "--check"),
    ],
    ids=" ".join,
)
def test_the_command_lines_reading_commands_exit_0_on_every_golden_store(
    golden: dict[str, Any],
    command: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each reading command succeeds on each golden store and prints what it read."""
    assert cli(golden, monkeypatch, *command) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if command[0] in ("threads", "reviews"):
        assert "golden-review-pending" in out
    elif command[0] != "migrate":
        assert command[1] in out


def test_the_command_line_verifies_every_golden_thread(
    golden: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``replay --verify`` exits 0 and reports no problem for every thread of every
    golden store, given the store's chain key where it has one."""
    for thread_id in golden["threads"]:
        status = cli(golden, monkeypatch, "replay", "--verify", thread_id, chain_key=True)
        output = capsys.readouterr()
        assert status == 0, output.err
        assert "PROBLEMS FOUND" not in output.out


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty SQLite store or PostgreSQL database to import into."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'imported.db'}"
    return str(request.getfixturevalue("postgres_database"))


@pytest.mark.parametrize("export_file", sorted(MANIFEST["exports"]))
def test_golden_exports_import_into_an_empty_store_and_verify(
    export_file: str, empty_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export file written by ``covonaut-es export`` of 198c838, before exports had
    trailers, imports when the operator says so (``--allow-untrailed``) into an empty
    SQLite or PostgreSQL store, where each thread verifies and reads as in the store it
    was exported from; without the flag it is refused and nothing is written."""
    path = GOLDEN / "exports" / export_file
    assert main(["import", "--store", empty_url, str(path)]) == 2
    assert "--allow-untrailed" in capsys.readouterr().err
    command = ["import", "--store", empty_url, "--allow-untrailed", str(path)]
    assert main(command) == 0, capsys.readouterr().err
    exported = MANIFEST["exports"][export_file]
    source_copy = tmp_path / "source.db"
    shutil.copyfile(GOLDEN / STORES[exported["store"]]["file"], source_copy)
    with open_store(empty_url) as imported, open_store(f"sqlite:///{source_copy}") as source:
        thread_id = exported["thread"]
        assert imported.state_at(thread_id) == source.state_at(thread_id)
        for imported_id in imported.thread_ids():
            assert imported.verify(imported_id).ok, imported_id


def stored_rows(path: Path) -> set[tuple[Any, ...]]:
    """Every event row of a SQLite store file, read behind the library's back."""
    with golden_database(path) as db:
        return set(
            db.execute("SELECT originator_id, originator_version, topic, state FROM stored_events")
        )


def test_using_a_golden_store_rewrites_none_of_its_stored_events(
    golden: dict[str, Any], store: Store
) -> None:
    """Reading, verifying and exporting every thread, then deciding the pending review,
    leaves every event row the older code wrote exactly as it was: stored data is never
    rewritten in place, only appended to."""
    before = stored_rows(golden["original"])
    for thread_id in golden["threads"]:
        store.load(thread_id)
        store.verify(thread_id)
        list(export_thread(store, thread_id))
    verifier = HmacReviewerVerifier(KEYS["reviewer_secret"].encode(), clock=lambda: 1.8e9)
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([]),
            checkpoint=CheckpointSettings(store=store, thread_id="golden-review-pending"),
            reviewer_verifier=verifier,
        )
    )
    (review_id,) = golden["threads"]["golden-review-pending"]["pending_reviews"]
    agent.reject(review_id, reviewer=verifier.issue_token("golden-reviewer", 3600), reason="No.")
    store.close()
    after = stored_rows(Path(golden["url"].removeprefix("sqlite:///")))
    assert before <= after
    appended = after - before  # the decision, after the thread's head
    head = golden["threads"]["golden-review-pending"]["version"]
    assert appended and {row[1] for row in appended} == set(
        range(head + 1, head + 1 + len(appended))
    )
    assert len({row[0] for row in appended}) == 1


def test_a_golden_store_opened_read_only_is_read_and_left_byte_for_byte(
    golden: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through ``?mode=ro`` the command line lists and checks each golden store, and
    the file is left byte for byte as the older code wrote it."""
    read_only = {**golden, "url": golden["url"] + "?mode=ro"}
    for command in (("threads",), ("migrate", "--check"), ("show", "golden-long")):
        assert cli(read_only, monkeypatch, *command) == 0, capsys.readouterr().err
    copy = Path(golden["url"].removeprefix("sqlite:///"))
    assert copy.read_bytes() == golden["original"].read_bytes()


def test_a_golden_store_keeps_reading_with_the_compression_it_recorded(
    golden: dict[str, Any], store: Store
) -> None:
    """Each golden store is read with the compression it recorded, whatever a new store
    records now; the event payloads of a zstd store are frames naming the dictionary
    this version ships (a later dictionary must keep reading them)."""
    with golden_database(golden["original"]) as db:
        (recorded,) = db.execute(
            "SELECT value FROM covonaut_settings WHERE name = 'compression'"
        ).fetchone()
    assert recorded == golden.get(
        "compression", "zlib" if golden["options"].get("compress") else "none"
    )
    if recorded == "zstd" and "cipher_key" not in golden["options"]:
        ids = {_zstd.dictionary_id(row[3]) for row in stored_rows(golden["original"])}
        assert ids == {shipped_dictionary().id}
    assert store.state_at("golden-long").status is ThreadStatus.FINISHED
