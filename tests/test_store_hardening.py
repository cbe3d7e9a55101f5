"""Stores facing hostile or damaged data: stored topics, keys, corruption, URLs."""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import traceback
import uuid
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec
import pytest
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderRequest,
    ProviderResponse,
    ReviewQueue,
    SerializationError,
    Tool,
    ToolContext,
    create_cipher_key,
    open_store,
)
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.cli import main as cli_main
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import (
    CipherKeyMismatchError,
    CompressionMismatchError,
    CovonautError,
    ForeignSchemaError,
    MissingEventError,
    MissingFirstEventError,
    ReadOnlyStoreError,
    StoreOwnerRequiredError,
    StoreSettingsError,
    StoreURLError,
    ThreadNotFoundError,
    TransferError,
)
from covonaut_es.inbox import create_app
from covonaut_es.messages import Message, Role
from covonaut_es.providers import ScriptedProvider
from covonaut_es.service import HmacReviewerVerifier, ThreadService, review_submission
from covonaut_es.store import AgentApplication, Store, _zstd
from covonaut_es.store._dictionary import ZstdDictionaryCompressor, shipped_dictionary
from covonaut_es.store._settings import SETTINGS_TABLE, settings_table
from covonaut_es.store._url_secrets import redact
from covonaut_es.store._urls import persistence_env, postgres_params
from covonaut_es.workers import Worker
from support import (
    answer,
    append_raw_event,
    call,
    postgres_database_of,
    sqlite_key,
    start_bare_run,
    ticking_clock,
)
from test_cli import ROOT, covonaut_es

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
    for read in (store.history, store.load):
        with pytest.raises(
            SerializationError, match=rf"thread 't' .*{stream} at version {version}.*not imported"
        ):
            read("t")
    assert not flag.exists()
    assert list(store.thread_ids()) == ["t"]


def test_a_created_event_naming_a_module_as_its_aggregate_is_refused_without_importing_it(
    store: Store, planted_topic: tuple[str, Path]
) -> None:
    """A thread's first event whose aggregate type was rewritten to name an importable
    module raises a SerializationError naming its stream (verify reports it), and the
    module's code never runs: eventsourcing would import that name to create the
    aggregate."""
    topic, flag = planted_topic
    payload = {"timestamp": NOW.isoformat(), "originator_topic": topic, "thread_id": "t"}
    stored = store._app.mapper.stored_payload(msgspec.json.encode(payload))  # type: ignore[attr-defined]
    record = StoredEvent(thread_aggregate_id("t"), 1, AgentThread.Started.TOPIC, stored)
    store._app.recorder.insert_events([record])

    stream = thread_aggregate_id("t")
    for read in (store.history, store.load):
        with pytest.raises(
            SerializationError, match=rf"{stream} at version 1: it creates .*not imported"
        ):
            read("t")
    report = store.verify("t")  # reports it, as every damage, and never raises
    assert any("not imported" in f.problem for f in report.findings), report.findings
    assert not flag.exists()


def test_import_refuses_a_line_whose_topic_names_a_module(
    store: Store, planted_topic: tuple[str, Path]
) -> None:
    """An import line whose topic names an importable module is refused before anything
    is written, and the module is not imported."""
    topic, flag = planted_topic
    store.save(AgentThread.start("t", now=NOW))
    [line, _trailer] = export_thread(store, "t")
    exported = msgspec.json.decode(line)
    exported["thread_id"] = "copy"
    planted = {**exported, "version": 2, "topic": topic, "payload": {"_v": 1}}
    lines = [msgspec.json.encode(exported).decode(), msgspec.json.encode(planted).decode()]

    with pytest.raises(TransferError, match=r"version 2\): unknown event type"):
        import_threads(store, lines)
    assert not flag.exists()
    assert not store.exists("copy")


def test_import_refuses_a_line_nested_beyond_the_decoders_depth(store: Store) -> None:
    """A line whose payload nests deeper than msgspec decodes is a TransferError naming
    the line, not a RecursionError, and nothing is written."""
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    line = f'{{"thread_id":"x","version":1,"topic":"{AgentThread.Started.TOPIC}","payload":{deep}}}'

    with pytest.raises(TransferError, match="line 1 is neither an exported event nor"):
        import_threads(store, [line])
    assert not store.exists("x")


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


@pytest.fixture
def reopenable_url(store_url: str) -> str:
    """A store URL that a second open reaches: memory stores get a name."""
    return f"memory://{uuid.uuid4().hex}" if store_url == "memory://" else store_url


def test_another_key_or_none_fails_at_open_and_the_right_key_still_reads(
    reopenable_url: str,
) -> None:
    """Opening an encrypted store with another key or none raises CipherKeyMismatchError
    saying which; the store keeps only a fingerprint of its key, and reads with it."""
    key = create_cipher_key()
    with open_store(reopenable_url, cipher_key=key) as first:
        first.save(AgentThread.start("t", now=NOW))
        with pytest.raises(CipherKeyMismatchError, match="key given is another"):
            open_store(reopenable_url, cipher_key=create_cipher_key())
        with pytest.raises(CipherKeyMismatchError, match="opened without a cipher key"):
            open_store(reopenable_url)
        settings = settings_table(first._app).read()
        assert settings["cipher"].startswith("hmac-sha256:")
        assert key not in settings["cipher"]
        with open_store(reopenable_url, cipher_key=key) as again:
            assert list(again.thread_ids()) == ["t"]


def test_a_key_for_a_plain_store_fails_at_open(reopenable_url: str) -> None:
    """A cipher key given for a store created without one raises CipherKeyMismatchError."""
    with open_store(reopenable_url) as first:
        first.save(AgentThread.start("t", now=NOW))
        with pytest.raises(CipherKeyMismatchError, match="is not encrypted"):
            open_store(reopenable_url, cipher_key=create_cipher_key())


def test_another_compression_fails_at_open(reopenable_url: str) -> None:
    """Opening a compressed store with ``compress=False`` given raises
    CompressionMismatchError naming the option to pass, writing or only reading."""
    with open_store(reopenable_url, compress=True) as first:
        first.save(AgentThread.start("t", now=NOW))
        for create_tables in (True, False):
            with pytest.raises(CompressionMismatchError, match="pass compress='zlib'"):
                open_store(reopenable_url, compress=False, create_tables=create_tables)


def test_an_open_that_names_no_compression_takes_the_stores(reopenable_url: str) -> None:
    """Without ``compress`` a compressed store is opened compressed, to write and to
    read: what it writes is compressed."""
    with open_store(reopenable_url, compress=True) as first:
        first.save(AgentThread.start("t", now=NOW))
        with open_store(reopenable_url) as writer:
            thread = writer.load("t")
            start_bare_run(thread, now=NOW)
            writer.save(thread)
            [*_, newest] = writer._app.recorder.select_notifications(None, 10)
            assert msgspec.json.decode(zlib.decompress(newest.state))["mode"] == "continue"
        with open_store(reopenable_url, create_tables=False) as reader:
            assert reader.load("t").version == 2


