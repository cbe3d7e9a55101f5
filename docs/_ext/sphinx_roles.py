"""A griffe extension for the API reference (mkdocs.yml): the docstrings' Sphinx roles,
such as :class:`~covonaut_es.Agent` or :func:`open_store`, render as code that links to
the object when the site documents it, instead of as literal ``:class:`` text.

The links are optional cross-references: a name the site does not document stays plain
code and warns nothing, so ``mkdocs build --strict`` still fails only on real problems.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

import griffe

ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):`(?P<short>~?)(?P<target>[^`]+)`")


def _identifier(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as written in ``obj``'s docstring."""
    head, _, rest = target.partition(".")
    try:
        resolved = obj.resolve(head)
    except griffe.NameResolutionError:
        return target  # already a full path, or a name the site does not know
    return f"{resolved}.{rest}" if rest else resolved


def _link(obj: griffe.Object, match: re.Match[str]) -> str:
    target = match["target"].removesuffix("()")
    title = target.rsplit(".", 1)[-1] if match["short"] else target
    identifier = escape(_identifier(obj, target), quote=True)
    return f'<autoref identifier="{identifier}" optional><code>{escape(title)}</code></autoref>'


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = ROLE.sub(lambda match: _link(obj, match), obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Rewrites the roles once the whole package is loaded, so that names resolve."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        _rewrite(pkg)
