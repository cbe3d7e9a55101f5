"""Where ``export --output`` may write, and writing it whole.

An export holds its threads decrypted, and operators export into shared directories
such as ``/tmp``. So the file is written only where its own user decides what it is:
through symbolic links that user or the link's directory's owner made (the rule of
Linux's ``fs.protected_symlinks``, kept whatever the machine sets, since a path resolved
in user space passes the kernel's check), over a regular file of that user only (whose
mode it keeps), and never over a SQLite database or its journal.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from covonaut_es.cli._command import UsageError
from covonaut_es.store._settings import is_sqlite_database, sqlite_journal_of

_MOST_LINKS = 40  # as Linux's path walk: beyond, ELOOP


def write_output(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: into a new file beside it, readable
    by its owner only until it is whole, then renamed over it, so that a full disk or a
    kill never leaves half an export there, nor destroys the file that was there before,
    nor shows a reader a part of it. A new file stays readable by its owner only; one
    written over keeps its mode. A path that is no regular file (a pipe,
    ``/dev/stdout``) is written as it is: there is nothing to rename over.

    Raises:
        UsageError: ``path`` is a SQLite database or one's journal, goes through a link
            another user made, names another user's file, or cannot be written; nothing
            was written.
    """
    _refuse_database(path)
    partial: Path | None = None
    try:
        target = _followed(Path(path))
        found = _existing(target)
        if found is not None and not stat.S_ISREG(found.st_mode):
            with open(target, "w", encoding="utf-8") as stream:
                stream.write(text)
            return
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.", delete=False
        ) as file:
            partial = Path(file.name)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if found is not None:
            partial.chmod(stat.S_IMODE(found.st_mode))
        os.replace(partial, target)
    except OSError as exc:
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()
        msg = f"cannot write --output {path!r}: {exc.strerror or exc} (nothing was written)"
        raise UsageError(msg) from exc


def _followed(path: Path) -> Path:
    """``path`` with the links of its last part followed, each one its reader's own or
    its directory owner's; its directories are left to the kernel (and its
    ``fs.protected_symlinks``, where set).

    Raises:
        UsageError: A link another user made.
        OSError: Too many links, or one that cannot be read.
    """
    for _ in range(_MOST_LINKS):
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return path
        if not stat.S_ISLNK(found.st_mode):
            return path
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


def _existing(target: Path) -> os.stat_result | None:
    """What ``target`` is, if it is anything; None when nothing is there.

    Raises:
        UsageError: It is a regular file another user owns: its mode would be given to
            the export, or its owner could read or change it as it is written.
    """
    try:
        found = os.stat(target)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(found.st_mode) and found.st_uid != os.geteuid():
        msg = (
            f"--output {str(target)!r} is a file of another user (uid {found.st_uid}): "
            "an export writes over its own user's files only; remove it or name another "
            "(nothing was written)"
        )
        raise UsageError(msg)
    return found


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