def test_a_new_store_opened_without_compress_compresses_with_the_shipped_dictionary(
    tmp_path: Path,
) -> None:
    """A new store opened without ``compress`` stores each record in a zstd frame naming
    the shipped dictionary, and records so: a later ``compress=True`` (zlib) or
    ``False`` is refused, ``"zstd"`` opens it."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    with open_store(url) as new:
        new.save(AgentThread.start("t", now=NOW))
        [first_record] = new._app.recorder.select_notifications(None, 10)
        assert _zstd.dictionary_id(first_record.state) == shipped_dictionary().id != 0
        plain = ZstdDictionaryCompressor().decompress(first_record.state)
        assert msgspec.json.decode(plain)["thread_id"] == "t"
    for other in (True, False):
        with pytest.raises(CompressionMismatchError, match="pass compress='zstd'"):
            open_store(url, compress=other)
    with open_store(url, compress="zstd") as again:
        assert again.load("t").version == 1


def test_an_empty_store_keeps_the_options_of_its_first_open(reopenable_url: str) -> None:
    """A store without events records the options it was first opened with, so a later
    open with another key fails even before anything was stored."""
    with (
        open_store(reopenable_url, cipher_key=create_cipher_key()),
        pytest.raises(CipherKeyMismatchError),
    ):
        open_store(reopenable_url, cipher_key=create_cipher_key())


def test_a_store_without_its_settings_is_checked_by_decoding_its_first_event(
    shared_url: str,
) -> None:
    """A store with events but no recorded options (as one made before they were
    recorded) is checked by decoding its first event: a wrong key fails at open; with
    the right key, a first event stored under its keyed stream id shows that the
    settings were removed (a store that old kept unkeyed ids: the golden stores open),
    and it is refused too (ADR 0095). Neither records anything in it."""
    key = create_cipher_key()
    with open_store(shared_url, cipher_key=key, compress="none") as first:
        first.save(AgentThread.start("t", now=NOW))
        with first._app.recorder.datastore.transaction(commit=True) as cursor:
            cursor.execute(f"DROP TABLE {SETTINGS_TABLE}")
    with pytest.raises(StoreSettingsError, match="predates recorded settings"):
        open_store(shared_url)
    with pytest.raises(StoreSettingsError, match="records no scheme of stream ids"):
        open_store(shared_url, cipher_key=key)
    with pytest.raises(StoreSettingsError, match="predates recorded settings"):
        open_store(shared_url)  # nothing was recorded


def delete_event(store: Store, thread_id: str, version: int) -> None:
    """Delete one stored event behind the library's back, as damage would."""
    sqlite = store._backend.name == "sqlite"
    table, mark = ("stored_events", "?") if sqlite else ("covonaut_events", "%s")
    stream = thread_aggregate_id(thread_id)
    with store._app.recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE originator_id = {mark} AND originator_version = {mark}",
            (sqlite_key(stream) if sqlite else stream, version),
        )


def three_messages(store: Store, thread_id: str = "t") -> None:
    """Store a thread of four events."""
    thread = AgentThread.start(thread_id, now=NOW)
    for text in ("one", "two", "three"):
        thread.steer(Message(Role.USER, text), now=NOW)
    store.save(thread)


@pytest.mark.parametrize(
    ("deleted", "error", "message"),
    [
        (2, MissingEventError, r"'t' .* lost its event at version 2"),
        (1, MissingFirstEventError, r"'t' .* lost its first event"),
    ],
)
def test_a_deleted_event_names_the_thread_and_version(
    shared_url: str, deleted: int, error: type[Exception], message: str
) -> None:
    """Loading, replaying or listing the history of a thread one of whose events was
    deleted raises MissingEventError (MissingFirstEventError for its first) naming the
    thread and the missing version."""
    with open_store(shared_url) as store:
        three_messages(store)
        delete_event(store, "t", deleted)
        for read in (store.load, store.replay_state, store.history):
            with pytest.raises(error, match=message) as raised:
                read("t")
            assert isinstance(raised.value, MissingEventError)
            assert (raised.value.thread_id, raised.value.version) == ("t", 2)


def damaged_stores(tmp_path: Path) -> dict[str, tuple[str, ...]]:
    """SQLite files damaged in each way, each with the command that reads it."""
    for name, version in (("middle", 2), ("first", 1)):
        with open_store(f"sqlite:///{tmp_path / name}.db") as store:
            three_messages(store)
            delete_event(store, "t", version)
    (tmp_path / "text.db").write_bytes(b"these are not the bytes of a database\n" * 200)
    with contextlib.closing(sqlite3.connect(tmp_path / "foreign.db")) as conn:
        conn.execute("CREATE TABLE stored_events (id INTEGER, payload TEXT)")
        conn.commit()
    return {
        "middle": ("threads",),
        "first": ("history", "t"),
        "text": ("threads",),
        "foreign": ("threads",),
    }


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("middle", "lost its event at version 2"),
        ("first", "lost its first event"),
        ("text", "is not a SQLite database"),
        ("foreign", "belongs to another application"),
    ],
)
def test_the_command_line_reports_a_damaged_store_in_one_line(
    tmp_path: Path, damage: str, message: str
) -> None:
    """Reading a damaged store or a file that is not one exits 2 with one line on
    stderr saying what is wrong, and no traceback."""
    command = damaged_stores(tmp_path)[damage]
    result = covonaut_es(*command, "--store", f"sqlite:///{tmp_path / damage}.db")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert message in result.stderr


def test_a_foreign_table_is_left_unwritten(tmp_path: Path) -> None:
    """Opening a file whose stored_events table is another application's raises
    ForeignSchemaError and creates none of the store's tables in it."""
    damaged_stores(tmp_path)
    with pytest.raises(ForeignSchemaError, match="expected columns"):
        open_store(f"sqlite:///{tmp_path / 'foreign.db'}")
    with contextlib.closing(sqlite3.connect(tmp_path / "foreign.db")) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master")]
    assert tables == ["stored_events"]


