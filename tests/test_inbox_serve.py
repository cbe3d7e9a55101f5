"""``covonaut-es serve``, run as a real process: it serves the inbox over a store, and
says clearly what is missing when the secret or the ``inbox`` extra is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from covonaut_es import HmacReviewerVerifier, open_store
from inbox_support import free_port

SECRET = "s" * 40
SRC = Path(__file__).resolve().parent.parent / "src"


def serve(url: str, port: int, *, env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "covonaut_es", "serve", "--store", url, "--port", str(port)]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(SRC), **env},
    )  # fmt: skip


def test_serve_answers_healthz_and_signs_reviewers_in(tmp_path: Path) -> None:
    """The served inbox is healthy, refuses a forged token and accepts a signed one;
    Ctrl-C stops it."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    open_store(url).close()
    port = free_port()
    process = serve(url, port, env={"COVONAUT_ES_REVIEWER_SECRET": SECRET})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"{base}/healthz")
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert health.status_code == 200
        token = HmacReviewerVerifier(SECRET).issue_token("ann", ttl_seconds=60)
        assert (
            httpx.get(f"{base}/api/reviews", headers={"Authorization": "Bearer x"}).status_code
            == 401
        )
        listed = httpx.get(f"{base}/api/reviews", headers={"Authorization": f"Bearer {token}"})
        assert (listed.status_code, listed.json()) == (200, [])
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert process.returncode == 0


def test_serve_without_secret_or_extra_says_what_is_missing(tmp_path: Path) -> None:
    """An unset secret and a missing inbox extra are usage errors naming the fix."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    no_secret = serve(url, free_port(), env={"COVONAUT_ES_REVIEWER_SECRET": ""})
    _, stderr = no_secret.communicate(timeout=60)
    assert no_secret.returncode == 2 and "COVONAUT_ES_REVIEWER_SECRET" in stderr
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "uvicorn.py").write_text("raise ImportError('No module named uvicorn')\n")
    no_extra = serve(
        url, free_port(),
        env={"COVONAUT_ES_REVIEWER_SECRET": SECRET, "PYTHONPATH": f"{shadow}{os.pathsep}{SRC}"},
    )  # fmt: skip
    _, stderr = no_extra.communicate(timeout=60)
    assert no_extra.returncode == 2 and "covonaut-es[inbox]" in stderr
