"""Hostile text where a seal is stored: a chain hash, the record of a store's chain key,
a snapshot's seal. Whatever text a writer of the database puts there, an open gives a
typed error and verify a finding, never a ``TypeError`` from comparing it."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import CovonautError, open_store
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import ChainKeyMismatchError, StoreSettingsError
from covonaut_es.store._chain_key import CHAIN_TABLE
from covonaut_es.store._snapshot_seals import Seal, unsealed
from support import snapshotted_thread
from test_chain import KEY, written_thread

PLACES = ["chain hash", "keyed chain hash", "key row", "position row", "point row", "snapshot"]

_made = iter(range(10**9))


def keyed_store(directory: Path) -> str:
    """A store that adopted its key over a thread written before it; with a snapshot."""
    url = f"sqlite:///{directory / f'{next(_made)}.db'}"
    with open_store(url) as store:
        written_thread(store, "old", 2)
    with open_store(url, chain_key=KEY) as store:
        snapshotted_thread(store, "long")
    return url


def put(url: str, place: str, text: str) -> None:
    """Store ``text`` in ``place``, as a writer of the database can."""
    path = url.removeprefix("sqlite:///")
    if place.endswith("chain hash"):
        with open_store(url, create_tables=False) as store:
            thread_id = "old" if place == "chain hash" else "long"
            record = store._records.stored_records(thread_id)[0]
            payload = msgspec.json.decode(store._records.mapper.plain_payload(record))
            payload["chain"] = text
            state = store._records.mapper.stored_payload(msgspec.json.encode(payload))
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE stored_events SET state = ? WHERE originator_id = ? "
                "AND originator_version = 1",
                (state, thread_aggregate_id(thread_id).hex),
            )
    elif place == "snapshot":
        with open_store(url, create_tables=False) as store:
            record = next(
                iter(
                    store._app.snapshots.recorder.select_events(  # type: ignore[union-attr]
                        thread_aggregate_id("long")
                    )
                )
            )
            seal, body = unsealed(store._records.mapper.plain_payload(record))
            assert seal is not None
            header = msgspec.msgpack.encode(Seal(seal.scheme, text, text))
            sealed = b"\x5c\x2a\x4d\x18" + len(header).to_bytes(4, "little") + header + body
            state = store._records.mapper.stored_payload(sealed)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE stored_snapshots SET state = ?", (state,))
    else:
        name = {
            "key row": "key",
            "position row": "adopted_at",
            "point row": thread_aggregate_id("old").hex,
        }[place]
        with sqlite3.connect(path) as conn:
            conn.execute(f"UPDATE {CHAIN_TABLE} SET value = ? WHERE name = ?", (text, name))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    place=st.sampled_from(PLACES),
    text=st.text(min_size=1, max_size=30).filter(lambda t: not t.isascii())
    | st.sampled_from(["k1.é", "é", "0:é", "\ud800", "k1.\ud800"]),
)
def test_no_hostile_text_in_a_seal_makes_an_open_or_a_verify_raise(
    tmp_path: Path, place: str, text: str
) -> None:
    """Non-ASCII text or a lone surrogate where a seal is stored gives a typed error on
    open, or a report from verify; never an exception from comparing it."""
    url = keyed_store(tmp_path)
    try:
        put(url, place, text)
    except UnicodeEncodeError:  # a lone surrogate SQLite cannot store as text
        return
    try:
        store = open_store(url, chain_key=KEY)
    except CovonautError:
        return
    with store:
        reports = [store.verify(thread_id) for thread_id in ("old", "long")]
    if place in ("chain hash", "keyed chain hash", "point row"):
        assert not all(report.ok for report in reports), reports


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    text=st.sampled_from(["", "text", "42", "hmac-sha256:", "hmac-sha256:" + "G" * 64])
    | st.text(max_size=80).filter(lambda t: not re.fullmatch(r"hmac-sha256:[0-9a-f]{64}", t))
)
def test_a_key_row_not_in_a_fingerprints_form_is_reported_damaged(
    tmp_path: Path, text: str
) -> None:
    """A ``key`` row of ``covonaut_chain`` whose value is no fingerprint says the row is
    damaged, not that the store adopted another key, on an open that writes and on one
    that reads."""
    url = keyed_store(tmp_path)
    try:
        put(url, "key row", text)
    except UnicodeEncodeError:  # a lone surrogate SQLite cannot store as text
        return
    for create_tables in (True, False):
        with pytest.raises(StoreSettingsError, match="row of table 'covonaut_chain' is dama") as e:
            open_store(url, chain_key=KEY, create_tables=create_tables)
        assert not isinstance(e.value, ChainKeyMismatchError)
