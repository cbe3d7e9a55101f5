"""check_store: every record upgraded in memory and reported, on every store."""

from __future__ import annotations

from pathlib import Path

import msgspec

from covonaut_es import AgentThread, FileStateStore, Store, open_store
from covonaut_es.audit import check_store, format_report
from support import append_raw_event, converse, snapshotted_thread

TURN_STARTED = AgentThread.TurnStarted.TOPIC


def test_a_clean_store_upgrades_and_is_counted_per_type_and_version(store: Store) -> None:
    """Every event, snapshot and named state is counted by type and stored version."""
    events = converse(store, "a").state.version + converse(store, "b").state.version
    report = check_store(store)
    assert report.ok and report.failures == []
    assert report.counts["AgentThread.StartedWithInput", 1] == 2
    assert report.counts["AgentThread.TurnAnsweredWithCalls", 1] == 2
    assert report.counts["StateSaved", 1] == 2
    assert report.counts["StateDocument", report.current["StateDocument"]] == 2
    assert report.records == events + 4
    lines = list(format_report(report, source=store.url))
    assert lines[-1] == f"OK: all {report.records} records upgrade to this code's schemas."


def test_a_compressed_snapshot_is_counted_at_its_stored_version(store: Store) -> None:
    """The check reads a snapshot's schema version out of its zstd frame."""
    snapshotted_thread(store)
    report = check_store(store)
    assert report.ok
    assert report.counts["ThreadSnapshot", report.current["ThreadSnapshot"]] == 1


def test_a_corrupt_and_a_too_new_record_are_reported_by_thread_and_version(store_url: str) -> None:
    """A damaged record and one from newer code are both reported, naming the thread,
    the event's version and the stored schema version; the other records still count."""
    with open_store(store_url) as store:  # not the fixture: these threads cannot be loaded
        converse(store, "a")
        converse(store, "b")
        corrupt = append_raw_event(store, "a", TURN_STARTED, b"\x00not json")
        newer = msgspec.json.encode({"timestamp": "2026-01-01T00:00:00Z", "turn": 9, "_v": 99})
        too_new = append_raw_event(store, "b", TURN_STARTED, newer)
        report = check_store(store)

    assert not report.ok
    first, second = report.failures
    assert (first.owner, first.position, first.stored_version) == (
        "thread 'a'",
        f"event {corrupt}",
        None,
    )
    assert first.error.startswith("SerializationError:") and "not valid JSON" in first.error
    assert (second.owner, second.position, second.stored_version) == (
        "thread 'b'",
        f"event {too_new}",
        99,
    )
    assert second.error.startswith("NewerSchemaError:") and "up to version 1" in second.error
    assert report.counts["AgentThread.TurnStarted", 99] == 1
    text = "\n".join(format_report(report, source=store_url))
    assert f"thread 'b', event {too_new} (AgentThread.TurnStarted, schema v99)" in text
    assert text.endswith(f"FAILED: 2 of {report.records} records do not upgrade.")


def test_a_failure_in_a_fork_names_the_fork(store_url: str) -> None:
    """A record that does not upgrade in a forked thread is reported by the fork's id."""
    with open_store(store_url) as store:
        converse(store, "a")
        fork = store.fork("a", new_thread_id="a-fork")
        version = append_raw_event(store, fork, TURN_STARTED, b"[]")
        report = check_store(store)
    assert [(f.owner, f.position) for f in report.failures] == [
        ("thread 'a-fork'", f"event {version}")
    ]


def test_named_state_files_are_checked_too(store: Store, tmp_path: Path) -> None:
    """Documents in a state directory are upgraded and counted; a too-new one and a
    damaged one are failures naming their keys."""
    states = FileStateStore(tmp_path)
    agent = converse(store, "a")
    document = store.read_state("a")
    assert document is not None
    states.write_state("good", document)
    states.write_state("unversioned", {k: v for k, v in document.items() if k != "_v"})
    states.write_state("future", {**document, "_v": 99})
    (tmp_path / "broken.json").write_text("{")
    assert agent.state.thread_id == "a"

    report = check_store(store, state_files=states)
    assert report.counts["StateDocument", 0] == 1
    assert [(f.owner, f.stored_version) for f in report.failures] == [
        ("state file 'broken'", None),
        ("state file 'future'", 99),
    ]


def test_progress_is_told_after_every_record(store: Store) -> None:
    """The progress callback sees every record and the size of the event log."""
    converse(store, "a")
    seen: list[tuple[int, int]] = []
    report = check_store(store, progress=lambda done, total: seen.append((done, total)))
    events = store._records.log_position()
    assert [done for done, _ in seen] == list(range(1, len(seen) + 1))
    assert {total for _, total in seen} == {events}
    assert len(seen) == report.records - 1  # the named state's document is not a record
