"""Event payloads compressed with the zstd dictionary the package ships (ADR 0061):
the dictionary compresses the events as they are now as well as one trained now,
payloads round-trip, and a frame naming another dictionary is a typed error naming its
row, on load and on verify."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import AgentThread, Store, open_store
from covonaut_es.errors import CompressionDictionaryError, ConfigurationError, SerializationError
from covonaut_es.messages import Message, Role
from covonaut_es.store import _dictionary, _zstd
from covonaut_es.store._dictionary import (
    DICTIONARY_FILE,
    ZstdDictionaryCompressor,
    shipped_dictionary,
)
from support import append_raw_event, conversation, run_python, start_bare_run

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_shipped_dictionary_compresses_todays_events_as_well_as_a_new_one() -> None:
    """``scripts/train_event_dictionary.py --check``: a dictionary trained from the
    library's events as they are now compresses other generated threads' events no more
    than 2% better than the dictionary the package ships (which every stored frame names
    by id, so replacing it is worth a real gain only). Training needs zstandard, a
    dependency only before Python 3.14."""
    pytest.importorskip("zstandard")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = run_python(ROOT / "scripts" / "train_event_dictionary.py", "--check", env=env)
    assert f"{DICTIONARY_FILE}: current" in result.stdout


def test_the_check_finds_a_dictionary_that_does_not_fit_the_events_stale() -> None:
    """The same check, given a dictionary of text that is not the library's events (the
    samples' own words, without their fields), finds it stale; and training is
    deterministic."""
    pytest.importorskip("zstandard")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import train_event_dictionary as script
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    trained = script.train()
    assert trained == script.train()
    words = script.Generated(script.SEED)
    unfit = " ".join(words.text() for _ in range(300)).encode()[: script.DICTIONARY_SIZE]
    assert script.gain(unfit, trained) > script.STALE_GAIN
    assert script.gain(trained, trained) == 0


def test_the_dictionary_is_package_data_of_a_few_kilobytes() -> None:
    """The dictionary is loaded from the package, and names itself by an id zstd leaves
    to users."""
    dictionary = shipped_dictionary()
    assert 32_768 <= dictionary.id < 2**31
    size = (ROOT / "src" / "covonaut_es" / "store" / DICTIONARY_FILE).stat().st_size
    assert 4 * 1024 <= size <= 32 * 1024


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=4096) | st.text(max_size=2048).map(str.encode))
def test_any_payload_round_trips_in_a_frame_naming_the_dictionary(payload: bytes) -> None:
    """Whatever bytes a payload holds, its frame names the shipped dictionary and gives
    them back exactly."""
    compressor = ZstdDictionaryCompressor()
    frame = compressor.compress(payload)
    assert frame.startswith(_zstd.MAGIC)
    assert _zstd.dictionary_id(frame) == shipped_dictionary().id
    assert compressor.decompress(frame) == payload


@pytest.fixture(scope="module")
def zstd_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    path = tmp_path_factory.mktemp("zstd") / "threads.db"
    return open_store(f"sqlite:///{path}")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# No lone surrogate: the mapper refuses to encode one, so no event holds one.
@given(
    texts=st.lists(
        st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",))),
        min_size=1,
        max_size=5,
    )
)
def test_messages_of_any_text_read_back_from_a_zstd_store(
    zstd_store: Store, texts: list[str]
) -> None:
    """Messages of any text saved in a new (zstd) SQLite store load back equal, from the
    events alone as through the store's reads."""
    thread_id = f"t{abs(hash(tuple(texts)))}"
    if zstd_store.exists(thread_id):
        return
    thread = AgentThread.start(thread_id, now=NOW)
    start_bare_run(thread, now=NOW)
    for text in texts:
        thread.append_message(Message(role=Role.USER, content=text), now=NOW)
    zstd_store.save(thread)
    state = zstd_store.state_at(thread_id)
    assert [m.content for m in state.messages] == texts
    assert zstd_store.replay_state(thread_id) == state
    assert zstd_store.verify(thread_id).ok


