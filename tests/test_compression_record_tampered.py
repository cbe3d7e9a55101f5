"""A store's recorded compression against a hostile database writer: changed to another
valid name, or deleted, on a store of every compression. An open then refuses with a
typed error that says the settings were altered, and writes nothing, whatever the open
asks for; put back, the store reads as before. (The proof is the first event, which
decodes whole under one compression only, ADR 0061.)"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import open_store
from covonaut_es.errors import StoreSettingsError
from test_audit import conversation

COMPRESSIONS = ("zstd", "zlib", "none")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = {}
    for compression in COMPRESSIONS:
        path = tmp_path_factory.mktemp(compression) / "threads.db"
        with open_store(f"sqlite:///{path}", compress=compression) as store:
            conversation(store, "t", 2)
        made[compression] = path
    return made


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    written=st.sampled_from(COMPRESSIONS),
    altered=st.sampled_from((*COMPRESSIONS, None)),
    asked=st.sampled_from((None, *COMPRESSIONS)),
)
def test_an_altered_compression_record_is_refused_at_open(
    stores: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    written: str,
    altered: str | None,
    asked: str | None,
) -> None:
    path = tmp_path_factory.mktemp("altered") / "threads.db"
    shutil.copy(stores[written], path)
    with sqlite3.connect(path) as conn:
        if altered is None:
            conn.execute("DELETE FROM covonaut_settings WHERE name = 'compression'")
        else:
            conn.execute(
                "UPDATE covonaut_settings SET value = ? WHERE name = 'compression'", (altered,)
            )
    before = path.read_bytes()
    effective = altered or "none"
    if effective == written:
        if asked in (None, written):
            with open_store(f"sqlite:///{path}", compress=asked) as store:
                assert store.load("t").version > 1
        return
    with pytest.raises(StoreSettingsError, match=r"settings were altered|was created with"):
        open_store(f"sqlite:///{path}", compress=asked).close()
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM covonaut_settings WHERE name = 'compression'")
        conn.execute("INSERT INTO covonaut_settings VALUES ('compression', ?)", (written,))
    with open_store(f"sqlite:///{path}") as store:
        assert store.load("t").version > 1


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    written=st.sampled_from(("zstd", "zlib")),
    payload=st.one_of(
        st.sampled_from([b"{}", b'{"a": 1}', b"[]", b"null", b'"x"']),
        st.dictionaries(st.text(max_size=8).filter(lambda k: k != "timestamp"), st.integers()).map(
            lambda d: json.dumps(d).encode()
        ),
    ),
)
def test_a_first_event_replaced_with_json_that_is_no_event_is_damage_not_altered_settings(
    stores: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, written: str, payload: bytes
) -> None:
    """The first row's payload replaced with plain JSON that is no event's (no time of
    its own), as damage or a writer could: the store opens as it records, and verify
    reports the row, where the open took it for proof that the settings were altered."""
    path = tmp_path_factory.mktemp("replaced") / "threads.db"
    shutil.copy(stores[written], path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE stored_events SET state = ? WHERE rowid = 1", (payload,))
    with open_store(f"sqlite:///{path}") as store:
        report = store.verify("t")
    assert [finding.version for finding in report.findings] == [1]