def test_a_read_only_file_is_refused_for_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store file the process cannot write is a ReadOnlyStoreError at a writing open
    (tests run as root, so the file's permission is simulated)."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        three_messages(store)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: mode != os.W_OK and real_access(p, mode))
    with pytest.raises(ReadOnlyStoreError, match=r"read-only.*mode=ro"):
        open_store(url)


def test_a_read_only_sqlite_url_reads_and_refuses_writes(tmp_path: Path) -> None:
    """sqlite:///x.db?mode=ro opens the file read-only: threads read, a save raises
    ReadOnlyStoreError, and no file named after the query appears."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        three_messages(store)
    with open_store(url + "?mode=ro") as read_only:
        thread = read_only.load("t")
        assert list(read_only.thread_ids()) == ["t"]
        thread.steer(Message(Role.USER, "four"), now=NOW)
        with pytest.raises(ReadOnlyStoreError, match="not saved"):
            read_only.save(thread)
    assert sorted(p.name for p in tmp_path.iterdir() if "?" in p.name) == []
    with open_store(url) as store:
        assert store.load("t").version == 4


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///threads.db?cache=shared", "unsupported query parameter cache=shared"),
        ("sqlite:///threads.db?mode=memory", "unsupported query parameter mode=memory"),
        ("sqlite:///a\x00b.db", "NUL byte"),
        ("sqlite:///a%00b.db", "NUL byte"),
        ("postgresql://localhost/app?bogus=1", "bogus"),
        ("postgresql://localhost:port/app", "invalid port"),
        ("postgresql://localhost:\u00b2/app", "invalid port"),
        ("postgresql://localhost/app?connect_timeout=0", "invalid connect_timeout"),
    ],
)
def test_a_malformed_store_url_names_its_problem(url: str, message: str) -> None:
    """A store URL with an unsupported parameter or an impossible path raises
    StoreURLError saying what is wrong, not an error about something else."""
    with pytest.raises(StoreURLError, match=message):
        open_store(url)


# Each number's setting, range, and default (taken for a URL's empty port, as libpq does).
_LIMITS = {
    "port": ("POSTGRES_PORT", 1, 65535, "5432"),
    "connect_timeout": ("POSTGRES_CONNECT_TIMEOUT", 1, 2**31 - 1, "5"),
}
_WRITTEN_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.integers(1, 5000).map(lambda n: "7" * n),  # past the 4,300 digits int() takes
    st.integers(1, 5000).map(lambda n: "0" * n + "5432"),  # libpq takes leading zeros
    st.text(st.characters(categories=("Nd", "No")), min_size=1, max_size=4),  # ٣, ², ...
    st.from_regex(r"\A[0-9]{1,4}[^0-9]{0,2}\Z"),
    st.text(max_size=4),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(_LIMITS)), written=_WRITTEN_NUMBERS, in_query=st.booleans())
def test_a_postgres_urls_numbers_are_whole_numbers_or_refused_by_name(
    name: str, written: str, in_query: bool
) -> None:
    """A PostgreSQL URL's port and connect_timeout reach the drivers only as whole numbers
    in ASCII digits, in the range libpq takes; anything else (another script's digits, a
    superscript, a number too long for int(), zero, a sign) is a StoreURLError naming
    the parameter, never a driver's error at connection time."""
    if name == "port" and not in_query:
        url = f"postgresql://app@db.internal:{quote(written, safe='')}/app"
    else:
        url = f"postgresql://app@db.internal/app?{name}={quote(written, safe='')}"
    key, least, most, default = _LIMITS[name]
    try:
        env = persistence_env(url)
    except StoreURLError as refused:
        assert name in str(refused) or "is not understood" in str(refused)
        return
    taken = (written or default).lstrip("0") or "0"
    assert taken.isascii() and taken.isdigit()
    assert env[key] == taken and least <= int(taken) <= most


_URLS_THAT_DO_NOT_OPEN = (
    "postgresql+psycopg://app:{secret}@db.internal/app",  # a scheme for another library
    "mysql://app:{secret}@db.internal/app",
    "postgresql://app:{secret}@[::1/app",  # a host that does not parse
    "postgresql://app:{secret}@db.internal:port/app",
    "postgresql://app:{secret}@/app",
    "postgresql://app:{secret}@db.internal/app?sslmode=%",
    "postgresql://app@db.internal/app?password={secret}&sslmode=%",
    "sqlite://app:{secret}@db.internal/threads.db",
    # A key, or another credential, given as a parameter of the URL by mistake.
    "sqlite:///threads.db?cipher_key={secret}",
    "sqlite:///threads.db?mode=ro&key={secret}",
    "sqlite:///threads.db#chain_key={secret}",
    "sqlite:///threads.db?passwd={secret}",
    "sqlite:///threads.db?mode=ro&passphrase={secret}",
    "postgresql://app@db.internal/app?cipher_key={secret}=",
    "postgresql://app@db.internal/app?api_token={secret}&sslmode=%",
)
# Characters that end a URL's user information in some reading of it: a password that
# holds one raw is not the same password to every parser.
_RAW_PASSWORD = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs"), exclude_characters="/?#&@"),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    template=st.sampled_from(_URLS_THAT_DO_NOT_OPEN),
    password=_RAW_PASSWORD.map(lambda text: "Sekret" + text),
    percent_encoded=st.booleans(),
)
def test_no_error_about_a_store_url_shows_its_password(
    template: str, password: str, percent_encoded: bool
) -> None:
    """However a URL is wrong (a scheme, a host, a port, a parameter), the error names
    the problem and shows neither the password nor its percent-encoded form, nor does
    a traceback of it."""
    written = quote(password, safe="") if percent_encoded else password
    with pytest.raises(StoreURLError) as refused:
        open_store(template.format(secret=written))
    shown = _shown_anywhere(refused.value)  # the driver's error it was raised from too
    assert password not in shown
    assert written not in shown


def test_the_command_line_never_prints_a_store_urls_password() -> None:
    """An operator's typo in a URL is reported in one line, with the password hidden."""
    result = covonaut_es("threads", "--store", "postgresql+psycopg://app:Sekret@db/app")
    assert result.returncode == 2
    assert "app:***@db" in result.stderr
    assert "Sekret" not in result.stdout + result.stderr


_PASSWORD_PLACES = (
    "postgresql://postgres:{secret}@{server}/{db}",
    "postgresql://postgres:{secret}@{server}/{db}?connect_timeout=0",
    "postgresql://postgres@{server}/{db}?{key}={secret}",
    "postgresql://postgres@{server}/{db}?{key}={secret}&connect_timeout=0",
    "postgresql://postgres@{server}/{db}?connect_timeout=0&{key}={secret}",
    "postgresql:/postgres:{secret}@{server}/{db}",  # a scheme mistyped
    "postgresql//postgres:{secret}@{server}/{db}",
    "host=127.0.0.1 dbname={db} {key}={secret}",  # libpq's other form, which no store takes
    "postgresql://postgres:{secret}@{server}/{db}?application_name=etl@node1",
    "application://postgres:{secret}@{server}/{db}",  # no store's: Store.from_application's
)
"""Where a URL may carry a password: its user information, or a parameter (which a
later parameter's error may be about)."""
_PASSWORD_KEYS = (
    "password",
    "PASSWORD",
    "pass%77ord",
    "%70assword",
    "sslpassword",
    "scram_client_key",
)
# Pieces of a password, joined by characters that end a part of a URL when written raw;
# short ones of letters no message shows, which a driver may show joined by a character
# it does not cut at.
_PIECES = st.lists(
    st.text(st.characters(categories=("L", "N")), min_size=1, max_size=6).map(
        lambda text: "Sekret" + text
    )
    | st.text("QXZJ", min_size=1, max_size=2),
    min_size=1,
    max_size=4,
)
_JOINTS = st.lists(st.sampled_from(list("@/#& \t=?:,%\\'\"")), min_size=3)


