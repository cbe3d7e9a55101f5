"""Where ``export --output`` may write, and writing it whole.

An export holds its threads decrypted, and operators export into shared directories
such as ``/tmp``. So the file is written only where its own user decides what it is:
through symbolic links that user or the link's directory's owner made (the rule of
Linux's ``fs.protected_symlinks``, kept whatever the machine sets, since a path resolved
in user space passes the kernel's check), over that user's own files only (a regular
file, whose mode it keeps, or a pipe; any user's device), and never over a SQLite
database or its journal. A descriptor of the process (``/dev/stdout``,
``/proc/self/fd/N``) is written as the shell opened it: appended to, never replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import NamedTuple

from covonaut_es.cli._command import UsageError
from covonaut_es.store._settings import is_sqlite_database, sqlite_journal_of

_MOST_LINKS = 40  # as Linux's path walk: beyond, ELOOP


class _Target(NamedTuple):
    """Where an export goes: ``path`` with its last part's links followed, what stands
    there (None: nothing yet), and whether it is a descriptor of this process."""

    path: Path
    found: os.stat_result | None
    descriptor: bool


def write_output(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: into a new file beside it, readable
    by its owner only until it is whole, then renamed over it, so that a full disk or a
    kill never leaves half an export there, nor destroys the file that was there before,
    nor shows a reader a part of it. A new file stays readable by its owner only; one
    written over keeps its mode. A path that is no regular file (a pipe, a device,
    ``/dev/stdout``) is written as it is: there is nothing to rename over.

    Raises:
        UsageError: ``path`` names a directory, is a SQLite database or one's journal,
            goes through a link another user made, names another user's file or pipe,
            or cannot be written; nothing was written.
    """
    _refuse_directory(path)
    _refuse_database(path)
    partial: Path | None = None
    try:
        target = _target(Path(path))
        if target.descriptor or (
            target.found is not None and not stat.S_ISREG(target.found.st_mode)
        ):
            _write_in_place(target, text)
            return
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=target.path.parent, prefix=f".{target.path.name}.",
            delete=False,
        ) as file:  # fmt: skip
            partial = Path(file.name)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
            if target.found is not None:  # the file itself: its name may be swapped
                os.fchmod(file.fileno(), stat.S_IMODE(target.found.st_mode))
        os.replace(partial, target.path)
    except BaseException as exc:  # stopped too (Ctrl-C, SIGTERM): leave no copy behind
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()
        if not isinstance(exc, OSError):
            raise
        msg = f"cannot write --output {path!r}: {exc.strerror or exc} (nothing was written)"
        raise UsageError(msg) from exc


def _write_in_place(target: _Target, text: str) -> None:
    """Write ``text`` into what stands at the target, no regular file, or a descriptor
    of this process (appended to, as the shell opened it): the very one checked, never
    a link put in its place since.

    Raises:
        OSError: It cannot be written, or it was replaced since it was checked.
    """
    if target.descriptor:
        fd = os.open(target.path, os.O_WRONLY | os.O_APPEND)
    else:
        fd = os.open(target.path, os.O_WRONLY | os.O_NOFOLLOW)
        opened, found = os.fstat(fd), target.found
        if found is None or (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
            os.close(fd)
            raise OSError(errno.ESTALE, "it was replaced while it was checked")
    with open(fd, "w", encoding="utf-8") as stream:
        stream.write(text)


def _target(path: Path) -> _Target:
    """Where ``path`` leads: the links of its last part followed, each one its reader's
    own or its directory owner's (its directories are left to the kernel, and its
    ``fs.protected_symlinks`` where set), up to a descriptor of this process, or to what
    stands there, its reader's own unless it is a device.

    Raises:
        UsageError: A link another user made, or another user's file or pipe.
        OSError: Too many links, or one that cannot be read.
    """
    for _ in range(_MOST_LINKS):
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return _Target(path, None, descriptor=False)
        if not stat.S_ISLNK(found.st_mode):
            return _Target(path, _owned(path, found), descriptor=False)
        if os.path.realpath(path.parent).startswith("/proc/"):
            return _Target(path, None, descriptor=True)  # /proc/self/fd/1, say
        owners = {os.geteuid(), os.stat(path.parent).st_uid}
        if found.st_uid not in owners:
            msg = (
                f"--output {str(path)!r} is a symbolic link that another user "
                f"(uid {found.st_uid}) made: an export follows only its own user's links, "
                "or its directory's owner's; name the file itself (nothing was written)"
            )
            raise UsageError(msg)
        path = path.parent / os.readlink(path)
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))


def _owned(path: Path, found: os.stat_result) -> os.stat_result:
    """``found``, what stands at ``path``, if its reader may write an export there.

    Raises:
        UsageError: It is a file or a pipe of another user: its mode would be given to
            the export, or its owner could read or change it as it is written.
    """
    if stat.S_ISCHR(found.st_mode) or found.st_uid == os.geteuid():
        return found
    msg = (
        f"--output {str(path)!r} is a file of another user (uid {found.st_uid}): "
        "an export writes over its own user's files only; remove it or name another "
        "(nothing was written)"
    )
    raise UsageError(msg)


def _refuse_directory(path: str) -> None:
    """Refuse a ``path`` that names a directory (``.``, ``/``, one ending in ``/``,
    ``/.`` or ``/..``), however it is spelled: an export is a file.

    Raises:
        UsageError: It does.
    """
    # os.path, not pathlib, which reads "name/." as "name".
    if path.endswith(os.sep) or os.path.basename(path) in ("", ".", ".."):
        msg = f"--output {path!r} names a directory: name the file to write (nothing was written)"
        raise UsageError(msg)


def _refuse_database(path: str) -> None:
    """Refuse to write an export over a SQLite database (the store's own file, reached
    by any spelling or link, or another), over a journal beside one, existing or not
    yet, or where a database's journal would be one already
    (:func:`~covonaut_es.store._settings.sqlite_journal_of`): renamed over it, the
    export would replace every thread it holds.

    Args:
        path: ``--output`` as given.

    Raises:
        UsageError: It is such a file; nothing is written.
    """
    what = sqlite_journal_of(path)
    if what is None and is_sqlite_database(Path(os.path.realpath(path))):
        what = "a SQLite database"
    if what is None:
        return
    msg = (
        f"--output {path!r} is {what} (a store?): an export never replaces one, "
        "which would lose what it holds; name another file (nothing was written)"
    )
    raise UsageError(msg)
