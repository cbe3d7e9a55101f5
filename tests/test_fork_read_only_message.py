"""A fork on a store opened read-only is refused as the run lease Store.fork now takes
first ("the run lease of thread 't' was not taken"), where it said the thread was not
forked: the user asked for no lease (helper-254)."""

from __future__ import annotations

from pathlib import Path

import pytest

from covonaut_es import open_store
from covonaut_es.errors import ReadOnlyStoreError
from support import converse


def test_a_fork_refused_by_a_read_only_store_says_it_was_not_forked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        converse(store, "t")
    with open_store(url + "?mode=ro") as store, pytest.raises(ReadOnlyStoreError) as refused:
        store.fork("t", new_thread_id="f")
    assert "was not forked" in str(refused.value), str(refused.value)
    assert "run lease" not in str(refused.value)