def _shown_anywhere(error: BaseException) -> str:
    """Everything a traceback of ``error`` prints (its chain included)."""
    return "".join(traceback.format_exception(error))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    place=st.sampled_from(_PASSWORD_PLACES),
    key=st.sampled_from(_PASSWORD_KEYS),
    pieces=_PIECES,
    joints=_JOINTS,
    percent_encoded=st.booleans(),
    as_the_view=st.booleans(),
)
# Found by fresh CI runs: a raw ":" between two pieces, which the driver read as a
# host and its port; a raw "?" and "=" before the "@", read as a query before the host.
@example(
    place="postgresql://postgres:{secret}@{server}/{db}",
    key="password",
    pieces=["Sekret00", "Sekret0", "Sekret0"],
    joints=["@", ":", "@"],
    percent_encoded=False,
    as_the_view=False,
)
@example(
    place="postgresql://postgres:{secret}@{server}/{db}",
    key="password",
    pieces=["Sekret0", "Sekret0", "Sekret0"],
    joints=["@", "?", "="],
    percent_encoded=False,
    as_the_view=False,
)
# Found by a CI run (2026-12-06): a raw "/" then "&" (or "?") and "=" before the "@",
# which the rule read as a query parameter holding the "@", so it found no password to
# hide, and libpq read the piece before the "/" as the port (or a parameter's name).
@example(
    place="postgresql://postgres:{secret}@{server}/{db}",
    key="password",
    pieces=["Sekret0", "Sekret0", "Sekret0"],
    joints=["/", "&", "="],
    percent_encoded=False,
    as_the_view=False,
)
@example(
    place="postgresql://postgres:{secret}@{server}/{db}",
    key="password",
    pieces=["Sekret0", "Sekret0", "Sekret0"],
    joints=["/", "?", "="],
    percent_encoded=False,
    as_the_view=False,
)
# Found by a fresh attack (helper-103): short pieces joined by "#", which libpq does not
# cut at, before a "/", which it does: the run was shown as the port.
@example(
    place="postgresql://postgres:{secret}@{server}/{db}",
    key="password",
    pieces=["QX", "ZJ", "QX", "J"],
    joints=["#", "#", "/", "@"],
    percent_encoded=False,
    as_the_view=False,
)
def test_no_message_of_an_open_shows_a_piece_of_a_password_however_it_is_written(
    postgres_database: str,
    place: str,
    key: str,
    pieces: list[str],
    joints: list[str],
    percent_encoded: bool,
    as_the_view: bool,
) -> None:
    """A password written raw with characters that end a part of a URL (``@``, ``/``,
    ``&``, ``#``, ``,``, a space) is read apart by libpq, which may show a run of it as
    a host, a port or an option, cutting at some of those characters and not at others
    (``ab#cd`` of ``ab#cd/x`` as a port); under a percent-encoded key it is still a
    password. Whether the store (or the reviewer queue's view kept there) opens or not,
    no message, nor a traceback of it, nor the store's or the queue's URL, shows any run
    of it of three characters or more."""
    password = "".join(piece + joint for piece, joint in zip(pieces, joints, strict=False))
    written = quote(password, safe="") if percent_encoded else password
    server = postgres_database.split("@", 1)[1].rsplit("/", 1)[0]
    url = place.format(secret=written, server=server, db="covonaut_missing", key=key)
    shown: list[str] = []
    try:
        if url.startswith("application:"):
            ReviewQueue(url)
        elif as_the_view:
            queue = ReviewQueue(postgres_database, view_url=url)
            shown.append(queue.store_url)
            queue.view()
            queue.close()
        else:
            with open_store(url, create_tables=False) as store:
                shown.append(store.url)
            shown.append(ReviewQueue(url).store_url)
    except CovonautError as refused:
        shown.append(_shown_anywhere(refused))
    command = (
        ("reviews", "--store", postgres_database, "--view", url)
        if as_the_view
        else ("threads", "--store", url)
    )
    result = covonaut_es(*command)
    shown.append(result.stdout + result.stderr)
    for run in _runs_of(pieces, joints):
        for text in shown:
            assert run not in text and quote(run, safe="") not in text, (run, text)


def _runs_of(pieces: list[str], joints: list[str]) -> Iterator[str]:
    """Each run of three characters or more from one piece to another, with the joints
    between them: what a driver cutting at some joints and not at others may show."""
    for first in range(len(pieces)):
        run = ""
        for index in range(first, len(pieces)):
            run += (joints[index - 1] if index > first else "") + pieces[index]
            if len(run) >= 3:
                yield run


@settings(max_examples=100, deadline=None)
@given(
    password=st.one_of(
        _PIECES.map("".join),
        st.from_regex(r"\A[a-z0-9]{1,3}\Z"),  # short: e, p, 5432
        st.sampled_from(["postgres", "app", "5432", "password"]),  # as common as the names
    ),
    names=st.lists(
        st.one_of(st.from_regex(r"\A[a-z][a-z0-9_]{2,8}\Z"), st.sampled_from(["postgres", "app"])),
        min_size=3,
        max_size=3,
    ),
    parameters=st.lists(
        st.tuples(
            st.sampled_from(["application_name", "user", "options", "sslmode"]),
            st.from_regex(r"\A[a-z0-9]{1,6}(@[a-z0-9]{1,6})?\Z"),
        ),
        max_size=3,
    ),
    in_the_query=st.booleans(),
)
def test_an_ordinary_url_is_shown_whole_but_for_its_password(
    password: str, names: list[str], parameters: list[tuple[str, str]], in_the_query: bool
) -> None:
    """A well-formed URL is shown with its password replaced and nothing else: an ``@``
    in a parameter (a user ``ann@corp``, an application name) does not make its host,
    port, database or parameters count as a password's pieces, nor does a short or
    common password (``postgres``, ``5432``) hide the same text elsewhere in the URL."""
    user, host, db = names
    query = "&".join(f"{k}={v}" for k, v in parameters)
    if in_the_query:
        url = f"postgresql://{user}@{host}:5432/{db}?password={password}" + (
            f"&{query}" if query else ""
        )
        expected = url.replace(f"password={password}", "password=***")
    else:
        url = f"postgresql://{user}:{password}@{host}:5432/{db}" + (f"?{query}" if query else "")
        expected = url.replace(f":{password}@", ":***@")
    assert redact(url) == expected


