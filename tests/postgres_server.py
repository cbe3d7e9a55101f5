"""A real, throwaway PostgreSQL server for the test suite.

`PostgresServer` runs ``initdb`` into a fresh temporary directory, starts the
server with ``pg_ctl`` on a free loopback port (durability switched off, which is
fine for tests), creates the database ``covonaut_test`` and hands out its URL.
That directory is in memory (``/dev/shm``, where there is room) unless the server is
durable or asked to be on disk: every test on PostgreSQL creates a database, which
copies its template, and on this machine's disk that took ten times as long (ADR 0148).
`PostgresServer.stop` shuts the server down and deletes the directory; an
``atexit`` hook does the same if a test run ends without calling it.

PostgreSQL refuses to run as root. When the tests run as root (as sessions and
CI do), ``initdb`` and ``pg_ctl`` run as the OS user ``postgres`` through
``runuser`` (or ``su``), in a directory under ``/dev/shm`` or ``/tmp`` owned by that
user.

The binaries are looked up on ``PATH`` first, then under
``/usr/lib/postgresql/<version>/bin`` (Debian's layout), newest version first.

Set ``COVONAUT_ES_TEST_POSTGRES_URL`` to use an already-running server instead
(see the ``postgres_url`` fixture in ``conftest.py``). Where no server can be had,
`unavailable` skips the test, or fails it when the environment variable ``CI``
is set: in CI a missing server is a failure, not a reason to skip.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Self, TypeVar

import psycopg
import pytest
from psycopg import sql

T = TypeVar("T")

URL_ENV = "COVONAUT_ES_TEST_POSTGRES_URL"
"""Environment variable naming an already-running server to test against."""

DATABASE = "covonaut_test"
"""The database created on a throwaway server."""

SUPERUSER = "postgres"
"""The database superuser (``initdb -U``); authentication is ``trust``."""

SERVER_OS_USER = "postgres"
"""The OS user that runs the server when the tests run as root."""

_COMMAND_TIMEOUT = 60.0
_START_ATTEMPTS = 3
_MEMORY = Path("/dev/shm")
"""Where a server that need not last keeps its files (see :func:`memory_folder`)."""
_MEMORY_ROOM = 1024**3
"""The free bytes that folder needs: a server takes 40-80 MB there, and the suite runs
four, each with the databases of its tests (a container's default is 64 MB)."""


class PostgresUnavailable(RuntimeError):
    """No throwaway server could be started (binaries missing, or start failed)."""


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test for lack of PostgreSQL, or fail it when ``CI`` is set."""
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is required in CI but unavailable: {reason}", pytrace=False)
    pytest.skip(
        f"PostgreSQL unavailable ({reason}). To run these tests, install the PostgreSQL "
        f"server binaries (initdb, pg_ctl, postgres; e.g. `apt-get install postgresql`) "
        f"or set {URL_ENV} to the URL of a running server."
    )


def start_or_unavailable(server: PostgresServer) -> str:
    """Start ``server`` and return its URL, or skip/fail the test via `unavailable`."""
    try:
        return server.start()
    except PostgresUnavailable as exc:
        reason = str(exc)
    unavailable(reason)  # outside the except block: no chained traceback in CI failures


@dataclass(frozen=True)
class PostgresBinaries:
    """Paths of the server programs this harness needs."""

    initdb: Path
    pg_ctl: Path
    postgres: Path


def find_binaries() -> PostgresBinaries:
    """Find ``initdb``, ``pg_ctl`` and ``postgres``, or raise `PostgresUnavailable`."""
    on_path = [shutil.which(name) for name in ("initdb", "pg_ctl", "postgres")]
    if all(on_path):
        initdb, pg_ctl, postgres = (Path(p) for p in on_path if p)
        return PostgresBinaries(initdb=initdb, pg_ctl=pg_ctl, postgres=postgres)

    def version_key(bin_dir: str) -> tuple[int, ...]:
        version = Path(bin_dir).parent.name
        return tuple(int(part) for part in re.findall(r"\d+", version))

    for bin_dir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key, reverse=True):
        candidate = PostgresBinaries(
            initdb=Path(bin_dir, "initdb"),
            pg_ctl=Path(bin_dir, "pg_ctl"),
            postgres=Path(bin_dir, "postgres"),
        )
        if all(
            os.access(p, os.X_OK) for p in (candidate.initdb, candidate.pg_ctl, candidate.postgres)
        ):
            return candidate
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH "
        "or under /usr/lib/postgresql/*/bin"
    )


def memory_folder() -> Path | None:
    """``/dev/shm`` where it is a folder every user may write in (sticky, as ``/tmp``)
    with room for the suite's servers; else None."""
    try:
        info = _MEMORY.stat()
        room = os.statvfs(_MEMORY)
    except OSError:
        return None
    usable = stat.S_ISDIR(info.st_mode) and info.st_mode & 0o1777 == 0o1777
    return _MEMORY if usable and room.f_bavail * room.f_frsize >= _MEMORY_ROOM else None


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _privilege_drop_prefix(user: str) -> list[str]:
    """Return the argv prefix that runs a command as ``user`` (root only)."""
    for candidate in ("runuser", "/usr/sbin/runuser", "/sbin/runuser"):
        runuser = shutil.which(candidate)
        if runuser:
            return [runuser, "-u", user, "--"]
    return []


def _started(value: T | None) -> T:
    """A value the server has only once it has started."""
    if value is None:
        raise RuntimeError("server not started")
    return value


class PostgresServer:
    """One throwaway PostgreSQL server; use as a context manager or call start/stop.

    >>> with PostgresServer() as server:  # doctest: +SKIP
    ...     psycopg.connect(server.url).close()
    """

    def __init__(
        self, database: str = DATABASE, *, durable: bool = False, on_disk: bool = False
    ) -> None:
        self.database = database
        # Durable: fsync, full_page_writes and synchronous_commit at PostgreSQL's
        # defaults, as in production, for benchmarks of durable writes.
        self.durable = durable
        # On disk: what the benchmarks measure against; the tests' servers are in memory.
        self.on_disk = on_disk or durable
        self._base_dir: Path | None = None
        self._port: int | None = None
        self._binaries: PostgresBinaries | None = None
        self._running = False
        self._env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        self._run_as: tuple[int, int] | None = None  # (uid, gid) when dropping root

    # -- public API ---------------------------------------------------------------

    @property
    def base_dir(self) -> Path:
        """The temporary directory holding the data directory, socket and log."""
        return _started(self._base_dir)

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory (``initdb -D``)."""
        return self.base_dir / "data"

    @property
    def log_file(self) -> Path:
        """The server log written by ``pg_ctl -l``."""
        return self.base_dir / "server.log"

    @property
    def port(self) -> int:
        """The TCP port the server listens on, on 127.0.0.1."""
        return _started(self._port)

    @property
    def url(self) -> str:
        """Connection URL of the test database."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{self.database}"

    @property
    def running(self) -> bool:
        """Whether the server was started and not yet stopped."""
        return self._running

    def start(self) -> str:
        """Create, start and prepare the server; return `url`.

        Raises `PostgresUnavailable` when no server can be started; whatever was
        created on the way is removed again.
        """
        if self._base_dir is not None:
            raise RuntimeError("a PostgresServer can be started only once")
        self._binaries = find_binaries()
        self._prepare_base_dir()
        atexit.register(self.stop)
        try:
            self._initdb()
            self._start_server()
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        """Stop the server (if running) and delete its directory. Idempotent."""
        atexit.unregister(self.stop)
        try:
            if self._running:
                self._stop_server()
        finally:
            self._running = False
            if self._base_dir is not None:
                shutil.rmtree(self._base_dir, ignore_errors=True)

    def restart(self) -> None:
        """Restart the server on the same port with the same options: every session
        ends, as in a restart or a failover that clients see."""
        assert self._binaries is not None, "server not started"
        self._run(
            [
                str(self._binaries.pg_ctl),
                "restart",
                "-w",
                "-t",
                "30",
                "-m",
                "fast",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
            ],
            what="pg_ctl restart",
        )

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- steps --------------------------------------------------------------------

    def _prepare_base_dir(self) -> None:
        memory = None if self.on_disk else memory_folder()
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam(SERVER_OS_USER)
            except KeyError:
                raise PostgresUnavailable(
                    f"running as root, and there is no OS user {SERVER_OS_USER!r} "
                    "to run the server as (PostgreSQL refuses to run as root)"
                ) from None
            self._run_as = (entry.pw_uid, entry.pw_gid)
            # /tmp rather than $TMPDIR: every user can traverse /tmp.
            base = Path(tempfile.mkdtemp(prefix="covonaut-pg-", dir=memory or "/tmp"))
            os.chown(base, entry.pw_uid, entry.pw_gid)
        else:
            base = Path(tempfile.mkdtemp(prefix="covonaut-pg-", dir=memory))
        self._base_dir = base

    def _initdb(self) -> None:
        assert self._binaries is not None
        self._run(
            [
                str(self._binaries.initdb),
                "-D",
                str(self.data_dir),
                "--auth=trust",
                "-U",
                SUPERUSER,
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            what="initdb",
        )

    def _start_server(self) -> None:
        assert self._binaries is not None
        failure = ""
        for _ in range(_START_ATTEMPTS):  # another process may grab the port first
            self._port = free_port()
            unsynced = (
                []
                if self.durable
                else ["-F", "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
            )
            # In memory, the write-ahead log is kept to a few segments.
            bounded = [] if self.on_disk else ["-c max_wal_size=64MB", "-c min_wal_size=32MB"]
            options = " ".join(
                [
                    "-h 127.0.0.1",
                    f"-p {self._port}",
                    f"-k {shlex.quote(str(self.base_dir))}",
                    *unsynced,
                    *bounded,
                    "-c max_connections=200",
                ]
            )
            try:
                self._run(
                    [
                        str(self._binaries.pg_ctl),
                        "start",
                        "-w",
                        "-t",
                        "30",
                        "-D",
                        str(self.data_dir),
                        "-l",
                        str(self.log_file),
                        "-p",
                        str(self._binaries.postgres),
                        "-o",
                        options,
                    ],
                    what="pg_ctl start",
                )
            except PostgresUnavailable as exc:
                failure = f"{exc}\n--- server log ---\n{self._log_tail()}"
                self._kill_postmaster()
                continue
            self._running = True
            return
        raise PostgresUnavailable(failure)

    def _create_database(self) -> None:
        admin_url = f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))

    def _stop_server(self) -> None:
        assert self._binaries is not None
        for mode in ("fast", "immediate"):
            try:
                self._run(
                    [
                        str(self._binaries.pg_ctl),
                        "stop",
                        "-w",
                        "-t",
                        "30",
                        "-m",
                        mode,
                        "-D",
                        str(self.data_dir),
                    ],
                    what=f"pg_ctl stop -m {mode}",
                )
            except PostgresUnavailable:
                continue
            return
        self._kill_postmaster()

    # -- helpers ------------------------------------------------------------------

    def _run(self, argv: list[str], *, what: str) -> None:
        """Run a server program (as the server's OS user when root)."""
        if self._run_as is not None:
            prefix = _privilege_drop_prefix(SERVER_OS_USER)
            if prefix:
                argv = [*prefix, *argv]
            else:
                su = shutil.which("su") or "/bin/su"
                argv = [su, "-s", "/bin/sh", "-c", shlex.join(argv), SERVER_OS_USER]
        try:
            result = subprocess.run(
                argv,
                cwd=self.base_dir,
                env=self._env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_COMMAND_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PostgresUnavailable(f"{what} failed: {exc}") from exc
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            raise PostgresUnavailable(f"{what} exited with {result.returncode}: {output}")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _kill_postmaster(self) -> None:
        """Last resort: SIGKILL the postmaster named in ``postmaster.pid``, if any."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
