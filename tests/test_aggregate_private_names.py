"""eventsourcing's private aggregate attributes are spelled in one module of the domain,
which names the version checked (ADR 0122)."""

from __future__ import annotations

import ast
import importlib.metadata
from collections.abc import Iterator
from pathlib import Path

from test_store_structure import BACKENDS, PACKAGE, ROOT, eventsourcing_private_names

OWNER = PACKAGE / "domain" / "_eventsourcing.py"


def _spelled(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Each name a module spells as a string or a keyword: where a ``__dict__`` is
    read or written by key."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.keyword) and node.arg is not None:
            yield node.value.lineno, node.arg


def test_only_one_domain_module_spells_the_aggregates_private_attributes() -> None:
    """No module but ``domain/_eventsourcing.py`` and the back ends writes a private
    name of eventsourcing as a string or a keyword (``__dict__["_version"]``,
    ``__dict__.update(_id=...)``), which the check of attribute accesses does not see."""
    private = eventsourcing_private_names()
    assert {"_id", "_version", "_created_on", "_modified_on", "_pending_events"} <= private
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != OWNER and BACKENDS not in path.parents
        for line, name in _spelled(ast.parse(path.read_text(), filename=str(path)))
        if name in private
    ]
    assert found == []


def test_the_domain_module_names_the_version_checked() -> None:
    """The module that spells them says which version of eventsourcing it was checked
    against."""
    version = importlib.metadata.version("eventsourcing").rsplit(".", 1)[0]
    assert f"eventsourcing {version}." in Path(OWNER).read_text()