def _an_applications_tables(url: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE shop_events (originator_id uuid, originator_version bigint, "
            "topic text, state bytea, notification_id bigserial)"
        )
    return {}


def _a_changed_table(url: str) -> dict[str, Any]:
    import psycopg

    open_store(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE covonaut_events ALTER COLUMN topic TYPE varchar(200)")
    return {}


def _another_compression(url: str) -> dict[str, Any]:
    open_store(url).close()
    return {"compress": "zlib"}


def _another_cipher_key(url: str) -> dict[str, Any]:
    open_store(url, cipher_key=create_cipher_key()).close()
    return {"cipher_key": create_cipher_key()}


_REFUSED_OPENS: dict[str, Callable[[str], dict[str, Any]]] = {
    "an application's tables": _an_applications_tables,
    "a changed table": _a_changed_table,
    "another compression": _another_compression,
    "another cipher key": _another_cipher_key,
}
"""Databases a PostgreSQL store's open refuses, each made at a URL: the open's options."""


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    refused=st.sampled_from(sorted(_REFUSED_OPENS)),
    password=_RAW_PASSWORD.map(lambda text: "Sekret" + text),
)
def test_no_refused_postgres_open_shows_the_urls_password(
    postgres_url: str, refused: str, password: str
) -> None:
    """Whatever an open of a PostgreSQL store refuses (another application's tables, a
    table changed around the library, other settings), its error shows neither the URL's
    password nor its percent-encoded form, on the API and on the command line."""
    import psycopg

    name = f"p_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    written = quote(password, safe="")
    base = postgres_url.rsplit("/", 1)[0].replace("://postgres@", f"://postgres:{written}@")
    url = f"{base}/{name}"
    try:
        options = _REFUSED_OPENS[refused](url)
        with pytest.raises(CovonautError) as raised:
            open_store(url, **options).close()
        assert password not in str(raised.value) and written not in str(raised.value)
        result = covonaut_es("threads", "--store", url)  # which opens as the store records
        shown = result.stdout + result.stderr
        assert password not in shown and written not in shown
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_postgres_url_parameters_reach_every_connection(postgres_database: str) -> None:
    """A PostgreSQL URL's query parameters (sslmode, application_name, ...) are passed
    to the store's connections and to its reviewer queue's, not dropped."""
    assert postgres_params(persistence_env(postgres_database + "?sslmode=disable")) == {
        "sslmode": "disable"
    }
    url = postgres_database + "?application_name=covonaut-check&sslmode=disable"
    with open_store(url) as store:
        store.save(AgentThread.start("t", now=NOW))
        with store._app.recorder.datastore.transaction(commit=False) as cursor:
            cursor.execute("SHOW application_name")
            assert cursor.fetchone()["application_name"] == "covonaut-check"
    with ReviewQueue(url) as queue, queue.view().datastore.transaction(commit=False) as cursor:
        cursor.execute("SHOW application_name")
        assert cursor.fetchone()["application_name"] == "covonaut-check"


def test_the_command_line_import_runs_no_module_a_line_names(
    tmp_path: Path, planted_topic: tuple[str, Path]
) -> None:
    """`import` of a line whose topic names an importable module exits 2 with one line
    and never imports it, even with the module on the command's path."""
    topic, flag = planted_topic
    line = {"thread_id": "t", "version": 1, "topic": topic, "payload": {"_v": 1}}
    export = tmp_path / "planted.jsonl"
    export.write_bytes(msgspec.json.encode(line) + b"\n")
    path = os.pathsep.join([str(ROOT / "src"), str(tmp_path)])
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    result = covonaut_es("import", str(export), "--store", url, env={"PYTHONPATH": path})
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "unknown event type" in result.stderr
    assert not flag.exists()


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    thread_id=st.sampled_from(["v", "vf"]),
    version=st.one_of(
        st.integers(min_value=-2, max_value=7),
        st.integers(),
        st.integers(min_value=2**62, max_value=2**80),
    ),
)
@example(thread_id="v", version=5)  # one past the head
@example(thread_id="vf", version=6)
@example(thread_id="vf", version=2)  # the fork's branch point, its parent's version
@example(thread_id="vf", version=0)
def test_a_read_at_any_version_gives_it_or_names_the_versions_the_thread_has(
    store: Store, thread_id: str, version: int
) -> None:
    """Generated (helper-189): a plain thread (versions 1 to 4) or a fork of it at 2 (its
    own from 3 to 5) read at a version it has gives that version; at any other, below 1,
    past its head or past what any back end stores (2**63), a load and ``state_at`` are
    refused as a fork there is, with ThreadNotFoundError naming the versions the thread
    has, and ``find`` gives None, on every store: never the head given for a version
    past it, nor the driver's OverflowError."""
    if not store.exists("v"):
        three_messages(store, "v")
        store.fork("v", at_version=2, new_thread_id="vf")
        fork = store.load("vf")
        for text in ("four", "five"):
            fork.steer(Message(Role.USER, text), now=NOW)
        store.save(fork)
    head = store.state_at(thread_id).version
    assert head == {"v": 4, "vf": 5}[thread_id]
    if 1 <= version <= head:
        assert store.load(thread_id, version=version).version == version
        assert store.state_at(thread_id, version).version == version
        found = store.find(thread_id, version=version)
        assert found is not None and found.version == version
    else:
        refusals = {
            "load": ("read", lambda: store.load(thread_id, version=version)),
            "state_at": ("read", lambda: store.state_at(thread_id, version)),
            "fork": ("forked", lambda: store.fork(thread_id, at_version=version)),
        }
        for name, (doing, refused) in refusals.items():
            with pytest.raises(ThreadNotFoundError) as raised:
                refused()
            assert str(raised.value) == (
                f"thread {thread_id!r} has versions 1 to {head}; "
                f"it cannot be {doing} at version {version}"
            ), name
        assert store.find(thread_id, version=version) is None
    if version >= 0 and thread_id == "v":  # past 2**63 SQLite's driver raised OverflowError
        assert len(store.events_after("v", version)) == max(0, head - version)


def test_the_command_line_refuses_a_fork_at_a_version_no_store_holds(tmp_path: Path) -> None:
    """`fork --at` a number past what SQLite stores exits 2 in one line."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        three_messages(store, "v")
    result = covonaut_es("fork", "v", "--at", "99999999999999999999999", "--store", url)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "cannot be forked" in result.stderr


_DOCS = ROOT / "docs" / "operations.md"


def _documented_grants(role: str, database: str) -> list[str]:
    """The statements of the GRANT script docs/operations.md gives, for ``role`` on
    ``database``."""
    text = _DOCS.read_text()
    script = text.split("```sql\n-- grants of an application role\n", 1)[1].split("```", 1)[0]
    script = script.replace("covonaut_app", role).replace("DATABASE app ", f"DATABASE {database} ")
    return [line for line in script.splitlines() if line and not line.startswith("--")]


@contextlib.contextmanager
def _roles(postgres_database: str) -> Iterator[tuple[str, str]]:
    """The URLs of two roles of ``postgres_database``, neither a superuser: the owner
    of its schema (who makes the store), and an application role granted exactly what
    docs/operations.md says it needs, nothing on the schema but its use."""
    import psycopg

    suffix = uuid.uuid4().hex[:8]
    owner, app = f"owner_{suffix}", f"app_{suffix}"
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        for role in (owner, app):
            admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        admin.execute(f"ALTER SCHEMA public OWNER TO {owner}")
        admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    parts = urlsplit(postgres_database)

    def url(role: str) -> str:
        return parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}").geturl()

    try:
        yield url(owner), url(app)
    finally:
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            for role in (app, owner):
                admin.execute(f"REASSIGN OWNED BY {role} TO postgres")
                admin.execute(f"DROP OWNED BY {role}")
                admin.execute(f"DROP ROLE {role}")


_REVIEWER_SECRET = uuid.uuid4().hex * 2


def _paying(store: Store, thread_id: str) -> Agent:
    """An agent whose model asks to pay, a call a person must approve."""

    def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
        return {"paid": args["amount"]}

    def model(request: ProviderRequest) -> ProviderResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return answer("paid")
        return call(("p1", "pay", '{"amount": 40}'))

    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[Tool("pay", "Pay", {"type": "object"}, pay, requires_approval=True)],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            reviewer_verifier=HmacReviewerVerifier(_REVIEWER_SECRET.encode()),
            clock=ticking_clock(),
        )
    )


@pytest.mark.postgres
def test_a_role_that_does_not_own_the_tables_uses_the_store_with_the_documented_grants(
    postgres_database: str,
) -> None:
    """The owner's first open makes every table; a second role, no superuser, granted
    exactly the documented privileges (no CREATE on the schema, owning nothing) runs
    every command: open, a run that pauses, a decision and the resume, loads, listings,
    verify, fork, a worker's step, the inbox's queue and the command line's threads,
    reviews and approve; it sends no DDL, so it owns nothing afterwards."""
    import psycopg

    verifier = HmacReviewerVerifier(_REVIEWER_SECRET.encode())
    rita = verifier.issue_token("rita", ttl_seconds=600)
    with _roles(postgres_database) as (owner_url, app_url):
        open_store(owner_url).close()
        role = urlsplit(app_url).username
        database = postgres_database.rsplit("/", 1)[1]
        with psycopg.connect(owner_url, autocommit=True) as owner:
            for statement in _documented_grants(str(role), database):
                owner.execute(statement)
        with open_store(app_url) as store:
            agent = _paying(store, "t1")
            assert agent.run("Pay.") == ""
            (pending,) = agent.pending_reviews
            service = ThreadService(store, verifier=verifier)
            service.decide(
                pending.review_id,
                review_submission("approve"),
                reviewer=service.reviewer(rita),
                thread_id="t1",
            )
            assert _paying(store, "t1").resume() == "paid"
            assert store.load("t1").version == len(store.history("t1"))
            assert [t.thread_id for t in store.list_threads().threads] == ["t1"]
            assert store.verify("t1").findings == ()
            store.fork("t1")
            _paying(store, "t2").run("Pay.")
            Worker(store, lambda thread_id: _paying(store, thread_id).config).run(once=True)
            with TestClient(create_app(store, verifier), base_url="http://inbox.test") as client:
                desk = client.app.state.inbox.desk  # type: ignore[attr-defined]
                desk.queue.wait_until_current(desk.store)
                listed = client.get("/api/reviews", headers={"Authorization": f"Bearer {rita}"})
            assert listed.status_code == 200 and "t2" in listed.text
            (waiting,) = _paying(store, "t2").pending_reviews
        env = {"COVONAUT_ES_REVIEWER_SECRET": _REVIEWER_SECRET}
        for args in (
            ("threads",),
            ("reviews",),
            ("approve", waiting.review_id, "--reviewer-token", rita),
            ("workers",),
        ):
            result = covonaut_es(*args, "--store", app_url, env=env)
            assert result.returncode == 0, (args, result.stderr)
        with psycopg.connect(postgres_database) as admin:
            owned = admin.execute(
                "SELECT count(*) FROM pg_class WHERE relowner = "
                "(SELECT oid FROM pg_roles WHERE rolname = %s)",
                (role,),
            ).fetchone()
        assert owned == (0,)


def _queued(store: Store) -> list[str]:
    """The threads the reviewer queue kept in ``store``'s database lists, once current."""
    with ReviewQueue(store.url) as queue, queue.follow() as runner:
        queue.wait_until_current(store, runner=runner)
        return sorted(item.thread_id for item in queue.pending())


