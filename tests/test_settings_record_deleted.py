"""A store's settings against a hostile database writer that deletes one of their rows
(the cipher, the compression, the scheme of stream ids), on a plain and an encrypted
store: every open, with the store's key or without, reading or writing, is refused with
a typed error that writes nothing, so that no keyless open writes plain text into an
encrypted store; with the row put back, the store reads as before."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import create_cipher_key, open_store
from covonaut_es.errors import CipherKeyMismatchError, StoreSettingsError
from test_audit import conversation

KEY = create_cipher_key()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    made = {}
    for encrypted in (False, True):
        path = tmp_path_factory.mktemp("settings") / "threads.db"
        with open_store(f"sqlite:///{path}", cipher_key=KEY if encrypted else None) as store:
            conversation(store, "t", 2)
        made[encrypted] = path
    return made


def _rows(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT name, value FROM covonaut_settings"))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    encrypted=st.booleans(),
    row=st.sampled_from(("cipher", "compression", "stream_ids")),
    with_key=st.booleans(),
    reading=st.booleans(),
)
def test_a_deleted_settings_row_refuses_every_open_and_writes_nothing(
    stores: dict[bool, Path],
    tmp_path_factory: pytest.TempPathFactory,
    encrypted: bool,
    row: str,
    with_key: bool,
    reading: bool,
) -> None:
    path = tmp_path_factory.mktemp("deleted") / "threads.db"
    shutil.copy(stores[encrypted], path)
    recorded = _rows(path)
    if row not in recorded:  # a plain store records no scheme of stream ids
        return
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM covonaut_settings WHERE name = ?", (row,))
    before = path.read_bytes()
    url = f"sqlite:///{path}" + ("?mode=ro" if reading else "")
    with pytest.raises((StoreSettingsError, CipherKeyMismatchError)):
        open_store(url, cipher_key=KEY if with_key else None).close()
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO covonaut_settings VALUES (?, ?)", (row, recorded[row]))
    with open_store(f"sqlite:///{path}", cipher_key=KEY if encrypted else None) as store:
        assert store.load("t").version > 1


def test_a_deleted_cipher_row_is_named_as_altered_settings(
    stores: dict[bool, Path], tmp_path: Path
) -> None:
    path = tmp_path / "threads.db"
    shutil.copy(stores[True], path)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM covonaut_settings WHERE name = 'cipher'")
    for key in (KEY, None):
        with pytest.raises(StoreSettingsError, match=r"not whether it is encrypted.*altered"):
            open_store(f"sqlite:///{path}", cipher_key=key).close()
