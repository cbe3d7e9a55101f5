"""Compact topics (ADR 0064): a new row names a library class by its code, a row written
before by its full topic, and every reader takes both; the codes are pinned."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from covonaut_es import ReviewQueue, Store, open_store
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.domain._snapshot import differing_fields
from covonaut_es.errors import ConfigurationError, SerializationError
from covonaut_es.store._codec import library_event_classes
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._topic_codes import TOPIC_CODES, compact, full_topic, stored_forms
from support import sqlite_key
from test_audit import conversation
from test_review_queue import pause

GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "v6-zstd" / "plain.db"
"""A store written before codes: every row holds its full topic."""

PINNED = {
    "1": "covonaut.thread.MessageAppended",
    "2": "covonaut.thread.ToolCalled",
    "3": "covonaut.thread.ToolResultRecorded",
    "4": "covonaut.thread.TurnStarted",
    "5": "covonaut.thread.CheckpointSaved",
    "6": "covonaut.thread.RunStarted",
    "7": "covonaut.thread.RunFinished",
    "8": "covonaut.thread.Started",
    "9": "covonaut.thread.Snapshot",
    "10": "covonaut.thread.ToolCallSettled",
    "11": "covonaut.thread.ToolPinned",
    "12": "covonaut.thread.ToolCallRetried",
    "13": "covonaut.thread.RetryRequested",
    "14": "covonaut.thread.Interrupted",
    "15": "covonaut.thread.InterruptAnswered",
    "16": "covonaut.thread.Steered",
    "17": "covonaut.thread.Resumed",
    "18": "covonaut.thread.Compacted",
    "19": "covonaut.thread.RunFailed",
    "20": "covonaut.thread.Forked",
    "21": "covonaut.thread.Abandoned",
    "22": "covonaut.thread.Labelled",
    "23": "covonaut.thread.ReviewRequested",
    "24": "covonaut.thread.ReviewDecided",
    "25": "covonaut.thread.ReviewApprovedWithEdits",
    "26": "covonaut.thread.ReviewResponded",
    "27": "covonaut.thread.ReviewExpired",
    "28": "covonaut.thread.ReviewDeadlineNear",
    "29": "covonaut.thread.ReviewApprovedInPart",
    "30": "covonaut.thread.ApprovalUsed",
    "31": "covonaut.thread.StartedFromState",
    "32": "covonaut.state.StateSaved",
    "33": "covonaut.submission.InputSubmitted",
    "34": "covonaut.submission.InputTaken",
    "35": "covonaut.thread.TurnAnswered",
    "36": "covonaut.thread.TurnAnsweredWithCalls",
    "37": "covonaut.thread.ToolResultCheckpointed",
    "38": "covonaut.thread.RunFinishedCheckpointed",
    "39": "covonaut.thread.RunStartedWithInput",
    "40": "covonaut.thread.StartedWithInput",
}
"""The codes as stores hold them: a line here never changes (rows written with it would
read as another class); a new class appends one."""

STORED_CLASSES = set(library_event_classes()) - {AgentThread.Event}
"""Every class the library stores (the thread events' base class is never stored)."""


def test_the_codes_are_pinned() -> None:
    """No code changes the topic it stands for, and none is dropped: stored rows name
    their class by it."""
    assert dict(TOPIC_CODES) == PINNED


def test_every_class_the_library_stores_has_exactly_one_code() -> None:
    """A class added later without a code, or given a second one, fails here rather
    than being stored under its full topic, or read back under two names."""
    for cls in STORED_CLASSES:
        codes = [code for code, topic in TOPIC_CODES.items() if topic == get_topic(cls)]
        assert len(codes) == 1, (cls, codes)
    assert len(set(TOPIC_CODES.values())) == len(TOPIC_CODES)


def test_a_code_is_never_a_topic() -> None:
    """Codes have neither '.' nor ':', which every stored class's topic has: a row's
    topic column says which form it holds."""
    assert all("." not in code and ":" not in code for code in TOPIC_CODES)
    assert all("." in get_topic(cls) or ":" in get_topic(cls) for cls in STORED_CLASSES)
    assert compact("covonaut.thread.Started") == "8" and compact("8") == "8"
    assert full_topic("8") == "covonaut.thread.Started" and full_topic("999") == "999"
    assert stored_forms([AgentThread.Started]) == ("covonaut.thread.Started", "8")


def test_a_new_store_writes_codes_for_its_events_and_snapshots(store: Store) -> None:
    """Every row a store writes for the library's classes holds the class's code, and
    the thread loads and verifies from them; its export names full topics, and imports
    into another store as codes."""
    conversation(store, "t", 40)  # long enough for a snapshot
    records = list(store._records.all_stored_records())
    assert {full_topic(r.topic) for r in records} >= {
        AgentThread.ToolResultCheckpointed.TOPIC,
        "covonaut.thread.Snapshot",
    }
    assert all(r.topic in TOPIC_CODES for r in records), {r.topic for r in records}
    assert store.verify("t").ok
    assert store.load("t").state.status.value == "finished"
    lines = list(export_thread(store, "t"))
    assert {json.loads(line).get("topic") for line in lines} >= {AgentThread.StartedWithInput.TOPIC}
    with open_store("memory://") as copy:
        assert import_threads(copy, lines) == ["t"]
        assert all(r.topic in TOPIC_CODES for r in copy._records.all_stored_records())
        assert copy.verify("t").ok


def test_an_application_class_whose_topic_is_a_code_is_refused() -> None:
    """A class of the application's own named like a code would read back as the
    library's class, or the library's as it: the mapper refuses to be made."""

    class Shop(Aggregate):
        class Opened(Aggregate.Event):
            TOPIC = "3"

    with pytest.raises(ConfigurationError, match=r"topics \['3'\]"):
        MsgspecMapper(aggregate_classes=[Shop])


def test_old_rows_and_new_rows_are_read_filtered_and_queued_alike(tmp_path: Path) -> None:
    """A store written before codes, then written with them: the log filtered by type
    and the review queue rebuilt from zero find the pending reviews of both forms."""
    db = tmp_path / "plain.db"
    shutil.copyfile(GOLDEN, db)
    with open_store(f"sqlite:///{db}") as store:
        pause(store, "new", "r-new")
        interrupts = list(store._records.notifications(AgentThread.Interrupted))
        assert {r.topic for r in interrupts} == {AgentThread.Interrupted.TOPIC, "14"}
        assert store._records.has_events_after(
            interrupts[-1].id - 1, AgentThread.Interrupted, follower="t"
        )
        queue = ReviewQueue(store.url)
        with queue.follow() as runner:
            queue.wait_until_current(store, runner=runner)
            pending = {item.thread_id for item in queue.pending()}
        assert {"golden-review-pending", "new"} <= pending
        assert store.verify("new").ok and store.verify("golden-review-pending").ok


def first_tool_result(db: Path) -> int:
    """The version of thread ``t``'s first tool result (a turn's last, which saves the
    turn's checkpoint: ``ToolResultCheckpointed``), which its row names by code."""
    with sqlite3.connect(db) as conn:
        (version,) = conn.execute(
            "SELECT min(originator_version) FROM stored_events WHERE topic = ?",
            (compact(AgentThread.ToolResultCheckpointed.TOPIC),),
        ).fetchone()
    return int(version)


def rewrite(db: Path, version: int, column: str, value: str | bytes) -> None:
    """Set one column of thread ``t``'s event row, as a writer of the database could."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            f"UPDATE stored_events SET {column} = ? WHERE originator_id = ? "
            "AND originator_version = ?",
            (value, sqlite_key(thread_aggregate_id("t")), version),
        )


def test_a_full_topic_in_place_of_a_code_is_harmless_to_load_and_verify(
    tmp_path: Path,
) -> None:
    """The class's own full topic written over its code names the same class through the
    same allowlist, and the link covers the full topic: the thread loads as it was and
    verifies intact. Another class's code there is a finding at its version."""
    db = tmp_path / "t.db"
    with open_store(f"sqlite:///{db}") as store:
        conversation(store, "t", 3)
        before = store.load("t")
    version = first_tool_result(db)
    rewrite(db, version, "topic", AgentThread.ToolResultCheckpointed.TOPIC)
    with open_store(f"sqlite:///{db}") as store:
        assert differing_fields(store.load("t"), before) == ()
        assert store.verify("t").ok
    rewrite(db, version, "topic", compact(AgentThread.TurnStarted.TOPIC))
    with open_store(f"sqlite:///{db}") as store:
        assert version in [f.version for f in store.verify("t").findings]


def test_an_unknown_code_is_a_typed_error_naming_the_row(tmp_path: Path) -> None:
    """A row whose code no class has: the load raises SerializationError naming the row
    and its code, nothing is imported, and verify reports it at its version."""
    db = tmp_path / "t.db"
    with open_store(f"sqlite:///{db}") as store:
        conversation(store, "t", 3)
    version = first_tool_result(db)
    rewrite(db, version, "topic", "999")
    with open_store(f"sqlite:///{db}") as store:
        with pytest.raises(SerializationError, match=rf"'999' of stream .* at version {version}"):
            store.load("t")
        assert version in [f.version for f in store.verify("t").findings]


def test_a_known_code_names_its_class_in_an_error(tmp_path: Path) -> None:
    """A row whose bytes cannot be read names its code and the topic it stands for."""
    db = tmp_path / "t.db"
    with open_store(f"sqlite:///{db}") as store:
        conversation(store, "t", 3)
    rewrite(db, first_tool_result(db), "state", b"\x00")
    with open_store(f"sqlite:///{db}") as store:
        expected = r"stored event '37' \(covonaut.thread.ToolResultCheckpointed\) of stream"
        with pytest.raises(SerializationError, match=expected):
            store.load("t")


def test_the_golden_stores_hold_each_form() -> None:
    """The golden stores written before codes hold full topics only, those written
    with them codes only: tests/test_golden_stores.py reads both forms."""
    golden = GOLDEN.parent.parent
    for version, coded in (("v6-zstd", False), ("v7-topic-codes", True)):
        with sqlite3.connect(golden / version / "plain.db") as conn:
            topics = {
                topic
                for table in ("stored_events", "stored_snapshots")
                for (topic,) in conn.execute(f"SELECT DISTINCT topic FROM {table}")
            }
        conn.close()
        assert all((topic in TOPIC_CODES) is coded for topic in topics), (version, topics)


def test_codes_change_neither_links_nor_exports() -> None:
    """The same threads written with the same clock before codes (v6-zstd) and with
    them (v7-topic-codes): every chain head, and every exported line, is the same."""
    golden = GOLDEN.parent.parent
    old, new = golden / "v6-zstd", golden / "v7-topic-codes"
    for name in ("golden-values.jsonl", "golden-fork-of-fork.jsonl"):
        assert (old / "exports" / name).read_bytes() == (new / "exports" / name).read_bytes()
    manifests = [json.loads((d / "manifest.json").read_text(encoding="utf-8")) for d in (old, new)]
    assert manifests[0]["stores"] == manifests[1]["stores"]


def test_every_row_reads_the_same_under_its_code_and_its_full_topic(store: Store) -> None:
    """Each event row of a thread that paused and was forked, read with its
    topic column as its code and as its full topic: the same event, field for field."""
    pause(store, "t", "r1")
    store.fork("t", new_thread_id="f")
    records = list(store._records.notifications())
    assert len({r.topic for r in records}) > 5
    for record in records:
        forms = {compact(record.topic), full_topic(record.topic)}
        read = [vars(store._records.read_record(replace(record, topic=t))) for t in forms]
        assert len(forms) == 2 and read[0] == read[1], record.topic
