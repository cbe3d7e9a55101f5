"""Run leases and the worker registry of a SQLite store: ``flock`` on files beside
the database (ADR 0016, ADR 0025)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import os
import pwd
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Protocol
from uuid import UUID

import msgspec

from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import (
    ConfigurationError,
    ReadOnlyStoreError,
    StoreUnavailableError,
    UntrustedLeaseDirectoryError,
)
from covonaut_es.store._backends._sqlite_connections import StoreFile
from covonaut_es.store._leases import LeaseBackend, LeaseTokens, WorkerRecord
from covonaut_es.store._write_errors import database_errors_typed


def lease_directory(database_file: str) -> Path:
    """Where the leases of a SQLite database live: named after the file itself (its
    device and inode), beside its resolved path, so that every name of the file (a
    symbolic link) shares one set of leases. (A file of several hard links is no store:
    ``sqlite_journal_of`` refuses it.)"""
    resolved = Path(os.path.realpath(database_file))
    found = resolved.stat()
    return resolved.parent / f".covonaut-leases-{found.st_dev:x}-{found.st_ino:x}"


class SyncedLaterTokens(LeaseTokens, Protocol):
    """The SQLite recorder's lease tokens, recorded without waiting for the disk."""

    def advance_lease_token(self, stream: UUID, *, synced: bool = True) -> int:
        """Record a new lease of ``stream``; its token. ``synced``: wait for the disk."""
        ...

    def sync_lease_token(self, stream: UUID) -> None:
        """Make the tokens recorded without waiting for the disk durable."""
        ...


