"""The throwaway PostgreSQL server used by the PostgreSQL tests."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import psycopg
import pytest

from postgres_server import (
    URL_ENV,
    PostgresServer,
    PostgresUnavailable,
    find_binaries,
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
    """The tests' servers are in memory where every user may write there; a durable
    server, and one the benchmarks ask to be on disk, are not."""
    shared_memory = Path("/dev/shm")
    if not shared_memory.is_dir() or shared_memory.stat().st_mode & 0o1777 != 0o1777:
        pytest.skip("no shared memory folder every user may write in")
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
