"""The hash chain's write path: the store seals each event once, at save, with its key
when it has one, records when it adopted that key, and refuses to seal on a broken
predecessor."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import open_store
from covonaut_es.messages import Message

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
        store.fork("long-fork", new_thread_id="fork-after")
    with open_store(f"sqlite:///{tmp_path / name}", chain_key=key) as store:
        for thread_id in [*golden["threads"], "fork-after"]:
            report = store.verify(thread_id)
            assert report.ok, (thread_id, report.findings)
            assert report.chained == report.events
