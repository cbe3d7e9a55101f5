"""What the provider adapters share: how they say that their SDK is missing."""

from __future__ import annotations


def missing_sdk(exc: ModuleNotFoundError, package: str, extra: str) -> ImportError:
    """The error to raise when an adapter's SDK cannot be imported.

    Another missing module (a dependency of the SDK) is returned unchanged, so that its
    own message is not hidden behind advice that would not help.
    """
    if exc.name is None or exc.name.partition(".")[0] != package:
        return exc
    msg = (
        f"this provider adapter needs the {package!r} package, which is not installed: "
        f"pip install 'covonaut-es[{extra}]'"
    )
    return ImportError(msg, name=package)