@pytest.mark.postgres
def test_a_schema_first_on_the_roles_search_path_is_never_read_or_written(
    postgres_database: str,
) -> None:
    """A schema earlier on the role's search_path than the store's, holding a table of
    the same name as each of the store's (the worker registry with a live worker of its
    own), is never read or written: runs, a worker's step, ``live_workers()``, the
    reviewer queue kept in the store's database and the command line's ``workers`` use
    the store's own tables."""
    import psycopg

    with _roles(postgres_database) as (owner_url, _):
        with open_store(owner_url) as store:
            _paying(store, "t1").run("Pay.")
            Worker(store, lambda thread_id: _paying(store, thread_id).config).run(once=True)
            _queued(store)  # the view's tables, in the store's database
        owner = urlsplit(owner_url).username
        database = postgres_database.rsplit("/", 1)[1]
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            tables = [
                str(name)
                for (name,) in admin.execute(
                    "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = "
                    "'public'::regnamespace ORDER BY relname"
                )
            ]
            admin.execute("CREATE SCHEMA evil")
            for table in tables:
                admin.execute(f"CREATE TABLE evil.{table} (LIKE public.{table})")
            admin.execute(
                "INSERT INTO evil.covonaut_workers VALUES ('fake-worker', 'evilhost', 1, "
                "now(), now() + interval '1 day', '[\"t1\"]', '[]')"
            )
            admin.execute(f"GRANT ALL ON SCHEMA evil TO {owner}")
            admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA evil TO {owner}")
            admin.execute(
                f"ALTER ROLE {owner} IN DATABASE {database} SET search_path = evil, public"
            )

            def evil_rows() -> dict[str, list[Any]]:
                return {
                    table: admin.execute(f"SELECT * FROM evil.{table}").fetchall()
                    for table in tables
                }

            before = evil_rows()
            with open_store(owner_url) as store:
                _paying(store, "t2").run("Pay.")
                worker = Worker(store, lambda thread_id: _paying(store, thread_id).config)
                worker.run(once=True)
                assert store.live_workers() == ()
                store.list_threads()
                assert _queued(store) == ["t1", "t2"]
            result = covonaut_es("workers", "--store", owner_url)
            assert result.returncode == 0 and "fake-worker" not in result.stdout, result
            assert evil_rows() == before


def _paused(store: Store, thread_id: str) -> str:
    """Run a new thread to its pause: the review id it waits for."""
    agent = _paying(store, thread_id)
    agent.run("Pay.")
    (pending,) = agent.pending_reviews
    return pending.review_id


def _decided_and_resumed(store: Store, thread_id: str) -> None:
    verifier = HmacReviewerVerifier(_REVIEWER_SECRET.encode())
    review_id = _paused(store, thread_id)
    service = ThreadService(store, verifier=verifier)
    rita = service.reviewer(verifier.issue_token("rita", ttl_seconds=600))
    service.decide(review_id, review_submission("approve"), reviewer=rita, thread_id=thread_id)
    assert _paying(store, thread_id).resume() == "paid"


_ROLE_COMMANDS: dict[str, Callable[[Store, str], object]] = {
    "run": _paused,
    "decide and resume": _decided_and_resumed,
    "load": lambda store, thread_id: (_paused(store, thread_id), store.load(thread_id)),
    "history": lambda store, thread_id: (_paused(store, thread_id), store.history(thread_id)),
    "verify": lambda store, thread_id: (_paused(store, thread_id), store.verify(thread_id)),
    "fork": lambda store, thread_id: (_paused(store, thread_id), store.fork(thread_id)),
    "list_threads": lambda store, _: store.list_threads(),
    "live_workers": lambda store, _: store.live_workers(),
    "worker step": lambda store, _: Worker(
        store, lambda thread_id: _paying(store, thread_id).config
    ).run(once=True),
}


@pytest.mark.postgres
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands=st.permutations(sorted(_ROLE_COMMANDS)))
def test_every_command_in_any_order_runs_as_a_role_that_does_not_own_the_tables(
    postgres_url: str, commands: list[str]
) -> None:
    """Whatever command a role granted the documented privileges runs first (a listing
    or a worker before any run, a decision before a listing), none sends DDL: the owner's
    first open made every table, those otherwise made on first use included."""
    import psycopg

    with postgres_database_of(postgres_url) as database_url, _roles(database_url) as urls:
        owner_url, app_url = urls
        open_store(owner_url).close()
        role = str(urlsplit(app_url).username)
        with psycopg.connect(owner_url, autocommit=True) as owner:
            for statement in _documented_grants(role, database_url.rsplit("/", 1)[1]):
                owner.execute(statement)
        with open_store(app_url) as store:
            for n, command in enumerate(commands):
                _ROLE_COMMANDS[command](store, f"t{n}")


_STORE_INDEXES = (
    "covonaut_events_pkey",
    "covonaut_events_notification_id_idx",
    "covonaut_snapshots_pkey",
    "covonaut_events_heads_pkey",
    "covonaut_events_leases_pkey",
    "covonaut_settings_pkey",
    "covonaut_events_summaries_pkey",
    "covonaut_events_summaries_originator_id_key",
    "covonaut_events_summaries_seen",
    "covonaut_events_outstanding_v2_pkey",
    "covonaut_events_reviews_pkey",
    "covonaut_workers_pkey",
)
"""Every index the owner's first open of a store makes, as the catalog names it."""

