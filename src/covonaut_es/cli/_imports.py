"""The user's code a command runs, named ``MODULE:NAME`` (``--application``, ``worker
--app``): imported from the import path, then from the working directory if it is this
user's and not every user may write in it (not ``/tmp``, nor a folder another user made
there): a module another user put there would run as the operator, and the import
path's modules win over one of the same name there. (``python -m`` puts the working
directory first itself: ``python -P -m covonaut_es`` does not.)"""

from __future__ import annotations

import importlib
import os
import stat
import sys

from covonaut_es.cli._command import UsageError


def imported(option: str, spec: str, *, form: str) -> object:
    """What ``spec``, ``MODULE:NAME`` (``NAME`` may be dotted, an attribute of an
    attribute), names, its module imported.

    Args:
        option: The option that gave ``spec``, for the errors.
        spec: As given.
        form: The option's form with an example, for the error of a ``spec`` not of it
            (``"MODULE:CLASS, e.g. myshop.app:ShopApplication"``).

    Raises:
        UsageError: ``spec`` is not of the form, its module does not import (the
            application's own import may fail in any way: the error is named), or it
            has no such name.
    """
    module_name, colon, name = spec.partition(":")
    if not (colon and module_name and name):
        msg = f"{option} takes {form}; got {spec!r}"
        raise UsageError(msg)
    _look_in_working_directory()
    try:
        found: object = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # the application's own import, any way
        msg = (
            f"{option} {spec!r}: its module {module_name!r} cannot be imported "
            f"({type(exc).__name__}: {exc}); is it in the working directory or on PYTHONPATH?"
        )
        raise UsageError(msg) from exc
    for part in name.split("."):
        if not hasattr(found, part):
            msg = f"{option} {spec!r}: module {module_name!r} has no {name!r}"
            raise UsageError(msg)
        found = getattr(found, part)
    return found


def _look_in_working_directory() -> None:
    """Put the working directory last on the import path, if it is this user's (or
    root's) and not every user may write in it; not one this user cannot read."""
    try:
        here = os.getcwd()
        found = os.stat(here)
    except OSError:  # gone, or not this user's to look at (sudo -u from root's home)
        return
    if here in sys.path or found.st_uid not in (os.geteuid(), 0):
        return
    if not found.st_mode & stat.S_IWOTH:
        sys.path.append(here)