class FileLeases(LeaseBackend):
    """Leases of a SQLite store: ``flock`` on files in :func:`lease_directory`.

    A lock file is named after the thread's stream id as the store keeps it (a thread
    id may hold any character; an encrypted store's stream ids are keyed), and holds
    its holder's name while locked. Its holder removes it on release, while still
    holding the lock; a runner that locked a file after it was removed finds the name
    no longer leads to it and tries again, so two runners never hold two files of one
    name, and lock files do not pile up: a runner that died leaves its file, which the
    next holder removes, or (a thread nobody runs again) the next worker to start, with
    the records of workers that died (:meth:`_sweep`).

    A lease's token is committed without waiting for the disk (ADR 0062): every
    connection sees it at once, so saves under an older lease are refused from then on,
    and it is synced by the first save under the lease, or before it can leave the
    store (its first read through :attr:`Lease.token`, a check before a side effect),
    whichever comes first. A power loss before either forgets a token nobody saw.
    """

    def __init__(
        self,
        holder: str,
        database_file: str,
        tokens: SyncedLaterTokens | None,
        stored: Callable[[UUID], UUID],
    ) -> None:
        super().__init__(holder, tokens)
        self._later_tokens = tokens
        self._stored = stored
        self.directory = lease_directory(database_file)
        self._database = f"sqlite:{self.directory}"
        # Who may have made the directory and what is in it: this user, the file's owner,
        # or, where the file is its group's to write, a member of that group.
        store = os.stat(database_file)
        self._owners = frozenset({os.geteuid(), store.st_uid})
        self._group = store.st_gid if store.st_mode & stat.S_IWGRP else None
        # The files made here: the store's group's to read and write if it is theirs.
        self._mode = 0o664 if self._group is not None else 0o644
        # The leases and worker records are the opened file's (named by its inode):
        # once another file takes its name, a worker's beat says so instead.
        self._file = StoreFile(database_file)
        self._file.note()
        self._files: dict[str, tuple[int, Path]] = {}  # each held lock, and its path
        self._record_fd: int | None = None  # the lock of the record this store published
        self._record_id: str | None = None  # whose record that is

    def _path(self, thread_id: str) -> Path:
        return self.directory / f"{self._stored(thread_aggregate_id(thread_id)).hex}.lock"

    def _try_lock(self, thread_id: str) -> bool:
        path = self._path(thread_id)
        try:
            self._trusted(self.directory)
            fd = _taken(path, self._mode, self.directory / _SWEEPING)
        except UntrustedLeaseDirectoryError:
            raise  # an OSError too (a ConnectionError), told as itself
        except OSError as exc:
            msg = (
                f"cannot take the run lease of thread {thread_id!r} in {self.directory}: "
                f"{exc}; runs need a writable directory beside the SQLite file"
            )
            raise ReadOnlyStoreError(msg) from exc
        if fd is None:
            return False
        try:
            _rewrite(fd, self.holder.encode() + b"\n")
        except OSError as exc:  # a full disk: let the lock go, leave no file behind
            with contextlib.suppress(OSError):
                if _still_at(fd, path):
                    path.unlink()
            os.close(fd)
            msg = f"cannot take the run lease of thread {thread_id!r} in {self.directory}: {exc}"
            raise StoreUnavailableError(msg) from exc
        with self._lock:
            self._files[thread_id] = (fd, path)
        return True

    def _advance(self, thread_id: str) -> int:
        assert self._later_tokens is not None  # _take asks only where tokens are kept
        tokens, stream = self._later_tokens, thread_aggregate_id(thread_id)
        with database_errors_typed(
            "the store's lease table", f"the run lease of thread {thread_id!r} was not taken"
        ):
            token = tokens.advance_lease_token(stream, synced=False)
        with self._lock:
            self._unsynced[thread_id] = lambda: tokens.sync_lease_token(stream)
        return token

    def _unlock(self, thread_id: str) -> None:
        with self._lock:
            held = self._files.pop(thread_id, None)
        if held is None:
            return
        fd, path = held
        try:
            if _still_at(fd, path):
                path.unlink()  # still locked: nobody can take it meanwhile
        finally:
            os.close(fd)  # closing the only descriptor drops the lock

    def _lock_problem(self, thread_id: str, *, in_save: bool) -> str | None:
        with self._lock:
            held = self._files.get(thread_id)
        if held is not None and _still_at(*held):
            return None
        return f"its lock file in {self.directory} was removed or replaced"

    def holder_of(self, thread_id: str) -> str | None:
        try:
            text = _read_regular(self._path(thread_id)).decode(errors="replace")
        except OSError:
            return None
        # The name ends at its newline: a longer name written before may follow it
        # until the file is cut to length.
        return text.partition("\n")[0].strip() or None

    def _records(self) -> Path:
        return self.directory / "workers"

    def _trusted(self, directory: Path, *, make: bool = True) -> bool:
        """Whether ``directory`` is there, made first when ``make``; refused unless only
        the store's own users could have made it and can write in it: another local user
        who made it (in ``/tmp``, beside a store there) would hold its threads' locks,
        name their holders, and plant links for the store's process to write through.

        Raises:
            UntrustedLeaseDirectoryError: It is a link or no directory, another user's, or
                writable by every user; nothing in it was used.
        """
        if make:
            with contextlib.suppress(FileExistsError):
                directory.mkdir()
                self._give_mode(directory)
        try:
            found = os.lstat(directory)
        except FileNotFoundError:
            return False
        if not stat.S_ISDIR(found.st_mode):
            problem = "is no directory (a link, or a file)"
        elif found.st_uid not in self._owners and not self._in_group(found):
            problem = f"belongs to a user (uid {found.st_uid}) who is not the store's owner"
        elif found.st_mode & stat.S_IWOTH:
            problem = "is writable by every user"
        elif found.st_mode & stat.S_IWGRP and found.st_gid != self._group:
            problem = f"is writable by a group (gid {found.st_gid}) that may not write the store"
        else:
            return True
        msg = (
            f"the lease directory {directory} {problem}: another local user could block "
            "this store's runs or make it write through links there; remove it, and the "
            "store makes it again (nothing in it was used)"
        )
        raise UntrustedLeaseDirectoryError(msg)

    def _records_trusted(self, *, make: bool) -> bool:
        """Whether the worker records' directory is there, within the lease directory,
        both made first when ``make``; as :meth:`_trusted` refuses either."""
        return self._trusted(self.directory, make=make) and self._trusted(
            self._records(), make=make
        )

    def _give_mode(self, directory: Path) -> None:
        """Make a directory this store just made its users' to write, whatever the
        umask: its owner's, and its group's (setgid, so that what is made in it is the
        group's too) where the store is its group's to write and this user one of it;
        never every user's."""
        mode = 0o755
        if self._group is not None:
            with contextlib.suppress(OSError):  # not a member: the owner's alone
                os.chown(directory, -1, self._group)
                mode = 0o2775
        os.chmod(directory, mode)

    def _in_group(self, found: os.stat_result) -> bool:
        """Whether ``found`` is of the store's group, where the store is its group's to
        write, and its owner a member: a directory made in a setgid folder takes the
        folder's group whoever made it."""
        if self._group is None or found.st_gid != self._group:
            return False
        try:
            owner = pwd.getpwuid(found.st_uid)
            return owner.pw_gid == self._group or owner.pw_name in grp.getgrgid(self._group).gr_mem
        except KeyError:  # a user or group this machine does not name
            return False

    def publish(self, record: WorkerRecord) -> None:
        self._file.check()
        records = self._records()
        lock = records / f"{record.worker_id}.lock"
        if self._record_fd is not None and not _still_at(self._record_fd, lock):
            # Removed (the whole directory, by a cleaner of temporary files, say): made
            # again, or the worker would run calls that no listing says it runs.
            os.close(self._record_fd)
            self._record_fd, self._record_id = None, None
        if self._record_fd is None:
            self._records_trusted(make=True)
            self._sweep()
            self._record_fd = _taken(lock, self._mode, self.directory / _SWEEPING)
            if self._record_fd is None:
                msg = f"worker id {record.worker_id!r} is taken by a live worker: choose another"
                raise ConfigurationError(msg)
            self._record_id = record.worker_id
        # Written aside, into a new file of its own (never through a name another
        # member of the store's group could have linked elsewhere), and renamed over the
        # record: a listing reads the old record or the new one, never one cut short.
        written = records / f".{record.worker_id}.{secrets.token_hex(8)}.tmp"
        fd = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, self._mode)  # readable by whoever lists workers, whatever the umask
            with open(fd, "wb") as file:
                file.write(msgspec.json.encode(record))
            os.replace(written, records / f"{record.worker_id}.json")
        except OSError as exc:  # a full disk, or a directory put at the record's name
            with contextlib.suppress(OSError):
                written.unlink()
            msg = f"the record of worker {record.worker_id!r} was not written in {records}: {exc}"
            raise StoreUnavailableError(msg) from exc

    def withdraw(self, worker_id: str) -> None:
        records = self._records()
        lock = records / f"{worker_id}.lock"
        if self._record_fd is not None and worker_id == self._record_id:
            fd, self._record_fd, self._record_id = self._record_fd, None, None
        elif not self._records_trusted(make=False):
            return
        else:
            # Made if missing: a worker publishing under the id meanwhile waits for it.
            taken = _locked_file(lock, self._mode)
            if taken is None:
                msg = (
                    f"worker {worker_id!r} is live (its process holds its record's lock): "
                    "only the store that published its record withdraws it (nothing was removed)"
                )
                raise ConfigurationError(msg)
            fd = taken
        _remove_locked(fd, lock, records / f"{worker_id}.json")

    def _sweep(self) -> None:
        """Remove what runners and workers that died left, and nobody holds: a thread's
        lock file (of a thread no runner took again, having finished) and a worker's
        record, each under its lock. A runner or worker that locks the same file just
        after finds its name no longer leads to it, and makes it again. What cannot be
        removed (another user's file) stays, as harmless as before."""
        try:
            sweeping = _locked_file(self.directory / _SWEEPING, self._mode)
        except OSError:  # another user's, or a link planted there: no sweep
            return
        if sweeping is None:
            return  # another worker sweeps now, or a taker waits on a held file
        try:
            leftovers: list[tuple[Path, tuple[Path, ...]]]
            leftovers = [(path, ()) for path in self.directory.glob("*.lock")]
            leftovers += [
                (lock, (lock.with_suffix(".json"),)) for lock in self._records().glob("*.lock")
            ]
            for path, beside in leftovers:
                with contextlib.suppress(OSError):  # a link planted there among them
                    fd = _locked_file(path, self._mode, create=False)
                    if fd is not None:
                        _remove_locked(fd, path, *beside)
        finally:
            os.close(sweeping)

    def workers(self) -> tuple[WorkerRecord, ...]:
        found = []
        records = self._records()
        listed = self._records_trusted(make=False)
        for path in sorted(records.glob("*.json")) if listed else ():
            probe = _locked_file(path.with_suffix(".lock"), self._mode, create=False)
            if probe is not None:  # nobody holds it: its worker died
                os.close(probe)
                continue
            with contextlib.suppress(OSError, msgspec.DecodeError):
                found.append(msgspec.json.decode(_read_regular(path), type=WorkerRecord))
        return tuple(found)

    def close(self) -> None:
        super().close()
        if self._record_fd is not None:
            os.close(self._record_fd)
            self._record_fd, self._record_id = None, None