_DAMAGES = (
    *(("index", name) for name in _STORE_INDEXES),
    ("function", "missing"),
    ("function", "old"),
    ("table", "covonaut_events_reviews"),
    ("table", "covonaut_events_summaries"),
    ("column", "calls"),
)


def _damage(conn: Any, kind: str, name: str) -> str:
    """Take one object of the store away, or give it an earlier version's form, as a
    restore whose post-data section failed or an upgrade leaves it: what an open's
    error names."""
    if kind == "index":
        key = conn.execute(
            "SELECT conrelid::regclass::text FROM pg_constraint WHERE conname = %s", (name,)
        ).fetchone()
        if key is None:
            conn.execute(f'DROP INDEX "{name}"')
        else:
            conn.execute(f'ALTER TABLE {key[0]} DROP CONSTRAINT "{name}"')
        return f"index {name!r}"
    if kind == "table":
        conn.execute(f'DROP TABLE "{name}"')
        return f"table {name!r}"
    if kind == "column":
        conn.execute(f"ALTER TABLE covonaut_workers DROP COLUMN {name}")
        return f"column {name!r} of table 'covonaut_workers'"
    signature = "covonaut_events_insert(json, json, json, text)"
    if name == "missing":
        conn.execute(f"DROP FUNCTION {signature}")
    else:
        (made,) = conn.execute(
            "SELECT pg_get_functiondef(%s::regprocedure)", (signature,)
        ).fetchone()
        conn.execute(made.replace("$function$", "$function$ -- an earlier version\n", 1))
    return "function 'covonaut_events_insert'"


def _store_catalog(conn: Any) -> dict[str, Any]:
    """What the catalog shows of a store: its tables' indexes as defined, every
    table's columns, its functions' bodies."""
    return {
        "indexes": sorted(
            conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'")
        ),
        "columns": sorted(
            conn.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'public'"
            )
        ),
        "functions": sorted(
            conn.execute(
                "SELECT proname, prosrc FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
            )
        ),
    }


@pytest.mark.postgres
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damage=st.sampled_from(_DAMAGES), who=st.sampled_from(["owner", "app"]))
@example(damage=("index", "covonaut_events_notification_id_idx"), who="owner")
@example(damage=("function", "old"), who="app")
def test_an_open_finds_any_object_of_the_store_missing_or_old_and_only_the_owner_makes_it(
    postgres_url: str, damage: tuple[str, str], who: str
) -> None:
    """Whatever the store lacks, or holds in an earlier version's form (an index or key,
    the insert function, a side table, a column an earlier version lacked), the owner's
    open makes it again as its first open did; an application role with the documented
    grants is refused, typed, naming it and telling to open the store as the owner, and
    nothing stored is lost."""
    import psycopg

    with postgres_database_of(postgres_url) as database_url, _roles(database_url) as urls:
        owner_url, app_url = urls
        with open_store(owner_url) as store:
            _paying(store, "kept").run("Pay.")
            stored = store.history("kept")
        role = str(urlsplit(app_url).username)
        with psycopg.connect(owner_url, autocommit=True) as owner:
            for statement in _documented_grants(role, database_url.rsplit("/", 1)[1]):
                owner.execute(statement)
            made = _store_catalog(owner)
            named = _damage(owner, *damage)
            if who == "owner":
                open_store(owner_url).close()
                assert _store_catalog(owner) == made
            else:
                with pytest.raises(StoreOwnerRequiredError) as refused:
                    open_store(app_url)
                assert named in str(refused.value)
                assert "open the store once as the owner of its tables" in str(refused.value)
        with open_store(owner_url) as store:
            assert store.history("kept") == stored


@pytest.mark.postgres
@pytest.mark.parametrize(
    "index",
    [
        'CREATE INDEX "covonaut_events_notification_id_idx" ON covonaut_events (notification_id)',
        'CREATE UNIQUE INDEX "covonaut_events_notification_id_idx" ON covonaut_events '
        "(notification_id) WHERE notification_id > 1",
        'CREATE UNIQUE INDEX "covonaut_events_notification_id_idx" ON covonaut_events_heads '
        "(originator_id)",
    ],
)
def test_an_index_of_the_stores_name_in_another_form_is_refused_by_name(
    postgres_database: str, index: str
) -> None:
    """The first open makes exactly the indexes the check asks for (and eventsourcing's
    tracking table, with its own key); one of them made
    again in another form (not unique, partial, on another table) is refused with
    ForeignSchemaError naming it, not taken for the store's."""
    import psycopg

    open_store(postgres_database).close()
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        made = conn.execute(  # eventsourcing keys its tracking table as it chooses
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' "
            "AND tablename <> 'covonaut_tracking'"
        )
        assert sorted(name for (name,) in made) == sorted(_STORE_INDEXES)
        conn.execute('DROP INDEX "covonaut_events_notification_id_idx"')
        conn.execute(index)
    with pytest.raises(ForeignSchemaError, match="covonaut_events_notification_id_idx"):
        open_store(postgres_database)


_APP_PASSWORD = "pw_" + uuid.uuid4().hex
"""The application role's password in the URLs below: no message may show it."""


