"""The throwaway PostgreSQL server used by the PostgreSQL tests."""

from __future__ import annotations

import os
import re
import shutil

import psycopg
import pytest

import postgres_server
from postgres_server import (
    URL_ENV,
    PostgresServer,
    PostgresUnavailable,
    find_binaries,
    memory_folder,
    start_or_unavailable,
)

pytestmark = pytest.mark.postgres


def _server_major_version(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("select version()").fetchone()
    assert row is not None
    match = re.match(r"PostgreSQL (\d+)", row[0])
    assert match, row[0]
    return int(match.group(1))


def test_postgres_url_fixture_gives_a_postgresql_15_or_later(postgres_url: str) -> None:
    assert _server_major_version(postgres_url) >= 15


def test_throwaway_server_starts_serves_and_is_removed_on_stop() -> None:
    if os.environ.get(URL_ENV):
        try:
            find_binaries()
        except PostgresUnavailable as exc:
            pytest.skip(f"{exc}; the other PostgreSQL tests use {URL_ENV}")
    server = PostgresServer()
    start_or_unavailable(server)
    try:
        assert server.running
        assert server.data_dir.is_dir()
        assert server.url.endswith("/covonaut_test")
        assert _server_major_version(server.url) >= 15
    finally:
        server.stop()
    assert not server.running
    assert not server.base_dir.exists()
    server.stop()  # idempotent


def test_a_throwaway_server_keeps_its_files_in_memory_unless_it_must_be_on_disk() -> None:
    """The tests' servers are in memory where every user may write there and there is
    room; a durable server, and one the benchmarks ask to be on disk, are not."""
    shared_memory = memory_folder()
    if shared_memory is None:
        pytest.skip("no shared memory folder every user may write in, with room")
    placed = {}
    for name, server in {
        "default": PostgresServer(),
        "on disk": PostgresServer(on_disk=True),
        "durable": PostgresServer(durable=True),
    }.items():
        server._prepare_base_dir()
        placed[name] = server.base_dir.parent
        shutil.rmtree(server.base_dir)
    assert placed["default"] == shared_memory
    assert shared_memory not in (placed["on disk"], placed["durable"])


def test_a_memory_folder_without_room_for_the_servers_is_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shared memory folder too small for the suite's servers (a container's 64 MB)
    is not used: its servers would fail their writes."""
    monkeypatch.setattr(postgres_server, "_MEMORY_ROOM", 2**62)
    assert memory_folder() is None
    server = PostgresServer()
    server._prepare_base_dir()
    shutil.rmtree(server.base_dir)
    assert server.base_dir.parent != postgres_server._MEMORY
