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


def serve(url: str, port: int, *extra: str, env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "covonaut_es", "serve", "--store", url, "--port", str(port)]
    command += extra
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
    """An unset secret, an incomplete identity provider and a missing inbox extra are
    usage errors naming the fix."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    no_secret = serve(url, free_port(), env={"COVONAUT_ES_REVIEWER_SECRET": ""})
    _, stderr = no_secret.communicate(timeout=60)
    assert no_secret.returncode == 2 and "COVONAUT_ES_REVIEWER_SECRET" in stderr
    half_jwt = serve(url, free_port(), "--jwt-issuer", "https://id.example", env={})
    _, stderr = half_jwt.communicate(timeout=60)
    assert half_jwt.returncode == 2 and "--jwt-audience" in stderr
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "uvicorn.py").write_text("raise ImportError('No module named uvicorn')\n")
    no_extra = serve(
        url, free_port(),
        env={"COVONAUT_ES_REVIEWER_SECRET": SECRET, "PYTHONPATH": f"{shadow}{os.pathsep}{SRC}"},
    )  # fmt: skip
    _, stderr = no_extra.communicate(timeout=60)
    assert no_extra.returncode == 2 and "covonaut-es[inbox]" in stderr


def test_importing_the_inbox_without_its_extra_names_the_extra(tmp_path: Path) -> None:
    """Without Starlette, importing covonaut_es.inbox says which extra to install."""
    (tmp_path / "starlette.py").write_text(
        "raise ModuleNotFoundError('No module named starlette', name='starlette')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", "import covonaut_es.inbox"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{SRC}"},
        timeout=60,
    )
    assert result.returncode == 1
    assert "pip install 'covonaut-es[inbox]'" in result.stderr.splitlines()[-1]