@pytest.fixture(scope="module")
def granted_template(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A database to copy (its name) and the application role's URL template on it
    (``{database}`` in place of the copy's name): its owner (no superuser) made the
    store and left thread ``t1`` paused on a review and ``t2`` with its review
    approved; the application role, no superuser and owning nothing, holds exactly
    the documented grants and a password."""
    import psycopg

    with postgres_database_of(postgres_url) as database_url, _roles(database_url) as urls:
        owner_url, app_url = urls
        role = str(urlsplit(app_url).username)
        database = database_url.rsplit("/", 1)[1]
        verifier = HmacReviewerVerifier(_REVIEWER_SECRET.encode())
        with open_store(owner_url) as store:
            _paused(store, "t1")
            review_id = _paused(store, "t2")
            service = ThreadService(store, verifier=verifier)
            rita = service.reviewer(verifier.issue_token("rita", ttl_seconds=600))
            service.decide(review_id, review_submission("approve"), reviewer=rita, thread_id="t2")
        with psycopg.connect(owner_url, autocommit=True) as owner:
            for statement in _documented_grants(role, database):
                owner.execute(statement)
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"ALTER ROLE {role} PASSWORD '{_APP_PASSWORD}'")
        parts = urlsplit(app_url)
        netloc = f"{role}:{_APP_PASSWORD}@{parts.hostname}:{parts.port}"
        yield database, parts._replace(netloc=netloc, path="/{database}").geturl()


def _t1_review(store: Store) -> str:
    (pending,) = _paying(store, "t1").pending_reviews
    return pending.review_id


def _decided(store: Store) -> object:
    verifier = HmacReviewerVerifier(_REVIEWER_SECRET.encode())
    service = ThreadService(store, verifier=verifier)
    rita = service.reviewer(verifier.issue_token("rita", ttl_seconds=600))
    return service.decide(
        _t1_review(store), review_submission("approve"), reviewer=rita, thread_id="t1"
    )


_REFUSED_COMMANDS: dict[str, Callable[[Store], object]] = {
    "open": lambda store: None,
    "run that pauses": lambda store: _paused(store, "new"),
    "load": lambda store: store.load("t1"),
    "verify": lambda store: store.verify("t1"),
    "decide": _decided,
    "resume": lambda store: _paying(store, "t2").resume(),
    "fork": lambda store: store.fork("t1"),
    "worker step": lambda store: Worker(
        store, lambda thread_id: _paying(store, thread_id).config
    ).run(once=True),
    "list_threads": lambda store: store.list_threads(),
}
_REFUSED_CLI = ("threads", "reviews", "approve", "workers")
_REFUSALS = ("SELECT", "INSERT", "UPDATE", "DELETE", "row-level security")
_FOUND_BY_HELPER_139 = {
    "load": ("SELECT", "covonaut_snapshots"),
    "verify": ("SELECT", "covonaut_events_heads"),
    "worker step": ("INSERT", "covonaut_workers"),
    "resume": ("read-only", ""),
    "workers": ("SELECT", "covonaut_workers"),
}
"""The refusals that reached each command untyped before (``data`` None)."""


def _stored_events(database_url: str) -> set[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(database_url) as admin:
        rows = admin.execute("SELECT originator_id, originator_version FROM covonaut_events")
        return set(rows.fetchall())


@pytest.mark.postgres
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), command=st.sampled_from(sorted(_REFUSED_COMMANDS) + list(_REFUSED_CLI)))
@example(data=None, command="load").via("helper-139: SELECT revoked on the snapshots")
@example(data=None, command="verify").via("helper-139: SELECT revoked on the head anchors")
@example(data=None, command="worker step").via("helper-139: INSERT revoked on the workers")
@example(data=None, command="resume").via("helper-139: a read-only session")
@example(data=None, command="workers").via("helper-139: the CLI's traceback")
def test_a_refusal_of_a_privilege_or_a_read_only_session_is_typed_and_named(
    postgres_url: str, granted_template: tuple[str, str], data: Any, command: str
) -> None:
    """Whatever privilege on whichever of the store's tables the application role
    lacks (SELECT, INSERT, UPDATE or DELETE revoked, or a row-level security policy
    refusing its new rows), or with its sessions read-only, every command it runs
    (open, a run, load, verify, a decision, resume, fork, a worker's step, a listing,
    the command line's threads, reviews, approve and workers) succeeds or fails with a
    CovonautError (one line and exit 2 on the command line) naming the refusal, never
    the tables changed around the library nor the role's password; nothing already
    stored is lost."""
    import psycopg

    template, app_url = granted_template
    database = f"e_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database} TEMPLATE {template}")
    database_url = postgres_url.rsplit("/", 1)[0] + f"/{database}"
    url = app_url.format(database=database)
    role = str(urlsplit(url).username)
    try:
        with psycopg.connect(database_url, autocommit=True) as admin:
            tables = sorted(
                str(name)
                for (name,) in admin.execute(
                    "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = "
                    "'public'::regnamespace"
                )
            )
            if data is None:
                refusal, table = _FOUND_BY_HELPER_139[command]
            else:
                refusal = data.draw(st.sampled_from((*_REFUSALS, "read-only")), label="refusal")
                table = data.draw(st.sampled_from(tables), label="table")
            if refusal == "read-only":
                admin.execute(
                    f"ALTER ROLE {role} IN DATABASE {database} "
                    "SET default_transaction_read_only = on"
                )
            elif refusal == "row-level security":
                admin.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
                admin.execute(f"CREATE POLICY refuse ON {table} USING (true) WITH CHECK (false)")
            else:
                admin.execute(f"REVOKE {refusal} ON {table} FROM {role}")
        before = _stored_events(database_url)
        named = "the session is read-only" if refusal == "read-only" else "lacks a privilege"

        def refused(message: str) -> None:
            assert named in message, message
            assert "changed around the library" not in message, message
            assert _APP_PASSWORD not in message, message

        if command in _REFUSED_CLI:
            args: tuple[str, ...] = (command,)
            if command == "approve":
                with open_store(database_url) as store:
                    review_id = _t1_review(store)
                verifier = HmacReviewerVerifier(_REVIEWER_SECRET.encode())
                token = verifier.issue_token("rita", ttl_seconds=600)
                args = ("approve", review_id, "--reviewer-token", token)
            env = {"COVONAUT_ES_REVIEWER_SECRET": _REVIEWER_SECRET}
            result = covonaut_es(*args, "--store", url, env=env)
            assert result.returncode in (0, 2), (refusal, table, result.stderr)
            assert _APP_PASSWORD not in result.stdout + result.stderr
            if result.returncode == 2:
                assert len(result.stderr.splitlines()) == 1, result.stderr
                refused(result.stderr)
        else:
            try:
                with open_store(url) as store:
                    _REFUSED_COMMANDS[command](store)
            except CovonautError as exc:
                refused(str(exc))
        assert before <= _stored_events(database_url)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


@pytest.fixture(scope="module")
def stored_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bytes of a SQLite store holding a few threads, one forked, checkpointed into
    the file whole (no write-ahead log beside it)."""
    path = tmp_path_factory.mktemp("whole") / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        for index in range(3):
            three_messages(store, f"t{index}")
        store.fork("t0", at_version=2, new_thread_id="t0-b", now=NOW)
    return path


_READS: dict[str, Callable[[Store], object]] = {
    "thread ids": lambda store: list(store.thread_ids()),
    "load": lambda store: [store.load(t) for t in ("t0", "t1", "t0-b")],
    "history": lambda store: store.history("t2"),
    "state at": lambda store: store.state_at("t1", 2),
    "replay": lambda store: store.replay_state("t0-b"),
    "verify": lambda store: store.verify("t0"),
    "checkpoints": lambda store: store.checkpoints("t1"),
    "log position": lambda store: store.last_log_position(),
    "export": lambda store: list(export_thread(store, "t0-b", with_ancestors=True)),
    "log batch": lambda store: store.log.next_batch(after=0, end=store.log.end(), limit=50),
    "log records": lambda store: list(store.log.notifications()),
    "submissions": lambda store: store.submissions.submitted("t1"),
    "worker": lambda store: Worker(
        store, lambda thread_id: AgentConfig(provider=ScriptedProvider([]))
    ).run(once=True),
}
_COMMANDS = (("threads",), ("show", "t1"), ("replay", "--verify", "t0"), ("export", "t2"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    page=st.integers(0, 63), offset=st.integers(0, 4080), garbage=st.binary(min_size=1, max_size=16)
)
@example(page=2, offset=0, garbage=b"X" * 16)  # the first events index (helper-217)
def test_a_damaged_page_of_a_sqlite_file_gives_typed_errors_only(
    stored_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
    page: int,
    offset: int,
    garbage: bytes,
) -> None:
    """Bytes of any page of a store's file overwritten (a failing disk, a bad copy):
    every read of the library and every reading command either works or fails with
    the library's typed error (the command line: one line, exit 2), never the
    driver's own error."""
    damaged = bytearray(stored_file.read_bytes())
    page %= len(damaged) // 4096
    start = page * 4096 + (max(offset, 100) if page == 0 else offset)  # not the header
    damaged[start : start + len(garbage)] = garbage
    path = tmp_path_factory.mktemp("damaged") / "s.db"
    path.write_bytes(bytes(damaged))
    url = f"sqlite:///{path}"
    for name, read in _READS.items():
        try:
            with open_store(url, create_tables=False) as store:
                read(store)
        except CovonautError:
            pass
        except Exception as exc:  # the point: nothing else
            raise AssertionError(f"{name}: {type(exc).__module__}.{exc!r}") from exc
    for command in _COMMANDS:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = cli_main([*command, "--store", url])
        assert status in (0, 1, 2), command
