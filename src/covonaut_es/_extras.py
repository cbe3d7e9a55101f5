"""The error raised when an optional extra's package is not installed."""

from __future__ import annotations


def missing_extra(exc: ModuleNotFoundError, package: str, extra: str, *, user: str) -> ImportError:
    """The error to raise when ``user`` (e.g. "this provider adapter") cannot import
    ``package``, which the ``extra`` installs.

    Another missing module (a dependency of the package) is returned unchanged, so that
    its own message is not hidden behind advice that would not help.
    """
    if exc.name is None or exc.name.partition(".")[0] != package:
        return exc
    msg = (
        f"{user} needs the {package!r} package, which is not installed: "
        f"pip install 'covonaut-es[{extra}]'"
    )
    return ImportError(msg, name=package)
