"""A store on read-only media (a backup mounted read-only) is read by every reading
command without ``?mode=ro``, as a file the user may read but not write is, and a
write is refused saying what to do: SQLite could not make the shared-memory file it
reads a WAL-mode file with there, and every command said "unable to open database
file" (helper-223). The media is a tmpfs remounted read-only, which needs root, as CI
runs the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from covonaut_es import open_store
from covonaut_es.errors import ReadOnlyStoreError
from inbox_support import paused
from test_cli import covonaut_es


@pytest.fixture(scope="module")
def read_only_store() -> Iterator[str]:
    """The URL of a store with a paused thread, on a file system mounted read-only."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs the tests as root, with mount(8)")
        pytest.skip("mounting a read-only file system needs root")
    media = Path(tempfile.mkdtemp(prefix="covonaut-ro-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(media)], check=True)
    try:
        url = f"sqlite:///{media / 'backup.db'}"
        with open_store(url) as store:
            paused(store, "t", [], [])
        subprocess.run(["mount", "-o", "remount,ro", str(media)], check=True)
        yield url
    finally:
        subprocess.run(
            ["umount", "--lazy", str(media)], check=False
        )  # a failed test may hold a file
        media.rmdir()


@pytest.mark.parametrize(
    "command", [["threads"], ["show", "t"], ["history", "t"], ["export", "t"], ["reviews"]]
)
def test_every_reading_command_reads_a_store_on_read_only_media(
    read_only_store: str, command: list[str]
) -> None:
    result = covonaut_es(*command, "--store", read_only_store)
    assert result.returncode == 0, result.stderr
    assert "t" in result.stdout


def test_a_write_to_a_store_on_read_only_media_is_refused_saying_what_to_do(
    read_only_store: str,
) -> None:
    with pytest.raises(ReadOnlyStoreError, match=r"\?mode=ro"):
        open_store(read_only_store)
    with open_store(read_only_store, create_tables=False) as store:
        assert store.load("t").version > 0
        with pytest.raises(ReadOnlyStoreError, match="nothing was written"):
            store.submit("t", "more")
