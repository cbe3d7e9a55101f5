"""A misspelt SQLITE_DBNAME given to a read-only command with ``--application``: the
command says there is no such file, naming it, exits 2, and creates no file (SQLite
would create an empty one under the misspelt name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from covonaut_es import Store
from test_embedded_tools import Shop, cli, configured, paused_order, shop_env


@pytest.mark.parametrize(
    "command", [("threads",), ("reviews",), ("replay", "some-thread"), ("migrate", "--check")]
)
def test_a_read_only_command_on_a_missing_file_creates_none(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """The command is refused naming the path, and neither the misspelt file nor its
    directory's listing changes; the shop's own file is untouched."""
    env = shop_env(str(tmp_path / "shop.db"))
    with configured(env), Shop() as app, Store.from_application(app) as store:
        paused_order(app, store)
    before = sorted(tmp_path.iterdir())
    misspelt = tmp_path / "shpo.db"
    with configured({**env, "SQLITE_DBNAME": str(misspelt)}):
        result = cli(*command)
    assert result.returncode == 2, result.stderr
    assert f"there is no SQLite file {str(misspelt)!r} to open" in result.stderr
    assert "Traceback" not in result.stderr
    assert not misspelt.exists()
    assert sorted(tmp_path.iterdir()) == before


def test_the_applications_prefixed_setting_is_the_one_checked(tmp_path: Path) -> None:
    """A setting prefixed with the application's name (SHOP_SQLITE_DBNAME) wins over
    the plain one, as eventsourcing reads it: a missing file there is refused even
    when the plain setting names the shop's file."""
    env = shop_env(str(tmp_path / "shop.db"))
    with configured(env), Shop() as app, Store.from_application(app) as store:
        paused_order(app, store)
    misspelt = tmp_path / "missing" / "shop.db"
    with configured({**env, f"{Shop.name.upper()}_SQLITE_DBNAME": str(misspelt)}):
        result = cli("threads")
    assert result.returncode == 2, result.stderr
    assert str(misspelt) in result.stderr
    assert not misspelt.parent.exists()