def _locked_file(path: Path, mode: int, *, create: bool = True) -> int | None:
    """A descriptor of ``path`` under an exclusive ``flock``; None when another
    descriptor holds it (or, without ``create``, when it is gone). A file of this
    user's gets ``mode``'s read and write bits (a store its group writes: the group's
    too, so that its members take the same locks), whatever the umask.

    Raises:
        UntrustedLeaseDirectoryError: A link stands at ``path``.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0), 0o600)
        if create and os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, mode & 0o660)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        msg = (
            f"a link stands where the lock file {path} goes: someone who may write in its "
            "directory planted it; remove it (nothing was written through it)"
        )
        raise UntrustedLeaseDirectoryError(msg) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


_SWEEPING = ".sweeping"
"""The file of a lease directory that a sweep holds exclusively while it runs, and that
a taker which found a lock file held shares, so that it waits out a sweep, never more."""


def _locked_patiently(path: Path, mode: int, sweeping: Path) -> int | None:
    """As :func:`_locked_file`, told apart from a sweep: a file found held is tried
    again once no sweep runs (:meth:`FileLeases._sweep` locks the files it removes only
    while it holds ``sweeping`` exclusively), so a lease really held is reported busy at
    once, and one a sweep held for a moment is taken."""
    fd = _locked_file(path, mode)
    if fd is not None:
        return fd
    try:
        shared = os.open(sweeping, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, mode & 0o660)
    except OSError:  # a link planted there: the file is held, as found
        return None
    try:
        fcntl.flock(shared, fcntl.LOCK_SH)  # waits for a sweep under way to end
        return _locked_file(path, mode)
    finally:
        os.close(shared)


def _taken(path: Path, mode: int, sweeping: Path) -> int | None:
    """The lock of the file at ``path`` (:func:`_locked_patiently`), taken again while
    the file locked is no longer the one the name leads to (its last holder, a sweep or
    a withdrawal removed it meanwhile); None when it is held."""
    fd = _locked_patiently(path, mode, sweeping)
    while fd is not None and not _still_at(fd, path):
        os.close(fd)
        fd = _locked_patiently(path, mode, sweeping)
    return fd


def _remove_locked(fd: int, path: Path, *beside: Path) -> None:
    """Remove ``path``, locked as ``fd``, and the files ``beside`` it, if the name
    still leads to the file locked (else another made it again: not this one); then
    let the lock go. Nobody takes the name's lock meanwhile."""
    try:
        if _still_at(fd, path):
            for other in beside:
                with contextlib.suppress(FileNotFoundError):
                    other.unlink()
            path.unlink()
    finally:
        os.close(fd)


def _read_regular(path: Path) -> bytes:
    """What the regular file ``path`` holds, never read through a link nor waited on (a
    pipe put in its place).

    Raises:
        OSError: It is gone, a link, or no regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return file.read(_MOST_READ)


_MOST_READ = 64 * 1024
"""The most of a lock or record file read: a holder's name or a worker's record is far
less, and one planted larger is read no further."""


def _still_at(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _rewrite(fd: int, data: bytes) -> None:
    # Written, then cut to its length; never cut to nothing first: ext4 (its default
    # auto_da_alloc) flushes a file written after a truncation to zero when it is
    # closed, which made each release of a lease cost about 0.2 ms. A reader meanwhile
    # may see the tail of a longer name after this one's newline.
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
