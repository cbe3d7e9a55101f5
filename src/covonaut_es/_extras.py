"""The error raised when an optional extra's package is not installed, and the lazy
imports of a package's names that need one."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping


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


def lazy_names(
    package: str, namespace: MutableMapping[str, object], lazy: Mapping[str, str]
) -> Callable[[str], object]:
    """The module ``__getattr__`` (PEP 562) of ``package`` that imports each name of
    ``lazy`` from the module it maps to on first access, and keeps it in ``namespace``
    (the package's ``globals()``).

    The module imported raises its own error when its extra is missing
    (:func:`missing_extra`); any other name is an ``AttributeError``.
    """

    def __getattr__(name: str) -> object:
        if name not in lazy:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value: object = getattr(importlib.import_module(lazy[name]), name)
        namespace[name] = value
        return value

    return __getattr__
