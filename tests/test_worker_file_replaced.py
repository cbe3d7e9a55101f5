"""A worker whose SQLite file is replaced or deleted under it stops, saying so, instead
of following the old, unlinked file unseen."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from covonaut_es import open_store
from test_workers import Fleet, pause, wait_for


@pytest.mark.slow
@pytest.mark.parametrize("how", ["restored over", "deleted"])
def test_a_worker_stops_in_one_line_once_its_sqlite_file_is_replaced(
    tmp_path: Path, how: str
) -> None:
    """A backup restored over the file with ``mv``, or the file deleted, while a worker
    follows it: within a few heartbeats the worker exits nonzero with one line naming
    the file, no traceback; it never goes on reading the old file, where no new work
    will ever come and where no other process sees it in `workers`."""
    path = tmp_path / "threads.db"
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        pause(store, "t")
    shutil.copyfile(path, tmp_path / "backup.db")
    fleet = Fleet(url, tmp_path)
    try:
        worker = fleet.start()
        log = tmp_path / "worker-0.log"
        wait_for(lambda: "following" in log.read_text(), "the worker to start")
        if how == "deleted":
            for name in ("threads.db", "threads.db-wal", "threads.db-shm"):
                (tmp_path / name).unlink(missing_ok=True)
        else:
            os.replace(tmp_path / "backup.db", path)
        wait_for(lambda: worker.poll() is not None, "the worker to stop", timeout=30)
        assert worker.returncode not in (0, None)
        text = log.read_text()
        assert "Traceback" not in text, text
        assert f"the SQLite file {str(path)!r} was replaced" in text, text
    finally:
        fleet.stop()
