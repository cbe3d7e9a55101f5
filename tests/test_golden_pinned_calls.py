"""Calls of a server's tool left in doubt, written by the code before a thread kept each
open call's pin: read now, each thread reads at its head as that code read it, from
its snapshot as from its events, and verifies."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import Store
from support import GOLDEN, golden_store

MANIFEST = json.loads((GOLDEN / "pinned-calls" / "manifest.json").read_text())

sys.path.insert(0, str(GOLDEN.parent))
from write_golden_pinned_calls import summary  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with golden_store("pinned-calls", tmp_path) as opened:
        yield opened


@pytest.mark.parametrize("thread_id", sorted(MANIFEST["threads"]))
def test_each_thread_reads_as_the_code_that_wrote_it_read_it(store: Any, thread_id: str) -> None:
    assert summary(store.state_at(thread_id)) == MANIFEST["threads"][thread_id]
    assert store.state_at(thread_id) == store.replay_state(thread_id)
    assert store.verify(thread_id).findings == ()
