"""Stores facing hostile or damaged data: stored topics, keys, corruption, URLs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from eventsourcing.domain import Aggregate, event

from covonaut_es import AgentApplication, AgentThread, SerializationError, Store, open_store
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import TransferError
from covonaut_es.store._urls import persistence_env
from support import append_raw_event

NOW = datetime(2026, 5, 6, tzinfo=UTC)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A store of each kind, without the replay check at teardown: these tests leave
    records in it that no code can read."""
    opened = open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture
def planted_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """The topic of a class in an importable module that creates a file when imported;
    (topic, that file)."""
    flag = tmp_path / "imported.flag"
    module = tmp_path / "planted_module.py"
    module.write_text(f"open({str(flag)!r}, 'w').close()\n\nclass Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "planted_module:Thing", flag


def test_a_stored_topic_naming_a_module_is_refused_without_importing_it(
    store: Store, planted_topic: tuple[str, Path]
) -> None:
    """Reading a record whose topic names an importable module raises a SerializationError
    naming its stream and version, and the module's code never runs."""
    topic, flag = planted_topic
    store.save(AgentThread.start("t", now=NOW))
    version = append_raw_event(store, "t", topic, msgspec.json.encode({"_v": 1}))

    stream = thread_aggregate_id("t")
    with pytest.raises(SerializationError, match=rf"{stream} at version {version}.*not imported"):
        store.history("t")
    assert not flag.exists()
    assert list(store.thread_ids()) == ["t"]


def test_import_refuses_a_line_whose_topic_names_a_module(
    store: Store, planted_topic: tuple[str, Path]
) -> None:
    """An import line whose topic names an importable module is refused before anything
    is written, and the module is not imported."""
    topic, flag = planted_topic
    store.save(AgentThread.start("t", now=NOW))
    [line] = export_thread(store, "t")
    exported = msgspec.json.decode(line)
    exported["thread_id"] = "copy"
    planted = {**exported, "version": 2, "topic": topic, "payload": {"_v": 1}}
    lines = [msgspec.json.encode(exported).decode(), msgspec.json.encode(planted).decode()]

    with pytest.raises(TransferError, match="version 2: unknown event type"):
        import_threads(store, lines)
    assert not flag.exists()
    assert not store.exists("copy")


class Note(Aggregate):
    """An application's own aggregate."""

    @event("Written")
    def __init__(self, text: str) -> None:
        self.text = text


class Listing(AgentApplication):
    """An application that lists its aggregate."""

    aggregate_classes = (Note,)


class Unlisting(AgentApplication):
    """An application that does not list its aggregate."""


def test_an_application_reads_the_aggregates_it_lists(store_url: str) -> None:
    """An AgentApplication reads back the events of the aggregate classes it lists."""
    app = Listing(env=persistence_env(store_url))
    note = Note("pens")
    app.save(note)
    assert app.repository.get(note.id).text == "pens"
    app.close()


def test_an_application_refuses_to_write_events_it_could_not_read(store_url: str) -> None:
    """An event of an aggregate the application does not list is refused before it is
    stored, with a message saying to list the class in aggregate_classes."""
    app = Unlisting(env=persistence_env(store_url))
    note = Note("pens")
    with pytest.raises(SerializationError, match="aggregate_classes"):
        app.save(note)
    assert app.recorder.select_events(note.id) == []
    app.close()
