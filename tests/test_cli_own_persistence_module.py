"""``--application`` whose environment names a persistence module of the user's own
(durable: its factory keeps the events in SQLite, but is no SQLiteFactory) works, as
it did: the refusal of an application kept in memory took every factory the store does
not know for eventsourcing's in-memory default (helper-254)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FACTORY = '''
from eventsourcing.persistence import InfrastructureFactory
import eventsourcing.sqlite as _sqlite


class Factory(InfrastructureFactory):
    """SQLite underneath, through a factory that is no SQLiteFactory."""

    def __init__(self, env):
        super().__init__(env)
        self._inner = _sqlite.SQLiteFactory(env)

    def aggregate_recorder(self, purpose="events"):
        return self._inner.aggregate_recorder(purpose)

    def application_recorder(self):
        return self._inner.application_recorder()

    def tracking_recorder(self, tracking_recorder_class=None):
        return self._inner.tracking_recorder(tracking_recorder_class)

    def process_recorder(self):
        return self._inner.process_recorder()

    def close(self):
        self._inner.close()
        super().close()
'''

APP = """
from covonaut_es import AgentApplication


class App(AgentApplication):
    pass
"""


def test_an_application_on_its_own_durable_persistence_module_is_not_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "h254_durable.py").write_text(FACTORY)
    (tmp_path / "h254_app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if "PERSISTENCE_MODULE" not in k}
    env |= {
        "PERSISTENCE_MODULE": "h254_durable",
        "SQLITE_DBNAME": str(tmp_path / "d.db"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]),
    }
    made = _python(env, tmp_path, "-c", "from h254_app import App; App().close()")
    assert made.returncode == 0, made.stderr  # the application's tables, as it makes them
    listed = _python(env, tmp_path, "-m", "covonaut_es", "threads", "--application", "h254_app:App")
    assert "sets no PERSISTENCE_MODULE" not in listed.stderr, listed.stderr
    assert listed.returncode == 0, listed.stderr


def _python(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
