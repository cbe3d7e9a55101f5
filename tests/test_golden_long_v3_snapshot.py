"""A version-3 snapshot without open calls, over 1 MiB once decompressed (a 1.2 MB
message), written by the code before snapshots' version 4: the upgrade decodes it
untyped, which its size is too large for, so it is stale (its thread rebuilt from the
events), as a snapshot past that size always was meant to be. It was refused as damaged:
`migrate --check` failed and `verify` reported it not trusted (helper-239)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from covonaut_es import Store
from covonaut_es.cli import main
from support import golden_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with golden_store("long-v3-snapshot", tmp_path) as opened:
        yield opened


def test_migrate_check_passes(store: Store) -> None:
    assert main(["migrate", "--check", "--store", store.url]) == 0


def test_the_thread_loads_as_its_events_say_and_verifies(store: Store) -> None:
    assert store.state_at("long") == store.replay_state("long")
    assert len(store.state_at("long").messages[0].content) == 1_200_000
    report = store.verify("long")
    assert report.findings == ()
    assert any("passed over on load" in note for note in report.notes), report.notes
