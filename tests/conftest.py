"""Shared pytest fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from postgres_server import URL_ENV, PostgresServer, start_or_unavailable


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a PostgreSQL database for the whole test session.

    Uses ``$COVONAUT_ES_TEST_POSTGRES_URL`` when set; otherwise starts a throwaway
    server (see ``postgres_server.py``) and removes it at the end of the session.
    Skips when no server can be had, or fails when ``$CI`` is set.
    """
    external = os.environ.get(URL_ENV, "").strip()
    if external:
        yield external
        return
    server = PostgresServer()
    url = start_or_unavailable(server)
    try:
        yield url
    finally:
        server.stop()