def other_dictionary() -> _zstd.Dictionary:
    """The shipped dictionary under another id: as a later release's would be."""
    content = (ROOT / "src" / "covonaut_es" / "store" / DICTIONARY_FILE).read_bytes()
    return _zstd.Dictionary(
        content[:4] + (shipped_dictionary().id + 1).to_bytes(4, "little") + content[8:]
    )


@pytest.mark.parametrize("names", ["another dictionary", "no dictionary"])
def test_a_frame_naming_another_dictionary_is_a_typed_error_naming_its_row(
    store_url: str, names: str
) -> None:
    """A stored frame compressed with a dictionary this version does not ship (or none)
    is refused with CompressionDictionaryError naming the stream and version, never
    read with the shipped one; verify reports it at that version."""
    with open_store(store_url) as store:  # damaged: outside the replay law's teardown
        conversation(store, "t", 2)
        payload = msgspec.json.encode({"timestamp": NOW.isoformat(), "mode": "run"})
        frame = (
            other_dictionary().compress(payload)
            if names == "another dictionary"
            else _zstd.compress(payload)
        )
        version = append_raw_event(store, "t", AgentThread.TurnStarted.TOPIC, frame)
        found = (
            f"dictionary {shipped_dictionary().id + 1}" if names == "another dictionary" else names
        )
        with pytest.raises(
            CompressionDictionaryError, match=rf"at version {version}: its zstd frame names {found}"
        ):
            store.history("t")
        report = store.verify("t")
        assert [f.version for f in report.findings] == [version], report.findings


@given(payload=st.binary(min_size=1, max_size=1024), data=st.data())
def test_a_damaged_frame_is_refused_or_read_as_written(payload: bytes, data: st.DataObject) -> None:
    """A payload's frame with one byte changed (its header's among them), cut short, or
    followed by more bytes, is refused with a ValueError (a CompressionDictionaryError
    when its header then names another dictionary, or none) or read as the payload it
    holds: never as other data, and never with another error. A frame whose header was
    changed to declare no content is read, not answered with no bytes unread (ADR 0065)."""
    compressor = ZstdDictionaryCompressor()
    frame = compressor.compress(payload)
    damage = data.draw(st.sampled_from(["byte", "cut", "appended"]))
    if damage == "byte":
        at = data.draw(st.integers(0, len(frame) - 1))
        value = data.draw(st.integers(0, 255).filter(lambda v: v != frame[at]))
        damaged = frame[:at] + bytes([value]) + frame[at + 1 :]
    elif damage == "cut":
        damaged = frame[: data.draw(st.integers(0, len(frame) - 1))]
    else:
        damaged = frame + data.draw(st.binary(min_size=1, max_size=16))
    try:
        read = compressor.decompress(damaged)
    except CompressionDictionaryError as exc:
        assert damage == "byte", exc  # the dictionary's id, or the flag saying it has one
        return
    except ValueError as exc:
        assert not isinstance(exc, SerializationError), exc  # only the typed one above
        return
    assert damage == "byte" and read == payload  # a byte the frame's reading never uses


def test_compress_must_name_a_compression(tmp_path: Path) -> None:
    """``compress`` given a name no store records is refused before anything is opened."""
    with pytest.raises(ConfigurationError, match="names no compression"):
        open_store(f"sqlite:///{tmp_path / 'x.db'}", compress="brotli")  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()


def test_a_payload_beyond_the_limit_is_refused_when_written_and_when_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A payload larger than the limit a reader allows is refused before anything is
    stored, and a stored frame declaring more is refused before it is decompressed."""
    monkeypatch.setattr(_dictionary, "PAYLOAD_SIZE_LIMIT", 4096)
    with open_store(f"sqlite:///{tmp_path / 'big.db'}") as store:
        thread = AgentThread.start("big", now=NOW)
        start_bare_run(thread, now=NOW)
        thread.append_message(Message(role=Role.USER, content="x" * 5000), now=NOW)
        with pytest.raises(SerializationError, match="larger than the 4096 a store reads back"):
            store.save(thread)
        assert not store.exists("big")
    frame = shipped_dictionary().compress(b"x" * 5000)
    with pytest.raises(ValueError, match="declares 5000 bytes, more than the 4096 allowed"):
        ZstdDictionaryCompressor().decompress(frame)
